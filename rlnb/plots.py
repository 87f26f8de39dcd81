"""Matplotlib views of a History. Each function takes a History (or its DataFrame) and an optional
``ax``, returns the Axes or Figure, never calls ``plt.show()``, and builds figures under ``plt.ioff()``
so nothing is displayed twice in a notebook."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from rlnb.history import History


def _ops(history: History | pd.DataFrame) -> pd.DataFrame:
    return history.df if isinstance(history, History) else history


def _axes(ax: Axes | None) -> Axes:
    if ax is not None:
        return ax
    with plt.ioff():
        return plt.figure(figsize=(6, 3.5)).add_subplot()


def loss(history: History | pd.DataFrame, ax: Axes | None = None) -> Axes:
    """Forward-backward loss per step (summed over the step's forward-backwards)."""
    ax = _axes(ax)
    df = _ops(history)
    fb = df[(df.kind == "forward-backward") & (df.status == "TRAINING_OPERATION_STATUS_COMPLETED")]
    per_step = fb.groupby("step", observed=True)["loss"].sum()
    ax.plot(per_step.index.astype(int) + 1, per_step.to_numpy(), label="loss", color="C0")
    ax.set(xlabel="optimizer step", ylabel="loss", title="loss")
    return ax


def grad_norm(history: History | pd.DataFrame, ax: Axes | None = None) -> Axes:
    """Pre-clip global gradient norm per optimizer step, with the clip threshold dashed."""
    ax = _axes(ax)
    df = _ops(history)
    opt = df[(df.kind == "optim-step") & (df.status == "TRAINING_OPERATION_STATUS_COMPLETED")]
    ax.plot(opt.step.astype(int), opt.grad_norm, label="grad norm (pre-clip)", color="C1")
    clip = opt.grad_clip_norm.where(opt.grad_clip_norm > 0)
    if clip.notna().any():
        ax.plot(opt.step.astype(int), clip, ls="--", color="0.4", label="clip threshold")
    ax.set(xlabel="optimizer step", ylabel="norm", title="gradient norm")
    ax.legend(loc="best", fontsize="small")
    return ax


def metric(history: History, name: str, ax: Axes | None = None) -> Axes:
    """A figure given to ``history.log(step, name=...)``."""
    ax = _axes(ax)
    logged = history.logged
    if name in logged:
        ax.plot(logged.step, logged[name], label=name, color="C2")
    ax.set(xlabel="optimizer step", ylabel=name, title=name)
    return ax


def overview(history: History, metrics: tuple[str, ...] = ()) -> Figure:
    """Loss, gradient norm and any logged metrics side by side."""
    n = 2 + len(metrics)
    with plt.ioff():
        fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.4), layout="constrained")
    loss(history, axes[0])
    grad_norm(history, axes[1])
    for ax, name in zip(axes[2:], metrics, strict=True):
        metric(history, name, ax)
    return fig

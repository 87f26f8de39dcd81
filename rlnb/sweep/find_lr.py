"""The learning-rate range test (Smith, "Cyclical Learning Rates", 2017; fastai's ``lr_find``).

Train for ``steps`` steps while the learning rate grows exponentially from ``start_lr`` to ``end_lr``,
record the objective at each step, and suggest the rate where the smoothed objective improves fastest
per decade of learning rate — before the best point, below where training goes wrong. It runs on a copy
of a local session's weights (the session itself is not touched beyond saving a checkpoint), or on a
fresh session (remote targets, or no session given).

For Muon the learning rate is in the session's scaling convention ("original": spectral-norm units, KJ;
"match_adam": the RMS of an AdamW update, Moonshot). ``convert_muon_lr`` maps a rate from one to the
other for a model's matrix shapes.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from torch import nn

from rlnb.engine.models.adapter import roles
from rlnb.engine.models.tiny import SIZES, build_model
from rlnb.engine.optim.muon import MATCH_ADAM_RMS
from rlnb.engine.optim.split import split_params
from rlnb.errors import OperationFailed
from rlnb.history import new_run_id
from rlnb.params import AdamParams, OptimizerParams
from rlnb.session import Session, connect
from rlnb.tasks import Task, digits_task, rl_step
from rlnb.viz.plots import NotebookFigure

from .trial import Objective

DEFAULT_RANGES = {"adam": (1e-5, 1.0), "original": (1e-3, 10.0), "match_adam": (1e-5, 1.0)}
"""(start_lr, end_lr) by optimizer / Muon scaling convention: a decade or more either side of the usual
values (Adam 3e-4..3e-3; Muon 0.02 in "original" units)."""
SMOOTHING = 0.6
"""EMA factor on the per-step objective (bias-corrected), as fastai's ``lr_find`` (0.98 over 100 steps;
tens of steps here want far less memory). During the run the EMA is causal (to stop on divergence);
the curve shown and used for the suggestion is the EMA run forward and then backward, which has no
lag — a causal EMA trails the raw curve by ~1/(1 - β) steps and would shift the suggestion towards
larger rates."""
DIVERGE = 4.0
"""A loss run stops once the smoothed loss exceeds this many times its best."""
SCALING_NAMES = {"MUON_SCALING_STRATEGY_ORIGINAL": "original", "MUON_SCALING_STRATEGY_MATCH_ADAM": "match_adam"}

StepFn = Callable[[Session, OptimizerParams, int], float]
"""``step_fn(session, params, i) -> float``: one training step with ``params``, returning the objective."""


@dataclass
class LRFind:
    """A range test's result. ``plot()`` draws the objective against the learning rate with the
    suggestion marked; ``frame`` is the per-step table."""

    lrs: list[float]
    values: list[float]
    smoothed: list[float]
    suggestion: float | None
    objective: Objective
    optimizer: str
    muon_scaling: str | None
    """The convention of every rate here, for Muon; None for Adam."""
    reason: str
    """How the suggestion was chosen, or why there is none; and why the test ended early, if it did."""
    run_path: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def frame(self) -> pd.DataFrame:
        """One row per step: learning rate, the objective and its smoothed value."""
        return pd.DataFrame({"learning_rate": self.lrs, self.objective: self.values, "smoothed": self.smoothed})

    def figure(self) -> Figure:
        """A new figure with ``plot()`` on it; a notebook shows it where it is returned."""
        fig = NotebookFigure(figsize=(5, 3), layout="constrained")  # shows itself where a notebook returns it
        self.plot(fig.add_subplot())
        return fig

    def plot(self, ax: Axes | None = None) -> Axes:
        """The objective per step and smoothed against the learning rate (log x), the suggestion dashed."""
        if ax is None:
            return self.figure().axes[0]
        ax.plot(self.lrs, self.values, ".", color="0.6", label=f"{self.objective} per step")
        ax.plot(self.lrs, self.smoothed, color="C0", label="smoothed")
        if self.suggestion is not None:
            ax.axvline(self.suggestion, color="C3", ls="--", label=f"suggested {self.suggestion:.2g}")
        unit = f" ({self.muon_scaling} scaling)" if self.muon_scaling else ""
        ax.set(
            xscale="log",
            xlabel=f"{self.optimizer} learning rate{unit}",
            ylabel=self.objective,
            title="learning-rate range test",
        )
        ax.legend(loc="best", fontsize="small")
        return ax


def lr_find(
    base: OptimizerParams,
    session: Session | None = None,
    *,
    target: str = "local",
    start_lr: float | None = None,
    end_lr: float | None = None,
    steps: int = 40,
    task: Task | None = None,
    step_fn: StepFn | None = None,
    objective: Objective = "reward",
    seed: int = 0,
    runs_dir: str | Path | None = None,
    stop: threading.Event | None = None,
    progress: Callable[[int, int], None] | None = None,
    **options: Any,
) -> LRFind:
    """Run a range test with ``base``'s other fields, growing its ``learning_rate`` (Muon: Muon's own
    rate; the ``adam`` part keeps ``base``'s) from ``start_lr`` to ``end_lr`` over ``steps`` steps.

    ``session``: a local session is copied (a training checkpoint, loaded into a new session with a
    fresh optimizer; pass ``model=`` for a custom ``nn.Module``); a remote one gives the service and
    base model for a fresh session (``api_key`` from ``options`` or ``TOGETHER_API_KEY``). Without a
    session, a fresh session on ``target`` with ``options``. A step is one RL step of ``task``
    (default: the demo's) reporting the mean reward or the loss (``objective``), or your
    ``step_fn(session, params, i)``. ``stop`` ends it early; ``progress(done, total)`` after each step.
    """
    if steps < 5:
        raise ValueError(f"steps must be >= 5 for a range test, got {steps}")
    if objective not in ("reward", "loss"):
        raise ValueError(f"objective must be 'reward' or 'loss', got {objective!r}")
    kind = "adam" if isinstance(base, AdamParams) else "muon"
    trial = _open(kind, session, target, seed, runs_dir, options)
    scaling = SCALING_NAMES.get(str(trial.history.config.get("muon_scaling")), trial.history.config.get("muon_scaling"))
    scaling = scaling if kind == "muon" else None
    lo, hi = DEFAULT_RANGES[scaling or "adam"]
    start_lr, end_lr = start_lr or lo, end_lr or hi
    if not 0 < start_lr < end_lr:
        trial.close()
        raise ValueError(f"need 0 < start_lr < end_lr, got start_lr={start_lr}, end_lr={end_lr}")
    the_task = task or digits_task()
    run = step_fn or _rl_step(the_task, objective, seed)
    lrs = [start_lr * (end_lr / start_lr) ** (i / (steps - 1)) for i in range(steps)]
    values: list[float] = []
    ended = ""
    try:
        for i, lr in enumerate(lrs):
            if stop is not None and stop.is_set():
                ended = f"stopped after {i} steps"
                break
            try:
                value = float(run(trial, _with_lr(base, lr), i))
            except OperationFailed as exc:
                ended = f"{(exc.code or 'FAILED').rsplit('_CODE_', 1)[-1]} at lr {lr:.3g}"
                break
            values.append(value)
            trial.history.log(trial.step, **{objective: value, "lr_find_lr": lr})
            if progress is not None:
                progress(i + 1, steps)
            if not math.isfinite(value) or _diverged(_smooth(values), objective):
                ended = f"diverged at lr {lr:.3g}"
                break
    finally:
        trial.wait()
        trial.close()
    smoothed = _smooth(_smooth(values)[::-1])[::-1]  # forward, then backward: no lag
    suggestion, why = suggest(lrs[: len(values)], smoothed, objective)
    reason = why + (f"; ended early: {ended}" if ended else "")
    path = str(trial.history.path) if trial.history.path else None
    return LRFind(lrs[: len(values)], values, smoothed, suggestion, objective, kind, scaling, reason, path)


def _with_lr(base: OptimizerParams, lr: float) -> OptimizerParams:
    return type(base)(**{**base.model_dump(exclude_unset=True), "learning_rate": lr})


def _rl_step(task: Task, objective: Objective, seed: int) -> StepFn:
    def step(session: Session, params: OptimizerParams, i: int) -> float:
        report = rl_step(session, task, params, seed=seed * 1_000_003 + i)
        return report.reward if objective == "reward" else report.loss

    return step


def _open(
    kind: str, session: Session | None, target: str, seed: int, runs_dir: str | Path | None, options: dict[str, Any]
) -> Session:
    record: dict[str, Any] = {"runs_dir": runs_dir, "run_id": new_run_id("lr-find")}
    if session is None:
        extra: dict[str, Any] = {"seed": seed} if target == "local" else {}
        return connect(target, optimizer=kind, **record, **extra, **options)
    if session.optimizer != kind:
        raise ValueError(f"the session's optimizer is {session.optimizer}; pass {session.optimizer} params")
    config = session.history.config
    if config.get("backend") == "remote":
        fresh = {
            "base_model": config.get("model"),
            "muon_scaling": config.get("muon_scaling"),
            "lora": config.get("lora"),
            **options,
        }
        return connect(str(config["base_url"]), optimizer=kind, **record, **fresh)
    ckpt = session.save_training_checkpoint().result().checkpoint
    model = str(config.get("model", "")).removeprefix("rlnb/")
    if "model" not in options and model not in SIZES:
        raise ValueError("lr_find copies a session on a custom model into model=<a fresh instance of it>; pass model=")
    copy = {
        "model": model,
        "muon_scaling": config.get("muon_scaling") or "original",
        "lora": config.get("lora"),
        "device": config.get("device", "auto"),
        "seed": seed,
        **options,
    }
    return connect(
        "local",
        optimizer=kind,
        resume_from=session.backend.checkpoint_path(ckpt.id),  # type: ignore[attr-defined]
        load_optimizer=False,
        **record,
        **copy,
    )


def _smooth(values: Sequence[float], beta: float = SMOOTHING) -> list[float]:
    """Bias-corrected EMA (fastai): the first points are not dragged towards 0."""
    out, avg = [], 0.0
    for i, v in enumerate(values, 1):
        avg = beta * avg + (1 - beta) * v
        out.append(avg / (1 - beta**i))
    return out


def _diverged(smoothed: list[float], objective: Objective) -> bool:
    if objective != "loss" or len(smoothed) < 3:
        return False
    best = min(smoothed)
    return best > 0 and smoothed[-1] > DIVERGE * best


def suggest(lrs: Sequence[float], smoothed: Sequence[float], objective: Objective) -> tuple[float | None, str]:
    """The rate of fastest improvement per decade of learning rate, before the best point (the steepest
    descent of the loss, the steepest ascent of the reward). The first 10% of steps are skipped: the EMA
    has too little history there."""
    sign = 1.0 if objective == "reward" else -1.0
    y = sign * np.asarray(smoothed, dtype=float)
    if len(y) < 5:
        return None, f"too few steps ({len(y)}) to suggest a rate"
    best = int(np.nanargmax(y))
    skip = max(1, len(y) // 10)
    if best <= skip:
        return None, f"no improvement before the best point (at lr {lrs[best]:.3g}): try a smaller start_lr"
    slope = np.gradient(y[: best + 1], np.log10(np.asarray(lrs[: best + 1])))
    i = skip + int(np.nanargmax(slope[skip:]))
    if not slope[i] > 0:
        return None, "the objective did not improve: try a wider range or more steps"
    return float(lrs[i]), f"steepest {'ascent' if sign > 0 else 'descent'} of the smoothed {objective}"


def muon_shapes(model: str | nn.Module = "tiny") -> list[tuple[int, int]]:
    """The shapes (rows, cols) of the matrices Muon updates in a built-in model or an ``nn.Module``."""
    module = build_model(model, seed=0) if isinstance(model, str) else model
    return [(int(p.shape[0]), int(p.shape[1])) for _, p in split_params(module, roles(module)).muon]


def _scale(convention: str, rows: int, cols: int) -> float:
    if convention == "original":
        return max(1.0, rows / cols) ** 0.5
    if convention == "match_adam":
        return MATCH_ADAM_RMS * max(rows, cols) ** 0.5
    raise ValueError(f"Muon scaling must be 'original' or 'match_adam', got {convention!r}")


def convert_muon_lr(
    lr: float, from_: str, to: str, shapes: Sequence[tuple[int, int]] | str | nn.Module = "tiny"
) -> float:
    """A Muon learning rate in convention ``from_`` → the rate giving the same updates in ``to``.

    A matrix (rows × cols) moves by lr·s per step, s = max(1, rows/cols)^½ ("original") or
    0.2·max(rows, cols)^½ ("match_adam"). One rate cannot match every shape when the ratio differs
    between matrices, so the factor is the geometric mean of s_from/s_to weighted by each matrix's
    number of elements: the typical weight moves as before.
    """
    if not (lr > 0 and math.isfinite(lr)):
        raise ValueError(f"learning_rate = {lr!r} is invalid: must be a finite number > 0")
    dims = muon_shapes(shapes) if isinstance(shapes, str | nn.Module) else list(shapes)
    if not dims:
        raise ValueError("no Muon matrices to convert for")
    weights = np.array([r * c for r, c in dims], dtype=float)
    logs = np.array([math.log(_scale(from_, r, c) / _scale(to, r, c)) for r, c in dims])
    return float(lr * math.exp(float(weights @ logs / weights.sum())))

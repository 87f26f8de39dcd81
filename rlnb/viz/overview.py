"""``plots.overview``: one figure of a run, what matters first.

An RL run (a ``reward`` logged) leads with the reward, and ``eval/accuracy`` on the same axes when logged
(learning and reward gaming are then two lines), then the RL metrics ``rl_step`` logs (TRL's names), then
the gradient norm, and the loss last: a policy loss is ≈0 by construction and says little. Any other run
shows loss and gradient norm first, as before.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from rlnb.history import History
from rlnb.history.figures import EVAL_ACCURACY
from rlnb.history.figures import RLMetric as R
from rlnb.viz import placing
from rlnb.viz.draw import (
    NotebookFigure,
    all_nan,
    grad_norm_panel,
    logged_rows,
    loss_panel,
    metric_panel,
    note,
    numbers,
    once_per_step,
    steps_of,
)
from rlnb.viz.lines import MAX_POINTS, extremes, series
from rlnb.viz.names import long_name

COLUMNS = 4
"""Panels per row."""
EVAL = EVAL_ACCURACY
LOSS_NOTE = "≈0 by construction: the ratio is 1 on-policy\nand the advantages have zero mean per group"
"""Why the GRPO loss carries no signal (its gradient is what trains)."""
Line = tuple[str, str]
"""A column and its label."""
Panel = tuple[str, tuple[Line, ...], tuple[str, str] | None]
"""A panel's title, its lines and the two columns drawn as a band around them (or none)."""


def _panel(title: str | None, columns: tuple[str, ...], band: tuple[str, str] | None = None) -> Panel:
    """A panel of ``columns``, each labelled by its name (``rlnb.viz.names``); one alone titles it (``title=None``)."""
    return title or long_name(columns[0]), tuple((c, long_name(c)) for c in columns), band


RL_PANELS: tuple[Panel, ...] = (
    _panel(None, (R.ENTROPY,)),
    _panel("reward spread", (R.REWARD_STD, R.ZERO_STD)),
    _panel(None, (R.DISTINCT,)),
    _panel("completion length (tokens)", (R.MEAN_LENGTH,), (R.MIN_LENGTH, R.MAX_LENGTH)),
    _panel("clip fractions", (R.CLIPPED, R.CLIP_REGION)),
    _panel(None, (R.KL,)),
)
"""The RL metrics' panels, in order: title, (column, label) per line, and columns drawn as a band around
them; a panel none of whose lines was logged is left out."""


def overview(history: History | pd.DataFrame, metrics: Sequence[str] = (), ema: float | None = None) -> Figure:
    steps, reason = steps_of(history)
    logged = history.logged if isinstance(history, History) else steps
    rl = R.REWARD in logged.columns
    panels = [p for p in RL_PANELS if any(c in logged.columns for c, _ in p[1])] if rl else []
    shown = {R.REWARD, EVAL, *(c for _, lines, _ in panels for c, _ in lines)} if rl else set()
    shown |= {"loss", "grad_norm"}  # their own panels: a second one would say "no 'loss' logged yet"
    named = [metrics] if isinstance(metrics, str) else list(metrics) if isinstance(metrics, Iterable) else None
    if named is None or not all(isinstance(m, str) for m in named):  # 5: "'int' object is not iterable"
        raise TypeError(f"metrics must be the names of logged figures, got {metrics!r}"[:300])
    extra = [m for m in dict.fromkeys(named) if m not in shown]
    n = (1 if rl else 0) + len(panels) + len(extra) + 2
    cols = min(COLUMNS, n)
    fig = NotebookFigure(figsize=(4.2 * cols, 3.3 * math.ceil(n / cols)), layout="constrained")
    axes = list(np.atleast_1d(fig.subplots(math.ceil(n / cols), cols)).ravel())
    for ax in axes[n:]:
        ax.remove()
    own = history if isinstance(history, History) else None  # its log() rows: a NaN logged is a gap
    if rl:
        _reward(axes.pop(0), logged, ema, own)
        for title, lines, band in panels:
            ax = _lines(axes.pop(0), (logged, own), title, lines, band, ema)
            if lines[0][0] == R.DISTINCT:
                _counts(ax, numbers(logged, R.DISTINCT).to_numpy(dtype=float))
    else:
        loss_panel(axes.pop(0), steps, ema)
        grad_norm_panel(axes.pop(0), steps, reason, ema)
    for name in extra:  # a column of the steps table (learning_rate, step_time_s) is drawn from it
        if name in steps.columns and name not in logged.columns:
            metric_panel(axes.pop(0), steps, name, ema)
        else:
            metric_panel(axes.pop(0), logged, name, ema, own)
    if rl:
        grad_norm_panel(axes.pop(0), steps, reason, ema)
        ax = loss_panel(axes.pop(0), steps, ema)
        if R.MEAN_LENGTH in logged.columns:  # rl_step's run: a policy loss
            ax.set_title("GRPO loss (secondary)")
            # under the axis label: inside the axes, a loss wandering about 0 crossed it wherever it was put
            said = ax.annotate(LOSS_NOTE, (0.5, 0), (0, -2), ax.xaxis.label, "offset points", ha="center", va="top")
            said.set(fontsize="x-small", color="0.35")
    return fig


def _counts(ax: Axes, values: np.ndarray) -> None:
    """The distinct completions per group from 1 (collapsed) to the largest whole count seen (the group size, which
    is not logged, while its completions differ): autoscaled, 8 -> 7.83 filled the panel as a cliff."""
    seen = values[np.isfinite(values)]
    if seen.size:
        ax.set_ylim(0.5, max(math.ceil(seen.max()), 1) + 0.5)


def _reward(ax: Axes, frame: pd.DataFrame, ema: float | None, own: History | None) -> Axes:
    rows = logged_rows(ax, frame, R.REWARD, own)
    series(ax, rows["step"], rows[R.REWARD], ema, "C2", "reward (train)")
    if not rows[R.REWARD].notna().any():  # every reward NaN: bare axes would say nothing
        note(ax, all_nan(R.REWARD))
    title = "reward"
    if EVAL in frame.columns:
        acc = logged_rows(ax, frame, EVAL, own)
        # as every line: decimated, a marker at each of a few points, an infinity marked on the frame
        series(ax, acc["step"], acc[EVAL], None, "C3", long_name(EVAL), mark="s", ms=4)
        title = "reward and eval accuracy"
        placing.legend(ax, fontsize="small")
    ax.set(xlabel="optimizer step", ylabel="reward", title=title)
    return ax


def _lines(
    ax: Axes,
    source: tuple[pd.DataFrame, History | None],
    title: str,
    lines: tuple[Line, ...],
    band: tuple[str, str] | None,
    ema: float | None,
) -> Axes:
    """A panel of RL metrics: ``source`` is the logged table and, where the plot was given it, its History."""
    frame, own = source
    ax.set(xlabel="optimizer step", title=title)
    drawn = [(c, label) for c, label in lines if c in frame.columns]
    for i, (column, label) in enumerate(drawn):
        rows = logged_rows(ax, frame, column, own)
        series(ax, rows["step"], rows[column], ema, f"C{(i + 4) % 10}", label)
    if band is not None and set(band) <= set(frame.columns):
        rows = once_per_step(ax, frame[["step", *band]].dropna())  # logged late: in step order
        low, high = (numbers(rows, b).to_numpy(dtype=float) for b in band)
        keep = extremes(low, high, MAX_POINTS)  # decimated as the lines are: 100k steps would draw 100k vertices
        ax.fill_between(
            rows["step"].to_numpy()[keep], low[keep], high[keep], color="C4", alpha=0.2, lw=0, label="min-max"
        )
    if len(ax.get_legend_handles_labels()[0]) > 1:
        placing.legend(ax, fontsize="small")
    return ax

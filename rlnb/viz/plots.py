"""Matplotlib views of a History.

Every function takes a ``History`` or a DataFrame (``history.df``, ``history.steps``, ``history.logged``
or ``rlnb.compare(...)``, whichever it needs) and an optional ``ax``; it returns the Axes (one panel)
or the Figure (several). Nothing here touches pyplot: new figures are ``NotebookFigure`` objects (a
``Figure`` that renders itself as PNG for IPython), so a notebook shows a returned figure exactly once,
nothing piles up in pyplot's figure list, and ``plt.show()`` is never called. For an Axes, return
``ax.figure``.

Lines longer than ``MAX_POINTS`` are min/max-decimated before drawing (see ``decimate``), so a
100k-step run plots in a fraction of a second; smoothing (``ema=``) is computed on the full series first.

This module is the public face of every figure; the larger ones are drawn by their own modules
(``overview``, ``timeline``, ``comparison``), all on ``rlnb.viz.draw`` (with its ``lines`` and ``texts``).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from rlnb.history import History
from rlnb.viz import comparison
from rlnb.viz import overview as _overview
from rlnb.viz import timeline as _timeline
from rlnb.viz.draw import (
    CLIP_HEADROOM,
    MAX_ERROR_LABELS,
    STATUS_COLORS,
    STD_BAND_MIN_SEEDS,
    STEPS_TABLE,
    NotebookFigure,
    check_name,
    grad_norm_panel,
    loss_panel,
    metric_panel,
    need,
    new_axes,
    note,
    once_per_step,
    png,
    short,
    steps_of,
    within_span,
)
from rlnb.viz.lines import MARKERS_UP_TO, MAX_POINTS, check_ema, decimate, smooth
from rlnb.viz.texts import as_written, fit_titles

__all__ = [
    "CLIP_HEADROOM",
    "MARKERS_UP_TO",
    "MAX_ERROR_LABELS",
    "MAX_POINTS",
    "STATUS_COLORS",
    "STD_BAND_MIN_SEEDS",
    "NotebookFigure",
    "as_written",
    "compare",
    "decimate",
    "grad_norm",
    "learning_rate",
    "loss",
    "metric",
    "overview",
    "png",
    "short",
    "smooth",
    "timeline",
]


_Drawn = TypeVar("_Drawn", Axes, Figure)


def _written(draw: Callable[..., _Drawn]) -> Callable[..., _Drawn]:
    """A public plot whose texts are drawn as written (``as_written``), refusing what is no history by name, and an
    ``ema`` out of range at the call, on an empty history too (where the data is smoothed, it would pass there)."""
    signature = inspect.signature(draw)

    @functools.wraps(draw)
    def drawn(*args: Any, **kwargs: Any) -> _Drawn:
        data = args[0] if args else kwargs.get("history")
        if draw.__name__ != "compare" and not isinstance(data, History | pd.DataFrame):
            # plots.loss(session): AttributeError "'Session' object has no attribute 'columns'"
            hint = ": pass session.history" if hasattr(data, "history") else ""
            raise TypeError(f"plots.{draw.__name__} takes a History or a DataFrame, got {type(data).__name__}{hint}")
        ema = signature.bind_partial(*args, **kwargs).arguments.get("ema")
        if ema is not None:
            check_ema(ema)
        out = draw(*args, **kwargs)
        within_span(out)  # a figure of 1.7e308 failed when drawn (the tick locator's arange)
        fit_titles(out)  # on the names as given, each measured as drawn: an escape is never cut in two
        as_written(out)
        return out

    return drawn


@_written
def loss(history: History | pd.DataFrame, ax: Axes | None = None, ema: float | None = None) -> Axes:
    """Loss per optimizer step (``history.steps.loss``: the sum over the forward-backwards that fed
    the step). ``ema=0.9`` draws the raw line faint and its exponential moving average bold."""
    return loss_panel(new_axes(ax), steps_of(history)[0], ema)


@_written
def grad_norm(history: History | pd.DataFrame, ax: Axes | None = None, ema: float | None = None) -> Axes:
    """Pre-clip global gradient norm per optimizer step, the clip threshold dashed (absent where 0 =
    off) and, for Muon, the norms over the Muon matrices and the AdamW-tuned parameters. When the
    backend reports no norm (a remote Together session) the axes say why."""
    steps, reason = steps_of(history)
    return grad_norm_panel(new_axes(ax), steps, reason, ema)


@_written
def learning_rate(history: History | pd.DataFrame, ax: Axes | None = None) -> Axes:
    """Learning rate used per optimizer step (Muon: the matrix learning rate)."""
    steps, reason = steps_of(history)
    need(steps, ("step", "learning_rate"), STEPS_TABLE)
    ax = new_axes(ax)
    ax.set(xlabel="optimizer step", ylabel="learning rate", title="learning rate")
    steps = once_per_step(ax, steps)
    if steps["learning_rate"].notna().any():
        ax.plot(*decimate(steps["step"], steps["learning_rate"]), color="C3", label="learning rate")
    else:
        note(ax, reason or ("no completed optimizer step yet" if steps.empty else "no learning rate reported"))
    return ax


@_written
def metric(history: History | pd.DataFrame, name: str, ax: Axes | None = None, ema: float | None = None) -> Axes:
    """A figure given to ``history.log(step, name=...)`` (e.g. ``"reward"``), per logged row, or a column of the
    steps table (``"learning_rate"``, ``"step_time_s"``), per optimizer step."""
    check_name("name", name)
    if not isinstance(history, History):
        return metric_panel(new_axes(ax), history, name, ema)
    frame = history.logged
    if name not in frame.columns and name in history.steps.columns:
        # not "no 'learning_rate' logged yet" under a run that reports one every step
        return metric_panel(new_axes(ax), history.steps, name, ema)
    return metric_panel(new_axes(ax), frame, name, ema, history)


@_written
def overview(history: History | pd.DataFrame, metrics: Sequence[str] = (), ema: float | None = None) -> Figure:
    """One figure of the run. An RL run (``reward`` logged) leads with the reward (and ``eval/accuracy`` on
    the same axes when logged), then the RL metrics ``rl_step`` logs, each ``metrics`` figure, the gradient
    norm, and the loss last, marked as GRPO's ≈0 loss; any other run shows loss, gradient norm and each
    of ``metrics`` (``rlnb.viz.overview``)."""
    return _overview.overview(history, metrics, ema)


@_written
def timeline(history: History | pd.DataFrame, ax: Axes | None = None, now: float | None = None) -> Axes:
    """Operation status over time: one lane per operation kind (in order of first submission), one bar
    per operation from its start (its submission while pending) to its end (``now`` while unfinished,
    default the current POSIX time, or a loaded run's latest recorded time), coloured by status. A
    failure gets a red X at its end and its short error code (for the latest ``MAX_ERROR_LABELS``
    failures). x: seconds since the first submission. Takes a History or ``history.df``.

    A status with more than ``MAX_POINTS`` bars is decimated: bars of one lane closer than
    1/``MAX_POINTS`` of the time span (under a pixel) are merged into one."""
    return _timeline.timeline(history, ax, now)


@_written
def compare(
    frame_or_histories: pd.DataFrame | Iterable[History | str],
    y: str = "loss",
    ax: Axes | None = None,
    ema: float | None = None,
    by: str = "run",
    band: str = "auto",
) -> Axes:
    """Several runs against optimizer step: one line per ``by`` group (a config label). A group of
    several members (runs told apart by ``seed``) draws their mean per step and a band: ``"minmax"``
    (lowest to highest seed), ``"std"`` (mean ± sample std, ddof=1), ``"seeds"`` (a thin line per seed
    instead), or ``"auto"``: min-max below ``STD_BAND_MIN_SEEDS`` seeds — with 2-3 seeds a std band
    leaves the range the metric can take (a reward in [0, 1] drawn down to -0.2) — else mean ± std
    clipped to the min-max. ``ema`` smooths each member before averaging. Takes ``rlnb.compare([...])``
    output or a list of histories / run folders (given to it). The band is decimated like the lines,
    keeping each bucket's lowest lower edge and highest upper edge. Past the last step every member of a
    group reached (a seed that failed or stopped early), its mean of the others goes on dashed."""
    return comparison.compare(frame_or_histories, y, ax, ema, by, band)

"""Matplotlib views of a History.

Every function takes a ``History`` or a DataFrame (``history.df``, ``history.steps``, ``history.logged``
or ``rlnb.compare(...)``, whichever it needs) and an optional ``ax``; it returns the Axes (one panel)
or the Figure (several). Nothing here touches pyplot: new figures are ``NotebookFigure`` objects (a
``Figure`` that renders itself as PNG for IPython), so a notebook shows a returned figure exactly once,
nothing piles up in pyplot's figure list, and ``plt.show()`` is never called. For an Axes, return
``ax.figure``.

Lines longer than ``MAX_POINTS`` are min/max-decimated before drawing (see ``decimate``), so a
100k-step run plots in a fraction of a second; smoothing (``ema=``) is computed on the full series first.

This module is the public face of every figure; the larger ones are drawn by their own modules on its
helpers (``overview``, ``timeline``, ``comparison``).
"""

from __future__ import annotations

import functools
import io
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import numpy as np
import pandas as pd
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text
from numpy.typing import ArrayLike

from rlnb import wire
from rlnb.history import History
from rlnb.history.tables import steps_table

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
from rlnb.wire import OperationStatus as Status


def png(fig: Figure) -> bytes:
    """Render a figure to PNG bytes on the Agg canvas (no pyplot; safe off the main thread)."""
    buf = io.BytesIO()
    (fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)).print_png(buf)
    return buf.getvalue()


class NotebookFigure(Figure):
    """A matplotlib ``Figure`` outside pyplot that Jupyter displays as a PNG where it is returned."""

    def _repr_png_(self) -> bytes:
        return png(self)


STATUS_COLORS: dict[str, str] = {
    Status.COMPLETED: "tab:green",
    Status.FAILED: "tab:red",
    Status.RUNNING: "tab:blue",
    Status.PENDING: "0.7",
}
"""Bar colour per operation status (timeline, live table); any other status is drawn grey."""
MAX_POINTS = 2000
"""Lines with more points are decimated to at most this many before drawing."""
MAX_ERROR_LABELS = 25
"""``timeline`` labels at most this many of the latest failures with their error code, so labels never
cover the plot."""
MARKERS_UP_TO = 30
"""Lines of at most this many points get a marker at each point."""
CLIP_HEADROOM = 2.0
"""The clip threshold is drawn when it is at most this × the largest gradient norm; above, the legend
gives its value instead, so a threshold of 10 never squashes norms of 0.3 into a flat line."""


def short(code: str | None) -> str:
    """``TRAINING_OPERATION_ERROR_CODE_NON_FINITE_LOSS`` → ``NON_FINITE_LOSS`` (statuses likewise)."""
    if code is None or (isinstance(code, float) and np.isnan(code)):
        return ""
    return wire.short_name(code)


def _extremes(low: np.ndarray, high: np.ndarray, cap: int) -> np.ndarray:
    """Indices to keep: all of them when there are at most ``cap``; else, over ``cap // 2`` equal
    consecutive buckets, each bucket's lowest ``low`` and highest ``high`` (NaNs ignored), in order."""
    n = len(low)
    if n <= cap:
        return np.arange(n)
    width = -(-n // (cap // 2))
    buckets = -(-n // width)
    start = np.arange(buckets) * width

    def grid(values: np.ndarray, fill: float) -> np.ndarray:
        padded = np.full(buckets * width, fill)
        padded[:n] = np.where(np.isnan(values), fill, values)
        return padded.reshape(buckets, width)

    # An all-NaN bucket keeps its first point: the gap stays a gap.
    keep = np.concatenate([start + grid(low, np.inf).argmin(1), start + grid(high, -np.inf).argmax(1)])
    keep = np.unique(keep)
    return keep[keep < n]


def decimate(x: ArrayLike, y: ArrayLike, cap: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)`` as float arrays, unchanged up to ``cap`` points; beyond, min/max bucket decimation:
    ``cap // 2`` equal buckets of consecutive points, each keeping its lowest and its highest point, so
    spikes survive and the drawn envelope is exact at screen resolution."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = _extremes(y, y, cap)
    return x[keep], y[keep]


def smooth(y: ArrayLike, ema: float) -> np.ndarray:
    """Exponential moving average ``s[0] = y[0]``, ``s[t] = ema·s[t-1] + (1 - ema)·y[t]``; NaNs are
    skipped and stay gaps."""
    if not 0 <= ema < 1:
        raise ValueError(f"ema must be in [0, 1), got {ema}")
    values = pd.Series(np.asarray(y, dtype=float))
    out = values.ewm(alpha=1 - ema, adjust=False, ignore_na=True).mean()
    return out.where(values.notna()).to_numpy()


def _axes(ax: Axes | None) -> Axes:
    return ax if ax is not None else NotebookFigure(figsize=(6, 3.5), layout="constrained").add_subplot()


def _note(ax: Axes, text: str) -> None:
    """Say on the axes why there is nothing to draw."""
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", wrap=True, color="0.35")


def _series(ax: Axes, x: ArrayLike, y: ArrayLike, ema: float | None, color: str, label: str) -> None:
    """``y`` over ``x`` (a marker at each point while there are few); with ``ema`` the raw line faint
    and the smoothed one bold."""
    marker = "o" if len(np.asarray(x)) <= MARKERS_UP_TO else ""
    if ema is None:
        ax.plot(*decimate(x, y), color=color, label=label, marker=marker, ms=3)
        return
    ax.plot(*decimate(x, y), color=color, alpha=0.3, lw=1, label=f"{label} (raw)", marker=marker, ms=3)
    ax.plot(*decimate(x, smooth(y, ema)), color=color, lw=2, label=f"{label} (EMA {ema})")


def _na_reason(ops: pd.DataFrame) -> str | None:
    reasons = ops["na_reason"].dropna()
    return str(reasons.iloc[-1]) if len(reasons) else None


def _steps(data: History | pd.DataFrame) -> tuple[pd.DataFrame, str | None]:
    """The steps table and why the gradient norm is missing (when the operations say)."""
    if isinstance(data, History):  # kept up to date as operations finish: no rebuild from .df
        return data.steps, data.step_log.na_reason
    if "kind" in data.columns:
        return steps_table(data), _na_reason(data)
    return data, None


def _loss(ax: Axes, steps: pd.DataFrame, ema: float | None) -> Axes:
    if "loss" not in steps or "step" not in steps:
        raise ValueError(f"this table has no step and loss columns (it has {', '.join(map(str, steps.columns))}): "
                         "pass a History, history.df or history.steps; plots.metric draws a logged figure")
    _series(ax, steps["step"], steps["loss"], ema, "C0", "loss")
    ax.set(xlabel="optimizer step", ylabel="loss", title="loss")
    return ax


def _grad_norm(ax: Axes, steps: pd.DataFrame, reason: str | None, ema: float | None) -> Axes:
    ax.set(xlabel="optimizer step", ylabel="norm", title="gradient norm (pre-clip)")
    if not steps["grad_norm"].notna().any():
        _note(ax, reason or ("no completed optimizer step yet" if steps.empty else "no gradient norm reported"))
        return ax
    _series(ax, steps["step"], steps["grad_norm"], ema, "C1", "global")
    for col, color, label in (("grad_norm_muon", "C4", "Muon matrices"), ("grad_norm_adam", "C2", "AdamW params")):
        if steps[col].notna().any():
            _series(ax, steps["step"], steps[col], ema, color, label)
    clip = steps["grad_clip_norm"].where(steps["grad_clip_norm"] > 0)  # 0 = clipping off: no line there
    top = steps[["grad_norm", "grad_norm_muon", "grad_norm_adam"]].max().max()
    if clip.notna().any() and clip.max() <= CLIP_HEADROOM * top:
        ax.plot(*decimate(steps["step"], clip), ls="--", color="0.4", label="clip threshold")
    elif clip.notna().any():  # far above the norms: in the legend only, the y-range stays theirs
        ax.plot([], [], ls="--", color="0.4", label=f"clip threshold {clip.max():g} (off the top)")
    ax.legend(loc="upper right", fontsize="small")
    return ax


def _metric(ax: Axes, frame: pd.DataFrame, name: str, ema: float | None) -> Axes:
    ax.set(xlabel="optimizer step", ylabel=name, title=name)
    if name not in frame.columns or not frame[name].notna().any():
        _note(ax, f"no {name!r} logged yet")
        return ax
    _series(ax, frame["step"], frame[name], ema, "C2", name)
    return ax


def as_written(artist: Artist) -> None:
    """Every text of ``artist`` (an Axes, a Figure) drawn as written: matplotlib reads text between two ``$`` as TeX,
    and a figure's, a run's or a loaded status's name is the user's text (``"$\\nope$ cost"`` failed to draw, and
    ``"price $5 to $10"`` lost its dollars)."""
    for text in artist.findobj(Text):
        text.set_parse_math(False)


_Drawn = TypeVar("_Drawn", Axes, Figure)


def _written(draw: Callable[..., _Drawn]) -> Callable[..., _Drawn]:
    """A public plot whose texts are drawn as written (``as_written``)."""

    @functools.wraps(draw)
    def drawn(*args: Any, **kwargs: Any) -> _Drawn:
        out = draw(*args, **kwargs)
        as_written(out)
        return out

    return drawn


@_written
def loss(history: History | pd.DataFrame, ax: Axes | None = None, ema: float | None = None) -> Axes:
    """Loss per optimizer step (``history.steps.loss``: the sum over the forward-backwards that fed
    the step). ``ema=0.9`` draws the raw line faint and its exponential moving average bold."""
    return _loss(_axes(ax), _steps(history)[0], ema)


@_written
def grad_norm(history: History | pd.DataFrame, ax: Axes | None = None, ema: float | None = None) -> Axes:
    """Pre-clip global gradient norm per optimizer step, the clip threshold dashed (absent where 0 =
    off) and, for Muon, the norms over the Muon matrices and the AdamW-tuned parameters. When the
    backend reports no norm (a remote Together session) the axes say why."""
    steps, reason = _steps(history)
    return _grad_norm(_axes(ax), steps, reason, ema)


@_written
def learning_rate(history: History | pd.DataFrame, ax: Axes | None = None) -> Axes:
    """Learning rate used per optimizer step (Muon: the matrix learning rate)."""
    steps, reason = _steps(history)
    ax = _axes(ax)
    ax.set(xlabel="optimizer step", ylabel="learning rate", title="learning rate")
    if steps["learning_rate"].notna().any():
        ax.plot(*decimate(steps["step"], steps["learning_rate"]), color="C3", label="learning rate")
    else:
        _note(ax, reason or ("no completed optimizer step yet" if steps.empty else "no learning rate reported"))
    return ax


@_written
def metric(history: History | pd.DataFrame, name: str, ax: Axes | None = None, ema: float | None = None) -> Axes:
    """A figure given to ``history.log(step, name=...)`` (e.g. ``"reward"``), per logged row."""
    frame = history.logged if isinstance(history, History) else history
    return _metric(_axes(ax), frame, name, ema)


@_written
def overview(history: History | pd.DataFrame, metrics: Sequence[str] = (), ema: float | None = None) -> Figure:
    """One figure of the run. An RL run (``reward`` logged) leads with the reward (and ``eval/accuracy`` on
    the same axes when logged), then the RL metrics ``rl_step`` logs, each ``metrics`` figure, the gradient
    norm, and the loss last, marked as GRPO's ≈0 loss; any other run shows loss, gradient norm and each
    of ``metrics`` (``rlnb.viz.overview``)."""
    from rlnb.viz.overview import overview as draw  # it builds on this module's panels

    return draw(history, metrics, ema)


@_written
def timeline(history: History | pd.DataFrame, ax: Axes | None = None, now: float | None = None) -> Axes:
    """Operation status over time: one lane per operation kind (in order of first submission), one bar
    per operation from its start (its submission while pending) to its end (``now`` while unfinished,
    default the current POSIX time, or a loaded run's latest recorded time), coloured by status. A
    failure gets a red X at its end and its short error code (for the latest ``MAX_ERROR_LABELS``
    failures). x: seconds since the first submission. Takes a History or ``history.df``.

    A status with more than ``MAX_POINTS`` bars is decimated: bars of one lane closer than
    1/``MAX_POINTS`` of the time span (under a pixel) are merged into one."""
    from rlnb.viz.timeline import timeline as draw  # it builds on this module's helpers

    return draw(history, ax, now)


STD_BAND_MIN_SEEDS = 10
"""``compare(band="auto")`` draws a min-max band for fewer seeds than this, and mean ± std from here on."""


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
    from rlnb.viz.comparison import compare as draw  # it builds on this module's helpers

    return draw(frame_or_histories, y, ax, ema, by, band)

"""Matplotlib views of a History.

Every function takes a ``History`` or a DataFrame (``history.df``, ``history.steps``, ``history.logged``
or ``rlnb.compare(...)``, whichever it needs) and an optional ``ax``; it returns the Axes (one panel)
or the Figure (several). Nothing here touches pyplot: new figures are ``NotebookFigure`` objects (a
``Figure`` that renders itself as PNG for IPython), so a notebook shows a returned figure exactly once,
nothing piles up in pyplot's figure list, and ``plt.show()`` is never called. For an Axes, return
``ax.figure``.

Lines longer than ``MAX_POINTS`` are min/max-decimated before drawing (see ``decimate``), so a
100k-step run plots in a fraction of a second; smoothing (``ema=``) is computed on the full series first.
"""

from __future__ import annotations

import io
import time
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from numpy.typing import ArrayLike

from rlnb import wire
from rlnb.history import History
from rlnb.history.catalog import compare as compare_runs
from rlnb.history.tables import steps_table

__all__ = [
    "CLIP_HEADROOM",
    "MARKERS_UP_TO",
    "MAX_ERROR_LABELS",
    "MAX_POINTS",
    "STATUS_COLORS",
    "STD_BAND_MIN_SEEDS",
    "NotebookFigure",
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


def loss(history: History | pd.DataFrame, ax: Axes | None = None, ema: float | None = None) -> Axes:
    """Loss per optimizer step (``history.steps.loss``: the sum over the forward-backwards that fed
    the step). ``ema=0.9`` draws the raw line faint and its exponential moving average bold."""
    return _loss(_axes(ax), _steps(history)[0], ema)


def grad_norm(history: History | pd.DataFrame, ax: Axes | None = None, ema: float | None = None) -> Axes:
    """Pre-clip global gradient norm per optimizer step, the clip threshold dashed (absent where 0 =
    off) and, for Muon, the norms over the Muon matrices and the AdamW-tuned parameters. When the
    backend reports no norm (a remote Together session) the axes say why."""
    steps, reason = _steps(history)
    return _grad_norm(_axes(ax), steps, reason, ema)


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


def metric(history: History | pd.DataFrame, name: str, ax: Axes | None = None, ema: float | None = None) -> Axes:
    """A figure given to ``history.log(step, name=...)`` (e.g. ``"reward"``), per logged row."""
    frame = history.logged if isinstance(history, History) else history
    return _metric(_axes(ax), frame, name, ema)


def overview(history: History | pd.DataFrame, metrics: Sequence[str] = (), ema: float | None = None) -> Figure:
    """One figure of the run. An RL run (``reward`` logged) leads with the reward (and ``eval/accuracy`` on
    the same axes when logged), then the RL metrics ``rl_step`` logs, each ``metrics`` figure, the gradient
    norm, and the loss last, marked as GRPO's ≈0 loss; any other run shows loss, gradient norm and each
    of ``metrics`` (``rlnb.viz.overview``)."""
    from rlnb.viz.overview import overview as draw  # it builds on this module's panels

    return draw(history, metrics, ema)


def _merge_bars(x0: np.ndarray, x1: np.ndarray, lane: np.ndarray, gap: float) -> tuple[np.ndarray, ...]:
    """Per lane, bars that overlap or lie within ``gap`` of each other merged into one."""
    parts = []
    for k in np.unique(lane):
        m = lane == k
        order = np.argsort(x0[m], kind="stable")
        a, b = x0[m][order], x1[m][order]
        reach = np.maximum.accumulate(b)
        first = np.flatnonzero(np.r_[True, a[1:] > reach[:-1] + gap])
        parts.append((a[first], np.maximum.reduceat(b, first), np.full(len(first), k)))
    return tuple(np.concatenate(p) for p in zip(*parts, strict=True))


def _seconds(times: pd.Series, t0: pd.Timestamp) -> np.ndarray:
    return (times - t0).dt.total_seconds().to_numpy(dtype=float)


def timeline(history: History | pd.DataFrame, ax: Axes | None = None, now: float | None = None) -> Axes:
    """Operation status over time: one lane per operation kind (in order of first submission), one bar
    per operation from its start (its submission while pending) to its end (``now`` while unfinished,
    default the current POSIX time), coloured by status. A failure gets a red X at its end and its
    short error code (for the latest ``MAX_ERROR_LABELS`` failures). x: seconds since the first
    submission. Takes a History or ``history.df``.

    A status with more than ``MAX_POINTS`` bars is decimated: bars of one lane closer than
    1/``MAX_POINTS`` of the time span (under a pixel) are merged into one."""
    ops = history.df if isinstance(history, History) else history
    ax = _axes(ax)
    ax.set(xlabel="seconds since the first submission", title="operations")
    if ops.empty:
        _note(ax, "no operations yet")
        return ax
    t0 = ops["submitted_at"].min()
    submitted = _seconds(ops["submitted_at"], t0)
    started, finished = _seconds(ops["started_at"], t0), _seconds(ops["finished_at"], t0)
    left = np.where(np.isnan(started), submitted, started)
    right = np.where(np.isnan(finished), (time.time() if now is None else now) - t0.timestamp(), finished)
    kind = ops["kind"].astype(str).to_numpy()
    kinds = list(dict.fromkeys(kind))
    lane = pd.Series(kind).map({k: i for i, k in enumerate(kinds)}).to_numpy(dtype=float)
    status = ops["status"].astype(str).to_numpy()
    half, span = 0.35, float(np.nanmax(right) - np.nanmin(left))
    for st in [*STATUS_COLORS, *sorted(set(status) - set(STATUS_COLORS))]:
        m = status == st
        if not m.any():
            continue
        x0, x1, y = left[m], right[m], lane[m]
        if m.sum() > MAX_POINTS:
            x0, x1, y = _merge_bars(x0, x1, y, span / MAX_POINTS)
        verts = np.stack([np.c_[x0, y - half], np.c_[x0, y + half], np.c_[x1, y + half], np.c_[x1, y - half]], axis=1)
        color = STATUS_COLORS.get(st, "0.5")
        # A thin edge in the same colour keeps sub-pixel operations visible as a hairline.
        ax.add_collection(
            PolyCollection(list(verts), facecolors=color, edgecolors=color, linewidths=0.5, label=short(st).lower())
        )
    failed = status == Status.FAILED
    if failed.any():
        ax.plot(right[failed], lane[failed], "X", color="red", mec="black", ms=9, ls="none", label="_failure")
        codes = ops["error_code"].astype(object).to_numpy()[failed]
        for x, y, code in list(zip(right[failed], lane[failed], codes, strict=True))[-MAX_ERROR_LABELS:]:
            ax.annotate(
                short(code) or "no error code",
                (x, y),
                xytext=(5, -8),
                textcoords="offset points",
                fontsize="x-small",
                color="darkred",
            )
    ax.autoscale_view()
    ax.set_yticks(range(len(kinds)), kinds)
    ax.set_ylim(len(kinds) - 0.5, -0.5)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small", title="status")
    return ax


STD_BAND_MIN_SEEDS = 10
"""``compare(band="auto")`` draws a min-max band for fewer seeds than this, and mean ± std from here on."""


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
    keeping each bucket's lowest lower edge and highest upper edge."""
    if band not in ("auto", "minmax", "std", "seeds"):
        raise ValueError(f"band must be 'auto', 'minmax', 'std' or 'seeds', got {band!r}")
    if isinstance(frame_or_histories, pd.DataFrame):
        frame = frame_or_histories
    else:
        frame = compare_runs(list(frame_or_histories))
    ax = _axes(ax)
    ax.set(xlabel="optimizer step", ylabel=y, title=f"{y} by {by}")
    for i, (label, group) in enumerate(frame.groupby(by, sort=False, dropna=False)):
        seeds = group.groupby("seed", sort=False, dropna=False) if "seed" in group else [(None, group)]
        members = [m.sort_values("step") for _, m in seeds]
        series = [m[y].to_numpy(dtype=float) if ema is None else smooth(m[y], ema) for m in members]
        values = pd.DataFrame({"step": np.concatenate([m["step"] for m in members]), y: np.concatenate(series)})
        stats = values.groupby("step")[y].agg(["mean", "std", "min", "max"])
        x, mean = stats.index.to_numpy(dtype=float), stats["mean"].to_numpy()
        color = f"C{i % 10}"
        name = f"{label} ({len(members)} seeds)" if len(members) > 1 else str(label)
        ax.plot(*decimate(x, mean), color=color, label=name)
        if len(members) < 2:
            continue
        if band == "seeds":
            for m, s in zip(members, series, strict=True):
                ax.plot(*decimate(m["step"].to_numpy(dtype=float), s), color=color, lw=0.7, alpha=0.5)
            continue
        low, high = stats["min"].to_numpy(), stats["max"].to_numpy()
        if band == "std" or (band == "auto" and len(members) >= STD_BAND_MIN_SEEDS):
            std = stats["std"].to_numpy()
            if band == "std":
                low, high = mean - std, mean + std
            else:  # many seeds: the spread of the typical seed, never past the extreme ones
                low, high = np.maximum(low, mean - std), np.minimum(high, mean + std)
        keep = _extremes(low, high, MAX_POINTS)
        ax.fill_between(x[keep], low[keep], high[keep], color=color, alpha=0.25, lw=0)
    if len(frame):
        ax.legend(loc="best", fontsize="small")
    return ax

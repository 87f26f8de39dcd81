"""How a series of figures becomes a line: min/max decimation, EMA smoothing, a marker at each of a few points, and
its infinities marked on the frame (the static plots here; the live view's panels mark them the same way).
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.lines import Line2D
from numpy.typing import ArrayLike

from rlnb.viz import insidelegend

MAX_POINTS = 2000
"""Lines with more points are decimated to at most this many before drawing."""
MARKERS_UP_TO = 30
"""Lines of at most this many points get a marker at each point."""


def extremes(low: np.ndarray, high: np.ndarray, cap: int) -> np.ndarray:
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
    keep = extremes(y, y, cap)
    return x[keep], y[keep]


def check_ema(ema: object) -> None:
    """A ``ValueError`` naming ``ema`` unless a number in [0, 1): ``"0.9"`` was a bare ``TypeError`` from ``<=``."""
    if isinstance(ema, bool) or not isinstance(ema, numbers.Real) or not 0 <= float(ema) < 1:
        raise ValueError(f"ema must be a number in [0, 1), got {ema!r}")


def smooth(y: ArrayLike, ema: float) -> np.ndarray:
    """Exponential moving average ``s[0] = y[0]``, ``s[t] = ema·s[t-1] + (1 - ema)·y[t]``; NaNs and infinities are
    skipped and stay gaps (the EMA would draw the value before an infinity at its step, as if one had been reported)."""
    check_ema(ema)
    values = pd.Series(np.asarray(y, dtype=float))
    values = values.where(np.isfinite(values))
    out = values.ewm(alpha=1 - ema, adjust=False, ignore_na=True).mean()
    return out.where(values.notna()).to_numpy()


def series(
    ax: Axes, x: ArrayLike, y: ArrayLike, ema: float | None, color: str, label: str, mark: str = "o", **style: Any
) -> None:
    """``y`` over ``x`` (a ``mark`` at each point while there are few); with ``ema`` the raw line faint and the
    smoothed one bold, named in a legend: which is which is said nowhere else. ``style``: the line's own (``ms``,
    ``zorder``)."""
    style = {"ms": 3, **style, "marker": mark if len(np.asarray(x)) <= MARKERS_UP_TO else ""}
    if ema is None:
        ax.plot(*decimate(x, y), color=color, label=label, **style)
    else:
        ax.plot(*decimate(x, y), color=color, alpha=0.3, lw=1, label=f"{label} (raw)", **style)
        ax.plot(*decimate(x, smooth(y, ema)), color=color, lw=2, label=f"{label} (EMA {ema})")
        insidelegend.legend(ax)
    infinite(ax, x, y, color, label)


def infinite(ax: Axes, x: ArrayLike, y: ArrayLike, color: str, label: str) -> list[Line2D]:
    """A triangle on the frame at each step of ``y`` that is +inf (top) or -inf (bottom), named in a legend: a line
    has no point there, so a diverged step was a gap like a missing one, and a series all inf an empty axes.
    Returns what it drew."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    drawn: list[Line2D] = []
    for sign, edge, style in inf_marks(ax):
        hit = y == float(f"{sign}inf")
        if hit.any():
            at = x[hit][extremes(x[hit], x[hit], MAX_POINTS)]  # one per bucket is all a pixel shows
            label_n = inf_label(label, sign, int(hit.sum()))
            drawn += ax.plot(at, np.full(len(at), edge), color=color, label=label_n, **style)
            insidelegend.legend(ax)
    return drawn


def inf_marks(ax: Axes) -> list[tuple[str, float, dict[str, Any]]]:
    """Each sign of infinity, the edge of ``ax``'s frame it is marked on (in axes units) and the style of its marks:
    what the static plots (``infinite``) and the live view's panels (``rlnb.viz.livepanels``) both draw."""
    on_frame = {"transform": ax.get_xaxis_transform(), "ls": "none", "clip_on": False}
    return [("+", 1.0, {**on_frame, "marker": "^"}), ("-", 0.0, {**on_frame, "marker": "v"})]


def inf_label(label: str, sign: str, n: int) -> str:
    """The legend's name for the ``n`` steps of the line ``label`` at ``sign`` inf."""
    return f"{label} {sign}inf ({n} step{'s' if n > 1 else ''}, on the frame)"

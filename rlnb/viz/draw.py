"""What every figure of rlnb is drawn with: figures outside pyplot that a notebook shows (``NotebookFigure``,
``png``), the colours and limits they share, min/max decimation and EMA smoothing, and the single panels (loss,
gradient norm, a logged figure) that ``plots`` and ``overview`` put on their axes.

``rlnb.viz.plots`` is the public face; this module is what it and the larger figures (``overview``,
``timeline``, ``comparison``) build on, so none of them imports another.
"""

from __future__ import annotations

import io
import numbers
from collections.abc import Callable

import numpy as np
import pandas as pd
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.lines import Line2D
from matplotlib.text import Text
from matplotlib.textpath import TextToPath
from numpy.typing import ArrayLike

from rlnb import wire
from rlnb.history import History
from rlnb.history.tables import steps_table
from rlnb.wire import OperationStatus as Status


def png(fig: Figure) -> bytes:
    """Render a figure to PNG bytes on the Agg canvas (no pyplot; safe off the main thread)."""
    buf = io.BytesIO()
    (fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)).print_png(buf)
    return buf.getvalue()


def as_written(artist: Artist) -> None:
    """Every text of ``artist`` (an Axes, a Figure) drawn as written: matplotlib reads text between two ``$`` as TeX,
    and a figure's, a run's or a loaded status's name is the user's text (``"$\\nope$ cost"`` failed to draw, and
    ``"price $5 to $10"`` lost its dollars)."""
    for text in artist.findobj(Text):
        text.set_parse_math(False)


def printable(name: object) -> str:
    """``name`` as text with each character that is not printable as its escape (``\\n``, ``\\x00``), as the live
    tables show it: a run or a metric named ``"a\\x00b\\n"`` was drawn raw, a box and a line break in the legend."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(name))


def shortened(text: str, fits: Callable[[str], bool]) -> str:
    """``text``, or as much of its start and end as ``fits`` with "…" between (a long name differs at either end)."""
    if fits(text):
        return text
    low, high = 0, len(text)  # characters kept: ``low`` fits, ``high`` does not
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(_cut(text, mid)) else (low, mid)
    return _cut(text, low)


def _cut(text: str, keep: int) -> str:
    return text[: -(-keep // 2)] + "…" + text[len(text) - keep // 2 :]


def fit_title(ax: Axes, room: float) -> None:
    """Each line of ``ax``'s title cut in the middle ("…") to ``room`` pixels: a long figure name ran off the
    figure's edges, clipped at both ends with nothing to say so."""
    title = ax.title
    font, scale = title.get_fontproperties(), ax.figure.dpi / 72

    def fits(line: str) -> bool:
        return text_width(line, font) * scale <= room

    title.set_text("\n".join(shortened(line, fits) for line in title.get_text().split("\n")))


_TEXT = TextToPath()


def text_width(text: str, font: FontProperties) -> float:
    """``text``'s width in points, measured without a renderer (a figure on no canvas yet has none)."""
    return float(_TEXT.get_text_width_height_descent(text, font, ismath=False)[0])


def fit_titles(drawn: Axes | Figure) -> None:
    """Every title of ``drawn`` cut to its share of the figure's width (``fit_title``)."""
    for ax in drawn.axes if isinstance(drawn, Figure) else [drawn]:
        spec = ax.get_subplotspec()
        share = 1 / spec.get_gridspec().ncols if spec is not None else ax.get_position().width
        fit_title(ax, 0.85 * share * ax.figure.bbox.width)


Y_SPAN = 1e150
"""A y-axis ends at ±this: figures near the largest float (1.7e308) made the limits' margins overflow and the tick
locator fail (``arange: cannot compute length``) when drawn; larger points run off the frame. Half the largest
float's decades, not all of them: a log axis (``ax.set_yscale("log")`` afterwards, the live view's "log y") ticks
past its top by up to its span in decades, and from 1 to 1e300 that tick was inf (``OverflowError`` when drawn)."""


def within_span(drawn: Axes | Figure) -> None:
    """Each axes of ``drawn`` whose data pass ±``Y_SPAN`` limited to it (the others are left to autoscale)."""
    for ax in drawn.axes if isinstance(drawn, Figure) else [drawn]:
        low, high = ax.dataLim.intervaly  # the data's range, before autoscale's margins (an empty axes: inf, -inf)
        if np.isfinite([low, high]).all() and max(abs(low), abs(high)) > Y_SPAN:
            low, high = np.clip([low, high], -Y_SPAN, Y_SPAN)
            pad = max(high - low, abs(high), abs(low)) * 0.05
            ax.set_autoscaley_on(False)  # else set_ylim first runs the pending autoscale, which overflows
            ax.set_ylim(max(low - pad, -Y_SPAN), min(high + pad, Y_SPAN))


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
    skipped and stay gaps (the EMA drew the value before an infinity at its step, as if one had been reported)."""
    check_ema(ema)
    values = pd.Series(np.asarray(y, dtype=float))
    values = values.where(np.isfinite(values))
    out = values.ewm(alpha=1 - ema, adjust=False, ignore_na=True).mean()
    return out.where(values.notna()).to_numpy()


def new_axes(ax: Axes | None) -> Axes:
    return ax if ax is not None else NotebookFigure(figsize=(6, 3.5), layout="constrained").add_subplot()


def note(ax: Axes, text: str) -> None:
    """Say on the axes why there is nothing to draw."""
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", wrap=True, color="0.35")


def series(ax: Axes, x: ArrayLike, y: ArrayLike, ema: float | None, color: str, label: str) -> None:
    """``y`` over ``x`` (a marker at each point while there are few); with ``ema`` the raw line faint
    and the smoothed one bold."""
    marker = "o" if len(np.asarray(x)) <= MARKERS_UP_TO else ""
    if ema is None:
        ax.plot(*decimate(x, y), color=color, label=label, marker=marker, ms=3)
    else:
        ax.plot(*decimate(x, y), color=color, alpha=0.3, lw=1, label=f"{label} (raw)", marker=marker, ms=3)
        ax.plot(*decimate(x, smooth(y, ema)), color=color, lw=2, label=f"{label} (EMA {ema})")
    infinite(ax, x, y, color, label)


def infinite(ax: Axes, x: ArrayLike, y: ArrayLike, color: str, label: str) -> list[Line2D]:
    """A triangle on the frame at each step of ``y`` that is +inf (top) or -inf (bottom), named in a legend: a line
    has no point there, so a diverged step was a gap like a missing one, and a series all inf an empty axes.
    Returns what it drew."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    drawn: list[Line2D] = []
    for sign, edge, mark in (("+", 1.0, "^"), ("-", 0.0, "v")):
        hit = y == float(f"{sign}inf")
        if hit.any():
            at = x[hit][extremes(x[hit], x[hit], MAX_POINTS)]  # one per bucket is all a pixel shows
            n = int(hit.sum())
            named = f"{label} {sign}inf ({n} step{'s' if n > 1 else ''}, on the frame)"
            drawn += ax.plot(at, np.full(len(at), edge), transform=ax.get_xaxis_transform(), ls="none", marker=mark,
                             color=color, clip_on=False, label=named)  # fmt: skip
            ax.legend(loc="best", fontsize="small")
    return drawn


def _na_reason(ops: pd.DataFrame) -> str | None:
    reasons = ops["na_reason"].dropna()
    return str(reasons.iloc[-1]) if len(reasons) else None


def steps_of(data: History | pd.DataFrame) -> tuple[pd.DataFrame, str | None]:
    """The steps table and why the gradient norm is missing (when the operations say)."""
    if isinstance(data, History):  # kept up to date as operations finish: no rebuild from .df
        return data.steps, data.step_log.na_reason
    if "kind" in data.columns:
        return steps_table(data), _na_reason(data)
    return data, None


def need(table: pd.DataFrame, columns: tuple[str, ...], give: str) -> None:
    """A ``ValueError`` naming what ``table`` lacks and what to ``give`` instead: a plot of ``history.logged`` (the
    wrong one of the tables) was a bare ``KeyError: 'grad_norm'``."""
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise ValueError(f"this table has no {', '.join(missing)} column{'s' if len(missing) > 1 else ''} (it has "
                         f"{', '.join(map(str, table.columns)) or 'none'}): {give}")  # fmt: skip


STEPS_TABLE = "pass a History, history.df or history.steps; plots.metric draws a logged figure"
"""What a plot of the steps table asks for in place of another table."""


def loss_panel(ax: Axes, steps: pd.DataFrame, ema: float | None) -> Axes:
    need(steps, ("step", "loss"), STEPS_TABLE)
    ax.set(xlabel="optimizer step", ylabel="loss", title="loss")
    if not steps["loss"].notna().any():  # empty axes said nothing, where the norm's panel beside them said why
        note(ax, "no completed optimizer step yet" if steps.empty else "no loss reported")
        return ax
    series(ax, steps["step"], steps["loss"], ema, "C0", "loss")
    return ax


def grad_norm_panel(ax: Axes, steps: pd.DataFrame, reason: str | None, ema: float | None) -> Axes:
    need(steps, ("step", "grad_norm", "grad_norm_muon", "grad_norm_adam", "grad_clip_norm"), STEPS_TABLE)
    ax.set(xlabel="optimizer step", ylabel="norm", title="gradient norm (pre-clip)")
    if not steps["grad_norm"].notna().any():
        note(ax, reason or ("no completed optimizer step yet" if steps.empty else "no gradient norm reported"))
        return ax
    series(ax, steps["step"], steps["grad_norm"], ema, "C1", "global")
    for col, color, label in (("grad_norm_muon", "C4", "Muon matrices"), ("grad_norm_adam", "C2", "AdamW params")):
        if steps[col].notna().any():
            series(ax, steps["step"], steps[col], ema, color, label)
    clip = steps["grad_clip_norm"].where(steps["grad_clip_norm"] > 0)  # 0 = clipping off: no line there
    top = steps[["grad_norm", "grad_norm_muon", "grad_norm_adam"]].max().max()
    if clip.notna().any() and clip.max() <= CLIP_HEADROOM * top:
        ax.plot(*decimate(steps["step"], clip), ls="--", color="0.4", label="clip threshold")
    elif clip.notna().any():  # far above the norms: in the legend only, the y-range stays theirs
        ax.plot([], [], ls="--", color="0.4", label=f"clip threshold {clip.max():g} (off the top)")
    ax.legend(loc="upper right", fontsize="small")
    return ax


def logged_rows(frame: pd.DataFrame, name: str) -> pd.DataFrame:
    """The rows of ``frame`` where ``name`` was logged: a figure logged in a ``history.log`` call of its own (an eval
    accuracy every 10 steps) is NaN in the others' rows, and drawn with them it was dots between gaps, no line."""
    return frame[["step", name]].dropna()


def metric_panel(ax: Axes, frame: pd.DataFrame, name: str, ema: float | None) -> Axes:
    ax.set(xlabel="optimizer step", ylabel=printable(name), title=printable(name))
    if name not in frame.columns or not frame[name].notna().any():
        note(ax, f"no {name!r} logged yet")
        return ax
    rows = logged_rows(frame, name)
    series(ax, rows["step"], rows[name], ema, "C2", printable(name))
    return ax


STD_BAND_MIN_SEEDS = 10
"""``compare(band="auto")`` draws a min-max band for fewer seeds than this, and mean ± std from here on."""

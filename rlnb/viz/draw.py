"""What every figure of rlnb is drawn with: figures outside pyplot that a notebook shows (``NotebookFigure``,
``png``), the colours and limits they share, and the single panels (loss, gradient norm, a logged figure) that
``plots`` and ``overview`` put on their axes; their lines are ``rlnb.viz.lines``, their texts ``rlnb.viz.texts``.

``rlnb.viz.plots`` is the public face; this module is what it and the larger figures (``overview``,
``timeline``, ``comparison``) build on, so none of them imports another.
"""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text
from pandas.api.types import is_datetime64_any_dtype, is_numeric_dtype

from rlnb import wire
from rlnb._input.shown import printable
from rlnb.history import History
from rlnb.history.figures import STEP_COLUMNS
from rlnb.history.tables import steps_table
from rlnb.viz import insidelegend
from rlnb.viz.lines import decimate, series
from rlnb.viz.texts import Wrapper
from rlnb.wire import OperationStatus as Status


def png(fig: Figure) -> bytes:
    """Render a figure to PNG bytes on the Agg canvas (no pyplot; safe off the main thread)."""
    buf = io.BytesIO()
    (fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)).print_png(buf)
    return buf.getvalue()


Y_SPAN = 1e150
"""A y-axis ends at ±this: figures near the largest float (1.7e308) would make the limits' margins overflow and the tick
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
MAX_ERROR_LABELS = 25
"""``timeline`` labels at most this many of the latest failures with their error code, so labels never
cover the plot."""
CLIP_HEADROOM = 2.0
"""The clip threshold is drawn when it is at most this × the largest gradient norm; above, the legend
gives its value instead, so a threshold of 10 never squashes norms of 0.3 into a flat line."""


def short(code: str | None) -> str:
    """``TRAINING_OPERATION_ERROR_CODE_NON_FINITE_LOSS`` → ``NON_FINITE_LOSS`` (statuses likewise)."""
    if code is None or (isinstance(code, float) and np.isnan(code)):
        return ""
    return wire.short_name(code)


def new_axes(ax: Axes | None) -> Axes:
    return ax if ax is not None else NotebookFigure(figsize=(6, 3.5), layout="constrained").add_subplot()


def note(ax: Axes, text: str) -> None:
    """Say on the axes why there is nothing to draw, in lines as wide as the axes as drawn (``texts.Wrapper``)."""
    said = ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="0.35")
    ax.add_artist(Wrapper(said))


def not_logged(name: str) -> str:
    """The note of a figure's panel while none of it has come."""
    return f"no {name!r} logged yet"


def all_nan(name: str, logged: int | None = None, *, per_step: bool = False, where: str = "") -> str:
    """The note of a panel whose every value is NaN, said as what happened: "no 'loss' logged" (or "no loss
    reported") would be false under a run that logged or reported a NaN each time. A logged figure was ``logged``
    times (``None``: how often is not known); a column of the steps table (``per_step``) is NaN at a step that had no
    value as at one whose value was NaN, so it says only that."""
    if per_step:
        return f"{name!r} is NaN at every step{where}"
    times = "" if logged is None else f" {logged} time{'' if logged == 1 else 's'}"
    return f"{name!r} logged{times}, all NaN{where}"


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


def check_name(field: str, value: object) -> str:
    """``value``, the name of a figure or column, or a ``TypeError`` naming ``field``: ``plots.metric(h, ["acc"])`` and
    ``compare(by=["run"])`` were pandas' bare "unhashable type: 'list'", ``plots.metric(h, 5)`` a panel saying "no 5
    logged yet" (``history.log`` names each figure by a str)."""
    if not isinstance(value, str):
        raise TypeError(f"{field} must be the name of a column (a str), got {type(value).__name__}: {value!r}"[:300])
    return value


STEPS_TABLE = "pass a History, history.df or history.steps; plots.metric draws a logged figure"
"""What a plot of the steps table asks for in place of another table."""


def loss_panel(ax: Axes, steps: pd.DataFrame, ema: float | None) -> Axes:
    need(steps, ("step", "loss"), STEPS_TABLE)
    ax.set(xlabel="optimizer step", ylabel="loss", title="loss")
    steps = once_per_step(ax, steps)
    if not steps["loss"].notna().any():  # empty axes said nothing, where the norm's panel beside them said why
        note(ax, "no completed optimizer step yet" if steps.empty else all_nan("loss", per_step=True))
        return ax
    series(ax, steps["step"], steps["loss"], ema, "C0", "loss")
    return ax


def grad_norm_panel(ax: Axes, steps: pd.DataFrame, reason: str | None, ema: float | None) -> Axes:
    need(steps, ("step", "grad_norm", "grad_norm_muon", "grad_norm_adam", "grad_clip_norm"), STEPS_TABLE)
    ax.set(xlabel="optimizer step", ylabel="norm", title="gradient norm (pre-clip)")
    steps = once_per_step(ax, steps)
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
    insidelegend.legend(ax)  # "best": the upper right covered a norm that rose to its peak there
    return ax


def logged_rows(ax: Axes, frame: pd.DataFrame, name: str, history: History | None = None) -> pd.DataFrame:
    """The rows of ``frame`` where ``name`` was logged, as numbers (``numbers``), in step order, each step once
    (``once_per_step``) with the steps table's value: the last number logged there, NaN where only NaN was. A figure
    logged in a ``history.log`` call of its own (an eval accuracy every 10 steps) is NaN in the others' rows, and
    drawn with them it would be dots between gaps, no line; one logged late (step 5, then 2) would be a line going
    back across the axes. Given the ``history`` (``frame`` its ``logged`` table, one row per ``log()`` call), a NaN
    logged for ``name`` stays where its step has no number: a gap, where a figure that diverged would look healthy
    joined across."""
    rows = frame[["step", name]]
    keep = rows[name].notna().to_numpy(copy=True)
    if history is not None:
        nan_at = [i for i in history.step_log.nan_rows(name) if i < len(keep)]  # none logged after ``frame`` was read
        keep[nan_at] = True
        numbered = rows.loc[rows[name].notna(), "step"]
        keep &= rows[name].notna().to_numpy() | ~rows["step"].isin(numbered).to_numpy()  # a number beats a NaN
    rows = rows[keep]
    return once_per_step(ax, rows.assign(**{name: numbers(rows, name)}))


REPEATED = "{n} step{s} logged more than once: the last value of each drawn"
"""The note of axes whose table held a step more than once."""


class Repeats(Text):
    """The note of how many steps of an axes' lines came more than once: the most of any one line's (``count``, a
    number), its text made of it."""

    def __init__(self, ax: Axes) -> None:
        super().__init__(0.02, 0.03, "", transform=ax.transAxes, fontsize="x-small", color="0.35", clip_on=False)
        self.count = 0

    def at_least(self, count: int) -> None:
        if count > self.count:
            self.count = count
            self.set_text(REPEATED.format(n=count, s="" if count == 1 else "s"))


def once_per_step(ax: Axes, rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` in step order, each step once: its last row, the value logged last (a resumed run that logged a step
    again, a sink's rows read back), not a point per row, the line going down and up across it. How many
    steps came more than once is noted on ``ax`` (``Repeats``: the most of its lines')."""
    rows = rows.sort_values("step", kind="stable")
    repeated = int(rows["step"][rows["step"].duplicated()].nunique())
    if not repeated:
        return rows
    notes = [t for t in ax.texts if isinstance(t, Repeats)]
    if notes:
        notes[0].at_least(repeated)
    else:
        note = Repeats(ax)
        ax.add_artist(note)
        note.at_least(repeated)
    return rows.drop_duplicates("step", keep="last")


def numbers(frame: pd.DataFrame, name: str) -> pd.Series:
    """``frame[name]`` as floats, or a ``ValueError`` naming the figure, the first value that is no number and its
    step: a table read back from a file or built by hand whose figure held a text was pandas' bare "could not convert
    string to float: 'x'"."""
    column = frame[name]
    if is_numeric_dtype(column.dtype) or is_datetime64_any_dtype(column.dtype):
        return column
    values = pd.to_numeric(column.astype(object), errors="coerce")  # a text, "string" or categorical column
    bad = values.isna() & column.notna()
    if bad.any():
        i = bad.idxmax()
        at = f" at step {frame.at[i, 'step']}" if "step" in frame else ""
        raise ValueError(f"{name!r} holds {column[i]!r}{at}, not a number: plots draw numbers (history.log takes "
                         "only numbers; a table read back from a file may hold text)"[:300])  # fmt: skip
    return values.astype(float)


def metric_panel(ax: Axes, frame: pd.DataFrame, name: str, ema: float | None, history: History | None = None) -> Axes:
    """``name``'s panel from ``frame``: ``history``'s ``logged`` table, given with it (``logged_rows``), or a steps
    table."""
    ax.set(xlabel="optimizer step", ylabel=printable(name), title=printable(name))
    if name not in frame.columns or frame.empty:
        note(ax, not_logged(name))
        return ax
    if not frame[name].notna().any():  # the column is there: the figure was logged (or the step reported it)
        note(ax, all_nan(name, per_step=name in STEP_COLUMNS))
        return ax
    rows = logged_rows(ax, frame, name, history)
    series(ax, rows["step"], rows[name], ema, "C2", printable(name))
    return ax


STD_BAND_MIN_SEEDS = 10
"""``compare(band="auto")`` draws a min-max band for fewer seeds than this, and mean ± std from here on."""

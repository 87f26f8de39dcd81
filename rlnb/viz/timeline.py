"""``plots.timeline``: every operation as a bar in its kind's lane, coloured by status.

Kept apart from ``plots`` because it draws operations, not step series: its own geometry (lanes, bars
merged below a pixel, failure labels) and none of the step panels' helpers.
"""

from __future__ import annotations

import math
import numbers
import time
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.backend_bases import RendererBase
from matplotlib.collections import PolyCollection
from matplotlib.text import Annotation
from matplotlib.transforms import Bbox

from rlnb._input.shown import shown
from rlnb.history import History
from rlnb.history.export import read_back
from rlnb.history.tables import in_run_order
from rlnb.viz.draw import MAX_ERROR_LABELS, STATUS_COLORS, need, new_axes, note, short
from rlnb.viz.lines import MAX_POINTS
from rlnb.wire import OperationStatus as Status


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


LABEL_CANDIDATES = 4 * MAX_ERROR_LABELS
"""The latest failures that may get a label (those that fit are shown, ``FailureLabels``): a label is an artist
measured at each draw, and 2,000 failures of a long run would be 2,000 of them."""


LABEL_RISES = (-8, 3)
"""Points from a failure's mark to its label's baseline, tried in turn: below the mark, else above it (below the
bottom lane's mark, on short axes, a label ran across the axes' lower edge into the tick labels)."""


class FailureLabels(Artist):
    """Draws nothing: drawn first of its axes' artists, once a layout has sized them, it shows the failures' labels
    that fit, the latest first, at most ``MAX_ERROR_LABELS``: each right of its mark, or left of it in the axes' right
    half (right of a run's last operation, the label ran under the legend beside the axes), below it or else above it
    (``LABEL_RISES``), inside the axes, and none over another (the latest 25 of dense failures were printed on top of
    one another in one blob)."""

    def __init__(self, labels: list[Annotation]) -> None:
        super().__init__()
        self.labels = labels
        self.set_zorder(-math.inf)
        for label in labels:
            label.set_in_layout(False)  # kept inside the axes here: the layout need not make room beside them

    def draw(self, renderer: RendererBase) -> None:
        if self.axes is None:
            return
        box, taken = self.axes.bbox, list[Bbox]()
        for label in reversed(self.labels):
            left = self.axes.transData.transform(label.xy)[0] > (box.x0 + box.x1) / 2
            label.set(horizontalalignment="right" if left else "left", visible=True)  # an invisible one measures 0
            for rise in LABEL_RISES if len(taken) < MAX_ERROR_LABELS else ():
                label.xyann = (-5 if left else 5, rise)
                extent = label.get_window_extent(renderer)
                inside = box.x0 <= extent.x0 and extent.x1 <= box.x1 and box.y0 <= extent.y0 and extent.y1 <= box.y1
                if inside and not any(extent.overlaps(other) for other in taken):
                    taken.append(extent)
                    break
            else:
                label.set_visible(False)


def _seconds(times: pd.Series, t0: pd.Timestamp) -> np.ndarray:
    return (times - t0).dt.total_seconds().to_numpy(dtype=float)


def timeline(history: History | pd.DataFrame, ax: Axes | None = None, now: float | None = None) -> Axes:
    """The figure ``plots.timeline`` documents."""
    if now is not None and (isinstance(now, bool) or not isinstance(now, numbers.Real)):  # "x" - t0: a bare TypeError
        raise ValueError(f"now must be a time (POSIX seconds, as time.time() gives) or None, got {shown(now)}")
    ops = history.df if isinstance(history, History) else history
    if now is None and isinstance(history, History):
        now = history.ended_at  # a loaded run: its unfinished bars end where its records do
    columns = ("kind", "status", "error_code", "submitted_at", "started_at", "finished_at")
    need(ops, columns, "plots.timeline draws the operations: pass a History or history.df")
    ops = in_run_order(read_back(ops))  # history.to_csv read back: its times are text
    ax = new_axes(ax)
    ax.set(xlabel="seconds since the first submission", title="operations")
    if ops.empty:
        note(ax, "no operations yet")
        return ax
    # the first submission; without any (each left out of a damaged run folder), the first time there is
    t0 = min((t for t in (ops[c].min() for c in ("submitted_at", "started_at", "finished_at")) if pd.notna(t)),
             default=None)  # fmt: skip
    if t0 is None:  # NaT: "NaTType does not support timestamp" below
        note(ax, "no operation has a recorded time")
        return ax
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
        spots = list(zip(right[failed], lane[failed], codes, strict=True))[-LABEL_CANDIDATES:]
        style: dict[str, Any] = {"textcoords": "offset points", "fontsize": "x-small", "color": "darkred",
                                 "annotation_clip": False}  # fmt: skip
        labels = [ax.annotate(short(code) or "no error code", (x, y), xytext=(5, -8), **style) for x, y, code in spots]
        ax.add_artist(FailureLabels(labels))
    ax.autoscale_view()
    ax.set_yticks(range(len(kinds)), kinds)
    ax.set_ylim(len(kinds) - 0.5, -0.5)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small", title="status")
    return ax

"""Where a legend inside its axes goes: where its ``loc`` puts it (matplotlib's "best", where the lines are least,
unless told), unless that covers a mark drawn alone on the frame (the triangles at +inf and -inf,
``lines.inf_marks``). "Best" counts a marker as its centre only, which on the frame's edge is outside every place it
tries: the legend's pale ground would be drawn over the base of the triangles it names, in the live view's panels and
the static plots alike. The live view places its legend at each render (``place``); a static plot's legend is placed
each time its axes are drawn (``legend``), after a layout has sized them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.backend_bases import RendererBase
from matplotlib.collections import PathCollection
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.legend import Legend
from matplotlib.lines import Line2D
from matplotlib.markers import MarkerStyle
from matplotlib.transforms import Bbox

from rlnb.viz.texts import agg, drawn_width

CLEAR_PX = 1.0
"""Pixels kept between a legend and a mark (antialiased, a mark touching the legend's ground read as part of it)."""

PLACES = range(1, 11)
"""The places tried: matplotlib's codes from "upper right" to "center", in its order for "best" (a tie goes to the
first)."""


def place(legend: Legend, renderer: RendererBase, clear: Sequence[PathCollection] = ()) -> None:
    """Put ``legend`` (inside its axes) where "best" does, else where it covers the fewest marks (and markers of
    ``clear``, such as a sweep's starred best trial), then the fewest points and crossings of the lines (as "best"
    weighs them). Called at each draw: the lines and marks move."""
    ax = legend.axes
    legend.set_loc("best")
    px = ax.figure.dpi / 72
    marks = _marks(ax) + [box for c in clear if c.get_visible() and c.axes is ax for box in _scattered(c, px)]
    if not marks or not _covered(legend, renderer, marks):
        return
    paths = [ln.get_transform().transform_path(ln.get_path()) for ln in ax.get_lines() if ln.get_visible()]

    def badness(loc: int) -> tuple[int, int]:
        legend.set_loc(loc)
        box = legend.get_window_extent(renderer)
        crossed = sum(box.count_contains(p.vertices) + p.intersects_bbox(box, filled=False) for p in paths)
        return _covered(legend, renderer, marks), crossed

    best: int = min(PLACES, key=badness)
    legend.set_loc(best)


def legend(
    ax: Axes, handles: list[Artist] | None = None, labels: list[str] | None = None, *,
    clear: Sequence[PathCollection] = (), **kwargs: Any,
) -> Legend:  # fmt: skip
    """``ax.legend(handles, labels, loc="best", **kwargs)`` (the lines of ``ax`` where no ``handles``), placed where
    "best" puts it unless that covers a mark on the frame or a marker of ``clear`` (``place``) each time ``ax`` is
    drawn: a static plot's legend ("best") was drawn over the triangles of the
    steps at +inf it names, and ``search_plot``'s over its star ("best" counts a marker as its centre)."""
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    made = ax.legend(handles, labels or [], loc="best", **kwargs)
    placer = next((a for a in ax.artists if isinstance(a, Placer)), None)
    if placer is None:
        placer = Placer()
        ax.add_artist(placer)
    placer.legend, placer.clear = made, clear  # one per axes: a legend made again replaces it
    return made


def beside(ax: Axes, handles: list[Artist], labels: list[str], *, grow: bool, ncols: int = 1) -> Legend:
    """The legend right of ``ax`` (small font); where ``grow`` (a figure the plot made), the figure widened by the
    legend's columns, each as wide as the widest name as drawn, so the axes keep their width: inside, a legend covers
    what it names, and beside a figure of fixed width it squashes the axes."""
    if grow:
        fig = cast(Figure, ax.get_figure(root=True))  # an Axes is always on a figure
        font = FontProperties(size="small")  # a CJK name's escapes are 6 times as wide: measured as drawn
        widest = max(drawn_width(n, font, agg(fig)) for n in labels)
        width, height = fig.get_size_inches()
        fig.set_size_inches(width + ncols * (0.6 + widest / fig.dpi), height)
    return ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0,
                     fontsize="small", ncols=ncols)  # fmt: skip


class Placer(Artist):
    """Draws nothing: drawn first of its axes' artists, it places their legend (``place``) before it is drawn, once
    a layout has sized the axes. A legend the user made in its stead is left where they put it."""

    def __init__(self) -> None:
        super().__init__()
        self.legend: Legend | None = None
        self.clear: Sequence[PathCollection] = ()
        self.set_zorder(-math.inf)

    def draw(self, renderer: RendererBase) -> None:
        if self.legend is not None and self.axes is not None and self.axes.get_legend() is self.legend:
            place(self.legend, renderer, self.clear)


def _covered(legend: Legend, renderer: RendererBase, marks: list[Bbox]) -> int:
    box = legend.get_window_extent(renderer).padded(CLEAR_PX)
    return sum(mark.overlaps(box) for mark in marks)


def _marks(ax: Axes) -> list[Bbox]:
    """The extents in pixels, edge included, of the markers of ``ax``'s visible lines drawn without a line."""
    boxes = []
    px = ax.figure.dpi / 72
    for line in ax.get_lines():
        if line.get_visible() and line.get_linestyle() == "None" and line.get_marker() not in ("", "None", None):
            boxes += _extents(line, px)
    return boxes


def _extents(line: Line2D, px: float) -> list[Bbox]:
    style = MarkerStyle(line.get_marker())
    shape = style.get_path().transformed(style.get_transform()).get_extents()
    at = line.get_transform().transform(line.get_xydata())
    return _boxes(shape, line.get_markersize() * px, line.get_markeredgewidth() / 2 * px, at)


def _scattered(markers: PathCollection, px: float) -> list[Bbox]:
    """The extents in pixels, edge included, of a scatter's markers (its first size, path and edge: ``clear`` holds
    single marks): read from its sizes, not from the transforms it sets as it is drawn, after the legend is placed."""
    offsets, sizes, edges = np.asarray(markers.get_offsets()), markers.get_sizes(), np.ravel(markers.get_linewidth())
    if not (len(offsets) and len(sizes) and len(edges) and markers.get_paths()):
        return []
    shape = markers.get_paths()[0].get_extents()
    at = markers.get_offset_transform().transform(offsets)
    return _boxes(shape, math.sqrt(float(sizes[0])) * px, float(edges[0]) / 2 * px, at)


def _boxes(shape: Bbox, size: float, edge: float, at: Any) -> list[Bbox]:
    """``shape`` (a marker's path, unit-sized) scaled to ``size`` pixels, grown by ``edge``, at each point of ``at``."""
    grown = Bbox.from_extents(
        shape.x0 * size - edge, shape.y0 * size - edge, shape.x1 * size + edge, shape.y1 * size + edge
    )
    return [grown.translated(x, y) for x, y in at]

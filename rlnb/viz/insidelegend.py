"""A legend inside axes the user gave (``plots.compare(ax=)``, ``search_plot(ax=)``): their figure is theirs and is
never resized, so right of the axes a legend would run off it. A few short names go as they are; else the legend is
fitted to the axes (``fitted``: in columns, a smaller font, then names cut in the middle). Fitted at the call, it ran
past axes a layout then narrowed, so it is fitted again as drawn (``InsideLegend``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import cast

from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.backend_bases import RendererBase
from matplotlib.collections import PathCollection
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.legend import Legend

from rlnb.viz import placing
from rlnb.viz.texts import agg, as_written, drawn_width, shortened

LEGEND_INSIDE_UP_TO = 6
"""A legend of more entries is never drawn as it is inside axes: on the user's axes it is fitted to them (``fitted``);
on a figure ``plots.compare`` made it goes right of the axes, in as many columns as it needs (30 entries inside a new
figure would be taller than it, and squash the axes to a sliver)."""
LEGEND_INSIDE_SHARE = 0.5
"""A legend of a few names goes inside the axes as it is while it takes at most this share of their width (and fits
their height): wider, it hides what it names, and on the user's axes it is fitted to them (``fitted``), and may take
their whole width."""
LEGEND_SIZES = ("small", "x-small", "xx-small")
"""The font sizes a legend on the user's axes tries, in turn, before its names are cut."""
SIZE_TOLERANCE_IN = 1e-6
"""Inches within which the axes' size counts as the one their legend was made for: a ``bbox_inches="tight"`` savefig
reads 1.9250000000000003 for 1.925, and the legend made again lost what the user had set on it."""
READABLE = "ab…yz"
"""The least room a name cut to fit keeps (two characters at each end): in less, five columns of "…" ran past the
axes of a 3 × 3 grid's panel and named nothing; the legend says there is no room instead (``fitted``), and is made
again, naming each, when the axes grow."""
ROW_EM, EDGE_EM, HANDLE_EM = 1.65, 2 * (0.4 + 0.5) - 0.5, 2.0 + 0.8
"""A legend's row (a line, 1.12 em measured, and its labelspacing), its edges (borderpad and borderaxespad, both sides,
less the last row's spacing) and an entry's handle and its gap, in ems of its font: matplotlib's defaults. Six rows
measured 10.0 em in "small", "x-small" and "xx-small"; this counts 11.2 (with the pads outside the frame)."""


def legend(
    ax: Axes,
    handles: list[Artist] | None = None,
    names: list[str] | None = None,
    *,
    clear: Sequence[PathCollection] = (),
) -> Legend:
    """The legend of ``names`` (of the lines of ``ax`` where no ``handles``) inside ``ax``, as it is or ``fitted``,
    fitted again as drawn (``InsideLegend``), placed where "best" puts it, clear of the marks on the frame and the
    markers of ``clear`` where it can be (``placing.legend``). A legend made again on the same axes (a plot drawn
    again there, a line added) replaces the one before."""
    if handles is None or names is None:
        handles, names = ax.get_legend_handles_labels()
    fig = cast(Figure, ax.get_figure(root=True))  # an Axes is always on a figure
    for old in [a for a in fig.artists if isinstance(a, InsideLegend) and a.ax is ax]:
        old.remove()
    made = InsideLegend(ax, handles, names, clear)
    fig.add_artist(made)
    return made.made


def plain(ax: Axes, names: list[str]) -> bool:
    """Whether the legend of ``names`` goes inside ``ax`` as it is: a few names, in one column at most
    ``LEGEND_INSIDE_SHARE`` of the axes' width and within their height, as they are now."""
    if len(names) > LEGEND_INSIDE_UP_TO:
        return False
    fig = cast(Figure, ax.get_figure(root=True))
    font = FontProperties(size="small")  # each name measured as drawn: a CJK name's escapes are 6 times as wide
    em = font.get_size_in_points() * fig.dpi / 72
    width = max(drawn_width(n, font, agg(fig)) for n in names) + (HANDLE_EM + 0.8) * em  # and the pads
    return width <= LEGEND_INSIDE_SHARE * ax.bbox.width and len(names) * ROW_EM * em + EDGE_EM * em <= ax.bbox.height


def fitted(ax: Axes, handles: list[Artist], names: list[str], clear: Sequence[PathCollection] = ()) -> Legend:
    """The legend inside ``ax``, in as many columns as its height needs, its font smaller and then its names cut in
    the middle ("…") until it fits; a legend saying there is no room where a name would keep less than
    ``READABLE``."""
    fig = cast(Figure, ax.get_figure(root=True))
    renderer, width, height = agg(fig), ax.bbox.width, ax.bbox.height  # pixels
    for size in LEGEND_SIZES:
        font = FontProperties(size=size)
        em = font.get_size_in_points() * fig.dpi / 72
        rows = max(1, int((height - EDGE_EM * em) // (ROW_EM * em)))
        cols = math.ceil(len(names) / rows)
        room = (width - EDGE_EM * em) / cols - (HANDLE_EM + 2.0) * em  # and the column spacing
        if max(drawn_width(n, font, renderer) for n in names) <= room:
            break
    if room < drawn_width(READABLE, font, renderer):  # no name could be told: the legend says so, inside the axes
        said = shortened(
            f"{len(names)} names: no room", lambda t: drawn_width(t, font, renderer) <= width - EDGE_EM * em
        )
        return placing.legend(ax, [], [], title=said, title_fontsize=size, clear=clear)
    shown = [shortened(n, lambda t: drawn_width(t, font, renderer) <= room) for n in names]
    scale = min(1.0, ROW_EM * font.get_size_in_points() / max(map(_marker_points, handles), default=1.0))
    return placing.legend(ax, handles, shown, fontsize=size, ncols=cols, clear=clear, markerscale=scale)


def _marker_points(handle: Artist) -> float:
    """How tall a handle's marker is drawn in the legend, in points: ``search_plot``'s star (``s=220``, 15 pt) drawn
    at its size in a legend fitted in "xx-small" (9 pt rows) covered the rows above and below it."""
    if isinstance(handle, PathCollection) and len(handle.get_sizes()):
        return math.sqrt(float(max(handle.get_sizes())))
    return float(getattr(handle, "get_markersize", lambda: 0.0)())


class InsideLegend(Artist):
    """Draws nothing: on the figure, drawn before its axes once a layout (constrained, ``tight_layout``) or a resize
    has sized them, it makes their legend again where their size changed since it was made, as it is or ``fitted``:
    fitted at the call, a legend ran past axes the layout then narrowed, and names cut for small axes stayed cut on a
    figure made larger. Made again, it keeps the title and frame the user set on the one before, the title through one
    that said there was no room (its place is the draw's, ``placing.legend``). A legend the user made in its stead is
    left as it is."""

    def __init__(self, ax: Axes, handles: list[Artist], names: list[str], clear: Sequence[PathCollection]) -> None:
        super().__init__()
        self.ax, self.handles, self.names, self.clear = ax, handles, names, clear
        self.set_zorder(-math.inf)
        self.set_in_layout(False)
        self.plain, self.size, self.made = self._make(plain(ax, names))
        self.title: tuple[str, FontProperties] | None = None
        """The title and its font of the last legend that named the names: the user's, kept through a no-room one."""

    def _resized(self) -> bool:
        return any(abs(now - then) > SIZE_TOLERANCE_IN for now, then in zip(self._size(), self.size, strict=True))

    def _size(self) -> tuple[float, float]:
        return self.ax.bbox.width / self.ax.figure.dpi, self.ax.bbox.height / self.ax.figure.dpi  # inches: dpi aside

    def _make(self, as_it_is: bool) -> tuple[bool, tuple[float, float], Legend]:
        if as_it_is:
            made = placing.legend(self.ax, self.handles, self.names, fontsize="small", clear=self.clear)
        else:
            made = fitted(self.ax, self.handles, self.names, self.clear)
        as_written(made)  # made again at a draw, after the plot's own pass: "$" and CJK drawn as written
        return as_it_is, self._size(), made

    def draw(self, renderer: RendererBase) -> None:
        if self.ax.get_figure(root=True) is None or self.ax.get_legend() is not self.made or not self._resized():
            return  # axes removed, a legend the user made, or the size it was made for
        as_it_is = plain(self.ax, self.names)
        if as_it_is and self.plain:  # as it was: the same legend, placed at its draw
            self.size = self._size()
            return
        before = self.made
        self.plain, self.size, self.made = self._make(as_it_is)
        if before.get_texts():  # else it only said there was no room: the user's title is the one kept before it
            self.title = before.get_title().get_text(), before.get_title().get_fontproperties()
        if self.made.get_texts() and self.title is not None:
            self.made.set_title(self.title[0], prop=self.title[1])
        self.made.set_frame_on(before.get_frame_on())

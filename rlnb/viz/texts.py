"""Texts as a figure draws them: a person's names written as they are (no TeX, control characters as escapes, each
character in a font that has it), cut in the middle to the room they have. A text is fitted as given, measured as it
will be drawn (``drawn_width``), then drawn (``as_written``): fitted after, an escape would be cut in two, and fitted
before but measured as given, a CJK name drawn as escapes would be six times as wide as its room.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cache
from typing import cast

from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.backend_bases import RendererBase
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg
from matplotlib.cbook import is_math_text
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.text import Text
from matplotlib.ticker import LogFormatter, ScalarFormatter

from rlnb.viz.glyphs import as_drawn, drawable


def as_written(artist: Artist) -> None:
    """Every text of ``artist`` (an Axes, a Figure) drawn as written: matplotlib reads text between two ``$`` as TeX,
    and a figure's, a run's or a loaded status's name is the user's text (``"$\\nope$ cost"`` would fail to draw, and
    ``"price $5 to $10"`` lose its dollars); each character in a font that has it, or as its escape where no
    installed font has it (``rlnb.viz.glyphs``: else CJK and emoji are empty boxes). A numeric axis' tick labels are
    matplotlib's own text, left as they are: a log axis writes them in its TeX (``_numbers``)."""
    numbers = _numbers(artist)
    for text in artist.findobj(Text):
        if id(text) in numbers:
            continue
        text.set_parse_math(False)
        drawable(text)
        if text.get_wrap() and is_math_text(text.get_text()):
            _wrap_here(text)


def _numbers(artist: Artist) -> set[int]:
    """The ids of the tick labels of ``artist``'s axes whose ticks matplotlib writes as numbers (not text: a
    category's, or labels given with the ticks): set to be written, they stayed so when the axis was made log
    afterwards (``ax.set_yscale("log")``), and read ``$\\mathdefault{10^{2}}$``, the characters."""
    ids: set[int] = set()
    for axis in artist.findobj(Axis):
        if isinstance(axis.get_major_formatter(), ScalarFormatter | LogFormatter):
            ids |= {id(t) for tick in [*axis.majorTicks, *axis.minorTicks] for t in (tick.label1, tick.label2)}
    return ids


def _wrap_here(text: Text) -> None:
    """``text`` broken into lines as wide as its axes here (``wrapped``), not by matplotlib: its wrapping measures the
    lines as TeX whatever ``parse_math`` says, so a note naming ``"$\\nope$ cost"`` would fail the whole draw."""
    figure = cast(Figure, text.get_figure(root=True))
    room = text.axes.bbox.width if text.axes is not None else figure.bbox.width
    font, renderer = text.get_fontproperties(), agg(figure)
    text.set_text(wrapped(text.get_text(), lambda line: drawn_width(line, font, renderer), room))
    text.set_wrap(False)


def shortened(text: str, fits: Callable[[str], bool]) -> str:
    """``text``, or as much of its start and end as ``fits`` with "…" between (a long name differs at either end)."""
    if fits(text):
        return text
    low, high = 0, len(text)  # characters kept: ``low`` fits, ``high`` does not
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(_cut(text, mid)) else (low, mid)
    return _cut(text, low)


def wrapped(text: str, width: Callable[[str], float], room: float) -> str:
    """``text`` broken at spaces into lines at most ``room`` wide (a word too long for a line of its own cut in the
    middle, as ``shortened``), unchanged where it fits; balanced: as few lines as breaking greedily gives, each as
    narrow as that allows (greedy, "reward (train) +inf (1 step, on the" left "frame)" alone on its last line)."""
    width = cache(width)
    words = [shortened(w, lambda t: width(t) <= room) for w in text.split(" ")]
    lines = _greedy(words, width, room)
    rooms = _line_widths(words, width, room) if len(lines) > 1 else []
    if rooms:  # the narrowest of the lines' possible widths that still gives as many lines
        low, high = 0, len(rooms) - 1  # rooms[high] gives as many lines; search for the first that does
        while low < high:
            mid = (low + high) // 2
            low, high = (low, mid) if len(_greedy(words, width, rooms[mid])) <= len(lines) else (mid + 1, high)
        lines = _greedy(words, width, rooms[low])
    return "\n".join(lines)


def _line_widths(words: list[str], width: Callable[[str], float], room: float) -> list[float]:
    """The widths a line of whole ``words`` may have, from the widest word's to ``room``, in order."""
    spans = {" ".join(words[i:j]) for i in range(len(words)) for j in range(i + 1, len(words) + 1)}
    least = max(width(w) for w in words)
    return sorted({w for w in map(width, spans) if least <= w <= room})


def _greedy(words: list[str], width: Callable[[str], float], room: float) -> list[str]:
    lines: list[str] = []
    for word in words:
        if lines and width(f"{lines[-1]} {word}") <= room:
            lines[-1] += f" {word}"
        else:
            lines.append(word)
    return lines


def fit_legend(labels: list[str], font: FontProperties, room: float, renderer: RendererBase) -> list[str]:
    """Each legend label broken into lines of at most ``room`` pixels in ``font`` (``wrapped``), measured as
    ``renderer`` draws them (``drawn_width``): a live panel's ``reward (train) +inf (1 step, on the frame)`` ran out
    of its legend, off the axes and the figure."""
    return [wrapped(label, lambda line: drawn_width(line, font, renderer), room) for label in labels]


def _cut(text: str, keep: int) -> str:
    return text[: -(-keep // 2)] + "…" + text[len(text) - keep // 2 :]


def fit_title(ax: Axes, room: float, renderer: RendererBase | None = None, text: Text | None = None) -> None:
    """Each line of ``ax``'s title (or its ``text``, such as its y label) cut in the middle ("…") to ``room`` pixels,
    as ``renderer`` (else ``agg``) draws it: a long figure name would run off the figure's edges, clipped at both
    ends with nothing to say so."""
    title = ax.title if text is None else text
    renderer = renderer or agg(cast(Figure, ax.get_figure(root=True)))
    title.set_text(_cut_lines(title.get_text(), title.get_fontproperties(), room, renderer))


def _cut_lines(said: str, font: FontProperties, room: float, renderer: RendererBase) -> str:
    """Each line of ``said`` cut in the middle (``shortened``) to ``room`` px in ``font`` as ``renderer`` draws it."""

    def fits(line: str) -> bool:
        return drawn_width(line, font, renderer) <= room

    return "\n".join(shortened(line, fits) for line in said.split("\n"))


def agg(figure: Figure) -> RendererBase:
    """The renderer that draws ``figure`` where it is Agg's (a live panel, a notebook's inline figure), else an Agg
    renderer at its dpi: fitted to their outlines, which Agg's hinted glyphs outgrow by up to a tenth at these
    sizes, a compare legend and a cut title ran a few pixels past their room."""
    canvas = figure.canvas
    if isinstance(canvas, FigureCanvasAgg):
        return canvas.get_renderer()
    return RendererAgg(1, 1, figure.dpi)


def drawn_width(text: str, font: FontProperties, renderer: RendererBase) -> float:
    """``text``'s width in pixels as ``renderer`` draws it (``glyphs.as_drawn``: a CJK character no font has is its
    escape, 6 characters wide)."""
    shown, drawn_in = _drawn(text, font)
    return float(renderer.get_text_width_height_descent(shown, drawn_in, ismath=False)[0])


def _drawn(text: str, font: FontProperties) -> tuple[str, FontProperties]:
    """``text`` as it is drawn in ``font`` (``glyphs.as_drawn``) and the font it is drawn in."""
    shown, families = as_drawn(text, tuple(font.get_family()))
    if families != tuple(font.get_family()):
        font = font.copy()
        font.set_family(list(families))
    return shown, font


def fit_titles(drawn: Axes | Figure) -> None:
    """Every title and x label of ``drawn`` cut to its room in its share of the figure's width (``_room``), and every
    y label to its share of the figure's height (``fit_title``): a long figure name, the label of its panel, ran off
    the top and the bottom, and ``search_plot``'s x label (a column's name) across a grid's row. Cut again as drawn,
    from what each said here (``Cutter``)."""
    for ax in drawn.axes if isinstance(drawn, Figure) else [drawn]:
        cutter = next((a for a in ax.artists if isinstance(a, Cutter)), None)
        if cutter is None:
            cutter = Cutter()
            ax.add_artist(cutter)
        for text, room in _rooms(ax, placed=cast(Figure, ax.get_figure(root=True)).get_layout_engine() is None):
            said = cutter.said(text)
            fit_title(ax, room, text=text)
            cutter.cuts[text] = said, text.get_text()


def _rooms(ax: Axes, placed: bool) -> list[tuple[Text, float]]:
    """``ax``'s title, x label and y label, each with its room: ``_room`` across, 0.7 of its share's height up."""
    across = _room(ax, placed)
    return [(ax.title, across), (ax.xaxis.label, across), (ax.yaxis.label, 0.7 * _share(ax)[3])]


def _share(ax: Axes) -> tuple[float, float, float, float]:
    """The left, right, width and height in pixels of ``ax``'s share of its figure: its cell of their grid, or its
    own place."""
    spec, (width, height) = ax.get_subplotspec(), ax.figure.bbox.size
    if spec is None:
        place = ax.get_position()
        return place.x0 * width, place.x1 * width, place.width * width, place.height * height
    grid = spec.get_gridspec()
    left, right = spec.colspan.start / grid.ncols * width, spec.colspan.stop / grid.ncols * width
    return left, right, right - left, height / grid.nrows


def _room(ax: Axes, placed: bool) -> float:
    """The width in pixels a text centred on ``ax`` (its title, its x label) may take: 0.85 of its share's, and where
    the axes are ``placed`` (drawn, or on a figure with no layout engine), no more than twice the room from their
    centre to the nearer side of the share: a grid's column 0 is right of its share's centre, and an x label cut to
    the share's width ran 13 px into column 1. A layout engine places the axes at each draw."""
    left, right, wide, _ = _share(ax)
    if not placed:
        return 0.85 * wide
    centre = ax.bbox.x0 + ax.bbox.width / 2
    return max(min(0.85 * wide, 2 * (centre - left), 2 * (right - centre)), 0.0)


def wrap_to_panel(ax: Axes, text: Text) -> None:
    """Each line of ``text`` (``ax``'s title, its x label) broken into lines at most the share of its panel's width
    ``fit_titles`` cuts a title to (``wrapped``): where cut, a sentence such as why a range test suggests nothing
    would lose its middle, and whole it ran past a 4 × 3 in figure and over a grid's neighbouring panels."""
    figure = cast(Figure, ax.get_figure(root=True))
    text.set_text(
        _lines(figure, text.get_text(), text.get_fontproperties(), _room(ax, figure.get_layout_engine() is None))
    )


def _lines(figure: Figure, said: str, font: FontProperties, room: float) -> str:
    """Each line of ``said`` broken into lines at most ``room`` pixels wide as drawn in ``font`` (``wrapped``)."""
    measure = agg(figure)
    return "\n".join(wrapped(line, lambda t: drawn_width(t, font, measure), room) for line in said.split("\n"))


NOTE_SHARE = 0.95
"""The share of its axes' width a note's lines take at most."""


class Wrapper(Artist):
    """Draws nothing: drawn first of its axes' artists, it breaks ``text`` (a note centred on them) into lines at most
    ``NOTE_SHARE`` of the axes' width as they are drawn (``wrapped``), after a layout or a resize: matplotlib's
    ``wrap`` breaks at the figure's edges, and "'loss' is NaN at every step" on a 3 × 3 grid's panel (137 px) was one
    line of 179 px, over the panel's y label and ticks. It wraps what the note said when made, each of its own lines,
    then writes it as drawn (``glyphs.drawable``): wrapped from its last draw, a name cut on a small panel stayed cut
    when the figure grew, and a CJK name's escapes were cut in two."""

    def __init__(self, text: Text) -> None:
        super().__init__()
        self.text, self.said = text, text.get_text()
        self.set_zorder(-math.inf)
        text.set_wrap(False)

    def draw(self, renderer: RendererBase) -> None:
        if self.axes is None or not self.text.get_visible():
            return
        font, figure = self.text.get_fontproperties(), cast(Figure, self.axes.get_figure(root=True))
        drawable(self.text, _lines(figure, self.said, font, NOTE_SHARE * self.axes.bbox.width))


class Cutter(Artist):
    """Draws nothing: drawn first of its axes' artists, once a layout has placed them, it cuts their title and labels
    to their rooms there (``_rooms``) from what each said when ``fit_titles`` cut it, and writes them as drawn
    (``glyphs.drawable``): cut only at the call, a 3 × 2 in figure's x label ended 2 px past its edge once its layout
    moved the axes, and one cut on a small figure stayed cut when it grew. A text set since is the user's: left."""

    def __init__(self) -> None:
        super().__init__()
        self.set_zorder(-math.inf)
        self.set_in_layout(False)
        self.cuts: dict[Text, tuple[str, str]] = {}
        """Each text's words as said and as last cut."""

    def said(self, text: Text) -> str:
        """What ``text`` says: its full words while it shows the cut made of them, else its own text."""
        said, cut = self.cuts.get(text, ("", None))
        return said if cut is not None and self._shows(text, cut) else text.get_text()

    def draw(self, renderer: RendererBase) -> None:
        ax = cast(Axes, self.axes)  # an Axes' artist
        figure = cast(Figure, ax.get_figure(root=True))
        for text, room in _rooms(ax, placed=True):
            if text not in self.cuts:
                continue
            said, cut = self.cuts[text]
            if not self._shows(text, cut):  # set since: the user's
                del self.cuts[text]
                continue
            cut = _cut_lines(said, text.get_fontproperties(), room, agg(figure))
            self.cuts[text] = said, cut
            drawable(text, cut)

    @staticmethod
    def _shows(text: Text, cut: str) -> bool:
        """Whether ``text`` shows ``cut``, as given or as drawn (``as_written``)."""
        return text.get_text() in (cut, as_drawn(cut, tuple(text.get_fontproperties().get_family()))[0])

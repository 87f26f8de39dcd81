"""A live view's panels, drawn at the same cost at step 10 and at step 100,000 (their lines' data is
``rlnb.viz.series``).

``Panel`` is one axes on its own small Agg figure, rendered to PNG. Its axis limits move in coarse
steps, so most redraws only change the lines: then the saved background (frame, ticks, labels, legend)
is restored and only the lines are drawn on it ("blitting"), about 10x cheaper than a full draw.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence

import numpy as np
from matplotlib import rcParams
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.lines import Line2D
from matplotlib.text import Text
from matplotlib.transforms import ScaledTranslation
from PIL import Image

from rlnb.viz import placing
from rlnb.viz.draw import Y_SPAN
from rlnb.viz.lines import MARKERS_UP_TO
from rlnb.viz.liveaxes import X_ROOM, AutoInView, InView, nice_ceiling
from rlnb.viz.texts import as_written, fit_legend, fit_title

PANEL_PX = {2: (320, 432), 3: (272, 368), 4: (228, 228)}
"""A panel's width and the gradient norm's in pixels, by the panels a view is made to fit in a row: one or two are
320 px wide, the gradient norm's legend beside its axes (432 px); three share a row of 920 px (272, 368 px), within
the ~930 px a notebook's output has on a 1366×768 laptop (JupyterLab, its file browser open); from four on, each is
228 px wide, the gradient norm's legend inside its axes, so four share that row (924 px). At 320 + 432 + 320 px a
bare view wrapped onto two rows of panels, 727 px tall in all, and so did an RL view's four panels at 272 and 368."""
PANEL_HEIGHT = 208
TOP = 0.87
"""The axes' top, in the figure's height, under a title of one line."""
LEFT_PX, RIGHT_PX, LEGEND_PX = 54, 20, 160
"""Pixels left of the axes (the y ticks), right of them (half a step number: ``100000`` under the axes' end ran off
the figure at 10), and right of them with a legend there."""
OFFSET_PX = 2 + 36
"""Pixels from the figure's left edge to the end of the y axis' offset text, up to ``1e−10`` (``_make_room``); a
wider one, as drawn, cuts the title further (``_clear_offset``)."""
TICK_PX = 40
"""Pixels of axes per x tick: a six-digit step number and a gap (at 5 ticks in 154 px they overlapped)."""


class Panel:
    """One axes on its own figure. Give lines new data with ``set``; ``render()`` returns PNG bytes,
    drawing the whole figure only when the limits, scale or decorations changed."""

    def __init__(self, title: str, legend: bool = False, dpi: int = 80, *, per_row: int = 2) -> None:
        """``legend``: a legend of the lines always shown, right of the axes (the figure is wider) while fewer than
        four panels share a row, else inside them; ``per_row``: sized to share a row with that many (``PANEL_PX``)."""
        per_row = min(max(per_row, 2), 4)
        self.beside = legend and per_row < 4
        """The legend goes right of the axes (else inside them)."""
        width, height = PANEL_PX[per_row][self.beside], PANEL_HEIGHT
        self.figure = Figure(figsize=(width / dpi, height / dpi), dpi=dpi)
        self.canvas = FigureCanvasAgg(self.figure)
        self.ax = self.figure.add_subplot()
        left, right = LEFT_PX / width, 1 - (LEGEND_PX if self.beside else RIGHT_PX) / width
        self.figure.subplots_adjust(left=left, right=right, bottom=0.18, top=TOP)
        self.ax.set_title(title, fontsize="medium", y=1.0)  # y given: placed here, once (``_seat_title``)
        self.ax.set_xlabel("optimizer step", fontsize="small")
        self.ax.tick_params(labelsize="small")
        self._seat_xlabel()
        self._linear_y()
        nbins = min(5, int((right - left) * width // TICK_PX))
        self.ax.xaxis.set_major_locator(InView(nbins=nbins, integer=True))
        self.lines: dict[str, Line2D] = {}
        self._note = ""
        self.note = self.ax.text(
            0.5, 0.5, "", transform=self.ax.transAxes, ha="center", va="center", wrap=True, color="0.35"
        )
        self._title = title
        self._middle = (left + right) / 2 * width  # the title is centred over the axes, clear of the offset text
        self._offset_end = OFFSET_PX  # where the offset text ends, as last drawn (``_clear_offset``)
        self._fit_title()
        as_written(self.ax.title)  # a figure's name is the user's text, not TeX; after the fit, which measures it as
        # drawn. Not the axes': its tick labels are the formatter's (TeX on a log axis), and it made ticks for 0 to 1
        self._make_room(width)
        self.full_draws = 0
        """How many times the whole figure was drawn (the rest were blits)."""
        self._background = None
        self._stale = True
        self._legend_keys: tuple[str, ...] = ()
        self._ylim_fits: tuple[float, float] | None = None  # the y-limits set, in log10 units on a log axis

    def _make_room(self, width: int) -> None:
        """The y axis' offset text (``1e−3``) over its tick labels, from the figure's left edge, and the axes' top
        lowered for a title of more than one line. Over the axes' left end, a title wider than ~110 px overlapped it
        and matplotlib lifted the title above it, to the figure's top edge (a two-line one half off the figure)."""
        offset = self.ax.yaxis.offsetText
        offset.set_horizontalalignment("left")
        offset.set_x(-(LEFT_PX - 2) / (self.ax.get_position().width * width))  # in the axes' widths
        title = self._seat_title()
        pad = rcParams["axes.titlepad"] * self.figure.dpi / 72 + 4  # the title's pad above the axes, and a margin
        self.top = min(TOP, 1 - (title + pad) / PANEL_HEIGHT)
        """The axes' top this panel's title needs, in the figure's height (``align_top`` may lower it further)."""
        self.figure.subplots_adjust(top=self.top)

    def _seat_xlabel(self) -> None:
        """The x label under the step numbers, where matplotlib puts it, placed here once: placed by matplotlib, at
        each whole draw both axes' tick labels were measured, and their locators run, a second time."""
        number = self.ax.xaxis.get_major_ticks(1)[0].label1  # the first tick drawn, made here (not again)
        under = self.ax.bbox.y0 - number.get_transform().transform((0, 0))[1]  # the numbers' top, under the axes
        probe = Text(0, 0, "0", fontproperties=number.get_fontproperties(), figure=self.figure)
        below = under + probe.get_window_extent(self.canvas.get_renderer()).height
        shift = ScaledTranslation(
            0, -below / self.figure.dpi - self.ax.xaxis.labelpad / 72, self.figure.dpi_scale_trans
        )
        self.ax.xaxis.set_label_coords(0.5, 0, transform=self.ax.transAxes + shift)
        self.ax.yaxis.set_label_coords(0, 0.5)  # it has no label

    def align_top(self, top: float) -> None:
        """The axes' top at ``top`` (at most ``self.top``): a live view gives each of its panels the lowest any needs,
        so that every axes is as tall (under a two-line title, one would be 12 px shorter than those beside it)."""
        top = min(top, self.top)
        if top != self.figure.subplotpars.top:
            self.figure.subplots_adjust(top=top)
            self._stale = True

    def _fit_title(self) -> None:
        """The title cut to the room it has, centred over the axes, clear of the offset text's end."""
        width = self.figure.bbox.width
        self.ax.title.set_text(self._title)
        room = 2 * min(self._middle - self._offset_end, width - self._middle) - 4
        fit_title(self.ax, room, self.canvas.get_renderer())

    def _clear_offset(self) -> bool:
        """Whether the title was fitted again, drawn: the offset text as drawn ends past ``OFFSET_PX`` (``1e−200``,
        ``1e−6+1e3``) and the title made room for it, or no more and the title has its room back."""
        offset, renderer = self.ax.yaxis.offsetText, self.canvas.get_renderer()
        end = OFFSET_PX
        if offset.get_visible() and offset.get_text():
            end = max(end, math.ceil(offset.get_window_extent(renderer).x1 - self.figure.bbox.x0) + 2)
        if end == self._offset_end:
            return False
        self._offset_end = end
        self._fit_title()
        as_written(self.ax.title)
        self._seat_title()
        return True

    def _seat_title(self) -> float:
        """The title's pad above the axes: matplotlib's, or as much as its marks reach below its baseline (stacked
        marks), which lifts it onto the frame, where matplotlib's own placing put it; returns its height in pixels.
        Placed by matplotlib, the title had every tick label measured at each whole draw (43 of 153 text layouts of a
        live view's first draw)."""
        title, pad = self.ax.title, rcParams["axes.titlepad"]
        box = title.get_window_extent(self.canvas.get_renderer())
        now = title.get_transform().transform((0, 1))[1] - self.ax.bbox.y1  # its pad, in pixels
        needed = max(pad, (now + self.ax.bbox.y1 - box.y0) * 72 / self.figure.dpi)
        if not math.isclose(needed, now * 72 / self.figure.dpi):
            self.ax.set_title(title.get_text(), fontsize="medium", y=1.0, pad=needed)
        return float(box.height)

    def line(self, key: str, **style: object) -> Line2D:
        (line,) = self.ax.plot([], [], animated=True, **style)  # type: ignore[arg-type]
        self.lines[key] = line
        return line

    def set(self, key: str, x: np.ndarray, y: np.ndarray, *, visible: bool = True, markers: bool | None = True) -> None:
        """New data for a line; a marker at each point while there are few (``markers=None``: its own kept)."""
        line = self.lines[key]
        line.set_data(x, y)
        if markers is not None:
            line.set_marker("o" if markers and 0 < len(x) <= MARKERS_UP_TO else "")
        if line.get_visible() != visible:
            line.set_visible(visible)
            self._stale = True  # the legend lists visible lines only

    def set_note(self, note: str, corner: bool = False) -> None:
        """Say on the axes why there is nothing to draw ("" when there is), in their middle; or, in their lower left
        ``corner``, clear of the lines, what is drawn without some of its points."""
        if note != self._note:
            self._note = note
            self.note.set_position((0.02, 0.03) if corner else (0.5, 0.5))
            self.note.set(ha="left" if corner else "center", va="bottom" if corner else "center")
            self.note.set_text(note)
            self.note.set_wrap(True)  # as_written may have broken an earlier note itself
            as_written(self.note)  # a metric's name in it: CJK or emoji would draw boxes, two "$" fail the draw
            self._stale = True

    def set_label(self, key: str, label: str) -> None:
        if self.lines[key].get_label() != label:
            self.lines[key].set_label(label)
            self._legend_keys = ()  # rebuilt on the next legend() call

    def set_log(self, log: bool) -> None:
        scale = "log" if log else "linear"
        if self.ax.get_yscale() != scale:
            self.ax.set_yscale(scale)
            self._ylim_fits = None
            if not log:
                self._linear_y()
            self._stale = True

    def _linear_y(self) -> None:
        """A linear y axis' ticks: matplotlib's (``AutoLocator``), only those in view; ``1e−3`` above them."""
        self.ax.yaxis.set_major_locator(AutoInView())
        self.ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 4))

    def set_limits(self, x_last: float, lo: float, hi: float) -> None:
        """x from 0 to a round number at least 5% past ``x_last`` (the newest point and its marker never sit
        on the frame); y around [``lo``, ``hi``], kept while the data fits and fills at least half of it."""
        xlim = (0.0, nice_ceiling(max(x_last, 1.0) * X_ROOM))
        ylim = self._ylim(lo, hi)
        if xlim != self.ax.get_xlim():
            self.ax.set_xlim(xlim)
            self._stale = True
        if ylim is not None:
            self.ax.set_ylim(ylim)
            self._stale = True

    def _ylim(self, lo: float, hi: float) -> tuple[float, float] | None:
        if not (math.isfinite(lo) and math.isfinite(hi)):
            return None
        lo, hi = (min(max(v, -Y_SPAN), Y_SPAN) for v in (lo, hi))  # past it, the margins and the ticks overflow
        log = self.ax.get_yscale() == "log"
        if log:
            if hi <= 0:
                return None
            lo = lo if lo > 0 else hi / 10  # points <= 0 are not drawn on a log axis
            # from 1/Y_SPAN: under 1e-300, a margin below it is 0, and matplotlib keeps the limits it had (warning)
            lo, hi = math.log10(max(lo, 1 / Y_SPAN)), math.log10(max(hi, 1 / Y_SPAN))
        # a flat line: 10% of its value (on an axis of ±0.006, a constant learning rate of 1e-5 is drawn as 0)
        span = hi - lo or abs(hi) * 0.1 or 0.05
        if self._ylim_fits is not None:
            cur_lo, cur_hi = self._ylim_fits
            if cur_lo <= lo and hi <= cur_hi and cur_hi - cur_lo <= 2.5 * span:
                return None
        self._ylim_fits = (lo - 0.12 * span, hi + 0.12 * span)
        new = self._ylim_fits
        return (10 ** new[0], 10 ** new[1]) if log else new

    def legend(self, keys: Sequence[str], inside: bool = False) -> None:
        """Show a legend of the lines ``keys`` (visible ones), redrawn only when the set changes: right of the
        axes (the figure made with ``legend=True`` has room there), or ``inside`` them where the lines are least,
        drawn over them (``render``). Each label broken into lines that fit the legend's room (``fit_legend``)."""
        keys = tuple(k for k in keys if self.lines[k].get_visible())
        if keys != self._legend_keys or self.ax.get_legend() is None and keys:
            self._legend_keys = keys
            old = self.ax.get_legend()
            if old is not None:
                old.remove()
            if keys:
                font = FontProperties(size="x-small")
                labels = [str(self.lines[k].get_label()) for k in keys]
                legend = self.ax.legend(
                    [self.lines[k] for k in keys],
                    fit_legend(labels, font, self._legend_room(font, inside), self.canvas.get_renderer()),
                    **({"loc": "best"} if inside else {"loc": "upper left", "bbox_to_anchor": (1.02, 1.0)}),
                    prop=font,
                    frameon=inside,  # inside, on a pale ground over the lines, which would hide a label they cross
                    framealpha=0.8,
                    edgecolor="none",
                )
                legend.set_animated(inside)
                as_written(legend)
            self._stale = True

    def _legend_room(self, font: FontProperties, inside: bool) -> float:
        """Pixels a legend's label may take: the axes' width inside them, else the room right of them, less the
        legend's pads and a line's sample (matplotlib's default sizes, in ems)."""
        em = font.get_size_in_points() * self.figure.dpi / 72
        axes = self.ax.get_position().width * self.figure.bbox.width
        if inside:
            return axes - (2 * 0.5 + 2 * 0.4 + 2.0 + 0.8) * em  # borderaxespad, borderpad, handle, its gap
        return LEGEND_PX - 0.02 * axes - (0.5 + 2 * 0.4 + 2.0 + 0.8) * em

    def render(self) -> bytes:
        if self._stale or self._background is None:
            self.canvas.draw()  # everything but the (animated) lines
            if self._clear_offset():  # the offset text is known once drawn
                self.canvas.draw()
            self._background = self.canvas.copy_from_bbox(self.figure.bbox)
            self._stale = False
            self.full_draws += 1
        else:
            self.canvas.restore_region(self._background)
        for line in sorted(self.lines.values(), key=lambda ln: ln.get_zorder()):
            if line.get_visible():
                self.ax.draw_artist(line)
        legend = self.ax.get_legend()
        if legend is not None and legend.get_animated():  # inside the axes: over the lines, where they are least
            placing.place(legend, self.canvas.get_renderer())  # and clear of the marks on the frame
            self.ax.draw_artist(legend)
        width, height = self.canvas.get_width_height()
        buf = io.BytesIO()
        Image.frombuffer("RGBA", (width, height), self.canvas.buffer_rgba(), "raw", "RGBA", 0, 1).save(
            buf, format="png", compress_level=1
        )
        return buf.getvalue()

"""Texts fitted to their room as Agg draws them: a live panel's title clear of its y axis' offset text and inside its
figure, legend labels broken into balanced lines, and a compare legend and a cut title inside their axes and figure
(measured by their outlines, a few percent narrower than Agg's hinted glyphs, they ran past them)."""

import functools
import itertools

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties

from rlnb.viz import plots
from rlnb.viz.livefig import Panel
from rlnb.viz.texts import drawn_width, wrapped

TITLES = ["gradient norm (pre-clip)", "Ångström gain (pre-clip) É", "gradient norm of the\nsecond (pre-clip) group",
          "WWW MMM www mmm WWW MMM www mmm WWW"]  # fmt: skip
"""Titles wider than the ~110 px that cleared the offset text over the axes' left end, of two lines, and cut."""


@pytest.mark.parametrize("per_row, legend", [(4, False), (4, True), (2, True), (3, False)])
@pytest.mark.parametrize("title", TITLES, ids=["long", "accents", "two lines", "cut"])
def test_a_live_panels_title_is_inside_its_figure_clear_of_the_offset_text(title, per_row, legend):
    """Values near 1e-3: matplotlib shows ``1e−3`` over the y axis; over the axes' left end a title wider than ~110 px
    overlapped it, and matplotlib lifted the title above it, to the figure's top edge (a two-line title half off)."""
    panel = Panel(title, legend=legend, per_row=per_row)
    panel.line("a", color="C0")
    y = 1e-3 * (1 + np.arange(10) / 10)
    panel.set("a", np.arange(10.0), y)
    panel.set_limits(9.0, float(y.min()), float(y.max()))
    panel.render()
    renderer = panel.canvas.get_renderer()
    offset, page = panel.ax.yaxis.offsetText, panel.figure.bbox
    assert offset.get_text() == "1e−3"
    text, box = offset.get_window_extent(renderer), panel.ax.title.get_window_extent(renderer)
    assert page.x0 <= text.x0 and text.y1 <= page.y1  # the offset text is shown whole
    assert page.x0 <= box.x0 and box.x1 <= page.x1 and box.y1 <= page.y1 - 1, (box.extents.round(1), page.extents)
    assert not box.overlaps(text), (box.extents.round(1), text.extents.round(1))
    assert box.y0 >= panel.ax.bbox.y1  # above the axes
    assert panel.ax.title.get_text().count("\n") == title.count("\n")


LABELS = ["reward (train) +inf (1 step, on the frame)", "clip threshold 10 (off the top)",
          "grad norm (muon) -inf (3 steps, on the frame)", "a b c d e f g h", "loss"]  # fmt: skip


def lines_needed(words, width, room):
    """Brute force: the fewest lines of whole words at most ``room`` wide, and the narrowest widest line they allow."""
    for count in range(1, len(words) + 1):
        widest = [
            max(width(" ".join(words[i:j])) for i, j in itertools.pairwise((0, *cuts, len(words))))
            for cuts in itertools.combinations(range(1, len(words)), count - 1)
        ]
        fitting = [w for w in widest if w <= room]
        if fitting:
            return count, min(fitting)
    raise AssertionError("no breaking fits")


@pytest.mark.parametrize("label", LABELS)
@pytest.mark.parametrize("share", [0.35, 0.5, 0.7])
def test_a_label_is_broken_into_as_few_lines_as_fit_each_as_narrow_as_they_allow(label, share):
    """Greedy breaking left one word alone on the last line (``(1 step, on the`` over ``frame)``); the same number of
    lines, balanced, is what a narrow legend shows now. Widths as Agg draws the live legend's font."""
    font, renderer = FontProperties(size="x-small"), FigureCanvasAgg(Figure(dpi=80)).get_renderer()

    @functools.cache  # the brute force below measures each run of words many times
    def width(line):
        return drawn_width(line, font, renderer)

    words = label.split(" ")
    room = max(max(map(width, words)), share * width(label))
    count, narrowest = lines_needed(words, width, room)
    lines = wrapped(label, width, room).split("\n")
    assert " ".join(lines) == label
    assert len(lines) == count and max(map(width, lines)) == narrowest, lines


def test_a_balanced_label_breaks_where_greedy_breaking_left_a_word_alone():
    lines = wrapped("reward (train) +inf (1 step, on the frame)", len, 36).split("\n")
    assert lines == ["reward (train) +inf (1", "step, on the frame)"]


WIDE = "ww mm" * 40
"""A name of wide letters, long enough to be cut: by its outlines, 4.6 px of a 72 dpi figure's legend ran left of the
user's axes, and a title cut to its room drew 17 px wider than it."""


def legend_box(ax, canvas):
    canvas.draw()
    return ax.get_legend().get_window_extent(canvas.get_renderer())


def runs(count):
    return pd.DataFrame(
        {"run": [f"{WIDE} {i}" for i in range(count) for _ in range(2)], "seed": 0, "step": [1, 2] * count,
         "loss": np.linspace(1.0, 2.0, 2 * count)}
    )  # fmt: skip


@pytest.mark.parametrize("dpi", [72, 100])
def test_a_compare_legend_of_cut_wide_names_fits_inside_the_users_axes(dpi):
    """Ten runs on the user's axes: the legend's font, columns and cut names were fitted by the names' outlines."""
    figure = Figure(figsize=(6.4, 4.8), dpi=dpi)
    canvas = FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    plots.compare(runs(10), ax=ax)
    box, axes = legend_box(ax, canvas), ax.bbox
    assert all("…" in t.get_text() for t in ax.get_legend().get_texts())
    assert axes.x0 <= box.x0 and box.x1 <= axes.x1 and axes.y0 <= box.y0 and box.y1 <= axes.y1, (
        box.extents.round(1), axes.extents.round(1))  # fmt: skip


def test_a_cut_title_of_wide_letters_is_within_its_share_of_the_figure():
    """A metric of a long name of wide letters: its title is cut to 85% of the figure's width, and by its outlines it
    was drawn 17 px wider than that."""
    frame = pd.DataFrame({"step": [1, 2, 3], "loss": [1.0, 0.5, 0.2], WIDE: [0.1, 0.2, 0.3]})
    figure = Figure(figsize=(6.4, 4.8), dpi=100)
    canvas = FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    plots.metric(frame, WIDE, ax=ax)
    canvas.draw()
    box, page = ax.title.get_window_extent(canvas.get_renderer()), figure.bbox
    assert "…" in ax.title.get_text()
    assert box.width <= 0.85 * page.width and page.x0 <= box.x0 and box.x1 <= page.x1, box.extents.round(1)


def drawn_with(panel, y):
    """``panel`` drawn with one line of the values ``y``, and its renderer."""
    panel.set("a", np.arange(float(len(y))), y)
    panel.set_limits(len(y) - 1.0, float(y.min()), float(y.max()))
    panel.render()
    return panel.canvas.get_renderer()


@pytest.mark.parametrize("per_row, legend", [(4, False), (2, True), (3, False)])
@pytest.mark.parametrize("title", [TITLES[0], TITLES[3]], ids=["long", "cut"])
def test_an_offset_text_wider_than_its_room_is_clear_of_the_title_which_gets_its_room_back_after(
    title, per_row, legend
):
    """The title was cut clear of an offset text up to ``1e−10`` (36 px): ``1e−200`` (44 px) ran into a title as wide as
    its room. The title makes room for the offset text as drawn, and takes it back when the offset narrows."""
    panel = Panel(title, legend=legend, per_row=per_row)
    panel.line("a", color="C0")
    fitted = panel.ax.title.get_text()  # fitted to 1e−10's room
    renderer = drawn_with(panel, 1e-200 * (1 + np.arange(10) / 10))
    offset, page = panel.ax.yaxis.offsetText, panel.figure.bbox
    assert offset.get_text() == "1e−200"
    text, box = offset.get_window_extent(renderer), panel.ax.title.get_window_extent(renderer)
    assert not box.overlaps(text), (box.extents.round(1), text.extents.round(1))
    assert page.x0 <= box.x0 and box.x1 <= page.x1 and box.y1 <= page.y1 - 1  # in the figure
    assert panel.ax.bbox.y1 <= box.y0 <= panel.ax.bbox.y1 + 8  # on the axes, not lifted over the offset text
    shown = panel.ax.title.get_text()
    assert shown[:2] == title[:2] and shown[-2:] == title[-2:]  # cut in the middle, if at all
    renderer = drawn_with(panel, 1e-3 * (1 + np.arange(10) / 10))
    assert offset.get_text() == "1e−3" and panel.ax.title.get_text() == fitted


LONG = "learning_rate={}, adam.learning_rate=0.002, momentum=0.9, newton_schulz_steps=3, weight_decay=0.01, seed=0"
"""A sweep's label of five Muon fields (about 100 characters): the part that differs is at its start."""


def long_runs(count, words=LONG):
    return pd.DataFrame(
        {"run": [words.replace("{}", f"{0.01 * (i + 2):.2f}") for i in range(count) for _ in range(2)], "seed": 0,
         "step": [1, 2] * count, "reward": np.linspace(0.1, 0.9, 2 * count)}
    )  # fmt: skip


@pytest.mark.parametrize("count", [2, 6])
@pytest.mark.parametrize("words", [LONG, LONG + ", " + LONG])
def test_a_compare_legend_of_a_few_long_names_leaves_the_axes_their_width_and_every_name_whole(count, words):
    """Two to six long names went inside a figure of compare's own with no width check: the legend squashed the axes
    to 196 px of a 600 px figure and ran off its left edge, each name's start cut (at 140 characters the layout
    collapsed: "axes sizes collapsed to zero")."""
    short = plots.compare(long_runs(count, "run {}"), y="reward")
    FigureCanvasAgg(short.figure).draw()
    ax = plots.compare(long_runs(count, words), y="reward")
    figure = ax.figure
    box = legend_box(ax, FigureCanvasAgg(figure))
    assert ax.bbox.width >= 0.95 * short.bbox.width, (ax.bbox.width, short.bbox.width)
    assert ax.bbox.x1 <= box.x0 and box.x1 <= figure.bbox.width, (box.extents, ax.bbox.extents)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == list(dict.fromkeys(long_runs(count, words).run))


@pytest.mark.parametrize("count", [2, 6])
@pytest.mark.parametrize("words", [LONG, LONG + ", " + LONG])
def test_a_compare_legend_of_a_few_long_names_on_the_users_axes_is_fitted_inside_them(count, words):
    """On the user's figure (never resized) the few long names are fitted inside the axes as many names are: a
    smaller font, then cut in the middle, their start kept."""
    figure = Figure(figsize=(6.4, 4.8), dpi=100, layout="constrained")
    canvas = FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    canvas.draw()
    width = ax.bbox.width
    plots.compare(long_runs(count, words), y="reward", ax=ax)
    box, axes = legend_box(ax, canvas), ax.bbox
    assert axes.width >= 0.95 * width and axes.x0 <= box.x0 and box.x1 <= axes.x1, (box.extents, axes.extents)
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert [t[:18] for t in texts] == [f"learning_rate={0.01 * (i + 2):.2f}" for i in range(count)], texts
    assert all(("…" in t) == (len(words) > len(LONG)) for t in texts), texts  # the longer ones cut

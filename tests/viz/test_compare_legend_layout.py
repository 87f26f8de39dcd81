"""``plots.compare``'s legend on the user's axes, fitted to the axes as drawn: after their figure's layout (constrained,
``tight_layout``) or a resize, not to the size the axes had when ``compare`` was called."""

import io

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from rlnb.viz import plots


def runs(names: list[str]) -> pd.DataFrame:
    return pd.DataFrame([{"run": n, "step": s, "loss": 1 / (s + 1 + i)} for i, n in enumerate(names) for s in range(5)])


def drawn(figure: Figure, ax):
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    return ax.get_legend().get_window_extent(canvas.get_renderer()), ax.bbox


def test_a_legend_fitted_to_the_users_axes_stays_inside_them_after_their_tight_layout():
    """Eight names fitted to the right of two axes as they were at the call; the user's labels and ``tight_layout``
    then narrowed the axes, and the legend ran 8 px past their left edge (396 against 404)."""
    names = [f"adam lr={10**-i:.0e} warmup=100 wd=0.01 #{i}" for i in range(8)]
    figure = Figure(figsize=(6, 3))
    left, right = figure.subplots(1, 2)
    plots.compare(runs(names), "loss", ax=right)
    for ax in (left, right):
        ax.set_ylabel("a long y label\nof two lines", fontsize=16)
    figure.tight_layout()
    box, axes = drawn(figure, right)
    assert axes.x0 <= box.x0 and box.x1 <= axes.x1 and axes.y0 <= box.y0 and box.y1 <= axes.y1, (
        box.extents.round(), axes.extents.round())  # fmt: skip


def test_names_cut_for_small_axes_are_drawn_whole_once_the_figure_is_made_larger():
    """Cut at the call, on a 3 × 2.5 in figure, the names stayed cut after the user made it 12 × 5 in."""
    names = [f"run {i} of a sweep over the learning rate and warmup" for i in range(3)]
    figure = Figure(figsize=(3, 2.5))
    ax = plots.compare(runs(names), "loss", ax=figure.add_subplot())
    assert all("…" in t.get_text() for t in ax.get_legend().get_texts())
    figure.set_size_inches(12, 5)
    box, axes = drawn(figure, ax)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == names
    assert axes.x0 <= box.x0 and box.x1 <= axes.x1 and box.width <= 0.5 * axes.width


def test_a_legend_made_again_as_drawn_keeps_its_names_as_written():
    """Made again at the draw, after ``plots.compare`` had set every text to be drawn as written: "$5 and $6" would be
    read as TeX again."""
    names = ["cost $5 and $6, a rather long label", "price $a$ low, another long label"]
    figure = Figure(figsize=(9, 5), layout="constrained")
    ax = plots.compare(runs(names), "loss", ax=figure.subplots(2, 3)[0, 0])
    before = ax.get_legend()
    drawn(figure, ax)
    texts = ax.get_legend().get_texts()
    assert ax.get_legend() is not before and [t.get_text() for t in texts] == names
    assert not [t.get_text() for t in texts if t.get_parse_math()]


def test_a_legend_the_user_made_instead_or_axes_removed_are_left_as_they_are():
    """The figure's fitter must not make the compare legend again over the user's own, nor fail the figure's draw
    once the axes it fitted are removed (``ax.figure`` is then None)."""
    figure = Figure(figsize=(9, 5), layout="constrained")
    first, second = figure.subplots(2, 3)[0, :2]
    for ax in (first, second):
        plots.compare(runs(["a rather long sweep label here", "another"]), "loss", ax=ax)
    mine = first.legend(["mine", "too"])
    second.remove()
    FigureCanvasAgg(figure).draw()
    assert first.get_legend() is mine and [t.get_text() for t in mine.get_texts()] == ["mine", "too"]


def styled(ax):
    """The user's touches on the compare legend after the call: a title (in bold) and no frame."""
    legend = ax.get_legend()
    legend.set_title("learning rate", prop={"weight": "bold"})
    legend.set_frame_on(False)
    return legend


def style(legend) -> tuple[str, str, bool]:
    return legend.get_title().get_text(), legend.get_title().get_fontweight(), legend.get_frame_on()


def test_a_tight_savefig_keeps_the_legend_the_user_styled():
    """``bbox_inches="tight"`` (what ``%matplotlib inline`` does) reads the axes' height as 1.9250000000000003 in
    against 1.925 at the call: compared exactly, each such savefig made the legend again, its title and frame lost."""
    names = [f"run {i} of a sweep over the learning rate and warmup" for i in range(3)]
    figure = Figure(figsize=(3, 2.5))
    ax = plots.compare(runs(names), "loss", ax=figure.add_subplot())
    legend = styled(ax)
    for _ in range(2):
        figure.savefig(io.BytesIO(), format="png", bbox_inches="tight")
    assert ax.get_legend() is legend and style(legend) == ("learning rate", "bold", False)


def test_a_legend_made_again_for_a_new_size_keeps_the_users_title_and_frame():
    """Its names fitted again to axes a layout resized; the title and frame the user set are kept."""
    names = [f"run {i} of a sweep over the learning rate and warmup" for i in range(3)]
    figure = Figure(figsize=(3, 2.5))
    ax = plots.compare(runs(names), "loss", ax=figure.add_subplot())
    legend = styled(ax)
    figure.set_size_inches(12, 5)
    drawn(figure, ax)
    again = ax.get_legend()
    assert again is not legend and [t.get_text() for t in again.get_texts()] == names  # made again: fitted anew
    assert style(again) == ("learning rate", "bold", False)


def test_names_that_cannot_be_read_on_tiny_axes_give_a_legend_that_says_so_inside_them():
    """30 runs on the middle panel of a 3 × 3 grid (137 × 96 px): five columns of names cut to "…" ran 110 px past
    the axes, over the panel on their left, and named nothing; the figure made larger lists them again."""
    names = [f"run{i:02d}" for i in range(30)]
    figure = Figure(figsize=(6.4, 4.8))
    ax = plots.compare(runs(names), "loss", ax=figure.subplots(3, 3)[1, 1])
    figure.tight_layout()
    box, axes = drawn(figure, ax)
    assert axes.x0 <= box.x0 and box.x1 <= axes.x1 and axes.y0 <= box.y0 and box.y1 <= axes.y1, (
        box.extents.round(), axes.extents.round())  # fmt: skip
    assert ax.get_legend().get_title().get_text() == "30 names: no room"
    figure.set_size_inches(19.2, 14.4)
    drawn(figure, ax)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == names
    assert ax.get_legend().get_title().get_text() == ""


def test_the_users_title_comes_back_after_the_legend_said_there_was_no_room():
    """Shrunk to a legend that only says "8 names: no room" and grown again, the legend had lost the user's title: it
    was copied from the legend before, the notice, which has none of its own."""
    names = [f"run {i} of a sweep over the learning rate and warmup" for i in range(8)]
    figure = Figure(figsize=(5, 4))
    ax = plots.compare(runs(names), "loss", ax=figure.add_subplot())
    styled(ax)
    figure.set_size_inches(1.0, 0.9)
    drawn(figure, ax)
    assert ax.get_legend().get_texts() == []  # only a notice: no name could be told
    figure.set_size_inches(5, 4)
    drawn(figure, ax)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == names
    assert style(ax.get_legend()) == ("learning rate", "bold", False)


def test_a_few_short_names_on_short_wide_axes_are_fitted_into_columns_within_their_height():
    """Six one-letter runs fit the width of 8 × 1.2 in axes but, one a row, not their height: a legend as it is ran
    over the axes' top and bottom."""
    figure = Figure(figsize=(8, 1.2))
    ax = plots.compare(runs(list("abcdef")), "loss", ax=figure.add_subplot())
    box, axes = drawn(figure, ax)
    assert axes.y0 <= box.y0 and box.y1 <= axes.y1, (box.extents.round(), axes.extents.round())

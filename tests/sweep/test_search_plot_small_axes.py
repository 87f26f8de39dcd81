"""``search_plot``'s legend on small axes of the user's (a 3 × 2 in figure, a panel of a 3 × 3 grid): fitted to the
axes as they are drawn, after the user's layout, as ``plots.compare``'s is (``rlnb.viz.inside``)."""

import io

import pandas as pd
import pytest
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties

from rlnb.sweep import search_plot
from rlnb.viz.insidelegend import ROW_EM


def every_status() -> pd.DataFrame:
    """Ten trials of every status, two of them diverged: six entries in the legend, the star's the longest."""
    statuses = ["COMPLETED"] * 4 + ["PRUNED"] * 2 + ["FAILED", "STOPPED"] + ["COMPLETED"] * 2
    trials = pd.DataFrame({"trial": range(10), "label": [f"t{i}" for i in range(10)],
                           "learning_rate": [10 ** (-5 + i / 2) for i in range(10)], "seed": 0, "status": statuses,
                           "value": [0.1 * (i % 5) + 0.05 for i in range(10)], "steps_done": 8,
                           "diverged_at": [None] * 8 + [2.0, 2.0]})  # fmt: skip
    trials.attrs["objective"] = "reward"
    return trials


def inside(box, axes) -> bool:
    return axes.x0 <= box.x0 and box.x1 <= axes.x1 and axes.y0 <= box.y0 and box.y1 <= axes.y1


def small_axes(case: str):
    """The user's axes: alone on a 3 × 2 in figure with ``layout="tight"``, or the middle of a 3 × 3 grid on a
    6.4 × 4.8 in figure, then ``tight_layout``."""
    if case == "3x2 tight":
        figure = Figure(figsize=(3, 2), layout="tight")
        return figure, figure.add_subplot()
    figure = Figure(figsize=(6.4, 4.8))
    ax = figure.subplots(3, 3)[1, 1]
    return figure, ax


@pytest.mark.parametrize("case", ["3x2 tight", "3x3 grid"])
def test_search_plots_legend_stays_inside_the_users_small_axes_as_drawn_and_as_saved(case):
    """On a 3 × 2 in figure the legend ran 21 px past the axes' left edge; in a 3 × 3 grid's middle panel (109 px
    wide) it was 233 px wide, 130 px past the axes, over the neighbouring panel and its labels."""
    figure, ax = small_axes(case)
    search_plot(every_status(), ax=ax)
    if case == "3x3 grid":
        figure.tight_layout()
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    box = ax.get_legend().get_window_extent(canvas.get_renderer())
    assert inside(box, ax.bbox), (box.extents.round(), ax.bbox.extents.round())
    figure.savefig(io.BytesIO(), format="png", bbox_inches="tight")  # what a notebook's inline backend does
    box = ax.get_legend().get_window_extent(canvas.get_renderer())
    assert inside(box, ax.bbox), (box.extents.round(), ax.bbox.extents.round())
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert len(texts) == 6 and texts[0][:2] == "co" and texts[-1][:2] == "be"  # each entry, its start kept


def test_search_plots_legend_on_the_users_axes_is_whole_once_their_figure_is_made_larger():
    """A legend fitted to a small figure is made again, whole and as it is, when the figure is made larger."""
    figure = Figure(figsize=(3, 2))
    ax = search_plot(every_status(), ax=figure.add_subplot())
    figure.set_size_inches(8, 6)
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert texts[0] == "completed (6)" and texts[-1].startswith("best trial learning_rate ") and "…" not in texts[-1]
    assert ax.get_legend().get_texts()[0].get_fontsize() == FontProperties(size="small").get_size_in_points()


def test_search_plots_long_axis_labels_keep_to_their_panel_of_a_grid():
    """x= a 60-character column on the middle panel of a 3 × 3 grid: its x label ran 570 px across the whole row,
    under the neighbouring panels, and the y label "reward (mean of the last 5 steps)" into the row above; cut in the
    middle to the panel's share of the figure, as the plots' titles and y labels are."""
    name = "learning rate of the adapter's second projection, after warmup"
    figure, ax, renderer = _drawn_in_grid(name, column=1)
    across, up = ax.xaxis.label.get_window_extent(renderer), ax.yaxis.label.get_window_extent(renderer)
    third_x, third_y = figure.bbox.width / 3, figure.bbox.height / 3
    assert third_x <= across.x0 and across.x1 <= 2 * third_x, across.extents.round()
    assert third_y <= up.y0 and up.y1 <= 2 * third_y, up.extents.round()
    label = ax.get_xlabel()
    assert label.startswith("learning") and label.endswith("warmup") and "…" in label


def test_the_stars_legend_marker_is_scaled_to_the_rows_of_a_legend_fitted_to_small_axes():
    """The best trial's star (``s=220``, 15 pt) drawn at its size in a legend fitted in a smaller font covered the
    rows above and below it: its legend marker is at most a row tall."""
    figure, ax = small_axes("3x2 tight")
    search_plot(every_status(), ax=ax)
    FigureCanvasAgg(figure).draw()
    legend = ax.get_legend()
    row = ROW_EM * legend.get_texts()[0].get_fontsize()  # points
    sizes = [max(h.get_sizes()) for h in legend.legend_handles if hasattr(h, "get_sizes") and len(h.get_sizes())]
    assert sizes and max(sizes) ** 0.5 <= row, (max(sizes) ** 0.5, row)


def test_a_cut_axis_label_stays_in_its_column_where_the_axes_are_right_of_its_centre():
    """A label is centred on the axes, which in a grid's column 0 are right of their share's centre: cut to the
    share's width, the x label ran 13 px into column 1 of a 3 × 3 grid."""
    figure, ax, renderer = _drawn_in_grid("optimizer_adam_learning_rate_for_the_policy_head_layers", column=0)
    box = ax.xaxis.label.get_window_extent(renderer)
    assert box.x0 >= 0 and box.x1 <= figure.bbox.width / 3, box.extents.round()
    assert "…" in ax.get_xlabel()


def _drawn_in_grid(name: str, column: int) -> tuple[Figure, Axes, RendererAgg]:
    """``search_plot`` of every status with ``x=name`` (a column of that name) on the middle row's panel ``column`` of
    a 3 × 3 grid on a 6.4 × 4.8 in figure, laid out (``tight_layout``) and drawn."""
    figure = Figure(figsize=(6.4, 4.8))
    ax = figure.subplots(3, 3)[1, column]
    search_plot(every_status().rename(columns={"learning_rate": name}), x=name, ax=ax)
    figure.tight_layout()
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    return figure, ax, canvas.get_renderer()


LONG = "optimizer_adam_learning_rate_for_the_policy_head_layers"


@pytest.mark.parametrize("layout", ["tight", "constrained"])
def test_a_cut_axis_label_is_cut_where_the_layout_puts_the_axes(layout):
    """Cut when ``search_plot`` was called, before the layout moved the axes right of the figure's centre, the x label
    of a 3 × 2 in figure with a layout engine ended at 302 px, past its 300 px (mend40g F3): cut again as drawn."""
    figure = Figure(figsize=(3, 2), layout=layout)
    ax = search_plot(every_status().rename(columns={"learning_rate": LONG}), x=LONG, ax=figure.add_subplot())
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    box = ax.xaxis.label.get_window_extent(canvas.get_renderer())
    assert box.x0 >= 0 and box.x1 <= figure.bbox.width, box.extents.round()
    assert ax.get_xlabel().startswith("optim") and "…" in ax.get_xlabel()


@pytest.mark.parametrize("layout", [None, "constrained"])
def test_labels_cut_for_a_small_figure_are_whole_once_it_is_made_larger(layout):
    """Cut at the call, a 3 × 2 in figure's labels stayed cut when the figure was made 12 × 6 in. (Made small again,
    a constrained layout's first draw finds the legend made for 12 × 6 in too large and leaves the axes: not here.)"""
    figure = Figure(figsize=(3, 2), layout=layout)
    ax = search_plot(every_status().rename(columns={"learning_rate": LONG}), x=LONG, ax=figure.add_subplot())
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    assert "…" in ax.get_xlabel() and "…" in ax.get_ylabel()
    figure.set_size_inches(12, 6)
    canvas.draw()
    assert ax.get_xlabel() == LONG and ax.get_ylabel() == "reward (mean of the last 5 steps)"
    if layout is None:
        figure.set_size_inches(3, 2)
        canvas.draw()
        assert "…" in ax.get_xlabel() and "…" in ax.get_ylabel()


def test_a_label_the_user_sets_after_the_plot_is_left_as_set():
    """What the user sets after the plot is theirs: neither cut nor written again at a draw."""
    figure = Figure(figsize=(3, 2), layout="constrained")
    ax = search_plot(every_status().rename(columns={"learning_rate": LONG}), x=LONG, ax=figure.add_subplot())
    ax.set_xlabel("mine, a label that is too long for this figure, as its user wrote it")
    ax.set_title("$x$ mine")
    FigureCanvasAgg(figure).draw()
    assert ax.get_xlabel() == "mine, a label that is too long for this figure, as its user wrote it"
    assert ax.get_title() == "$x$ mine"

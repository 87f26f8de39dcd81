"""A legend inside its axes, in a live panel or a static plot, is placed clear of the triangles that mark +inf and -inf
on the frame: matplotlib's "best" counts a marker as its centre only, which on the frame's edge is outside every place
it tries, so the legend's pale ground was drawn over the triangles it names (its top edge within a pixel of their
base). And a live panel's legend fits the room it has."""

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.markers import MarkerStyle
from matplotlib.transforms import Bbox

from rlnb.viz import plots
from rlnb.viz.live import LiveView
from rlnb.viz.livefig import Panel
from tests.support.histories import hand_history

INF = float("inf")
CLEAR_PX = 1.0


def drawn_marks(lines, dpi) -> list[Bbox]:
    """Each visible infinity mark's extent in pixels as drawn: its marker's path, at its size, and its edge."""
    boxes = []
    px = dpi / 72
    for line in lines:
        if line.get_marker() not in ("^", "v") or line.get_linestyle() != "None" or not line.get_visible():
            continue
        style = MarkerStyle(line.get_marker())
        shape = style.get_path().transformed(style.get_transform()).get_extents()
        grow = line.get_markeredgewidth() / 2
        size = line.get_markersize()
        for x, y in line.get_transform().transform(line.get_xydata()):
            boxes.append(
                Bbox.from_extents(
                    x + (shape.x0 * size - grow) * px,
                    y + (shape.y0 * size - grow) * px,
                    x + (shape.x1 * size + grow) * px,
                    y + (shape.y1 * size + grow) * px,
                )
            )
    return boxes


@pytest.mark.parametrize(
    "values",
    [[1.0] * 8 + [INF, INF] + [1.0] * 8, [1.0] * 8 + [INF, -INF] + [1.0] * 8],
    ids=["top", "top and bottom"],
)
def test_a_live_legend_is_placed_clear_of_the_infinity_marks_on_the_frame(values):
    h = hand_history([1.0, 0.5])
    for step, v in enumerate(values, 1):
        h.log(step, ppl=v)
    view = LiveView(h, metrics=("ppl",), every=0)
    try:
        panel = view.panels["ppl"]
        legend = panel.ax.get_legend()
        assert legend is not None and any("inf (" in t.get_text() for t in legend.get_texts())
        box = legend.get_window_extent(panel.canvas.get_renderer()).padded(CLEAR_PX)
        marks = drawn_marks(panel.lines.values(), panel.figure.dpi)
        assert marks and not [m.extents.round(2).tolist() for m in marks if m.overlaps(box)], box
        axes = panel.ax.get_window_extent()
        assert axes.y0 < box.y0 and box.y1 < axes.y1  # inside the axes still, above the bottom marks' row
    finally:
        view.close()


WIDE = ["WWW MMM www mmm WWW MMM www mmm WWW", "wmwwwMww  m wMMW   w M MwWWmwMwMWMwmWWmMw m wMwwMmMw  mmm"]
"""Labels of the widest letters: their outlines (what ``TextToPath`` measures) are narrower than Agg draws them
at a panel's small size, hinted, and the first ran 3.6 px past a narrow panel's axes."""


@pytest.mark.parametrize("per_row", [4, 2], ids=["narrow: inside the axes", "wide: beside them"])
@pytest.mark.parametrize("label", WIDE, ids=["words", "letters"])
def test_a_live_panels_legend_of_wide_letters_fits_inside_its_axes_or_its_figure(per_row, label):
    panel = Panel("norm", legend=True, per_row=per_row)
    panel.line("a", color="C0", label=label)
    panel.set("a", np.array([1.0, 2.0]), np.array([1.0, 2.0]))
    panel.legend(["a"], inside=not panel.beside)
    panel.set_limits(2.0, 1.0, 2.0)
    panel.render()
    legend = panel.ax.get_legend()
    box = legend.get_window_extent(panel.canvas.get_renderer())
    room = panel.figure.bbox if panel.beside else panel.ax.bbox
    assert "\n" in legend.get_texts()[0].get_text()  # broken into lines, not cut to nothing
    assert room.x0 <= box.x0 and box.x1 <= room.x1, (box.extents.round(1), room.extents.round(1))


DIVERGED = [2.0 - 0.1 * i for i in range(15)] + [INF] * 5
"""A loss falling from the upper left, then +inf: "best" (and the gradient norm's "upper right") is the upper right,
over the triangles on the frame's top."""


def diverged(column):
    steps = pd.DataFrame({"step": range(1, 21), "loss": DIVERGED, "grad_clip_norm": 1.0})
    steps["grad_norm"], steps["grad_norm_muon"], steps["grad_norm_adam"] = DIVERGED, np.nan, np.nan
    return steps if column != "runs" else steps[["step", "loss"]].assign(run="a", seed=0)


def clear_of_marks(ax, canvas=None) -> None:
    """``ax``'s figure drawn (on ``canvas`` where it was), its legend inside ``ax``, clear of each mark on the frame by
    ``CLEAR_PX``."""
    if canvas is None:
        canvas = FigureCanvasAgg(ax.figure)
        canvas.draw()
    legend = ax.get_legend()
    assert any("+inf (5 steps" in t.get_text() for t in legend.get_texts())
    box = legend.get_window_extent(canvas.get_renderer()).padded(CLEAR_PX)
    marks = drawn_marks(ax.get_lines(), ax.figure.dpi)
    assert len(marks) == 5 and not [m.extents.round(2).tolist() for m in marks if m.overlaps(box)], box
    axes = ax.get_window_extent()
    assert axes.x0 < box.x0 and box.x1 < axes.x1 and axes.y0 < box.y0 and box.y1 < axes.y1


PLOTS = {
    "loss": lambda ax: plots.loss(diverged("steps"), ax=ax),
    "grad_norm": lambda ax: plots.grad_norm(diverged("steps"), ax=ax),
    "metric": lambda ax: plots.metric(diverged("steps"), "loss", ax=ax),
    "compare": lambda ax: plots.compare(diverged("runs"), ax=ax),
}


@pytest.mark.parametrize("users_axes", [False, True], ids=["own figure", "the user's axes"])
@pytest.mark.parametrize("plot", list(PLOTS))
def test_a_static_plots_legend_is_placed_clear_of_the_infinity_marks_on_the_frame(plot, users_axes):
    ax = None
    if users_axes:  # placed once the layout has sized the axes: their size is not known when the plot is made
        ax = Figure(figsize=(9, 3), layout="constrained").subplots(1, 2)[1]
    clear_of_marks(PLOTS[plot](ax))


def test_a_legend_the_user_makes_in_place_of_a_plots_is_left_where_they_put_it():
    ax = plots.loss(diverged("steps"))
    legend = ax.legend(loc="upper right", borderaxespad=0)  # over the marks: theirs to choose
    canvas = FigureCanvasAgg(ax.figure)
    canvas.draw()
    box = legend.get_window_extent(canvas.get_renderer())
    assert any(m.overlaps(box) for m in drawn_marks(ax.get_lines(), ax.figure.dpi))


def test_each_panel_of_an_overview_places_its_legend_clear_of_the_infinity_marks():
    figure = plots.overview(diverged("steps"))
    assert [ax.get_title() for ax in figure.axes] == ["loss", "gradient norm (pre-clip)"]
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    for ax in figure.axes:
        clear_of_marks(ax, canvas)

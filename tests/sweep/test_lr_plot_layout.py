"""``LRFind.plot`` on the user's axes: its title (why there is no suggestion), x label and legend kept to its panel."""

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from rlnb.sweep.lr.result import LRFind

REASON = (
    "no clear suggestion: the loss never fell by 5% before it rose again past the start; try a wider range of rates"
)


def found(suggestion: float | None) -> LRFind:
    """A Muon test of 40 rates: its x label two lines, its title (without a suggestion) the reason."""
    lrs = list(np.geomspace(1e-6, 1, 40))
    values = [1 - 0.5 * np.tanh(i / 10) + 0.3 * (i > 30) for i in range(40)]
    return LRFind(lrs=lrs, values=values, smoothed=values, suggestion=suggestion, objective="loss", optimizer="muon",
                  muon_scaling="match_rms_adamw", adam_ratio=0.5, reason=REASON)  # fmt: skip


def within(box, x0, y0, x1, y1) -> bool:
    return x0 <= box.x0 and box.x1 <= x1 and y0 <= box.y0 and box.y1 <= y1


def test_the_reason_for_no_suggestion_stays_within_the_users_4_by_3_figure():
    """The title (the reason, wrapped at 64 characters) ran 4 px past a 4 × 3 in figure's right edge: "rose" cut."""
    figure = Figure(figsize=(4, 3), layout="constrained")
    ax = found(None).plot(figure.add_subplot())
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    box = ax.title.get_window_extent(canvas.get_renderer())
    assert within(box, *figure.bbox.extents), box.extents.round()
    assert ax.get_title().replace("\n", " ") == REASON


@pytest.mark.parametrize("suggestion", [1e-3, None])
def test_lr_plot_on_a_grid_panel_keeps_its_texts_to_the_panels_column_and_its_legend_inside(suggestion):
    """On the middle panel of a 3 × 3 grid after ``tight_layout`` the legend ran 13 px past the axes, and the title and
    two-line x label ran over the neighbouring columns."""
    figure = Figure(figsize=(6.4, 4.8))
    ax = found(suggestion).plot(figure.subplots(3, 3)[1, 1])
    figure.tight_layout()
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    renderer, third = canvas.get_renderer(), figure.bbox.width / 3
    for text in (ax.title, ax.xaxis.label):
        box = text.get_window_extent(renderer)
        assert third <= box.x0 and box.x1 <= 2 * third, (text.get_text(), box.extents.round())
    box = ax.get_legend().get_window_extent(renderer)
    assert within(box, *ax.bbox.extents), (box.extents.round(), ax.bbox.extents.round())

"""The single-run plots' legends (``loss``/``metric`` with ``ema``, the gradient norm's) on the user's axes, with a
long name: fitted inside the axes as drawn (``rlnb.viz.insidelegend``), as ``compare``'s is."""

import io
import re

import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from rlnb.viz import plots
from rlnb.viz.draw import note
from tests.support.histories import hand_history

LONG = "学習率 sweep — αβγ run with a rather long descriptive name №xxx"
"""60 characters, CJK among them: drawn as escapes where no font has them, six times as wide."""


def inside(box, axes) -> bool:
    return axes.x0 <= box.x0 and box.x1 <= axes.x1 and axes.y0 <= box.y0 and box.y1 <= axes.y1


@pytest.mark.parametrize("draw", ["metric", "grad_norm"])
def test_a_long_named_series_legend_stays_inside_the_users_axes_and_leaves_them_their_width(draw):
    """``plots.metric(h, LONG, ax=ax, ema=0.5)`` on a 4 × 3 in constrained figure: the legend of "LONG (raw)" and
    "LONG (EMA 0.5)" ran 511 px past the axes, and the layout squashed the axes to a sliver to hold it; a Muon run's
    gradient norms on a 3 × 3 grid's panel: seven entries, taller than the axes."""
    if draw == "metric":
        figure = Figure(figsize=(4, 3), layout="constrained")
        ax = figure.add_subplot()
        plots.metric(pd.DataFrame({"step": range(20), LONG: [i / 20 for i in range(20)]}), LONG, ax=ax, ema=0.5)
    else:  # a Muon run's three norms, raw and smoothed, and the clip threshold: seven entries on a grid's panel
        figure = Figure(figsize=(6.4, 4.8))
        ax = figure.subplots(3, 3)[1, 1]
        norms = {"grad_norm": 1.0, "grad_norm_muon": 0.8, "grad_norm_adam": 0.5, "grad_clip_norm": 1e6}
        plots.grad_norm(pd.DataFrame({"step": range(20), "learning_rate": 1e-3, **norms, "loss": 1.0}), ax=ax, ema=0.9)
        figure.tight_layout()
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    box = ax.get_legend().get_window_extent(canvas.get_renderer())
    assert inside(box, ax.bbox), (box.extents.round(), ax.bbox.extents.round())
    assert ax.bbox.width >= (0.6 if draw == "metric" else 0.2) * figure.bbox.width
    figure.savefig(io.BytesIO(), format="png", bbox_inches="tight")
    assert inside(ax.get_legend().get_window_extent(canvas.get_renderer()), ax.bbox)


@pytest.mark.parametrize("layout", ["tight_layout", "constrained"])
def test_a_note_of_why_nothing_is_drawn_is_broken_into_lines_inside_the_users_small_axes(layout):
    """An all-NaN loss on the middle panel of a 3 × 3 grid (137 px wide): "'loss' is NaN at every step" was wrapped
    to the figure (matplotlib's ``wrap``), one line 177 px wide, over the panel's y label and ticks."""
    figure = Figure(figsize=(6.4, 4.8), layout="constrained" if layout == "constrained" else None)
    ax = figure.subplots(3, 3)[1, 1]
    plots.loss(hand_history([float("nan")] * 5), ax=ax)
    if layout == "tight_layout":
        figure.tight_layout()
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    (text,) = [t for t in ax.texts if "NaN" in t.get_text()]
    box = text.get_window_extent(canvas.get_renderer())
    assert inside(box, ax.bbox), (box.extents.round(), ax.bbox.extents.round())
    assert text.get_text().replace("\n", " ") == "'loss' is NaN at every step"
    figure.set_size_inches(12.8, 9.6)  # a larger figure: on one line again
    canvas.draw()
    assert text.get_text() == "'loss' is NaN at every step"


def test_a_note_cut_on_a_small_panel_is_whole_again_when_the_figure_grows():
    """A note is wrapped from what it says at each draw, not from its last draw's lines: a name cut on a 3 × 3 grid's
    panel ("'completi…_policy'") stayed cut on a 20 × 12 in figure, where the axes are 456 px wide."""
    said = "'completions/distinct_mean_of_the_policy' is NaN at every step"
    figure = Figure(figsize=(6.4, 4.8))
    ax = figure.subplots(3, 3)[1, 1]
    note(ax, said)
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    (text,) = ax.texts
    assert "…" in text.get_text()
    figure.set_size_inches(20, 12)
    canvas.draw()
    assert text.get_text().replace("\n", " ") == said


def test_a_cjk_name_in_a_note_is_cut_on_whole_characters_then_escaped():
    """The escapes of a CJK name no font has are made after the cut: cut after, "'\\u5b66\\…2\\u7387'" kept half of
    two escapes."""
    name = "学習率" * 5
    figure = Figure(figsize=(6.4, 4.8))
    ax = figure.subplots(3, 3)[1, 1]
    plots.metric(pd.DataFrame({"step": range(5), name: [float("nan")] * 5}), name, ax=ax)
    canvas = FigureCanvasAgg(figure)
    for size in [(6.4, 4.8), (3, 2), (40, 9)]:
        figure.set_size_inches(*size)
        canvas.draw()
        (text,) = ax.texts
        assert "\\" not in re.sub(r"\\u[0-9a-f]{4}", "", text.get_text()), (size, text.get_text())
    assert text.get_text().startswith(repr(name).encode("unicode_escape").decode("ascii")), text.get_text()


def test_a_notes_own_line_breaks_are_kept():
    figure = Figure(figsize=(6, 4))
    ax = figure.add_subplot()
    note(ax, "line one\nline two")
    FigureCanvasAgg(figure).draw()
    assert ax.texts[0].get_text() == "line one\nline two"

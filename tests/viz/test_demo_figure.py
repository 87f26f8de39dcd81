"""The README's figure (``rlnb demo``'s overview of an RL run): nothing written over the lines. The gradient norm rises
over such a run and ended under a legend pinned to the upper right; the GRPO loss's "≈0" note sat inside its axes,
where a loss that wanders about 0 crosses any place. Measured on the drawn figure: text and legend extents against
the lines' display points and paths."""

import os

os.environ.setdefault("MPLBACKEND", "Agg")

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from rlnb.viz import plots
from tests.support.histories import hand_history, optim_metrics

STEPS = 40


def demo_like():
    """40 RL steps shaped as the demo's: the norm climbing to its peak near the end, the loss ±7e-11 about 0."""
    rng = np.random.default_rng(0)
    t = np.arange(1, STEPS + 1)
    norms = 0.0005 + 0.009 * (t / STEPS) ** 1.3 + rng.normal(0, 0.0004, STEPS)
    losses = 5e-11 * np.sin(t / 6) + rng.normal(0, 2e-11, STEPS)
    h = hand_history(list(losses), norms=list(norms), metrics=optim_metrics)
    for step in t:
        h.log(int(step), reward=step / STEPS * 0.65, **{"completions/mean_length": 1.0})
    return h


@pytest.fixture(scope="module")
def drawn():
    """The overview, drawn once for both tests (each place is read after the draw), and its renderer."""
    fig = plots.overview(demo_like())
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return fig, canvas.get_renderer()


def test_the_gradient_norm_legend_leaves_the_curve_and_its_peak_clear(drawn):
    fig, renderer = drawn
    ax = next(a for a in fig.axes if a.get_title() == "gradient norm (pre-clip)")
    box = ax.get_legend().get_window_extent(renderer)
    line = ax.get_lines()[0]
    path = line.get_transform().transform_path(line.get_path())
    assert box.count_contains(path.vertices) == 0 and not path.intersects_bbox(box, filled=False)


def test_the_grpo_loss_note_is_crossed_by_no_line_and_covers_no_other_panel(drawn):
    fig, renderer = drawn
    ax = fig.axes[-1]
    assert ax.get_title() == "GRPO loss (secondary)"
    (note,) = [t for t in ax.texts if t.get_text().startswith("≈0 by construction")]
    box = note.get_window_extent(renderer)
    line = ax.get_lines()[0]
    path = line.get_transform().transform_path(line.get_path())
    assert box.count_contains(path.vertices) == 0 and not path.intersects_bbox(box, filled=False)
    assert fig.bbox.contains(box.x0, box.y0) and fig.bbox.contains(box.x1, box.y1)  # inside the picture
    for other in fig.axes[:-1]:
        assert not box.overlaps(other.get_tightbbox(renderer)), other.get_title()
    for text in (ax.title, ax.xaxis.label, *ax.get_xticklabels()):
        assert not box.overlaps(text.get_window_extent(renderer)), text.get_text()

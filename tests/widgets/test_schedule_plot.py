"""The builder's schedule plot drawn at a fixed size with fixed margins: every text of it inside the figure and clear of
the others, whatever the schedule and the rate, and drawn with as few text layouts as one draw needs."""

import itertools
from unittest import mock

import pytest
from matplotlib.text import Text

from rlnb.params.schedule import MAX_STEPS, Schedule
from rlnb.widgets import describe

CASES = [
    ("constant", 0, 100, 1e-3),  # a flat line: its y axis a narrow band around the rate
    ("cosine", 3, 30, 0.05),
    ("linear", 100, 1000, 0.00125),
    ("cosine", MAX_STEPS, MAX_STEPS, 1e-9),  # the longest title; x to 1.1e6, an offset text under the axis
    ("linear", 0, 99_999, 12345.678),  # six-digit step numbers; a rate with an offset text over the axis
    ("cosine", 0, 1, 1e300),
    ("constant", 7, 7, 100.0),
    ("linear", 0, MAX_STEPS, 0.123456789),
    ("constant", 205_718, 208_720, 8.02e6),  # the step number 240000 at the axes' right end
    ("linear", 0, 466_419, 1.5e-9),  # six-digit step numbers: five of them overlap in this width
]


def texts(figure):
    """The texts a person sees on ``figure``, drawn: each tick label in view, the labels, title and offset texts."""
    ax = figure.axes[0]
    shown = []
    for axis, (low, high) in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
        shown += [t.label1 for t in axis.get_major_ticks() if min(low, high) <= t.get_loc() <= max(low, high)]
        shown += [axis.label, axis.offsetText]
    return [t for t in [*shown, ax.title] if t.get_visible() and t.get_text()]


@pytest.mark.parametrize(("kind", "warmup", "total", "rate"), CASES)
def test_every_text_of_the_schedule_plot_is_inside_it_and_clear_of_the_others(kind, warmup, total, rate):
    """Fixed margins in place of constrained layout (two thirds of the plot's CPU): a label cut at the figure's edge,
    or laid over another, would say a wrong number."""
    figure = describe.schedule_figure(Schedule(kind, warmup_steps=warmup, total_steps=total), rate)
    describe.png(figure)
    renderer = figure.canvas.get_renderer()
    page = figure.bbox
    boxes = {f"{t.get_text()!r}": t.get_window_extent(renderer) for t in texts(figure)}
    assert len(boxes) >= 7, boxes  # two tick labels an axis at least, the labels and the title
    for name, box in boxes.items():
        assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1, (name, box)
    for (a, one), (b, other) in itertools.combinations(boxes.items(), 2):
        assert not one.overlaps(other), (a, one, b, other)
    assert figure.axes[0].get_title() == f"{kind}, warmup {warmup}"


def test_a_schedule_plot_lays_its_texts_out_for_one_draw_only():
    """Constrained layout measured every text twice more before the draw: ~3x the text layouts of one draw."""
    layouts, real = [], Text._get_layout
    with mock.patch.object(Text, "_get_layout", lambda self, r: layouts.append(self) or real(self, r)):
        describe.schedule_png.cache_clear()
        describe.schedule_png(Schedule("cosine", warmup_steps=3, total_steps=30), 0.05)
    assert 0 < len(layouts) <= 40, len(layouts)  # 94 with constrained layout

"""A live view's first draw: what it makes (ticks, text layouts) is what it draws, and each tick label reads as the
axis' formatter wrote it. Counted on the figure objects: counts are the same under any load, where times are not."""

import os

os.environ.setdefault("MPLBACKEND", "Agg")

from unittest import mock

import numpy as np
import pytest
from matplotlib.axis import Tick
from matplotlib.text import Text
from matplotlib.transforms import Bbox

from rlnb.viz.live import LiveView
from rlnb.viz.livefig import Panel
from tests.support.histories import hand_history


def counted(cls, name):
    """``cls.name`` patched to count its calls: (the patch, the counts)."""
    real, calls = getattr(cls, name), [0]

    def counting(self, *args, **kwargs):
        calls[0] += 1
        return real(self, *args, **kwargs)

    return mock.patch.object(cls, name, counting), calls


def in_view(axis):
    """The axis' major tick locations inside its view limits: the ticks it draws."""
    low, high = sorted(axis.get_view_interval())
    locs = axis.get_majorticklocs()
    return locs[(locs >= low - 1e-9 * (high - low)) & (locs <= high + 1e-9 * (high - low))]


def drawn_labels(axis):
    """The labels of the major ticks that ``axis`` draws."""
    drawn, locs = set(in_view(axis)), axis.get_majorticklocs()
    return [
        tick.label1
        for tick, loc in zip(axis.majorTicks, locs, strict=False)
        if loc in drawn and tick.label1.get_visible()
    ]


@pytest.fixture(scope="module")
def history():
    """30 steps, a loss, a gradient norm, a constant learning rate and a logged reward at each."""
    h = hand_history([1.0 / (i + 1) for i in range(30)], norms=[0.3] * 30)
    for i in range(30):
        h.log(i + 1, reward=0.1 * i)
    return h


def test_a_live_views_first_draw_makes_only_the_major_ticks_it_draws(history):
    """Each panel's axes made a major tick for each location its locator gave, one past each end of the axis
    included, and some at the limits of the empty axes it was made with (0 to 1), before its data came: 51 ticks
    for a view of four panels, 30 of them drawn, each tick five artists (two texts)."""
    ticks, made = counted(Tick, "__init__")
    with ticks:
        view = LiveView(history, metrics=("reward",), every=0)
    view.close()
    for name, panel in view.panels.items():
        for axis in (panel.ax.xaxis, panel.ax.yaxis):
            drawn = in_view(axis)
            assert len(drawn) >= 3, (name, axis.axis_name)
            assert len(axis.majorTicks) == len(drawn), (name, axis.axis_name, axis.get_majorticklocs(), drawn)
    assert made[0] == sum(len(in_view(a)) + 1 for p in view.panels.values() for a in (p.ax.xaxis, p.ax.yaxis))


def test_a_live_views_first_draw_lays_each_text_out_about_twice(history):
    """matplotlib placed each panel's title itself at each whole draw: it measured every tick label of the y axis
    to keep the title clear of them (43 more text layouts, 153 for a view's first draw). Each text drawn is laid
    out to be measured, and to be drawn: about two layouts a text."""
    layouts, laid = counted(Text, "_get_layout")
    real, shown = Text.draw, []

    def draw(self, renderer):
        if self.get_visible() and self.get_text():
            shown.append(self)
        return real(self, renderer)

    with layouts, mock.patch.object(Text, "draw", draw):
        LiveView(history, metrics=("reward",), every=0).close()
    assert len(shown) <= 50 and laid[0] <= 2.2 * len(shown), (laid[0], len(shown))


def log_panel(y):
    """A live panel of one line through ``y`` at steps 1, 2, ..., on a log axis, drawn."""
    panel = Panel("loss")
    panel.line("loss", color="C0")
    panel.set("loss", np.arange(1.0, len(y) + 1), np.array(y))
    panel.set_log(True)
    panel.set_limits(len(y), min(y), max(y))
    panel.render()
    return panel


def test_a_log_panels_tick_labels_are_powers_of_ten_inside_the_figure():
    """A log axis' tick labels are TeX (``$\\mathdefault{10^{-3}}$``): the ticks made before the first draw had
    been set to be drawn as written, as the panel's title is, and drew their TeX raw, off the figure's left edge."""
    panel = log_panel([1e-6, 1e-3, 1.0, 1e3])
    renderer, labels = panel.canvas.get_renderer(), drawn_labels(panel.ax.yaxis)
    assert panel.ax.get_yscale() == "log" and len(labels) >= 3
    for label in labels:
        assert label.get_text().startswith("$\\mathdefault{10^{") and label.get_parse_math(), label
        box = label.get_window_extent(renderer)
        assert Bbox.intersection(box, panel.figure.bbox) is not None and box.x0 >= 0, (label, box)


def test_a_log_panel_of_figures_near_the_smallest_float_is_scaled_to_them():
    """On a log axis, a loss of 1e-300 made the lower limit (a margin under it) 0: matplotlib refused it with a
    warning and kept the limits it had. The axis reaches to 1e-150 (and a margin), as to 1e150 above."""
    for y in ([1e-300, 1e-250, 3.0], [1e-300, 1e-310]):
        low, high = log_panel(y).ax.get_ylim()
        assert 0 < low <= 1e-150 and high >= max(y), (y, low, high)

"""What the plots draw for a seed without the figure, a logged NaN, a long figure name, an EMA, and an overview's
eval accuracy: read off the Axes (lines, legend texts, notes)."""

import math
import os

os.environ.setdefault("MPLBACKEND", "Agg")

import numpy as np

from rlnb.viz import plots
from tests.support.histories import hand_history

NAN = math.nan


def legend_texts(ax):
    legend = ax.get_legend()
    return [] if legend is None else [t.get_text() for t in legend.get_texts()]


def test_a_seed_that_never_logged_y_is_not_counted_in_its_group():
    """Seed 1 logs no ``eval/accuracy``: the group is seed 0 alone, one solid line, not "(2 seeds)" dashed."""
    a = hand_history([1.0, 0.9, 0.8, 0.7], norms=[1.0] * 4, config={"label": "adam", "seed": 0})
    b = hand_history([1.1, 1.0, 0.9, 0.8], norms=[1.0] * 4, config={"label": "adam", "seed": 1})
    for i in range(1, 5):
        a.log(i, **{"eval/accuracy": 0.1 * i})
    ax = plots.compare([a, b], y="eval/accuracy")
    solid = [line for line in ax.lines if line.get_label() == "adam"]
    assert len(solid) == 1
    assert np.allclose(solid[0].get_xydata(), [[1, 0.1], [2, 0.2], [3, 0.3], [4, 0.4]])
    assert [line.get_label() for line in ax.lines if line.get_linestyle() == "--"] == []
    assert legend_texts(ax) == ["adam"]


def test_the_live_log_axis_says_how_many_points_at_or_below_0_it_does_not_draw():
    """A reward of 0 at 7 of 10 steps and a loss of either sign: on the log axis the panel says what it leaves out."""
    from rlnb.viz.live import LiveView

    rewards = [0.0, 0.0, 0.5, 0.0, 0.0, 0.0, 0.25, 0.0, 0.75, 0.0]
    losses = [0.01, -0.02, 0.003, -0.01, 0.02, -0.004, 0.001, -0.03, 0.002, 0.01]
    h = hand_history(losses, norms=[1.0] * 10)
    for i, r in enumerate(rewards):
        h.log(i + 1, reward=r)
    view = LiveView(h, metrics=("reward",))
    try:
        assert view.panels["reward"].note.get_text() == ""
        view.log_toggle.value = True
        assert view.panels["reward"].ax.get_yscale() == "log"
        assert view.panels["reward"].note.get_text() == "7 of 10 points ≤ 0 not drawn (log y)"
        assert view.panels["loss"].note.get_text() == "4 of 10 points ≤ 0 not drawn (log y)"
        assert view.panels["grad_norm"].note.get_text() == ""
        view.log_toggle.value = False
        assert view.panels["reward"].note.get_text() == ""
    finally:
        view.close()

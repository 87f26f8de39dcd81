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


def _points(line):
    return [(x, None if math.isnan(y) else round(y, 9)) for x, y in np.asarray(line.get_xydata()).tolist()]


def test_a_figure_logged_nan_is_a_gap_in_the_static_plots_as_in_the_steps_table():
    """``log(2, acc=nan)`` between 0.2 and 0.6: the steps table holds NaN at step 2, and the line breaks there, in
    ``plots.metric`` and in ``overview(metrics=...)``, where it joined 0.2 to 0.6 as if step 2 were healthy."""
    h = hand_history([1.0, 0.9, 0.8], norms=[1.0] * 3)
    h.log(1, acc=0.2)
    h.log(2, acc=NAN)
    h.log(3, acc=0.6)
    h.log(2, reward=0.5)  # a log() call without acc: no point of acc
    assert [None if math.isnan(v) else v for v in h.steps["acc"]] == [0.2, None, 0.6]
    assert _points(plots.metric(h, "acc").lines[0]) == [(1, 0.2), (2, None), (3, 0.6)]
    panel = next(ax for ax in plots.overview(h, metrics=("acc",)).axes if ax.get_title() == "acc")
    assert _points(panel.lines[0]) == [(1, 0.2), (2, None), (3, 0.6)]


def test_a_nan_logged_again_at_a_step_keeps_its_number_in_the_table_the_plots_and_the_live_view():
    """``log(2, acc=0.5)`` then ``log(2, acc=nan)``: the steps table keeps 0.5 (the last number logged at the step),
    ``plots.metric`` draws it, and the live view too, where it drew a gap."""
    from rlnb.viz.live import LiveView

    h = hand_history([1.0, 0.9, 0.8], norms=[1.0] * 3)
    view = LiveView(h, metrics=("acc",))
    try:
        h.log(1, acc=0.2)
        h.log(2, acc=0.5)
        h.log(3, acc=0.6)
        h.log(2, acc=NAN)
        view.refresh()
        assert h.steps["acc"].tolist() == [0.2, 0.5, 0.6]
        assert _points(plots.metric(h, "acc").lines[0]) == [(1, 0.2), (2, 0.5), (3, 0.6)]
        assert _points(view.panels["acc"].lines["acc"]) == [(1, 0.2), (2, 0.5), (3, 0.6)]
        h.log(4, acc=NAN)  # logged NaN at a step of its own: a gap in the live view as in the table
        view.refresh()
        assert _points(view.panels["acc"].lines["acc"])[-1] == (4, None)
    finally:
        view.close()


def test_a_long_figure_names_y_label_is_cut_to_the_axes_height_as_its_title_to_their_width():
    """A 76-character name: its y label ran past the figure's top and bottom (-106..478 px of 350 px)."""
    from rlnb.viz.draw import png

    name = "eval/held_out_accuracy_on_the_addition_task_sums_up_to_nine_greedy_pass_at_1"
    h = hand_history([0.5] * 3, norms=[1.0] * 3)
    h.log(1, **{name: 1.0})
    for ax in (plots.metric(h, name), plots.overview(h, metrics=(name,)).axes[-1]):
        png(ax.figure)
        label = ax.yaxis.label
        assert "…" in label.get_text()
        assert label.get_text().startswith("eval/") and label.get_text().endswith("pass_at_1")
        box = label.get_window_extent(ax.figure.canvas.get_renderer())
        assert box.y0 >= 0 and box.y1 <= ax.figure.bbox.height


def test_a_figure_name_past_the_bound_is_refused_naming_its_length_and_the_bound():
    """``history.log`` took a name of any length: 30,000 characters made ``plots.metric`` take 10 s."""
    import pytest

    from rlnb.history.figures import MAX_NAME

    h = hand_history([0.5], norms=[1.0])
    h.log(1, **{"x" * MAX_NAME: 1.0})  # at the bound: taken
    with pytest.raises(ValueError, match=f"figure name of {MAX_NAME + 1} characters.*at most {MAX_NAME}"):
        h.log(1, **{"y" * (MAX_NAME + 1): 1.0})
    assert list(h.logged.columns) == ["step", "x" * MAX_NAME]


def test_an_ema_names_its_raw_and_smoothed_lines_in_a_legend():
    """``plots.loss(h, ema=0.9)`` drew a faint and a bold line and said nowhere which was which."""
    h = hand_history([1.0, 0.8, 0.9, 0.7], norms=[1.0] * 4)
    h.log(1, acc=0.1)
    h.log(2, acc=0.3)
    assert legend_texts(plots.loss(h, ema=0.9)) == ["loss (raw)", "loss (EMA 0.9)"]
    assert legend_texts(plots.metric(h, "acc", ema=0.5)) == ["acc (raw)", "acc (EMA 0.5)"]
    assert legend_texts(plots.loss(h)) == []


def test_the_overviews_eval_accuracy_is_decimated_and_its_infinities_marked():
    """The eval accuracy beside the reward was a bare ``ax.plot``: 20,000 square markers for 20,000 evaluations,
    and no mark on the frame for an infinite one."""
    from rlnb.tasks import EVAL_ACCURACY
    from rlnb.viz.lines import MAX_POINTS

    h = hand_history([0.5] * 2, norms=[1.0] * 2)
    n = 3 * MAX_POINTS
    for step in range(1, n + 1):
        h.log(step, reward=0.5, **{EVAL_ACCURACY: step / n})
    h.log(n + 1, **{EVAL_ACCURACY: math.inf})
    ax = plots.overview(h).axes[0]
    (acc,) = [line for line in ax.lines if line.get_label() == "eval accuracy (held out)"]
    assert len(acc.get_xdata()) <= MAX_POINTS and acc.get_marker() in ("", "None", None)
    assert "eval accuracy (held out) +inf (1 step, on the frame)" in legend_texts(ax)
    few = hand_history([0.5] * 2, norms=[1.0] * 2)
    for step in (1, 2):
        few.log(step, reward=0.5, **{EVAL_ACCURACY: 0.25 * step})
    (acc,) = [line for line in plots.overview(few).axes[0].lines if line.get_label() == "eval accuracy (held out)"]
    assert acc.get_marker() == "s" and _points(acc) == [(1, 0.25), (2, 0.5)]


def test_a_nan_logged_after_a_number_at_a_step_is_no_repeated_step():
    """``log(2, x=2.0)`` then ``log(2, x=nan)``: the number is drawn, and the plot said "1 step logged more than
    once" given the History (the NaN row counted), where the logged table said nothing."""
    h = hand_history([1.0, 0.9, 0.8], norms=[1.0] * 3)
    for step, x in ((1, 1.0), (2, 2.0), (3, 3.0), (2, NAN)):
        h.log(step, x=x)
    for source in (h, h.logged):
        ax = plots.metric(source, "x")
        assert _points(ax.lines[0]) == [(1, 1.0), (2, 2.0), (3, 3.0)]
        assert [t.get_text() for t in ax.texts if "more than once" in t.get_text()] == []


def test_a_plot_given_a_history_reads_its_logged_nans_without_walking_every_row(monkeypatch):
    """Each panel walked every ``log()`` row in Python (``step_log.logged_since(0)``): an overview of 100k steps
    took twice its time. The rows where a NaN was logged are kept as they come."""
    from rlnb.history.steplog import StepLog

    h = hand_history([1.0, 0.9, 0.8], norms=[1.0] * 3)
    h.log(1, acc=0.2)
    h.log(2, acc=NAN)
    walks = []
    real = StepLog.logged_since
    monkeypatch.setattr(StepLog, "logged_since", lambda self, start: walks.append(start) or real(self, start))
    plots.overview(h, metrics=("acc",))
    assert walks == []
    assert _points(plots.metric(h, "acc").lines[0]) == [(1, 0.2), (2, None)]

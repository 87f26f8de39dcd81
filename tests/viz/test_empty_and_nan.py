"""What a plot says when it has nothing to draw: a comparison of no runs (or of a table that is no comparison), and a
figure that came only as NaN, which the plots called "not logged" though it was."""

import math
import os

os.environ.setdefault("MPLBACKEND", "Agg")

import pandas as pd
import pytest

import rlnb
from rlnb.history import History
from rlnb.viz import plots
from rlnb.viz.live import LiveView
from tests.support.histories import hand_history

NAN = math.nan


def texts(ax):
    return [t.get_text().replace("\n", " ") for t in ax.texts]


def test_a_comparison_of_no_runs_says_so_on_its_axes_as_an_empty_overview_does():
    """``plots.compare(rlnb.compare([]))`` drew bare axes, where ``plots.overview(History())`` says why."""
    assert texts(plots.compare(rlnb.compare([]))) == ["no runs to compare"]
    assert texts(plots.compare([])) == ["no runs to compare"]
    assert texts(plots.compare([History()])) == ["no steps in these runs yet"]
    assert texts(plots.compare([History()], y="reward")) == ["no steps in these runs yet"]


@pytest.mark.parametrize("table", ["logged", "steps", "nothing"])
def test_a_table_that_is_no_comparison_is_refused_naming_what_compare_takes(table):
    """``plots.compare(h.logged)`` of an empty history was a bare ``KeyError: 'run'``."""
    h = History()
    frame = {"logged": h.logged, "steps": h.steps, "nothing": pd.DataFrame()}[table]
    with pytest.raises(
        ValueError, match=r"by='run' is not a column of this table: plots\.compare takes rlnb\.compare\(\[h1, h2\]\)"
    ):
        plots.compare(frame)


def test_a_figure_logged_only_as_nan_is_said_so_not_called_unlogged():
    """A figure logged at every step, each time NaN, was "no 'acc' logged yet" in every plot."""
    h = hand_history([1.0, 2.0, 3.0])
    for step in (1, 2, 3):
        h.log(step, acc=NAN)
    h.log(3, other=1.0)  # a row of its own: acc is NaN there too, though not logged there
    assert texts(plots.metric(h, "acc")) == ["'acc' logged, all NaN"]
    assert texts(plots.overview(h, metrics=["acc"]).axes[2]) == ["'acc' logged, all NaN"]
    assert texts(plots.metric(h, "never")) == ["no 'never' logged yet"]
    view = LiveView(h, metrics=("acc",), every=0, loss=False, learning_rate=False)
    try:
        assert view.panels["acc"].note.get_text().replace("\n", " ") == "'acc' logged 3 times, all NaN"
    finally:
        view.close()


def test_a_reward_logged_only_as_nan_is_said_on_the_overviews_reward_panel():
    """An RL run's reward panel was bare axes when every reward was NaN."""
    h = hand_history([0.0, 0.0])
    h.log(1, reward=NAN)
    h.log(2, reward=NAN)
    assert texts(plots.overview(h).axes[0]) == ["'reward' logged, all NaN"]


def test_a_loss_nan_at_every_step_is_said_so_not_that_none_was_reported():
    """Every forward-backward reported a NaN loss: the plots said "no loss reported" and "no 'loss' logged"."""
    h = hand_history([NAN, NAN])
    assert texts(plots.loss(h)) == ["'loss' is NaN at every step"]
    assert texts(plots.metric(h, "loss")) == ["'loss' is NaN at every step"]
    assert texts(plots.compare([h])) == ["'loss' is NaN at every step of these runs"]
    view = LiveView(h, every=0)
    try:
        assert view.panels["loss"].note.get_text().replace("\n", " ") == "'loss' is NaN at every step"
    finally:
        view.close()


def test_a_figure_logged_out_of_step_order_is_drawn_in_step_order():
    """An evaluation logged late (step 5, then 2, 9, 1) was drawn in the order logged: a line going back and forth
    across the axes, where ``compare`` of the same run drew it by step."""
    h = hand_history([1.0, 2.0])
    for step in (5, 2, 9, 1):
        h.log(step, acc=float(step), reward=float(step))
    expected = [[1.0, 1.0], [2.0, 2.0], [5.0, 5.0], [9.0, 9.0]]
    assert plots.metric(h, "acc").lines[0].get_xydata().tolist() == expected
    assert plots.overview(h).axes[0].lines[0].get_xydata().tolist() == expected  # the reward panel
    assert plots.compare([h], y="acc").lines[0].get_xydata().tolist() == expected


@pytest.mark.parametrize("plot", ["metric", "overview", "compare", "ema", "string", "category"])
def test_a_figure_column_holding_text_is_refused_naming_the_column_and_step(plot):
    """A table read back from a file, or built by hand, whose figure holds a text: a bare "could not convert string
    to float: 'x'" naming neither the figure nor where."""
    acc = {"string": pd.array(["0.5", "0.6", "x"], dtype="string"), "category": pd.Categorical(["0.5", "0.6", "x"])}
    frame = pd.DataFrame({"run": "a", "seed": 0, "step": [1, 2, 3], "acc": acc.get(plot, [0.5, 0.6, "x"]), "reward": 1})
    draw = {
        "metric": lambda: plots.metric(frame, "acc"),
        "overview": lambda: plots.overview(frame.assign(loss=1.0, grad_norm=1.0, grad_norm_muon=NAN,
                                                        grad_norm_adam=NAN, grad_clip_norm=0.0), metrics=["acc"]),
        "compare": lambda: plots.compare(frame, y="acc"),
        "ema": lambda: plots.metric(frame, "acc", ema=0.5),
    }.get(plot, lambda: plots.metric(frame, "acc"))  # fmt: skip
    with pytest.raises(ValueError, match=r"^'acc' holds 'x' at step 3, not a number: plots draw numbers"):
        draw()
    assert plots.metric(frame[:2], "acc").lines[0].get_xydata().tolist() == [[1.0, 0.5], [2.0, 0.6]]  # texts of numbers


def test_a_live_view_draws_a_figure_logged_late_in_step_order():
    """The live view fed each logged point in the order logged: an evaluation logged late went back across the panel,
    where the static plots draw it by step."""
    h = hand_history([1.0, 2.0])
    for step in (5, 2):
        h.log(step, acc=float(step), reward=float(step), **{"eval/accuracy": step / 10})
    view = LiveView(h, metrics=("acc", "reward"), every=0, loss=False, learning_rate=False)
    try:
        for step in (9, 1):
            h.log(step, acc=float(step), reward=float(step), **{"eval/accuracy": step / 10})
        view.refresh()
        for name in ("acc", "reward"):
            assert view.panels[name].lines[name].get_xydata()[:, 0].tolist() == [1.0, 2.0, 5.0, 9.0]
        held_out = view.panels["reward"].lines["eval/accuracy"].get_xydata()[:, 0].tolist()
        assert held_out == [1.0, 2.0, 5.0, 9.0]
        assert plots.metric(h, "acc").lines[0].get_xydata()[:, 0].tolist() == [1.0, 2.0, 5.0, 9.0]
    finally:
        view.close()


@pytest.mark.parametrize(
    "call, field",
    [(lambda h: plots.metric(h, ["acc"]), "name"), (lambda h: plots.metric(h, 5), "name"),
     (lambda h: plots.compare([h], y=["loss"]), "y"), (lambda h: plots.compare([h], by=["run"]), "by"),
     (lambda h: plots.compare([h], y=None), "y")],
)  # fmt: skip
def test_a_figure_or_column_named_by_no_text_is_refused_naming_the_argument(call, field):
    """``plots.metric(h, ["acc"])`` and ``compare(by=["run"])`` were pandas' bare "unhashable type: 'list'", and
    ``plots.metric(h, 5)`` a panel saying "no 5 logged yet" (``overview`` and ``LiveView`` refuse such names)."""
    h = hand_history([1.0])
    h.log(1, acc=0.5)
    with pytest.raises(TypeError, match=rf"^{field} must be the name of a column \(a str\), got "):
        call(h)


@pytest.mark.parametrize(
    "draw",
    [
        lambda h, ema: plots.loss(h, ema=ema),
        lambda h, ema: plots.loss(h, None, ema),
        lambda h, ema: plots.grad_norm(h, ema=ema),
        lambda h, ema: plots.metric(h, "reward", ema=ema),
        lambda h, ema: plots.overview(h, ema=ema),
        lambda h, ema: plots.compare([h], ema=ema),
    ],
)
@pytest.mark.parametrize("ema", [2, "0.9", True])
def test_an_ema_out_of_range_is_refused_at_the_call_on_an_empty_history_too(draw, ema):
    """``plots.loss(h, ema=2)`` was drawn on an empty history and refused once it had a step: the check ran only
    where there was data to smooth (``LiveView(ema=2)`` refuses at once)."""
    with pytest.raises(ValueError, match=r"ema must be a number in \[0, 1\), got "):
        draw(History(), ema)

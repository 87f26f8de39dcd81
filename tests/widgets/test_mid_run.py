"""What the form and the panel do while a run goes: an edit the run cannot send, another panel's run on the session,
and what a step function returns. Widgets driven as a person would, through ``.value`` and ``.click()``, on real
local sessions of the tiny model, each step one real cross-entropy step that waits for the test's word."""

import re

import pytest

import rlnb
from rlnb.widgets import OptimizerBuilder, RunPanel
from rlnb.widgets.controls import INVALID
from tests.support.gated_steps import DEADLINE, Gate, text

pytestmark = pytest.mark.usefixtures("undrawn_live_view")  # reads no picture of the live view


@pytest.fixture
def gate():
    g = Gate()
    yield g
    for _ in range(10):  # a run the test left going ends
        g.release()


@pytest.fixture
def adam_local():
    s = rlnb.connect("local", model="tiny", optimizer="adam", record=False, device="cpu")
    yield s
    s.close()


@pytest.fixture
def muon_local():
    s = rlnb.connect("local", model="tiny", optimizer="muon", record=False, device="cpu")
    yield s
    s.close()


def test_an_invalid_edit_mid_run_is_not_sent_and_the_run_goes_on_with_the_last_valid_config(adam_local, gate):
    """A half-typed value during a run (beta1 = 1.5 on the way to 0.85) stopped the run: ``ValueError`` in the
    status line, the rest of the run thrown away."""
    panel = RunPanel(adam_local, step_fn=gate, every=0.05)
    b = panel.builder
    b.adam["learning_rate"].value = 2e-3
    assert panel.start(4)
    gate.called(1)
    b.adam["beta1"].value = 1.5
    assert "AdamParams.beta1 = 1.5 is invalid" in b.message.value and INVALID in b.adam["beta1"]._dom_classes
    said = text(panel.status)
    assert "your edit is not used until the form is valid (AdamParams.beta1 = 1.5 is invalid" in said
    assert said.endswith("the run goes on with the last valid config") and panel.running
    gate.release()
    gate.called(2)  # sent with the last valid config; the line says so still
    assert "1/4 done" in text(panel.status) and "your edit is not used" in text(panel.status)
    b.adam["beta1"].value = 0.85
    b.adam["learning_rate"].value = 1e-3  # valid again: sent from the next step
    assert "not used" not in text(panel.status) and "1/4 done" in text(panel.status)
    for k in (3, 4):
        gate.release()
        gate.called(k)
    gate.release()
    assert panel.join(DEADLINE) and panel.error is None and text(panel.status) == "step 4 · 4 done"
    assert [p.beta1 for p in gate.sent] == [0.9, 0.9, 0.85, 0.85] and adam_local.step == 4
    ops = adam_local.history.df
    sent = ops[(ops.kind == "optim-step") & (ops.status == "TRAINING_OPERATION_STATUS_COMPLETED")]
    assert list(sent.learning_rate) == pytest.approx([2e-3, 2e-3, 1e-3, 1e-3])
    panel.close()


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_the_schedule_line_keeps_the_runs_schedule_while_an_edit_is_not_used(adam_local, gate):
    """An invalid edit mid-run (total steps 0, on the way to 20) emptied the schedule line: the run went on with a
    schedule and rate it no longer showed."""
    panel = RunPanel(adam_local, step_fn=gate, every=0.05)
    b = panel.builder
    b.sched_kind.value, b.total.value, b.adam["learning_rate"].value = "cosine", 30, 2e-3
    assert text(panel.schedule_line) == "step 1 / 30 of the cosine schedule · lr 0.002"
    assert panel.start(3)
    gate.called(1)
    b.total.value = 0
    held = " · ⚠ the run's schedule: your edit is not used until the form is valid"
    assert not b.valid and text(panel.schedule_line) == "step 1 / 30 of the cosine schedule · lr 0.002" + held
    gate.release()
    gate.called(2)  # step 1 ran with the run's schedule; the line shows where step 2 is on it
    assert text(panel.schedule_line).startswith("step 2 / 30 of the cosine schedule · lr ")
    assert text(panel.schedule_line).endswith(held)
    b.total.value = 20  # valid again: taken from the next step, the line its
    line = text(panel.schedule_line)
    assert line.startswith("step 2 / 20 of the cosine schedule · lr ") and "⚠" not in line
    b.total.value = 0
    gate.release()
    gate.called(3)
    gate.release()
    assert panel.join(DEADLINE) and panel.error is None and adam_local.step == 3
    assert text(panel.schedule_line) == ""  # no run: the form's schedule, none while it is invalid
    b.total.value = 20
    assert text(panel.schedule_line).startswith("step 4 / 20 of the cosine schedule · lr ")
    panel.close()


def test_a_click_on_the_locked_tab_mid_run_is_put_back_and_the_run_goes_on(muon_local, gate):
    """A look at the "Adam (locked)" tab of a Muon session's panel during a run stopped the run: "stopped:
    ValueError — this session's optimizer is muon"."""
    panel = RunPanel(muon_local, step_fn=gate, every=0.05)
    b = panel.builder
    assert panel.start(2)
    gate.called(1)
    b.tabs.selected_index = 0  # a person clicks "Adam (locked)"
    assert b.kind == "muon" and b.tabs.selected_index == 1 and b.valid
    why = "put back to Muon: the Adam tab is locked (this session's optimizer is muon); the run goes on with its config"
    assert why in text(panel.status) and f"⚠ {why}" in text(b.message) and panel.running
    assert "✗" not in text(b.message)  # a note, not an error of the form (review42c L1: red above "✓ valid")
    gate.release()
    gate.called(2)
    gate.release()
    assert panel.join(DEADLINE) and panel.error is None and text(panel.status) == "step 2 · 2 done"
    assert text(b.message) == "✓ valid"  # "the run goes on" was left after the run had ended
    assert muon_local.step == 2 and all(isinstance(p, rlnb.MuonParams) for p in gate.sent)
    b.tabs.selected_index = 0  # no run: the tab is shown, the builder invalid, saying why (as before)
    assert b.kind == "adam" and not b.valid and panel.step_button.disabled
    panel.close()


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_a_panel_made_while_another_panels_run_goes_says_it_waits_then_ready(adam_local, gate):
    """The panel cell run again while the old panel's run went: the new panel said "step 0 · ready", Step
    enabled; a click was refused only then."""
    old = RunPanel(adam_local, step_fn=gate, every=0.05)
    assert old.start(1)
    gate.called(1)
    new = RunPanel(adam_local, step_fn=gate, every=0.05)  # the same cell, run again
    said = "step 0 · waits: a run of another RunPanel is going on this session (was its cell run again?); Stop ends it"
    assert text(new.status) == said and new.step_button.disabled and new.run_button.disabled
    assert not new.stop_button.disabled  # the only Stop on screen reaches the old run
    new.step_button.click()
    assert not new.running and "a run of another RunPanel is going on this session" in text(new.status)
    gate.release()
    assert old.join(DEADLINE) and old.error is None
    assert text(new.status) == "step 1 · ready" and not new.step_button.disabled and new.stop_button.disabled
    assert old.start(1)  # a run of the old panel again: the new one waits again, then is ready
    gate.called(2)
    assert text(new.status).startswith("step 1 · waits: a run of another RunPanel") and new.step_button.disabled
    gate.release()
    assert old.join(DEADLINE) and text(new.status) == "step 2 · ready"
    new.step_button.click()
    gate.called(3)
    assert text(old.status).startswith("step 2 · waits: a run of another RunPanel")
    gate.release()
    assert new.join(DEADLINE) and new.error is None and adam_local.step == 3 and text(old.status) == "step 3 · ready"
    new.close()
    old.close()


@pytest.mark.parametrize(
    "returned, said",
    [
        (
            {"acc": "high"},
            "ValueError — step_fn's figures of step 1 were not logged (the step ran): acc must be a real",
        ),
        (0.5, "TypeError — step_fn must return None or a dict of figures to log"),
    ],
)
def test_a_figure_that_cannot_be_logged_names_the_step_function_and_the_step_that_ran(adam_local, gate, returned, said):
    """``{"acc": "high"}`` stopped the run with "history.log: acc must be a real number", naming a function the
    person never called; a bare number was said at the step before, as if the step that returned it had not run."""

    def step(session, params):
        gate.release()
        gate(session, params)
        return returned

    panel = RunPanel(adam_local, step_fn=step, every=0.05)
    assert panel.start(3) and panel.join(DEADLINE)
    assert adam_local.step == 1 and panel.progress.value == 1 and str(panel.error) in text(panel.status)
    assert text(panel.status).startswith(f"step 1 · stopped: {said}") and "history.log" not in text(panel.status)
    assert adam_local.history.logged.empty
    panel.close()


@pytest.mark.parametrize("expanded", ["no", 1, None, "False"])
def test_expanded_takes_a_bool_only(expanded):
    """``OptimizerBuilder(expanded="no")`` opened the form: any truthy value did."""
    with pytest.raises(TypeError, match=f"^expanded must be True or False, got {re.escape(repr(expanded))}$"):
        OptimizerBuilder(expanded=expanded)
    assert OptimizerBuilder(expanded=True).fold.selected_index == 0
    assert OptimizerBuilder().fold.selected_index is None

"""A cell's ``rl_step`` on a session while a RunPanel's run steps it: the run's step holds the session's turn
(``Session.stepping``), so the cell's step waits for it and each optim-step applies its own step's gradients; a Stop
clicked while the run waits for a cell's step ends the run before its step."""

import threading

import pytest

import rlnb
from rlnb.session import step_turn
from rlnb.tasks import StepReport, Task, rl_step
from rlnb.widgets import RunPanel
from tests.support.gated_steps import DEADLINE, Gate, step_held, text, wait_for

pytestmark = pytest.mark.usefixtures("undrawn_live_view")  # reads no picture of the live view

TASK = Task("bytes", ["ab", "cd"], lambda p, c: float(sum(map(ord, c)) % 7), max_tokens=3, group_size=4)


@pytest.fixture
def session():
    s = rlnb.connect("local", model="tiny", optimizer="adam", seed=0, record=False, device="cpu")
    yield s
    s.close()


class SplitStep:
    """A ``step_fn`` of one's own: a forward-backward, the test's word, then the optim-step (its gradient norm kept)."""

    def __init__(self) -> None:
        self.norms: list[float] = []
        self.submitted = threading.Event()
        self.go = threading.Event()

    def __call__(self, session, params):
        session.forward_backward([rlnb.samples.cross_entropy(list(b"the run's step"))])
        self.submitted.set()
        assert self.go.wait(DEADLINE), "the test let no step go"
        self.norms.append(session.optim_step(params).result().metrics["grad_norm"])


@pytest.mark.slow  # an RL step beside a run's step
def test_a_cells_rl_step_during_a_runs_step_waits_and_neither_loses_its_gradients(session):
    step = SplitStep()
    panel = RunPanel(session, step_fn=step, every=0.05)
    waits = threading.Event()
    real_turn = session.stepping

    def stepping(*args, **kwargs):  # the cell's rl_step asks for the turn: does it wait for the run's step?
        try:
            with real_turn(timeout=0):
                pass
        except rlnb.SessionBusy:
            waits.set()
        return real_turn(*args, **kwargs)

    reports: list[StepReport] = []
    cell = threading.Thread(target=lambda: reports.append(rl_step(session, TASK, {"learning_rate": 1e-2})), name="cell")
    assert panel.start(1)
    assert step.submitted.wait(DEADLINE)  # the run's forward-backward is in, its optim-step not yet
    session.stepping = stepping  # type: ignore[method-assign]
    fbs = len(session.history)
    cell.start()  # the cell's step goes on until it waits its turn (or, unkept, submits its forward-backward)
    wait_for(lambda: waits.is_set() or len(session.history) >= fbs + 2)
    step.go.set()
    assert panel.join(DEADLINE) and panel.error is None
    cell.join(DEADLINE)
    assert not cell.is_alive() and len(reports) == 1
    # unkept, the cell's optim-step applied the run's gradients with its own, and the run's applied none (norm 0)
    assert step.norms[0] > 0 and reports[0].grad_norm > 0
    assert session.step == 2


def test_a_stop_while_the_run_waits_for_a_cells_step_ends_the_run_before_its_step(session):
    step = SplitStep()
    panel = RunPanel(session, step_fn=step, every=0.05)
    with session.stepping():  # a cell's step in progress
        assert panel.start(3)
        panel.stop()
    assert panel.join(DEADLINE) and panel.error is None
    assert not step.submitted.is_set() and session.step == 0
    assert text(panel.status).startswith("step 0 · stopped early after 0 of 3")


@pytest.mark.slow  # real steps after the wait
def test_a_run_waiting_for_a_cells_step_says_so_then_says_it_runs_once_it_has_the_turn(session):
    """The line said ``running: 0/2 done …`` while the run waited for a cell's step, for up to 600 s."""
    gate = Gate()
    panel = RunPanel(session, step_fn=gate, every=0.05)
    with session.stepping():  # a cell's step in progress, on the kernel's thread
        assert panel.start(2)
        wait_for(lambda: "waiting for the session" in text(panel.status))
        said = text(panel.status)
        # a click on Stop waits for the cell to end (the kernel is busy): the line does not offer it
        assert "another cell's step holds it (the run goes on when that cell ends; at most 600 s)" in said
        assert "Stop" not in said
        assert panel.running and not panel.stop_button.disabled and panel.step_button.disabled
    gate.called(1)  # the run has the turn: the line is the run's again
    assert text(panel.status).startswith("running: 0/2 done")
    gate.release()
    gate.called(2)
    gate.release()
    assert panel.join(DEADLINE) and panel.error is None
    assert text(panel.status).startswith("step 2 · 2 done") and session.step == 2


def test_a_run_that_waits_past_its_step_timeout_stops_with_session_busy_in_the_line_and_error(session):
    gate = Gate()
    panel = RunPanel(session, step_fn=gate, every=0.05, step_timeout=DEADLINE)
    with step_held(session, "my-worker"):  # a step on a thread of the person's own
        assert panel.start(2)
        wait_for(lambda: "waiting for the session: a step on thread 'my-worker' holds it" in text(panel.status))
        assert f"(at most {DEADLINE:g} s; Stop ends the wait)" in text(panel.status)
        panel.stop()
        assert panel.join(DEADLINE) and panel.error is None
        panel.step_timeout = 0.2
        assert panel.start(2) and panel.join(DEADLINE)
    assert isinstance(panel.error, rlnb.SessionBusy) and gate.sent == []
    said = text(panel.status)
    assert said.startswith("step 0 · stopped: SessionBusy") and "in the middle of a step on thread 'my-worker'" in said
    assert not panel.step_button.disabled and session.step == 0


def test_stop_ends_a_wait_for_a_cells_step_at_once(session):
    """A Stop while the run waited said "stopping after this step …" and the run went on waiting, up to 600 s."""
    gate = Gate()
    panel = RunPanel(session, step_fn=gate, every=0.05)
    with session.stepping():  # the cell's step goes on past the Stop
        assert panel.start(3)
        wait_for(lambda: "waiting for the session" in text(panel.status))
        panel.stop_button.click()
        assert panel.join(DEADLINE), "the run still waited for the cell's step"
        assert panel.error is None and gate.sent == []
        assert text(panel.status).startswith("step 0 · stopped early after 0 of 3")
        assert not panel.step_button.disabled and panel.stop_button.disabled


def test_a_session_closed_while_the_run_waits_ends_the_run_at_once_saying_so(session):
    gate = Gate()
    panel = RunPanel(session, step_fn=gate, every=0.05)
    with session.stepping():
        assert panel.start(3)
        wait_for(lambda: "waiting for the session" in text(panel.status))
        session.close()
        assert panel.join(DEADLINE), "the run still waited for the cell's step"
    assert isinstance(panel.error, rlnb.SessionClosed) and gate.sent == []
    assert "stopped: SessionClosed" in text(panel.status)


@pytest.mark.parametrize("step_timeout", [-1, float("nan"), True, "600"])
def test_a_bad_step_timeout_is_refused_naming_it_when_the_panel_is_made(session, step_timeout):
    with pytest.raises(ValueError, match=r"step_timeout must be None \(no limit\) or a number of seconds >= 0"):
        RunPanel(session, step_fn=Gate(), step_timeout=step_timeout)


@pytest.mark.slow  # real steps after the wait
def test_the_step_after_a_wait_sends_the_form_and_the_schedule_as_they_are_when_it_gets_the_turn(session):
    """The run's next params were fixed before it waited: an edit of the form during the wait (up to 600 s) was not
    sent, and after the cell's step the schedule's rate was the one of the step before (the session's step read
    before the cell stepped it on)."""
    gate = Gate()
    panel = RunPanel(session, step_fn=gate, every=0.05)
    b = panel.builder
    b.sched_kind.value, b.total.value, b.adam["learning_rate"].value = "cosine", 4, 2e-3
    with session.stepping():  # a cell's own step, on the kernel's thread
        assert panel.start(1)
        wait_for(lambda: "waiting for the session" in text(panel.status))
        session.forward_backward([rlnb.samples.cross_entropy(list(b"the cell's step"))])
        session.optim_step(rlnb.AdamParams(learning_rate=1e-3)).result()
        b.adam["learning_rate"].value = 1e-3  # a valid edit while the run waits
        assert "waiting for the session" in text(panel.status)  # the edit's redraw keeps saying so
    gate.called(1)
    gate.release()
    assert panel.join(DEADLINE) and panel.error is None
    assert gate.sent[0].learning_rate == pytest.approx(b.params_at(1).learning_rate)  # step 1 of 4 at 1e-3
    assert gate.sent[0].learning_rate < 1e-3
    assert text(panel.status).startswith("step 2 · 1 done")


def test_closing_the_panel_while_its_run_waits_for_a_cells_step_ends_the_wait_and_closes(session):
    """``panel.close()`` in the cell that holds the session's step stopped the run, then waited 60 s for a run that
    waited for that cell, and raised ``TimeoutError``, the panel left open."""
    gate = Gate()
    panel = RunPanel(session, step_fn=gate, every=0.05)
    with session.stepping():
        assert panel.start(3)
        wait_for(lambda: "waiting for the session" in text(panel.status))
        panel.close(timeout=DEADLINE)
        assert not panel.running and panel.error is None and gate.sent == []
    with pytest.raises(RuntimeError, match="this RunPanel is closed"):
        panel.start(1)


def test_a_bad_step_timeout_set_on_the_panel_is_refused_naming_it(session):
    """Set after the panel was made, a bad one stopped the next run with ``ValueError: timeout must be ...``."""
    panel = RunPanel(session, step_fn=Gate())
    with pytest.raises(ValueError, match=r"step_timeout must be None \(no limit\) or a number of seconds >= 0"):
        panel.step_timeout = -1
    panel.step_timeout = 5
    assert panel.step_timeout == 5.0
    panel.step_timeout = None
    assert panel.step_timeout is None


@pytest.mark.slow  # real steps after the wait
def test_join_in_the_cell_whose_step_the_run_waits_for_is_refused_at_once(session):
    """``panel.join()`` inside ``with session.stepping():`` waited for a run that waited for that block: the kernel hung
    for join's deadline (600 s), then got False."""
    gate = Gate()
    panel = RunPanel(session, step_fn=gate, every=0.05)
    with session.stepping():
        assert panel.start(1)
        wait_for(lambda: "waiting for the session" in text(panel.status))
        with pytest.raises(RuntimeError, match="waits for the step this thread holds"):
            panel.join(DEADLINE)
        assert panel.running
    gate.called(1)  # the block ended: the run has its turn
    gate.release()
    assert panel.join(DEADLINE) and panel.error is None and session.step == 1


@pytest.mark.slow  # half a second for the run to hear the Stop
def test_a_close_in_the_block_the_run_waits_for_ends_the_wait_though_the_run_hears_the_stop_late(session, monkeypatch):
    """A close (or a Stop, then ``join()``) in the cell that holds the step: its join saw the run still waiting for
    this thread before the run heard the Stop, and raised ``RuntimeError`` as if it joined a run left waiting."""
    monkeypatch.setattr(step_turn, "WAIT_SLICE", 0.5)  # the run hears the Stop up to half a second late
    panel = RunPanel(session, step_fn=Gate(), every=0.05)
    with session.stepping():
        assert panel.start(3)
        wait_for(lambda: panel.waits_on is threading.main_thread())
        panel.close(timeout=DEADLINE)
    assert not panel.running and panel.error is None

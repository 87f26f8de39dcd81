"""A cell's ``rl_step`` on a session while a RunPanel's run steps it: the run's step holds the session's turn
(``Session.stepping``), so the cell's step waits for it and each optim-step applies its own step's gradients; a Stop
clicked while the run waits for a cell's step ends the run before its step."""

import threading

import pytest

import rlnb
from rlnb.tasks import StepReport, Task, rl_step
from rlnb.widgets import RunPanel
from tests.support.gated_steps import DEADLINE, text, wait_for

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

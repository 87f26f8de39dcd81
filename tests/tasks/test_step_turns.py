"""Two threads stepping one session (a RunPanel's run and a cell, two ``threading`` workers): each ``rl_step`` is one
step whose gradients its own optim-step applies (``Session.stepping``); a wait for the other's step has a deadline."""

import re
import threading

import httpx
import pytest

import rlnb
from rlnb.tasks import StepReport, Task, rl_step
from tests.support.fake_api import BASE, FAST_POLL, KEY, FakeAPI
from tests.support.gated_steps import DEADLINE, step_held, wait_for

TASK = Task("bytes", ["ab", "cd"], lambda p, c: float(sum(map(ord, c)) % 7), max_tokens=3, group_size=4)
PARAMS = rlnb.AdamParams(learning_rate=1e-2)


def connect() -> rlnb.Session:
    return rlnb.connect("local", optimizer="adam", model="tiny", seed=0, device="cpu", record=False)


@pytest.mark.slow  # two sessions, four RL steps
def test_two_threads_rl_steps_on_one_session_each_apply_their_own_gradients():
    with connect() as alone, alone.stepping():  # the same two steps one after the other (re-entrant: rl_step in it)
        expected = [rl_step(alone, TASK, PARAMS, seed=s).grad_norm for s in (1, 2)]
    assert min(expected) > 0
    with connect() as session:
        fbs: list[str] = []
        asked: list[str] = []
        reports: dict[int, StepReport] = {}
        real_fb, real_turn = session._forward_backward_built, session.stepping  # how rl_step sends each piece

        def stepping(*args, **kwargs):
            asked.append(threading.current_thread().name)
            return real_turn(*args, **kwargs)

        def other_step() -> None:
            reports[2] = rl_step(session, TASK, PARAMS, seed=2)

        other = threading.Thread(target=other_step, name="other")

        def forward_backward(*args, **kwargs):
            op = real_fb(*args, **kwargs)
            fbs.append(threading.current_thread().name)
            if len(fbs) == 1:  # the first step's: the other starts, and this one goes on once the other's
                other.start()  # forward-backward is in (before this one's optim-step), or the other waits its turn
                wait_for(lambda: len(fbs) == 2 or "other" in asked)
            return op

        session._forward_backward_built, session.stepping = forward_backward, stepping  # type: ignore[method-assign]
        reports[1] = rl_step(session, TASK, PARAMS, seed=1)
        other.join(DEADLINE)
        assert not other.is_alive()
        assert fbs == ["MainThread", "other"]
        # interleaved, the first optim-step applied both forward-backwards' gradients and the second none (norm 0)
        assert [reports[1].grad_norm, reports[2].grad_norm] == pytest.approx(expected, rel=1e-4)
        assert session.step == 2


def remote() -> rlnb.Session:
    return rlnb.connect(BASE, api_key=KEY, transport=httpx.MockTransport(FakeAPI()), record=False, **FAST_POLL)


@pytest.mark.parametrize("open_session", [connect, remote], ids=["local", "remote"])
def test_a_step_that_waits_past_its_deadline_names_the_thread_in_the_middle_of_its_step(open_session):
    with open_session() as session:
        with step_held(session, "rlnb-run-panel"):
            words = f"session {session.id} is in the middle of a step on thread 'rlnb-run-panel'"
            with pytest.raises(rlnb.SessionBusy, match=re.escape(words)), session.stepping(timeout=0.05):
                pass
            with pytest.raises(ValueError, match="timeout must be None"), session.stepping(timeout=-1):
                pass
        with session.stepping(timeout=0), session.stepping(timeout=0):  # free again; re-entrant on one thread
            pass


def test_rl_step_waits_for_another_threads_step_at_most_its_step_timeout_and_sends_nothing():
    """``rl_step`` waited the fixed 600 s (``STEP_WAIT``) for another thread's step: a caller could not set it."""
    with connect() as session, step_held(session, "cell"):
        with pytest.raises(rlnb.SessionBusy, match="in the middle of a step on thread 'cell'"):
            rl_step(session, TASK, PARAMS, step_timeout=0.05)
        assert len(session.history) == 0 and session.step == 0  # nothing sampled, nothing sent


@pytest.mark.parametrize("step_timeout", [-1, float("nan"), True, "5"])
def test_a_bad_step_timeout_is_refused_naming_it_before_anything_is_sent(step_timeout):
    with connect() as session:
        with pytest.raises(ValueError, match=r"step_timeout must be None \(no limit\) or a number of seconds >= 0"):
            rl_step(session, TASK, PARAMS, step_timeout=step_timeout)
        assert len(session.history) == 0 and session.step == 0

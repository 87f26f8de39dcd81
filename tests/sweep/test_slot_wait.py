"""A trial waiting for a session slot (429) through the remote client's own retries: the client's ``Retry-After``
waits end at the trial's ``slot_timeout`` and wake on its sweep's stop (``RetryPolicy.pause``)."""

import threading

import httpx
import pytest

import rlnb
from rlnb import wire
from rlnb.errors import RateLimitError
from rlnb.remote.client import APIClient, ClientOptions
from rlnb.remote.retry import RetryPolicy
from rlnb.remote.waiting import PollOptions
from rlnb.sweep import sweep
from tests.support.fake_api import NOW
from tests.support.stopped_sweeps import stopped_sweep

BASE = rlnb.AdamParams(learning_rate=3e-3, weight_decay=0.0)
SESSION = {"id": "s-1", "status": wire.SessionStatus.STOPPED.value, "base_model": "m", "model_resources_id": "mr-1",
           "created_by": "me", "created_at": NOW, "updated_at": NOW}  # fmt: skip


def session_cap(asked: list[httpx.Request], retry_after: str):
    """A provider whose one session slot stays taken: 429 to every request, asking for ``retry_after`` seconds."""

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(request)
        return httpx.Response(429, headers={"Retry-After": retry_after}, json={"error": {"message": "cap reached"}})

    return answer


@pytest.mark.parametrize(
    ("retry_after", "retries"),
    [("2", {}), ("60", {}), ("60", {"max_retries": 3}), ("60", {"client": ClientOptions(max_retries=3)})],
    ids=["retry-after-2", "retry-after-60", "max_retries", "client-options-max_retries"],
)
def test_the_clients_retry_after_waits_end_at_the_slot_timeout_and_the_reason_counts_each_request(
    tmp_path, retry_after, retries
):
    """With the client's default retries, slot_timeout=0.3 and Retry-After: 2 failed after 10 s (6 requests) saying
    "429 to each of 1 tries"; Retry-After: 60 could hold a try 300 s."""
    asked: list[httpx.Request] = []
    provider = httpx.MockTransport(session_cap(asked, retry_after))
    trials = sweep(BASE, steps=1, target="http://rl.test", transport=provider, slot_timeout=0.1, runs_dir=tmp_path,
                   progress=False, **retries)  # fmt: skip
    assert list(trials.status) == ["FAILED"], trials.reason.tolist()
    reason = trials.reason[0]
    assert "no session slot within slot_timeout=0.1 s" in reason, reason
    assert f"answered 429 to each of {len(asked)} requests" in reason, (len(asked), reason)
    assert len(asked) < 6  # no retry was sent after the slot_timeout passed


def test_a_stop_set_while_the_client_waits_out_a_retry_after_ends_the_trial_stopped(tmp_path):
    """A sweep's stop set at 1 s took 20 s to take effect with Retry-After: 4 (60: minutes): the client's retry sleep
    never looked at it."""
    asked: list[httpx.Request] = []
    first = threading.Event()
    answer = session_cap(asked, "60")

    def provider(request: httpx.Request) -> httpx.Response:
        first.set()
        return answer(request)

    trials = stopped_sweep(BASE, httpx.MockTransport(provider), first, "http://rl.test", runs_dir=tmp_path)
    assert list(trials.status) == ["STOPPED"], trials.reason.tolist()
    assert trials.reason[0] == "stopped while waiting for a session"
    assert len(asked) == 1


def test_a_retry_called_off_by_the_policys_pause_raises_the_last_answer_at_once():
    asked: list[httpx.Request] = []
    waits: list[float] = []
    policy = RetryPolicy(pause=lambda seconds: waits.append(seconds) or True)
    client = APIClient("http://rl.test", transport=httpx.MockTransport(session_cap(asked, "7")), retry=policy)
    with pytest.raises(RateLimitError, match=r"cap reached.*called off \(RetryPolicy\.pause\)"):
        client.supported_models()
    assert waits == [7.0] and len(asked) == 1


def test_the_stops_that_clean_up_never_ask_the_pause():
    """A pause that calls retries off (a trial past its slot_timeout) must not leave what a failed start created
    running: the cleanup stops retry as before."""
    answers = iter([httpx.Response(503, headers={"Retry-After-Ms": "1"}), httpx.Response(200, json=SESSION)])
    asked: list[str] = []

    def provider(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        return next(answers)

    client = APIClient(
        "http://rl.test", transport=httpx.MockTransport(provider), retry=RetryPolicy(pause=lambda s: True)
    )
    client.stop_session("s-1", reconnect_until=float("inf"))
    assert len(asked) == 2


def test_a_users_own_pause_is_asked_by_a_trial_opening_its_session_and_calls_its_retries_off(tmp_path):
    """A sweep's ``retry=RetryPolicy(pause=...)`` was replaced by the trial's own wait, for the session's every call:
    the user's pause was never asked, and a retry it called off was sent."""
    asked: list[httpx.Request] = []
    waits: list[float] = []
    mine = RetryPolicy(pause=lambda seconds: waits.append(seconds) or True)
    trials = sweep(BASE, steps=1, target="http://rl.test", transport=httpx.MockTransport(session_cap(asked, "0.05")),
                   slot_timeout=0.2, runs_dir=tmp_path, progress=False, retry=mine)  # fmt: skip
    assert list(trials.status) == ["FAILED"], trials.reason.tolist()
    assert waits and set(waits) == {0.05}, waits
    assert len(asked) <= len(waits) + 1  # one request per try (a retry it allowed: 6), the last one past the deadline
    assert "called off (RetryPolicy.pause)" in trials.reason[0], trials.reason[0]


@pytest.mark.parametrize("pause", [5, "sleep", True])
def test_a_pause_that_is_no_function_is_refused_naming_it(pause):
    """``RetryPolicy(pause=5)`` was taken, and failed at the first retry ("'int' object is not callable"), in the
    thread that polls or sends a session's operations."""
    with pytest.raises(TypeError, match=r"^pause must be None or a function of the seconds to wait, got "):
        RetryPolicy(pause=pause)
    with pytest.raises(TypeError, match=r"^pause must be None or a function of the seconds to wait, got "):
        PollOptions(pause=pause)  # it failed at the first poll of a start, after the model resource was made


def test_once_the_session_is_open_its_calls_wait_through_the_users_own_pause():
    """After the session opened, its every call's retry slept (``time.sleep``): the user's pause was gone."""
    from rlnb.sweep.executors import _ThreadControl
    from rlnb.sweep.slot import SlotWait

    waits: list[float] = []
    wait = SlotWait(
        _ThreadControl(threading.Event(), None, None), end=0.0, user=lambda seconds: waits.append(seconds) or True
    )
    wait.opened = True
    assert wait(0.25) is True and waits == [0.25]  # its True calls the retry off, past the slot deadline or not

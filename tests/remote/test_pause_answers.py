"""What a ``pause`` (``RetryPolicy``'s, ``PollOptions``') answers: True calls the retry (or the start) off, False or
None goes on, a numpy bool as a bool; anything else is a ``TypeError`` naming ``pause`` (read by its truth value, a 0
went on and a "no" called the retry off)."""

import httpx
import numpy as np
import pytest

from rlnb import wire
from rlnb.errors import RateLimitError, RlnbError
from rlnb.remote.backend import RemoteBackend
from rlnb.remote.client import APIClient
from rlnb.remote.retry import RETRYING, RetryPolicy
from tests.support.fake_api import BASE, FAST_POLL, FakeAPI, error

MODELS = {"data": [], "object": "list"}
REFUSED = r"^pause must return True \(call it off\), False or None \(go on\), got "


def client(pause, asked: list[int | None]) -> APIClient:
    """A client whose first request is answered 429 (Retry-After 0.01 s), the next 200; ``asked`` gets the status
    each pause was asked to wait for (``RETRYING``)."""
    answers = iter([error(429, "cap reached", **{"Retry-After": "0.01"}), httpx.Response(200, json=MODELS)])

    def seen(seconds: float):
        asked.append(RETRYING.get())
        return pause(seconds)

    policy = RetryPolicy(pause=seen)
    return APIClient(BASE, transport=httpx.MockTransport(lambda request: next(answers)), retry=policy)


@pytest.mark.parametrize("answer", [None, False, np.False_], ids=["None", "False", "numpy-False"])
def test_a_pause_answering_false_or_none_lets_the_retry_go(answer):
    asked: list[int | None] = []
    assert client(lambda seconds: answer, asked).supported_models().data == []
    assert asked == [429] and RETRYING.get() is None  # told which status it waits for, then reset


@pytest.mark.parametrize("answer", [True, np.True_], ids=["True", "numpy-True"])
def test_a_pause_answering_true_calls_the_retry_off(answer):
    with pytest.raises(RateLimitError, match=r"called off \(RetryPolicy\.pause\)"):
        client(lambda seconds: answer, []).supported_models()


class BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("repr exploded")


@pytest.mark.parametrize("answer", [0, 1.0, "no", "False", BadRepr()])
def test_a_pause_answering_no_bool_is_refused_naming_it(answer):
    """A 0 went on, and "no" or "False" (true as a str) called the retry off; an answer whose repr() raises was
    that RuntimeError, not the refusal."""
    with pytest.raises(TypeError, match=REFUSED):
        client(lambda seconds: answer, []).supported_models()


def test_a_poll_pause_answering_no_bool_is_refused_naming_it_and_what_the_start_made_is_stopped():
    api = FakeAPI(ready_after=3)
    with pytest.raises(TypeError, match=REFUSED + "'no'"):
        RemoteBackend.connect(BASE, transport=httpx.MockTransport(api), pause=lambda seconds: "no", **FAST_POLL)
    assert [r["status"] for r in api.resources.values()] == [wire.ModelResourcesStatus.STOPPED.value]


def test_a_poll_pause_answering_numpy_true_calls_the_start_off():
    api = FakeAPI(ready_after=3)
    with pytest.raises(RlnbError, match=r"called off \(PollOptions\.pause\)"):
        RemoteBackend.connect(BASE, transport=httpx.MockTransport(api), pause=lambda seconds: np.True_, **FAST_POLL)

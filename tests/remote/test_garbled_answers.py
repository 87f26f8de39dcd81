"""Answers a proxy garbles: a 2xx to an operation POST or poll whose envelope cannot be read (truncated, HTML, no id),
and a 3xx without a ``Location``."""

import httpx
import pytest

import rlnb
from rlnb.remote.client import APIClient
from tests.support.fake_api import BASE, FAST_POLL, KEY, FakeAPI, quick

GARBLED = {
    "truncated": b'{"id": "op-',
    "a proxy's page": b"<html>502 Bad Gateway</html>",
    "no id": b'{"status": "TRAINING_OPERATION_STATUS_PENDING"}',
}


def session_garbling(fake: FakeAPI, times: int, body: bytes = GARBLED["truncated"], **retries: int) -> rlnb.Session:
    """A session on ``fake`` whose first ``times`` answers to an optim-step POST are ``body`` (the fake took it)."""
    rid = fake.add_resource({"adam": {}})
    left = [times]

    def handler(request: httpx.Request) -> httpx.Response:
        response = fake(request)
        if request.method == "POST" and request.url.path.endswith("/operations/optim-step") and left[0]:
            left[0] -= 1
            return httpx.Response(200, content=body)
        return response

    return rlnb.connect(BASE, api_key=KEY, transport=httpx.MockTransport(handler), model_resources_id=rid,
                        ready_timeout=5, record=False, **FAST_POLL, **quick(retries))  # fmt: skip


@pytest.mark.parametrize("body", GARBLED.values(), ids=GARBLED.keys())
def test_an_unreadable_answer_to_an_operation_post_is_asked_again_with_its_idempotency_key(body):
    """The server took the optim-step and ran it, while rlnb recorded it FAILED ("200 response is not a valid
    Operation"): the weights moved a step the history never saw."""
    fake = FakeAPI(ready_after=1)
    with session_garbling(fake, 1, body) as s:
        assert s.optim_step(rlnb.AdamParams(learning_rate=1e-3)).result(timeout=10).step == 1
    posts = fake.calls("POST", "optim-step")
    assert len(posts) == 2 and len({r.headers["Idempotency-Key"] for r in posts}) == 1
    assert [sess["step"] for sess in fake.sessions.values()] == ["1"]  # ran once


def test_an_answer_unreadable_every_time_fails_saying_the_operation_may_run():
    fake = FakeAPI(ready_after=1)
    with session_garbling(fake, 99, max_retries=2) as s, pytest.raises(rlnb.OperationFailed) as info:
        s.optim_step(rlnb.AdamParams(learning_rate=1e-3)).result(timeout=10)
    said = info.value.message
    assert "not a valid Operation" in said and "may run this optim-step" in said and "asked 2 more times" in said
    assert said.count("POST https://rl.test/") == 1 and len(fake.calls("POST", "optim-step")) == 3


def session_garbling_polls(fake: FakeAPI, times: int, **retries: int) -> rlnb.Session:
    """A session on ``fake`` whose first ``times`` answers to an operation's poll are a proxy's page with a 200."""
    rid = fake.add_resource({"adam": {}})
    left = [times]

    def handler(request: httpx.Request) -> httpx.Response:
        response = fake(request)
        if request.method == "GET" and "/operations/" in request.url.path and left[0]:
            left[0] -= 1
            return httpx.Response(200, content=GARBLED["a proxy's page"])
        return response

    return rlnb.connect(BASE, api_key=KEY, transport=httpx.MockTransport(handler), model_resources_id=rid,
                        ready_timeout=5, record=False, **FAST_POLL, **quick(retries))  # fmt: skip


def test_an_unreadable_poll_answer_is_polled_again():
    """One garbled poll failed the operation ("polling failed: ... not JSON") while the server ran it on."""
    fake = FakeAPI(ready_after=1)
    with session_garbling_polls(fake, 2) as s:
        assert s.optim_step(rlnb.AdamParams(learning_rate=1e-3)).result(timeout=10).step == 1


def test_a_poll_answer_unreadable_every_time_fails_after_max_retries_in_a_row():
    fake = FakeAPI(ready_after=1)
    with session_garbling_polls(fake, 99, max_retries=2) as s, pytest.raises(rlnb.OperationFailed) as info:
        s.optim_step(rlnb.AdamParams(learning_rate=1e-3)).result(timeout=10)
    assert "polling failed" in info.value.message and "3 answers in a row could not be read" in info.value.message
    assert len(fake.calls("GET", "/operations/")) == 3


@pytest.mark.parametrize("status", [301, 302, 304, 307])
def test_a_3xx_without_a_location_is_a_status_error(status):
    """A 302 (or 304) without ``Location`` (a captive portal, a proxy's) raised httpx's bare ``KeyError: 'location'``
    out of the client: no ``APIError`` for ``connect``'s clean-up, a sweep's row said "KeyError"."""
    answer = httpx.MockTransport(lambda request: httpx.Response(status, text="<html>moved</html>"))
    with APIClient(BASE, KEY, transport=answer, max_retries=0) as client, pytest.raises(rlnb.APIStatusError) as info:
        client.supported_models()
    assert info.value.status_code == status and "moved" in str(info.value)

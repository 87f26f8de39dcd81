"""What a hostile (or newer) server puts around its answers — headers no datetime holds, compressed bodies,
statuses rlnb does not know — and a transport that raises what no API error is: nothing hangs, nothing
fills the memory, the server's word is kept."""

import json
import threading
from collections.abc import Callable

import httpx
import pytest

import rlnb
from rlnb import samples
from rlnb.remote.client import APIClient
from rlnb.remote.retry import RetryPolicy
from tests.support.fake_api import BASE, FAST_POLL, KEY, FakeAPI, quick

Handler = Callable[[httpx.Request], httpx.Response]
BATCH = [samples.cross_entropy([1, 2, 3])]


def session_on(fake: FakeAPI, wrap: Callable[[Handler], Handler]) -> rlnb.Session:
    """A session on ``fake``, every request going through ``wrap(fake)``."""
    rid = fake.add_resource({"adam": {}})
    return rlnb.connect(
        BASE, api_key=KEY, transport=httpx.MockTransport(wrap(fake)), model_resources_id=rid, ready_timeout=5,
        operation_timeout=20, record=False, **FAST_POLL, **quick({}),
    )  # fmt: skip


def first_poll(answer: httpx.Response) -> Callable[[Handler], Handler]:
    """The first GET of an operation gets ``answer``; everything else goes to the fake."""
    done = threading.Event()

    def wrap(fake: Handler) -> Handler:
        def handler(request: httpx.Request) -> httpx.Response:
            if request.method == "GET" and "/operations/" in request.url.path and not done.is_set():
                done.set()
                return answer
            return fake(request)

        return handler

    return wrap


@pytest.mark.parametrize("date", ["Mon, 01 Jan 99999 00:00:00 GMT", "Fri, 31 Dec 9999999999999999 23:59:59 GMT"])
def test_a_retry_after_date_no_datetime_holds_is_backoff_not_a_dead_poll_thread(date):
    """``Retry-After: <a year past 9999>`` raised ValueError / OverflowError from the stdlib inside the send path:
    the poll thread died, and the operation waited for ever (``operation_timeout`` no longer applied)."""
    s = session_on(FakeAPI(ready_after=1), first_poll(httpx.Response(503, headers={"Retry-After": date})))
    assert s.forward_backward(BATCH).result(timeout=10).loss == 2.5
    assert RetryPolicy().delay(0, httpx.Headers({"retry-after": date})) <= 0.5  # the backoff
    s.close()


def test_a_date_header_no_datetime_holds_leaves_the_clock_alone():
    """The server's clock (``Date``) read after a lost create raised OverflowError out of ``connect``."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"data": []}, headers={"Date": "Fri, 31 Dec 9999999999999999 23:59:59 GMT"})

    with APIClient(BASE, KEY, transport=httpx.MockTransport(handler)) as client:
        client.supported_models()
        assert client.server_time(1000.0) == 1000.0


def test_a_poll_that_raises_what_no_api_error_is_fails_its_operation_and_polling_goes_on():
    """An injected transport's own error (here a RuntimeError) in a poll ended the poll thread: that operation
    and every later one of the session waited for ever."""

    def wrap(fake: Handler) -> Handler:
        def handler(request: httpx.Request) -> httpx.Response:
            if request.method == "GET" and request.url.path.endswith("/op-3"):
                raise RuntimeError(f"the proxy broke (Bearer {KEY})")
            return fake(request)

        return handler

    s = session_on(FakeAPI(ready_after=1), wrap)
    first = s.forward_backward(BATCH)
    with pytest.raises(rlnb.OperationFailed) as info:
        first.result(timeout=10)
    assert "RuntimeError: the proxy broke" in str(info.value) and KEY not in str(info.value)
    assert s.forward_backward(BATCH).result(timeout=10).loss == 2.5  # the poller lives on
    s.close()

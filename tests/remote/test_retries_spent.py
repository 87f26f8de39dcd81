"""A call whose retries are spent says so, not that its deadline passed: the backoff it would wait next is never waited
(review42a L3: "after 6 attempts; the call's deadline (20 s) passed", an ``APITimeoutError`` and an operation's
``TIMEOUT``, when the deadline was far)."""

import time

import httpx
import pytest

import rlnb
from rlnb.remote.client import APIClient, RetryPolicy
from tests.support.fake_api import BASE, KEY


def reset(request: httpx.Request) -> httpx.Response:
    raise httpx.ReadError("connection reset by peer", request=request)


@pytest.mark.parametrize("retries", [0, 2])
def test_a_call_out_of_retries_before_its_deadline_is_a_connection_error_not_a_timeout(retries):
    """Waits of 1 s, 2 s, ... (a ``pause`` that waits none of them, so the clock stays put): the retries' fit in the
    deadline; the one after the last try, never waited, would pass it."""
    waited: list[float] = []

    def pause(seconds: float) -> bool:
        waited.append(seconds)
        return False  # not called off

    retry = RetryPolicy(max_retries=retries, initial_delay=1.0, max_delay=30.0, jitter=0.0, pause=pause)
    deadline = 2.0**retries - 0.5
    with (
        APIClient(BASE, KEY, transport=httpx.MockTransport(reset), deadline=deadline, retry=retry) as c,
        pytest.raises(rlnb.APIConnectionError) as info,
    ):
        c.supported_models()
    assert len(waited) == retries  # every retry was made
    assert type(info.value) is rlnb.APIConnectionError, info.value
    assert "deadline" not in str(info.value) and "connection reset by peer" in str(info.value)


def test_a_call_whose_next_wait_would_pass_its_deadline_still_says_so():
    """With a retry left, a wait past the deadline ends the call as its deadline's."""
    retry = RetryPolicy(max_retries=3, initial_delay=5.0, max_delay=5.0, jitter=0.0)
    with (
        APIClient(BASE, KEY, transport=httpx.MockTransport(reset), deadline=1.0, retry=retry) as c,
        pytest.raises(rlnb.APITimeoutError, match=r"deadline \(1 s\) passed"),
    ):
        c.supported_models()


def test_a_last_try_cut_short_by_the_deadline_says_the_deadline_passed():
    """No retry left, and the deadline did pass (a server that never answers): that is said."""

    def slow(request: httpx.Request) -> httpx.Response:
        time.sleep(0.3)
        raise httpx.ReadTimeout("timed out", request=request)

    with (
        APIClient(BASE, KEY, transport=httpx.MockTransport(slow), deadline=0.2, retry=RetryPolicy(max_retries=0)) as c,
        pytest.raises(rlnb.APITimeoutError, match=r"deadline \(0.2 s\) passed"),
    ):
        c.supported_models()

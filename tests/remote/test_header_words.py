"""What the client makes of a server's words in its headers: a ``Retry-After`` that is no RFC 9110 delay-seconds
(``1_0``, ``+3``, ``٥``: Python's ``float`` takes them all) is no wait asked for, one that is an HTTP date is
measured on the server's clock (the answer's ``Date``), and a redirect whose ``Location`` is no URL is one clear error,
not a transient failure retried."""

import email.utils
import time

import httpx
import pytest

import rlnb
from rlnb.remote.client import APIClient
from rlnb.remote.retry import RetryPolicy
from tests.support.fake_api import BASE, KEY, error

BACKOFF = RetryPolicy(initial_delay=0.25, jitter=0.0)  # its first backoff is exactly 0.25 s

NOT_SECONDS = ["1_0", "+3", "٥", "3\u00a0", "1e1", "0x10", "inf", "nan", "3.", ".5", "1 0", "-5", ""]


@pytest.mark.parametrize("value", NOT_SECONDS)
@pytest.mark.parametrize("name", ["retry-after", "retry-after-ms"])
def test_a_retry_after_that_is_no_decimal_number_is_ignored(name, value):
    """``Retry-After: 1_0`` waited 10 s (``float`` takes underscores, a sign, non-ASCII digits, exponents)."""
    said = httpx.Headers({name: value.encode()})  # as the bytes come on the wire (UTF-8 text, decoded by httpx)
    assert said[name] == value and BACKOFF.delay(0, said) == 0.25
    assert BACKOFF.unheeded(httpx.Headers({name: (value + "000000").encode()})) == ""


@pytest.mark.parametrize(
    ("header", "seconds"),
    [({"retry-after": "10"}, 10.0), ({"retry-after": " 3 "}, 3.0), ({"retry-after": "0.5"}, 0.5),
     ({"retry-after-ms": "1500"}, 1.5), ({"retry-after-ms": "20.5"}, 0.0205)],
)  # fmt: skip
def test_a_retry_after_in_ascii_digits_is_obeyed(header, seconds):
    """Digits (a decimal fraction too, as the SDK takes it), with the spaces HTTP allows around a field value."""
    assert BACKOFF.delay(0, httpx.Headers(header)) == pytest.approx(seconds)


def test_a_429_asking_1_000_seconds_in_python_spelling_is_no_wait_named():
    """The final error said "the server asked to wait 1000 s" for ``Retry-After: 1_000``."""
    transport = httpx.MockTransport(lambda request: error(429, "busy", **{"retry-after": "1_000"}))
    retry = RetryPolicy(max_retries=1, initial_delay=0.001, max_delay=0.002)
    with APIClient(BASE, transport=transport, retry=retry) as client, pytest.raises(rlnb.RateLimitError) as info:
        client.supported_models()
    assert str(info.value).endswith(": 429 busy")


@pytest.mark.parametrize("location", ["http://[::1", "ht!tp://x", "https://rl.test:99999/v1", "http://exa mple/"])
@pytest.mark.parametrize("given", [False, True], ids=["transport", "http_client"])
def test_a_redirect_to_no_url_is_one_error_naming_the_status_and_the_location(location, given):
    """``Location: http://[::1`` was httpx's ``RemoteProtocolError``, retried 5 times as a transient failure, naming
    neither the status nor the header; ``ht!tp://x`` read as a redirect to ``https://rl.test/v1/rl/ht!tp:/x``."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(301, headers={"Location": location}, text="<html>Moved</html>")

    transport = httpx.MockTransport(handler)
    how = {"http_client": httpx.Client(transport=transport)} if given else {"transport": transport}
    with APIClient(BASE, KEY, **how) as client, pytest.raises(rlnb.APIStatusError) as info:
        client.supported_models()
    said = str(info.value)
    assert f"301 Moved Permanently: the server redirects to {location!r}, which is no URL" in said, said
    assert info.value.status_code == 301 and len(seen) == 1 and KEY not in said


def test_a_redirect_to_no_url_is_said_after_the_user_replaces_the_http_clients_event_hooks():
    """httpx's ``event_hooks = {...}`` setter dropped rlnb's check of ``Location``: ``http://[::1`` was httpx's
    ``RemoteProtocolError`` again, retried as a dropped connection, naming neither the status nor the header."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(301, headers={"Location": "http://[::1"}, text="<html>Moved</html>")

    http = httpx.Client(transport=httpx.MockTransport(handler))
    retry = RetryPolicy(max_retries=2, initial_delay=0.001, max_delay=0.002)
    with http, APIClient(BASE, KEY, http_client=http, retry=retry) as client:
        http.event_hooks = {"request": [], "response": [lambda response: None]}
        with pytest.raises(rlnb.APIStatusError) as info:
            client.supported_models()
    assert "301 Moved Permanently: the server redirects to 'http://[::1', which is no URL" in str(info.value)
    assert len(seen) == 1


@pytest.mark.parametrize("skew", [300.0, -300.0, 0.0], ids=["server ahead", "server behind", "same clock"])
def test_a_retry_after_date_is_measured_from_the_answers_date(skew):
    """A server whose clock ran 5 minutes ahead, asking to come back in 2 s by an HTTP date: rlnb read 302 s, retried
    on backoff at once and failed naming a wait never asked for; 5 minutes behind, it waited up to 60 s, not 2."""
    asked: list[float] = []
    now = time.time() + skew

    def answer(request: httpx.Request) -> httpx.Response:
        if asked:
            return httpx.Response(200, json={"data": []})
        dates = {"date": email.utils.formatdate(now, usegmt=True), "retry-after": email.utils.formatdate(now + 2)}
        return error(503, "maintenance, back in 2 s", **dates)

    retry = RetryPolicy(max_retries=1, pause=lambda seconds: asked.append(seconds) and False)
    with APIClient(BASE, KEY, transport=httpx.MockTransport(answer), retry=retry) as client:
        client.supported_models()
    assert asked == [2.0]


def test_a_retry_after_date_without_a_date_header_is_measured_on_this_machines_clock():
    said = httpx.Headers({"retry-after": email.utils.formatdate(time.time() + 30, usegmt=True)})
    assert 28 <= BACKOFF.delay(0, said) <= 30


def test_an_absurd_wait_is_named_as_more_than_a_week():
    """``Retry-After: 99999999999999999999999999`` read "the server asked to wait 100000000000000004764729344 s"."""
    for value in ["99999999999999999999999999", str(7 * 86400 + 1)]:
        said = BACKOFF.unheeded(httpx.Headers({"retry-after": value}))
        assert said == " (the server asked to wait more than a week before a retry, past max_retry_after, 60 s)"
    assert "wait 604799 s" in BACKOFF.unheeded(httpx.Headers({"retry-after": "604799"}))

"""What a user meets with the remote client: base URLs as they are pasted or read, proxies from the environment, an
http_client closed before the session."""

import contextlib
import email.utils
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

import rlnb
from rlnb import samples, wire
from rlnb.remote.client import APIClient
from rlnb.remote.retry import RetryPolicy
from rlnb.testing import ServerProcess, free_port
from tests.support.fake_api import BASE, FAST_POLL, KEY, FakeAPI, error
from tests.support.server import START_DEADLINE

BATCH = [samples.cross_entropy(list(b"a user's batch"))]


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        (" http://rl.test", "holds whitespace at position 0"),  # went to the relative URL "/ http://rl.test/v1/rl/..."
        ("http://rl.test\n", "holds whitespace at position 14"),  # httpx.InvalidURL, naming no field
        ("http://rl.test\u00a0", "holds whitespace"),  # a no-break space copied from a web page
        ("http://rl.test\u200b", r"holds an unprintable character \(U\+200B\)"),
        ("http://[::1:8000", r"is no URL \(Invalid IPv6 URL\)"),  # a bare ValueError("Invalid IPv6 URL")
        ("http://rl.test:99999", r"is no URL \(Port out of range"),
    ],
)
def test_a_base_url_with_whitespace_or_that_no_url_parser_takes_is_refused_naming_it(url, problem, monkeypatch):
    """``" http://host"`` passed the check (urlsplit strips the ends) and every call went to a relative URL, failed
    "missing an 'http://' protocol" after 6 tries, its create taken for one that may have acted; a trailing newline
    (a URL read from a file, or ``$TOGETHER_BASE_URL`` so set) raised httpx's ``InvalidURL`` naming no field."""
    sent: list[httpx.Request] = []
    transport = httpx.MockTransport(lambda request: sent.append(request) or httpx.Response(500))
    with pytest.raises(ValueError, match=rf"^the target \(the base_url\) {problem}"):
        rlnb.connect(url, api_key=KEY, transport=transport, record=False, max_retries=0)
    with pytest.raises(ValueError, match=rf"^base_url {problem}"):
        APIClient(url, api_key=KEY, transport=transport)
    monkeypatch.setenv("TOGETHER_BASE_URL", url)
    with pytest.raises(ValueError, match=rf"^TOGETHER_BASE_URL {problem}"):
        APIClient(api_key=KEY, transport=transport)
    assert not sent


@pytest.mark.parametrize(
    ("url", "sent_to"),
    [
        ("https://rl.test/", "https://rl.test/v1/rl/supported-models"),
        ("https://rl.test/proxy/", "https://rl.test/proxy/v1/rl/supported-models"),
        ("http://[::1]:8000", "http://[::1]:8000/v1/rl/supported-models"),
        ("HTTPS://RL.test", "https://rl.test/v1/rl/supported-models"),
    ],
)
def test_base_urls_as_users_write_them_reach_the_api_with_the_key(url, sent_to):
    """A trailing slash, a path prefix (a gateway), an IPv6 literal and an upper-case scheme are URLs all the same."""
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={"data": []})

    with APIClient(url, api_key=KEY, transport=httpx.MockTransport(answer)) as client:
        client.supported_models()
    assert [str(r.url) for r in sent] == [sent_to]
    assert sent[0].headers["Authorization"] == f"Bearer {KEY}"


@contextlib.contextmanager
def fake_proxy(status: bytes = b"200 OK", body: bytes = b'{"data": []}') -> Iterator[tuple[str, list[bytes]]]:
    """An HTTP proxy on loopback that answers every request itself (``status``, ``body``: an empty supported-models
    list), and keeps each request line."""
    lines: list[bytes] = []
    answer = b"HTTP/1.1 %s\r\ncontent-length: %d\r\n\r\n%s" % (status, len(body), body)
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                lines.append(conn.recv(65536).split(b"\r\n")[0])
                conn.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", lines
    finally:
        listener.close()


def test_the_proxy_the_environment_names_is_taken_as_httpx_and_the_sdk_take_it(monkeypatch):
    """rlnb gave httpx a transport of its own, and httpx then ignores ``HTTP_PROXY`` / ``HTTPS_PROXY``: behind a proxy
    that every other tool on the machine takes (the SDK too), rlnb went straight for the API and could not reach it.
    ``NO_PROXY`` still keeps a host off it."""
    with fake_proxy() as (proxy, lines):
        monkeypatch.setenv("HTTP_PROXY", proxy)
        with pytest.warns(rlnb.CleartextKeyWarning, match="rl.test:8000"):  # the key goes over plain http://
            client = APIClient("http://rl.test:8000", api_key=KEY, max_retries=0)
        with client:
            assert client.supported_models().data == []
        assert lines == [b"GET http://rl.test:8000/v1/rl/supported-models HTTP/1.1"]
        monkeypatch.setenv("NO_PROXY", "rl.test")
        with pytest.warns(rlnb.CleartextKeyWarning):
            client = APIClient("http://rl.test:8000", api_key=KEY, max_retries=0, timeout=2.0)
        with client, pytest.raises(rlnb.APIConnectionError) as info:  # no such host: straight there, not the proxy
            client.supported_models()
        assert len(lines) == 1 and "proxy" not in str(info.value)


def test_a_server_on_loopback_is_reached_directly_whatever_proxy_the_environment_names(monkeypatch):
    """A proxy's own loopback is not this machine's: with ``HTTP_PROXY`` set and no ``NO_PROXY``, a local ``rlnb serve``
    (``http://127.0.0.1:PORT``, ``localhost``) went through the proxy, which cannot reach it."""
    with fake_proxy() as (proxy, through), fake_proxy() as (local, direct):
        monkeypatch.setenv("HTTP_PROXY", proxy)
        for host in ("127.0.0.1", "localhost"):
            with APIClient(local.replace("127.0.0.1", host), api_key=KEY, max_retries=0) as client:
                assert client.supported_models().data == []
        assert through == [] and direct == [b"GET /v1/rl/supported-models HTTP/1.1"] * 2


def test_a_proxy_that_takes_no_connection_is_named_in_the_error_without_its_password(monkeypatch):
    """``HTTPS_PROXY`` pointing nowhere failed "ConnectError: [Errno 111] Connection refused", read as the API server's
    refusal; the error names the proxy now, its credentials masked."""
    with socket.create_server(("127.0.0.1", 0)) as closed:
        port = closed.getsockname()[1]
    monkeypatch.setenv("HTTPS_PROXY", f"http://proxyuser:proxy-password-1@127.0.0.1:{port}")
    client = APIClient("https://api.rl.test", api_key=KEY, max_retries=0)
    with client, pytest.raises(rlnb.APIConnectionError) as info:
        client.supported_models()
    said = str(info.value)
    assert f"through the proxy http://***@127.0.0.1:{port} that the environment names" in said
    assert "proxy-password-1" not in said and KEY not in said


@pytest.mark.parametrize(
    ("status", "said"),
    [(b"407 Proxy Authentication Required", r"407 .*\(the proxy http://\*\*\*@127\.0\.0\.1:\d+ that the environment "
      r"names answered this, not the API: it wants credentials \(or refused those in its URL\)"),
     (b"502 Bad Gateway", r"502 .*\(through the proxy http://\*\*\*@127\.0\.0\.1:\d+ that the environment names: a 502 "
      r"may be the proxy's own answer, not the API's\)"),
     (b"400 Bad Request", r"400 .*\(through the proxy http://\*\*\*@127\.0\.0\.1:\d+ that the environment names\)$")],
    ids=["407", "502", "400"],
)  # fmt: skip
def test_an_error_status_through_a_proxy_names_it_and_a_407_is_the_proxys_own(monkeypatch, status, said):
    """A proxy's own 407 or 502 read as the API's answer ("407 <html>Proxy Authentication Required</html>"): only an
    error with no response named the proxy."""
    with fake_proxy(status, b"<html>no</html>") as (proxy, lines):
        monkeypatch.setenv("HTTP_PROXY", proxy.replace("http://", "http://proxyuser:proxy-password-2@"))
        with pytest.warns(rlnb.CleartextKeyWarning):
            client = APIClient("http://rl.test:8000", api_key=KEY, max_retries=0)
        with client, pytest.raises(rlnb.APIStatusError, match=said) as info:
            client.supported_models()
    assert lines and "proxy-password-2" not in str(info.value)


def test_a_proxy_url_httpx_cannot_use_is_a_value_error_naming_where_it_comes_from(monkeypatch):
    """An ``ftp://`` proxy raised httpx's "Unknown scheme for proxy URL", naming neither the variable nor the fix."""
    monkeypatch.setenv("ALL_PROXY", "ftp://user:secret-pass@proxy.rl.test:21")
    with pytest.raises(ValueError, match=r"the proxy the environment names for all:// .*ftp://\*\*\*@proxy") as info:
        APIClient("https://api.rl.test", api_key=KEY)
    assert "secret-pass" not in str(info.value)


def test_a_session_whose_http_client_its_owner_closed_says_so_and_names_what_may_still_run(caplog):
    """``with httpx.Client() as http: s = rlnb.connect(..., http_client=http)``, then ``s`` used after the block:
    httpx's "RuntimeError: Cannot send a request, as the client has been closed" escaped ``close()``, which warned of
    nothing, left the session OPEN (so every later close raised it again) and its resource running."""
    fake = FakeAPI(ready_after=1)
    with httpx.Client(transport=httpx.MockTransport(fake)) as http:
        s = rlnb.connect(BASE, api_key=KEY, base_model="rlnb/tiny", http_client=http, record=False, **FAST_POLL)
    with pytest.raises(rlnb.OperationFailed, match="the http_client given to rlnb was closed"):
        s.forward_backward(BATCH).result(10)
    with pytest.raises(rlnb.APIError, match=r"/stop: the http_client given to rlnb was closed"):
        s.close()
    said = caplog.text
    assert f"could not stop session {s.backend.session_id}" in said
    assert f"could not stop model resource {s.backend.resource.id}" in said
    s.close()  # closed: nothing raised a second time
    assert [x["status"] for x in fake.sessions.values()] == ["TRAINING_SESSION_STATUS_RUNNING"]  # as the warning says


def test_a_closed_apiclient_says_it_was_closed_not_that_an_http_client_was_given():
    """Its own http client closed with it, a call after ``with APIClient(...) as c:`` said "the http_client given to
    rlnb was closed", though none was given."""
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json={"data": []}))
    with APIClient(BASE, api_key=KEY, transport=transport) as client:
        assert client.supported_models().data == []
    with pytest.raises(rlnb.APIError) as info:
        client.supported_models()
    said = str(info.value)
    assert said.endswith("/supported-models: this APIClient was closed (its close(), or the end of its with block)")
    assert info.value.sent is False


@pytest.mark.parametrize(
    "header",
    [{"retry-after": "3600"}, {"retry-after-ms": "3600000"}, {"retry-after": "an HTTP date an hour from now"}],
    ids=["seconds", "milliseconds", "http-date"],
)
def test_a_retry_after_past_max_retry_after_is_named_in_the_final_error(header):
    """A 429 asking for an hour was retried on backoff (as the SDK does) and failed "429 rate limited", without a word
    of the hour: the user retried at once, and was refused again."""
    if header.get("retry-after", "").startswith("an HTTP date"):
        header = {"retry-after": email.utils.formatdate(time.time() + 3600, usegmt=True)}
    sent: list[httpx.Request] = []
    transport = httpx.MockTransport(lambda request: sent.append(request) or error(429, "rate limited", **header))
    retry = RetryPolicy(max_retries=2, initial_delay=0.001, max_delay=0.002)
    client = APIClient(BASE, api_key=KEY, transport=transport, retry=retry)
    wait = r"\(the server asked to wait 3[56]\d\d s before a retry, past max_retry_after, 60 s\)$"
    with client, pytest.raises(rlnb.RateLimitError, match=rf": 429 rate limited {wait}"):
        client.supported_models()
    assert len(sent) == 3  # on backoff all the same, as before


@pytest.mark.parametrize("header", [{"retry-after": "0.01"}, {"retry-after": "-5"}, {}])
def test_a_retry_after_within_max_retry_after_or_none_is_not_named(header):
    transport = httpx.MockTransport(lambda request: error(429, "busy", **header))
    retry = RetryPolicy(max_retries=1, initial_delay=0.001, max_delay=0.002)
    with APIClient(BASE, transport=transport, retry=retry) as client, pytest.raises(rlnb.RateLimitError) as info:
        client.supported_models()
    assert str(info.value).endswith(": 429 busy")


def test_a_retry_after_past_the_calls_deadline_is_named_in_the_error_it_ends_with():
    """A 429 asking for 50 s, with 10 s of deadline: it failed at once "429 slow down" (5 retries left), no word of
    why it was not retried."""
    sent: list[httpx.Request] = []
    transport = httpx.MockTransport(
        lambda request: sent.append(request) or error(429, "slow down", **{"retry-after": "50"})
    )
    with APIClient(BASE, KEY, transport=transport, deadline=10) as client, pytest.raises(rlnb.RateLimitError) as info:
        client.supported_models()
    said = ": 429 slow down; not retried: the wait before a retry (50 s) would pass the call's deadline (10 s)"
    assert str(info.value).endswith(said) and len(sent) == 1


@pytest.mark.slow  # two rlnb serve processes
def test_a_server_killed_mid_poll_and_restarted_on_its_port_is_said_plainly(caplog):
    """The network drops mid-poll (the server is killed, then restarted on the same port without its state): what
    was in flight fails at once once it answers, saying it no longer knows the operations; a new submission fails
    SESSION_NOT_ACTIVE; ``close()`` ends within its deadlines, warning that the session was already gone."""
    port = free_port()
    first = ServerProcess.rlnb_serve("--device", "cpu", "--op-delay", "1.0", port=port, timeout=START_DEADLINE)
    with first as url:
        s = rlnb.connect(url, base_model="rlnb/tiny", record=False, poll_failure_window=START_DEADLINE)
        ops = [s.forward_backward(BATCH), s.optim_step(), s.forward_backward(BATCH)]
        deadline = time.monotonic() + 30
        while not all(op.id for op in ops):  # all sent
            assert time.monotonic() < deadline
            time.sleep(0.01)
    with ServerProcess.rlnb_serve("--device", "cpu", port=port, timeout=START_DEADLINE):
        unknown = []
        for op in ops:
            with contextlib.suppress(rlnb.OperationFailed):
                op.result(START_DEADLINE)
            if op.status == wire.OperationStatus.FAILED:
                unknown.append(op.error.code)
                assert "no longer knows this operation" in op.error.message
        assert unknown and set(unknown) == {wire.OperationErrorCode.SESSION_NOT_ACTIVE}
        with pytest.raises(rlnb.OperationFailed, match="SESSION_NOT_ACTIVE.*not found"):
            s.optim_step().result(30)
        s.close()
    assert f"session {s.backend.session_id} was already gone" in caplog.text


@pytest.mark.parametrize("base", ["https://rl.test/v1", "https://rl.test/v1/rl/", "https://rl.test/V1"])
def test_a_base_url_ending_in_the_apis_own_prefix_gets_a_404_that_says_which_to_pass(base):
    """The API reference's server URL is ``https://api.together.ai/v1``: passed as base_url, every call went to
    ``/v1/v1/rl/...`` and failed "404 no route GET /v1/v1/rl/model-resources", naming neither."""
    transport = httpx.MockTransport(FakeAPI())
    said = r"ends in /v(1|1/rl), and rlnb adds /v1/rl itself: pass base_url='https://rl\.test'\)$"
    with pytest.raises(rlnb.NotFoundError, match=said):
        rlnb.connect(base, api_key=KEY, transport=transport, base_model="org/model-a", record=False)
    with APIClient("https://rl.test", KEY, transport=transport) as client, pytest.raises(rlnb.NotFoundError) as info:
        client.get_session("sess-404")  # a 404 of the API itself: no word of base_url
    assert "base_url" not in str(info.value)

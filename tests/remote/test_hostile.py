"""The remote client against hostile servers on loopback: a server that drips its answer,
one that dies or answers 502 to every poll, one that forgets operations, one that echoes the API key.
Nothing hangs past its documented deadline, and the key appears in nothing rlnb shows, raises or logs."""

import io
import json
import logging
import socket
import subprocess
import sys
import textwrap
import threading
import time

import httpx
import pytest

import rlnb
from rlnb import samples
from rlnb.remote.client import APIClient, RetryPolicy
from tests.support.fake_api import KEY, FakeAPI
from tests.support.hostile import Loopback, bridge, dripping, everything_in, write_response

pytestmark = pytest.mark.slow  # hostile servers and client scripts in subprocesses

QUICK = RetryPolicy(max_retries=5, initial_delay=0.01, max_delay=0.05)
FAST_POLL = {"poll_min": 0.005, "poll_max": 0.05}
BATCH = [samples.cross_entropy([1, 2, 3, 4])]
FAILED = "TRAINING_OPERATION_STATUS_FAILED"


@pytest.mark.parametrize("headers_first", [False, True], ids=["dripped-headers", "dripped-body"])
def test_a_dripping_server_cannot_hold_a_call_past_its_deadline(headers_first):
    """One byte every 2 s (the issue's server) never trips a 5 s read timeout; the 3 s deadline ends the call."""
    with Loopback(dripping(2.0, headers_first=headers_first)) as server:
        start = time.monotonic()
        with pytest.raises(rlnb.APITimeoutError, match="deadline"):
            rlnb.connect(server.url, api_key=KEY, timeout=5.0, deadline=3.0, retry=QUICK)
        took = time.monotonic() - start
    assert 2.9 < took < 60  # the deadline, not the drip: a megabyte at one byte per 2 s never ends


def posted(ops: list[rlnb.Operation], timeout: float = 30.0) -> None:
    """Wait until every operation's POST has been answered (a submission returns before it is sent)."""
    deadline = time.monotonic() + timeout
    while not all(op.id for op in ops):
        assert time.monotonic() < deadline, "the POSTs were not answered"
        time.sleep(0.01)


def serve_fake(fake: FakeAPI) -> Loopback:
    return Loopback(bridge(fake), max_connections=2000)


def connect(url: str, **kw) -> rlnb.Session:
    return rlnb.connect(url, api_key=KEY, ready_timeout=10, retry=QUICK, **FAST_POLL, **kw)


def test_every_poll_a_502_fails_the_operation_after_the_failure_window():
    fake = FakeAPI()
    fake.hold = True
    with serve_fake(fake) as server:
        session = connect(server.url, poll_failure_window=1.0, record=False)
        op = session.forward_backward(BATCH)
        route = fake.route
        fake.route = lambda r: (  # type: ignore[method-assign]
            httpx.Response(502, text="Bad Gateway") if r.method == "GET" else route(r)
        )
        start = time.monotonic()
        with pytest.raises(rlnb.OperationFailed) as info:
            op.result(timeout=30)  # failed, not still waiting: the window ended it
        assert time.monotonic() - start >= 1.0  # not before the window
        assert info.value.code == "TRAINING_OPERATION_ERROR_CODE_TIMEOUT"
        assert "every poll failed" in info.value.message and "502" in info.value.message
        fake.route = route  # type: ignore[method-assign]
        session.close()


def test_after_a_poll_outage_ends_the_session_polls_again_and_its_operations_complete():
    """One failure window fails what was in flight; it does not fail every later operation at once, unpolled
    (review42a H1: the window's start was kept, so each later poll's retries ended before they began)."""
    fake = FakeAPI()
    route, polls = fake.route, []

    def counted(r: httpx.Request) -> httpx.Response:
        polls.extend([r] if r.method == "GET" and "/operations/" in r.url.path else [])
        return route(r)

    def outage(r: httpx.Request) -> httpx.Response:
        return httpx.Response(502, text="Bad Gateway") if r.method == "GET" else counted(r)

    with serve_fake(fake) as server:
        session = connect(server.url, poll_failure_window=1.0, record=False)
        try:
            fake.route = outage  # type: ignore[method-assign]
            with pytest.raises(rlnb.OperationFailed, match="every poll failed"):
                session.forward_backward(BATCH).result(timeout=30)
            fake.route = counted  # type: ignore[method-assign]
            for _ in range(3):
                assert session.forward_backward(BATCH).result(timeout=30).loss > 0
            assert polls  # polled, not failed with the outage's error
            fake.route = outage  # type: ignore[method-assign]
            start = time.monotonic()
            with pytest.raises(rlnb.OperationFailed, match="every poll failed"):
                session.forward_backward(BATCH).result(timeout=30)
            assert time.monotonic() - start >= 1.0  # a second outage is given a whole window of its own
        finally:
            fake.route = route  # type: ignore[method-assign]
            session.close()


def test_a_polls_retries_end_with_the_failure_window():
    """A slow backoff (~13 s of retries in one poll) does not carry the failure past a 1 s window."""
    fake = FakeAPI()
    fake.hold = True
    with serve_fake(fake) as server:
        slow = RetryPolicy(max_retries=8, initial_delay=1.0, max_delay=2.0, jitter=0.0)
        session = rlnb.connect(server.url, api_key=KEY, ready_timeout=10, retry=slow, poll_failure_window=1.0,
                               record=False, **FAST_POLL)  # fmt: skip
        op = session.forward_backward(BATCH)
        posted([op])
        route = fake.route
        fake.route = lambda r: (  # type: ignore[method-assign]
            httpx.Response(502, text="Bad Gateway") if r.method == "GET" else route(r)
        )
        start = time.monotonic()
        with pytest.raises(rlnb.OperationFailed) as info:
            op.result(timeout=60)
        assert 1.0 <= time.monotonic() - start < 6.0  # the first poll's retries alone would take 13 s
        assert "every poll failed" in info.value.message and "poll_failure_window 1 s" in info.value.message
        fake.route = route  # type: ignore[method-assign]
        session.close()


def test_a_dead_server_fails_every_operation_in_flight_after_the_window():
    fake = FakeAPI()
    fake.hold = True
    server = serve_fake(fake)
    session = connect(server.url, poll_failure_window=1.0, record=False)
    ops = [session.forward_backward(BATCH) for _ in range(10)]
    posted(ops)
    server.stop()  # the port is closed: every poll is refused
    start = time.monotonic()
    for op in ops:
        with pytest.raises(rlnb.OperationFailed) as info:
            op.result(timeout=30)
        assert info.value.code == "TRAINING_OPERATION_ERROR_CODE_TIMEOUT"
    start = time.monotonic()
    with pytest.raises(rlnb.APIConnectionError):
        session.close()  # the stop cannot reach the server, and close does not poll it 10 more times
    assert time.monotonic() - start < 30


@pytest.mark.slow
def test_a_server_that_never_answers_polls_fails_every_operation_at_once():
    """Polls go one at a time; against a server that accepts and never answers, each takes a whole deadline.
    Once the window has passed, all ten operations fail together, not one deadline apart (issue 19 §1.5)."""
    fake = FakeAPI()
    fake.hold = True
    silent = threading.Event()

    def answer(conn: socket.socket, request: httpx.Request, stopping: threading.Event) -> None:
        if silent.is_set() and request.method == "GET" and "/operations/" in request.url.path:
            stopping.wait()  # accepted, never answered
            return
        write_response(conn, fake(request))

    with Loopback(answer, max_connections=2000) as server:
        session = connect(server.url, poll_failure_window=0.5, deadline=1.5, record=False)
        ops = [session.forward_backward(BATCH) for _ in range(10)]
        posted(ops)
        silent.set()
        for op in ops:
            with pytest.raises(rlnb.OperationFailed) as info:
                op.result(timeout=60)
            assert info.value.code == "TRAINING_OPERATION_ERROR_CODE_TIMEOUT"
            assert "every poll failed" in info.value.message
        ended = [rec.finished_at for rec in session.history.records]
        assert max(ended) - min(ended) < 1.0  # one deadline apart would be >= 13.5 s
        silent.clear()
        session.close()


def test_an_operation_the_server_no_longer_knows_fails_at_once():
    """A server restarted without its state answers 404: no waiting for a window."""
    fake = FakeAPI()
    fake.hold = True
    with serve_fake(fake) as server:
        session = connect(server.url, poll_failure_window=600, record=False)
        op = session.forward_backward(BATCH)
        posted([op])
        with fake.lock:
            fake.ops.clear()
        with pytest.raises(rlnb.OperationFailed) as info:
            op.result(timeout=10)
        assert info.value.code == "TRAINING_OPERATION_ERROR_CODE_SESSION_NOT_ACTIVE"
        assert "no longer knows this operation" in info.value.message
        session.close()


EXIT_SCRIPT = """
import sys
import rlnb
from rlnb import samples
from rlnb.remote.client import RetryPolicy

s = rlnb.connect(sys.argv[1], api_key="sk-exit-test-key", runs_dir=sys.argv[2], run_id="r",
                 retry=RetryPolicy(max_retries=3, initial_delay=0.2), poll_min=0.005, poll_max=0.05)
batch = [samples.cross_entropy([1, 2, 3, 4])]
for _ in range(20):
    s.forward_backward(batch)
    s.optim_step()
print("submitted", flush=True)
sys.stdin.readline()  # the test stops the server (or kills us), then lets us exit without waiting or closing
"""


def run_script(tmp_path, server: Loopback) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(EXIT_SCRIPT), server.url, str(tmp_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline().strip() == "submitted"
    return proc


def test_a_script_that_exits_after_its_server_died_exits_soon_and_keeps_every_row(tmp_path):
    fake = FakeAPI()
    fake.hold = True
    server = serve_fake(fake)
    try:
        proc = run_script(tmp_path, server)
        deadline = time.monotonic() + 60
        while len(fake.calls("POST", "/operations/")) < 40:  # submissions return before their POST is sent
            assert time.monotonic() < deadline
            time.sleep(0.01)
        server.stop()
        start = time.monotonic()
        _, err = proc.communicate("go\n", timeout=120)
        took = time.monotonic() - start
    finally:
        server.stop()
    assert proc.returncode == 0, err[-2000:]
    assert took < 60  # one stop that is refused, not one refused poll per operation in flight
    df = rlnb.History.load(tmp_path / "r").df
    assert len(df) == 40 and list(df.seq) == list(range(40)) and (df.status == FAILED).all()
    assert set(df.error_code) == {"TRAINING_OPERATION_ERROR_CODE_SESSION_NOT_ACTIVE"}


def test_kill_9_keeps_every_remote_submission(tmp_path):
    fake = FakeAPI()
    fake.hold = True
    with serve_fake(fake) as server:
        proc = run_script(tmp_path, server)
        proc.kill()
        proc.communicate(timeout=30)
    df = rlnb.History.load(tmp_path / "r").df
    assert len(df) == 40 and list(df.seq) == list(range(40))
    assert list(df.kind) == ["forward-backward", "optim-step"] * 20


# -- the API key --------------------------------------------------------------------------------

ESCAPED = "".join(f"\\u{ord(c):04x}" for c in KEY)  # the key as JSON \u escapes: no literal match


def echoing(conn: socket.socket, request: httpx.Request, stopping: threading.Event) -> None:
    """Answer 401 with the Authorization header echoed in the body (\\u-escaped) and in a header."""
    sent = request.headers.get("authorization", "")
    escaped = "".join(f"\\u{ord(c):04x}" for c in sent)
    body = '{"error": {"message": "bad credentials ' + escaped + '", "type": "auth", "param": "' + escaped + '"}}'
    write_response(conn, httpx.Response(401, content=body.encode(), headers={"x-echo": sent}))


def test_a_key_echoed_with_json_escapes_is_redacted_after_decoding():
    assert KEY not in ESCAPED
    with (
        Loopback(echoing) as server,
        APIClient(server.url, KEY, retry=QUICK) as client,
        pytest.raises(rlnb.AuthenticationError) as info,
    ):
        client.supported_models()
    text = everything_in(info.value)
    assert "bad credentials Bearer ***" in str(info.value) and info.value.param == "Bearer ***"
    assert KEY not in text and KEY not in json.dumps(info.value.body, ensure_ascii=False)


def test_the_authorization_header_is_in_no_exception_rlnb_raises():
    def hang_up(conn: socket.socket, request: httpx.Request, stopping: threading.Event) -> None:
        conn.shutdown(socket.SHUT_RDWR)  # no answer at all

    with (
        Loopback(hang_up) as server,
        APIClient(server.url, KEY, retry=QUICK) as client,
        pytest.raises(rlnb.APIConnectionError) as info,
    ):
        client.supported_models()
    cause = info.value.__cause__
    assert isinstance(cause, httpx.RequestError)
    assert cause.request.headers["Authorization"] == "Bearer ***"
    assert KEY not in everything_in(info.value)


def test_httpcore_debug_logging_through_rlnb_never_shows_the_key():
    """httpcore's DEBUG log prints the response headers, here one echoing the key; rlnb's handler masks it."""
    loggers = [logging.getLogger(n) for n in ("rlnb", "httpx", "httpcore")]
    saved = [(lg.level, lg.propagate, list(lg.handlers)) for lg in loggers]
    out = io.StringIO()
    handler = rlnb.configure_logging(logging.DEBUG, stream=out)
    try:
        with (
            Loopback(echoing) as server,
            APIClient(server.url, KEY, retry=QUICK) as client,
            pytest.raises(rlnb.AuthenticationError),
        ):
            client.supported_models()
    finally:
        for lg, (level, propagate, handlers) in zip(loggers, saved, strict=True):
            lg.removeHandler(handler)
            lg.setLevel(level)
            lg.propagate = propagate
            assert lg.handlers == handlers
    log = out.getvalue()
    assert "receive_response_headers.complete" in log and "x-echo" in log  # httpcore did log the header
    assert "Bearer ***" in log and KEY not in log

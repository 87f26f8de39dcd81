"""``header_timeout`` and ``max_connections`` (``rlnb.server.connections``): uvicorn timed out no connection that
never finished its request headers (120 s later it was still held, and 1,100 of them reset every other client of a
server limited to 1,024 descriptors); past ``max_connections`` requests in flight a request gets the API's 503, not
uvicorn's plain-text one, and connections that sent nothing are left to ``header_timeout``. Both of uvicorn's HTTP
protocols (httptools', h11's), served in process, and the option through ``rlnb serve --limit``."""

import json
import socket
import sys
import threading
import time
from collections.abc import Callable
from urllib.parse import urlsplit

import httpx
import pytest
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from rlnb.server import create_app
from rlnb.server.app import bind
from rlnb.server.connections import protocol
from rlnb.testing import ServerProcess
from tests.support.server import START_DEADLINE

WAIT = 60.0
"""Seconds a socket waits for the server here (a header deadline closes it about ``DEADLINE`` s in)."""
DEADLINE = 0.3
"""The header deadline served here, which the first two tests' sleeps are fractions and multiples of: each waits on its
clock (at 1 s, this file idled its core 6.5 s, the fast tier's longest wait)."""
BASES = [pytest.param(H11Protocol, id="h11")]
try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    # Slow tier: each test waits on the 1 s deadline's clock (~6 s a protocol, the fast tier's longest idle file);
    # h11's cases keep every idea in the fast tier, and the slow tier runs both.
    BASES.append(pytest.param(HttpToolsProtocol, id="httptools", marks=pytest.mark.slow))
except ImportError:  # uvicorn without httptools serves h11 only
    pass


@pytest.fixture
def header_deadline() -> float:
    """The served header deadline: ``DEADLINE``, or a test's own (``parametrize("header_deadline", ...)``)."""
    return DEADLINE


@pytest.fixture
def serving(tmp_path, request, header_deadline):
    """``(host, port, state)`` of the app served in process by uvicorn over ``request.param``'s protocol, with a header
    deadline of ``header_deadline`` s and ``max_connections`` 3; ``state`` is uvicorn's ``ServerState``, whose
    ``connections`` and ``tasks`` (requests in flight) a test waits on."""
    app = create_app(device="cpu", checkpoint_dir=tmp_path)
    sock = bind("127.0.0.1", 0)
    http = protocol(header_deadline, 3, base=request.param)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", http=http))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield (*sock.getsockname()[:2], server.server_state)
    finally:
        server.should_exit = True
        thread.join(WAIT)
        sock.close()


def until(condition: Callable[[], bool]) -> None:
    """Wait for ``condition`` (the server's state, read from its thread), at most ``WAIT`` seconds."""
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, "the server's state did not come within WAIT"
        time.sleep(0.005)


def closed_after(sock: socket.socket) -> tuple[bytes, float]:
    """What the server sent until it closed ``sock``, and how long that took."""
    sock.settimeout(WAIT)
    started, data = time.monotonic(), b""
    while chunk := sock.recv(65536):
        data += chunk
    return data, time.monotonic() - started


@pytest.mark.parametrize("serving", BASES, indirect=True)
def test_a_connection_that_never_finishes_its_headers_is_closed_by_the_deadline(serving):
    """Closed ``DEADLINE`` after it opened, or after its last answer ended: the second step's answer ends past the
    deadline counted from the connection's start, and the close is timed from before the server had that request's
    body (a bound load can only lengthen). Counted from the start, it closed 7 ms after; the step before this one
    (an answer at once, then a partial request) passed either way."""
    host, port, _ = serving
    with socket.create_connection((host, port), timeout=WAIT) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-a: ")
        data, took = closed_after(sock)
    assert data == b"" and DEADLINE / 2 < took < WAIT / 2, took
    body = b'{"base_model": 1}'
    post = f"POST /v1/rl/model-resources HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(body)}\r\n\r\n"
    with socket.create_connection((host, port), timeout=WAIT) as sock:  # after an answer, on a kept-alive connection
        sock.sendall(post.encode() + body[:1])  # a slow request, its headers in: no target of the deadline
        time.sleep(1.5 * DEADLINE)  # its answer ends past the deadline counted from the connection's start
        sent = time.monotonic()  # before the server has the body: its answer, and the deadline set then, come after
        sock.sendall(body[1:] + b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        data, _ = closed_after(sock)
        after_sent = time.monotonic() - sent  # load can only lengthen it
    assert data.startswith(b"HTTP/1.1 400 ") and data.count(b"HTTP/1.1") == 1, data
    assert DEADLINE - 0.01 < after_sent < WAIT / 2, after_sent  # the deadline started again at the answer


@pytest.mark.parametrize("serving", BASES, indirect=True)
def test_a_pipelined_request_whose_headers_came_is_no_target_while_it_runs(serving):
    """httptools parses a pipelined request's headers while the one before it runs: the deadline, set again when that
    one's answer ended, took the pipelined request (already in) for the one awaited, and closed it mid-body."""
    host, port, _ = serving
    body = b'{"base_model": 1}'
    with socket.create_connection((host, port), timeout=WAIT) as sock:
        post = f"POST /v1/rl/model-resources HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(body)}\r\n"
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" + post.encode() + b"\r\n" + body[:1])
        time.sleep(1.6 * DEADLINE)  # the pipelined request's body, past the header deadline
        sock.sendall(body[1:] + b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        data, _ = closed_after(sock)
    assert data.startswith(b"HTTP/1.1 200 ") and data.count(b"HTTP/1.1 ") == 3, data


@pytest.mark.parametrize("header_deadline", [1.0])  # the silent connections stay open through the first request
@pytest.mark.parametrize("serving", BASES, indirect=True)
def test_past_max_connections_requests_in_flight_a_request_gets_the_apis_503(serving):
    """Requests in flight are counted, not connections: a 503 frees no descriptor (its connection is accepted already),
    so counting connections that sent nothing only refused every other client while they were held (header_timeout
    frees those)."""
    host, port, state = serving
    silent = [socket.create_connection((host, port), timeout=WAIT) for _ in range(5)]
    try:
        until(lambda: len(state.connections) == 5)  # accepted
        assert httpx.get(f"http://{host}:{port}/health", timeout=WAIT).status_code == 200
    finally:
        for sock in silent:
            sock.close()
    held = [socket.create_connection((host, port), timeout=WAIT) for _ in range(3)]
    try:
        for sock in held:  # a request in flight: its headers in, its body still arriving
            sock.sendall(b"POST /v1/rl/model-resources HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 9\r\n\r\n{")
        until(lambda: len(state.tasks) == 3)  # each one's request in flight: its body read has begun
        r = httpx.get(f"http://{host}:{port}/health", timeout=WAIT)
    finally:
        for sock in held:
            sock.close()
    assert r.status_code == 503 and r.headers["connection"] == "close" and r.headers["retry-after"] == "1", r.text
    error = r.json()["error"]
    assert error["type"] == "server_error" and "4 requests in flight with this one" in error["message"], error
    assert "(max_connections)" in error["message"], error
    until(lambda: not state.tasks)  # the held ones are gone
    assert httpx.get(f"http://{host}:{port}/health", timeout=WAIT).status_code == 200


@pytest.mark.slow  # a process
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX")
def test_rlnb_serve_takes_header_timeout_from_its_limit_option():
    with ServerProcess.rlnb_serve("--device", "cpu", "--limit", "header_timeout=1", timeout=START_DEADLINE) as url:
        parts = urlsplit(url)
        with socket.create_connection((parts.hostname, parts.port), timeout=WAIT) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\n")
            data, took = closed_after(sock)
        assert data == b"" and took < WAIT / 2, took
        assert json.loads(httpx.get(url + "/health", timeout=WAIT).text) == {"status": "ok"}

"""``rlnb serve`` stopped (SIGTERM, Ctrl-C) while a request body is still arriving: the body read waited for its idle
deadline (30 s), past uvicorn's ``SHUTDOWN_GRACE`` (10 s), which then cancelled it: a plain-text 500 to the client
and a 76-line ``CancelledError`` traceback on stderr. A stop now ends a pending body read at once: a 503 in the API's
error body, saying ``Connection: close``."""

import json
import signal
import socket
import sys
import time
from urllib.parse import urlsplit

import pytest

from rlnb.testing import ServerProcess
from tests.support.server import START_DEADLINE

pytestmark = [pytest.mark.slow, pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")]  # processes

EXIT_ROOM = 60.0


def read_all(sock: socket.socket) -> bytes:
    sock.settimeout(EXIT_ROOM)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_while_a_body_arrives_answers_503_in_the_error_body_without_a_traceback(sig):
    server = ServerProcess.rlnb_serve("--device", "cpu", timeout=START_DEADLINE)
    url = urlsplit(server.start())
    try:
        with socket.create_connection((url.hostname, url.port), timeout=EXIT_ROOM) as sock:
            head = f"POST /v1/rl/model-resources HTTP/1.1\r\nHost: {url.netloc}\r\nContent-Length: 1000\r\n"
            sock.sendall(f"{head}Content-Type: application/json\r\n\r\n{{".encode())  # 1 byte of the 1,000
            time.sleep(1.0)  # the app reads the body by then
            assert server.proc is not None
            started = time.monotonic()
            server.proc.send_signal(sig)
            answer = read_all(sock)
        code = server.proc.wait(timeout=EXIT_ROOM)
        took = time.monotonic() - started
    finally:
        log = server.log()
        server.stop()
    assert code == (0 if sig == signal.SIGTERM else 130), log
    assert "Traceback" not in log and "Exception in ASGI application" not in log, log
    status, _, rest = answer.partition(b"\r\n")
    assert status == b"HTTP/1.1 503 Service Unavailable", answer
    headers, _, body = rest.partition(b"\r\n\r\n")
    assert b"connection: close" in headers.lower(), answer
    error = json.loads(body)["error"]
    assert error["type"] == "server_error" and error["message"].startswith("the server is stopping"), error
    assert took < 10, took  # within SHUTDOWN_GRACE: not cut by it

"""``rlnb serve`` stopped (SIGTERM, Ctrl-C) while a request body is still arriving: the body read waited for its idle
deadline (30 s), past uvicorn's ``SHUTDOWN_GRACE`` (10 s), which then cancelled it: a plain-text 500 to the client
and a 76-line ``CancelledError`` traceback on stderr. A stop now ends a pending body read at once: a 503 in the API's
error body, saying ``Connection: close``. So does a body that keeps trickling in: its grace ends once, half a
second after the stop, not half a second after each byte."""

import json
import signal
import socket
import sys
import threading
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


def stop_while_sending(sig: signal.Signals, trickle: bool) -> tuple[int, str, bytes, float]:
    """The server's exit code, its log, what the client got, and the seconds from the signal to the exit, for a stop
    1 s into a body of 1,000 bytes: one byte sent, then (``trickle``) one more every 0.2 s."""
    server = ServerProcess.rlnb_serve("--device", "cpu", timeout=START_DEADLINE)
    url = urlsplit(server.start())
    sent_all = threading.Event()
    try:
        with socket.create_connection((url.hostname, url.port), timeout=EXIT_ROOM) as sock:

            def send_slowly() -> None:  # a steady upload on a slow link: under body_idle_timeout and the grace
                for _ in range(998):
                    if sent_all.wait(0.2):
                        return
                    try:
                        sock.sendall(b" ")
                    except OSError:  # the server closed it
                        return

            head = f"POST /v1/rl/model-resources HTTP/1.1\r\nHost: {url.netloc}\r\nContent-Length: 1000\r\n"
            sock.sendall(f"{head}Content-Type: application/json\r\n\r\n{{".encode())  # 1 byte of the 1,000
            sender = threading.Thread(target=send_slowly, daemon=True)
            if trickle:
                sender.start()
            time.sleep(1.0)  # the app reads the body by then
            assert server.proc is not None
            started = time.monotonic()
            server.proc.send_signal(sig)
            answer = read_all(sock)
            sent_all.set()
            if trickle:
                sender.join(EXIT_ROOM)
        code = server.proc.wait(timeout=EXIT_ROOM)
        took = time.monotonic() - started
    finally:
        sent_all.set()
        log = server.log()
        server.stop()
    return code, log, answer, took


@pytest.mark.parametrize(
    ("sig", "trickle"),
    [(signal.SIGTERM, False), (signal.SIGINT, False), (signal.SIGTERM, True)],
    ids=["SIGTERM", "SIGINT", "SIGTERM-trickle"],
)
def test_a_stop_while_a_body_arrives_answers_503_in_the_error_body_without_a_traceback(sig, trickle):
    code, log, answer, took = stop_while_sending(sig, trickle)
    assert code == (0 if sig == signal.SIGTERM else 130), log
    assert "Traceback" not in log and "Exception in ASGI application" not in log, log
    status, _, rest = answer.partition(b"\r\n")
    assert status == b"HTTP/1.1 503 Service Unavailable", answer
    headers, _, body = rest.partition(b"\r\n\r\n")
    assert b"connection: close" in headers.lower(), answer
    error = json.loads(body)["error"]
    assert error["type"] == "server_error" and error["message"].startswith("the server is stopping"), error
    assert took < 10, took  # within SHUTDOWN_GRACE: not cut by it

"""``rlnb serve`` stopped (SIGTERM, Ctrl-C) while a client long-polls an operation (``?wait=S``, as rlnb's remote
client does against it): uvicorn's graceful shutdown waited for the held GET, which waited for a status change that
only the app's shutdown (after it) makes. The stop took ``SHUTDOWN_GRACE`` longer, then the GET was cancelled:
a 500 to the client and a ``CancelledError`` traceback on the server's stderr."""

import signal
import sys
import threading
import time

import httpx
import pytest

from rlnb import wire
from rlnb.testing import ServerProcess
from tests.support.server import START_DEADLINE, new_session, submit

pytestmark = [pytest.mark.slow, pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")]  # processes

EXIT_ROOM = 60.0
"""Seconds the stop may take here (about one; the long operation is abandoned well within it)."""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_answers_a_long_poll_at_once_with_the_status_it_has(sig):
    server = ServerProcess.rlnb_serve("--device", "cpu", "--op-delay", "600", timeout=START_DEADLINE)
    url = server.start()
    answers: list[httpx.Response | Exception] = []
    try:
        with httpx.Client(base_url=url + "/v1/rl", timeout=EXIT_ROOM) as c:
            _, sid = new_session(c)
            op = submit(c, sid, "training-checkpoint")["id"]  # 600 s of simulated compute
            path = f"/training-sessions/{sid}/operations/training-checkpoint/{op}"
            held = threading.Event()

            def long_poll() -> None:
                held.set()
                try:
                    answers.append(c.get(path, params={"wait": 30, "seen": wire.OperationStatus.RUNNING}))
                except httpx.HTTPError as exc:
                    answers.append(exc)

            poller = threading.Thread(target=long_poll)
            while c.get(path).json()["status"] != wire.OperationStatus.RUNNING:
                time.sleep(0.05)
            poller.start()
            held.wait()
            assert server.proc is not None
            threading.Timer(0.5, server.proc.send_signal, (sig,)).start()  # the GET is held by then
            poller.join(EXIT_ROOM)
            code = server.proc.wait(timeout=EXIT_ROOM)
    finally:
        log = server.log()
        server.stop()
    assert code in (0, 130), log
    assert "Traceback" not in log and "CancelledError" not in log, log
    (answer,) = answers
    assert isinstance(answer, httpx.Response), answer
    assert answer.status_code == 200, answer.text
    assert answer.json()["id"] == op

"""``rlnb serve`` stopped (SIGTERM, Ctrl-C) while an operation runs: the stop waited for it without a deadline
(minutes on a real model) and a second Ctrl-C did not hurry it. Now the operation gets ``STOP_DEADLINE`` (a second
Ctrl-C: none), then it is abandoned, said on stderr, and journaled FAILED for the restart to read."""

import signal
import subprocess
import sys
import time

import httpx
import pytest

from rlnb import samples, wire
from rlnb.testing import ServerProcess
from tests.support.server import START_DEADLINE, new_session, submit

pytestmark = pytest.mark.slow  # starts, stops and restarts rlnb serve processes

LONG = wire.ForwardBackwardBody(  # tens of seconds on rlnb/small on a CPU: far past the deadlines below
    samples=[samples.cross_entropy(list(range(1, 250)))] * 256, loss=wire.LossConfig(type="LOSS_TYPE_CROSS_ENTROPY")
).to_json_dict()
EXIT_ROOM = 20.0
"""Seconds a stop with an abandoned operation may take here (it takes about the deadline; the operation 10-40 s)."""


def _serve_running_a_long_operation(state: str, deadline: float | None) -> tuple[ServerProcess, str, str]:
    """A server (its ``STOP_DEADLINE`` patched when given) whose one session runs ``LONG``: (server, session, op)."""
    server = ServerProcess.rlnb_serve("--device", "cpu", "--state-dir", state, timeout=START_DEADLINE)
    if deadline is not None:
        patch = f"import rlnb.server.stopping as s; s.STOP_DEADLINE = {deadline}; import runpy; "
        server.cmd[1:3] = ["-c", patch + "runpy.run_module('rlnb.cli', run_name='__main__')"]
    url = server.start()
    with httpx.Client(base_url=url + "/v1/rl", timeout=60) as c:
        _, sid = new_session(c, base_model="rlnb/small")
        op = submit(c, sid, "forward-backward", LONG)["id"]
        path = f"/training-sessions/{sid}/operations/forward-backward/{op}"
        for _ in range(600):  # the model is built and the operation starts: at most 30 s
            if (status := c.get(path).json()["status"]) != wire.OperationStatus.PENDING:
                break
            time.sleep(0.05)
        assert status == wire.OperationStatus.RUNNING, status
    return server, sid, op


def _after_restart(state: str, sid: str, op: str) -> dict:
    with ServerProcess.rlnb_serve("--device", "cpu", "--state-dir", state, timeout=START_DEADLINE) as url:
        return httpx.get(f"{url}/v1/rl/training-sessions/{sid}/operations/forward-backward/{op}").json()


def _stopped(server: ServerProcess, *signals: signal.Signals) -> tuple[int, str]:
    """Send ``signals`` half a second apart: (exit code, stderr)."""
    assert server.proc is not None
    try:
        for sig in signals:
            server.proc.send_signal(sig)
            time.sleep(0.5)
        code = server.proc.wait(timeout=EXIT_ROOM)
    except subprocess.TimeoutExpired:
        pytest.fail(f"rlnb serve still ran {EXIT_ROOM} s after {', '.join(s.name for s in signals)}")
    finally:
        log = server.log()
        server.stop()
    return code, log


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_sigterm_abandons_an_operation_still_running_past_the_deadline_and_the_journal_says_so(tmp_path):
    state = str(tmp_path / "state")
    server, sid, op = _serve_running_a_long_operation(state, deadline=1.0)
    code, log = _stopped(server, signal.SIGTERM)
    assert code == 0, log
    said = f"abandoned forward-backward operation {op} of session {sid}, unfinished when the stop gave up on it "
    assert said + "(FAILED in --state-dir)" in log, log
    assert f"stopping; waiting up to 1 s for the running forward-backward operation {op} of session {sid}" in log, log
    assert "Traceback" not in log, log
    env = _after_restart(state, sid, op)
    assert env["status"] == wire.OperationStatus.FAILED, env
    assert env["error"]["code"] == wire.OperationErrorCode.SESSION_NOT_ACTIVE
    assert "abandoned" in env["error"]["message"] and "(1 s)" in env["error"]["message"], env


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_says_at_once_what_the_stop_waits_for_and_a_second_abandons_it(tmp_path):
    """The stop said nothing for the 30 s it waited (a hung server, at a terminal), then ``stopped (Ctrl-C)`` with
    the rest. Now that line comes at the signal and the next names the operation waited for, while it still runs."""
    state = str(tmp_path / "state")
    server, sid, op = _serve_running_a_long_operation(state, deadline=None)  # the real STOP_DEADLINE
    assert server.proc is not None
    server.proc.send_signal(signal.SIGINT)
    waiting = (f"rlnb serve: stopping; waiting up to 30 s for the running forward-backward operation {op} of session "
               f"{sid}; Ctrl-C or SIGTERM again abandons it")  # fmt: skip
    deadline = time.monotonic() + EXIT_ROOM
    while waiting not in (log := server.log()) and server.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.proc.poll() is None and waiting in log, log  # said while the operation runs, not after the wait
    assert log.index("rlnb serve: stopped (Ctrl-C)") < log.index(waiting), log
    code, log = _stopped(server, signal.SIGINT)
    assert code == 130 and log.count("rlnb serve: stopped (Ctrl-C)") == 1, log
    assert f"abandoned forward-backward operation {op}" in log and "Traceback" not in log, log
    env = _after_restart(state, sid, op)
    assert env["status"] == wire.OperationStatus.FAILED and "second Ctrl-C" in env["error"]["message"], env

"""A remote session closed by a hurried exit (a SIGTERM while rlnb's exit hook runs: a Jupyter kernel's Shut Down sends
it 2.5 s in, SIGKILL at 5 s). Its close sent the stop first, then waited for the POST in flight (up to ``CLOSE_GRACE``)
and the poll in flight, then polled each operation once more: on a slow server the SIGKILL came mid-wait and the
operations stayed PENDING in the history for good. Hurried, it stops waiting and records them FAILED."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import httpx
import pytest

import rlnb
from rlnb import samples, wire
from rlnb.lifecycle import shutdown
from tests.support.server import app_client, held, running_server

SLOW_SERVER_EXIT = """
import atexit, os, sys, threading, time
marks = {}
atexit.register(lambda: print(f"EXIT {time.monotonic() - marks['exit']:.2f}", flush=True))  # runs after rlnb's hook
import httpx
import rlnb
from rlnb import samples
from rlnb.lifecycle import shutdown
slow = threading.Event()
def answers_slowly(response):  # the server takes 20 s more to answer about an operation (its stop: at once)
    if slow.is_set() and "/operations" in response.request.url.path:
        time.sleep(20)
http = httpx.Client(event_hooks={"response": [answers_slowly]})
s = rlnb.connect(sys.argv[1], base_model="rlnb/tiny", http_client=http, runs_dir=sys.argv[2], run_id="r")
print("SESSION", s.backend.session_id, flush=True)
s.forward_backward([samples.cross_entropy([1, 2, 3])])  # runs 8 s (--op-delay): its poll is in flight at exit
time.sleep(1.0)
slow.set()
s.optim_step()  # its POST is in flight at exit
time.sleep(0.3)
def term():
    while not shutdown.exiting():
        time.sleep(0.01)
    marks["exit"] = time.monotonic()
    time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGTERM)
import signal
threading.Thread(target=term, daemon=True).start()
"""


@pytest.mark.slow
def test_a_sigterm_during_the_exit_cuts_a_remote_sessions_close_short_and_leaves_nothing_pending(tmp_path):
    with running_server("--op-delay", "8") as url:
        proc = subprocess.run([sys.executable, "-c", SLOW_SERVER_EXIT, url, str(tmp_path)],
                              capture_output=True, text=True, timeout=90)  # fmt: skip
        out = proc.stdout.split()
        assert proc.returncode == 0 and "EXIT" in out, (proc.returncode, proc.stdout, proc.stderr[-3000:])
        assert float(out[out.index("EXIT") + 1]) < 2.0, proc.stdout  # SIGTERM at 0.5 s; SIGKILL would come at 5 s
        session_id = out[out.index("SESSION") + 1]
        info = httpx.get(f"{url}/v1/rl/training-sessions/{session_id}", timeout=10).json()
    assert info["status"] == "TRAINING_SESSION_STATUS_STOPPED", info
    df = rlnb.History.load(tmp_path / "r").df
    assert list(df.kind) == ["forward-backward", "optim-step"], df
    assert set(df.status) == {"TRAINING_OPERATION_STATUS_FAILED"}, df[["kind", "status"]]
    assert all("outcome is unknown" in why for why in df.error_message), list(df.error_message)


def test_a_hurried_exit_stops_waiting_for_a_remote_closes_last_polls(tmp_path, monkeypatch):
    hurry, answered = threading.Event(), threading.Event()
    monkeypatch.setattr(shutdown, "_HURRY", hurry)  # set below as the exit's SIGTERM handler would

    def answers_slowly(response):  # the server takes 20 s to answer close()'s last polls
        if threading.current_thread().name.startswith("rlnb-settle-"):
            answered.wait(20)

    with held(monkeypatch, wire.OperationKind.FORWARD_BACKWARD) as gate, app_client(tmp_path) as c:
        c.event_hooks["response"].append(answers_slowly)
        s = rlnb.connect("http://testserver", base_model="rlnb/tiny", http_client=c, record=False)
        step = s.forward_backward([samples.cross_entropy([1, 2, 3])])  # held running, past the session's stop
        time.sleep(0.5)
        threading.Timer(0.5, hurry.set).start()
        started = time.monotonic()
        s.close()
        took = time.monotonic() - started
        answered.set()
        gate.set()
        for polls in [t for t in threading.enumerate() if t.name.startswith("rlnb-settle-")]:
            polls.join(10)  # before the app stops: a request still on its way through TestClient hung its exit
        end = time.monotonic() + 10
        while c.get(f"/training-sessions/{s.backend.session_id}").json()["status"] != wire.SessionStatus.STOPPED:
            assert time.monotonic() < end, "the server's session never stopped"
            time.sleep(0.05)
    assert took < 2.0, took
    with pytest.raises(rlnb.OperationFailed, match=r"closed before this finished \(the exit was hurried \(SIGTERM"):
        step.result(5)

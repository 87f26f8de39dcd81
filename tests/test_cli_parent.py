"""``rlnb serve --exit-with-stdin`` and ``ServerProcess``: a server does not outlive the process that started it, even
one that is SIGKILLed (a hung notebook kernel restarted, the OOM killer), where no finalizer runs."""

import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from rlnb.cli import parent
from rlnb.engine.held import SCRATCH_PREFIX
from tests.support.processes import gone
from tests.support.server import START_DEADLINE

ROOT = str(Path(__file__).resolve().parents[1])
EXIT_DEADLINE = 120.0
"""Seconds the orphaned server may take to stop: uvicorn's shutdown, on a loaded machine."""


def test_the_watcher_ignores_what_stdin_carries_and_raises_sigterm_at_its_end(monkeypatch, capsys):
    raised: list[int] = []
    monkeypatch.setattr(signal, "raise_signal", raised.append)  # not this test process's SIGTERM
    read, write = os.pipe()
    watcher = threading.Thread(target=parent._watch, args=(read,), daemon=True)
    watcher.start()
    os.write(write, b"anything\n")
    watcher.join(0.2)
    assert watcher.is_alive() and raised == []  # data is no end
    os.close(write)
    watcher.join(10)
    os.close(read)
    assert not watcher.is_alive() and raised == [signal.SIGTERM]
    assert "stdin closed (--exit-with-stdin" in capsys.readouterr().err


def test_a_stdin_that_is_not_open_stops_at_once(monkeypatch, capsys):
    raised: list[int] = []
    monkeypatch.setattr(signal, "raise_signal", raised.append)
    read, write = os.pipe()
    os.close(read), os.close(write)
    parent._watch(read)  # EBADF: no parent holds it
    assert raised == [signal.SIGTERM]


_PARENT = textwrap.dedent("""
    import sys
    from rlnb.testing import ServerProcess
    server = ServerProcess.rlnb_serve("--device", "cpu", timeout=float(sys.argv[1]))
    server.start()
    print(server.proc.pid, server.url.rpartition(":")[2], flush=True)
    sys.stdin.read()  # until SIGKILLed
""")


@pytest.mark.slow  # two Python processes, one of them importing torch
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_server_stops_cleanly_when_the_process_that_started_it_is_sigkilled(tmp_path):
    """The kernel's finalizer never ran: the server kept its port (and memory) for ever. Now it stops as at SIGTERM:
    its checkpoints' temporary folder is removed, as only a clean stop does, and its port is free."""
    env = {**os.environ, "PYTHONPATH": ROOT, "TMPDIR": str(tmp_path)}
    argv = [sys.executable, "-c", _PARENT, str(START_DEADLINE)]
    with subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as kernel:
        assert kernel.stdout is not None
        line = kernel.stdout.readline()  # start() has its own deadline: a failure exits and ends the line
        assert line, "the parent did not start its server"
        pid, port = map(int, line.split())
        try:
            assert list(tmp_path.glob(f"{SCRATCH_PREFIX}*"))  # the running server's checkpoints' folder
            kernel.kill()
            kernel.wait(EXIT_DEADLINE)
            assert gone(pid, within=EXIT_DEADLINE), "the orphaned server is still running"
        finally:
            if not gone(pid, within=0):  # never left running by a failed test
                os.kill(pid, signal.SIGKILL)
    assert not list(tmp_path.glob(f"{SCRATCH_PREFIX}*"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # free again

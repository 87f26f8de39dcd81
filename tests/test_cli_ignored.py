"""A signal that the process starting ``rlnb serve`` or ``rlnb demo`` left ignored stays ignored all along: a shell
starts a background job (``rlnb serve &``) with SIGINT ignored, ``nohup`` a command with SIGHUP ignored. rlnb's
handlers, installed ~40 ms into the start, honoured them from then on (a Ctrl-C stopped it, a hang-up under nohup
stopped it); SIGTERM still stops it as it did."""

import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from rlnb.cli.interrupts import HeldDuringImports
from rlnb.engine.held import SCRATCH_PREFIX

ROOT = str(Path(__file__).resolve().parents[1])
EXIT_DEADLINE = 120.0
"""Seconds a command may take to start or stop: it imports torch, slowly on a loaded machine."""

pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="Linux: /proc/PID/status")


def _ignored_by(pid: int) -> set[int]:
    """The signals the kernel discards for ``pid`` (``SigIgn`` of /proc/PID/status): ignored, not handled."""
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("SigIgn:"))
    mask = int(line.split()[1], 16)
    return {s for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM) if mask >> (s - 1) & 1}


def _start(argv: list[str], ignore: tuple[int, ...], tmp_path: Path) -> subprocess.Popen:
    """``rlnb ARGV`` started with the signals ``ignore`` ignored, as a shell or nohup starts it."""
    env = {**os.environ, "PYTHONPATH": ROOT, "TMPDIR": str(tmp_path)}
    ignoring = lambda: [signal.signal(s, signal.SIG_IGN) for s in ignore]  # noqa: E731 - in the child, before exec
    command = [sys.executable, "-m", "rlnb.cli", *argv]
    return subprocess.Popen(command, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=ignoring)  # fmt: skip


def test_an_ignored_ctrl_c_stays_ignored_while_the_command_line_imports():
    """``HeldDuringImports`` installed its handler over an inherited ``SIG_IGN``: from then on a Ctrl-C stopped a
    background job that had ignored it until then."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with HeldDuringImports():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGINT)  # discarded: nothing is raised
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.slow  # a Python process that imports torch
@pytest.mark.parametrize("ignore", [signal.SIGINT, signal.SIGHUP], ids=["background job", "nohup"])
def test_serve_keeps_ignoring_what_it_was_started_to_ignore_and_stops_at_sigterm(ignore, tmp_path):
    """Once it listened, uvicorn's handler honoured an ignored SIGINT (a background server stopped at a Ctrl-C sent
    to it, 130), and rlnb's SIGHUP handler an ignored SIGHUP (``nohup rlnb serve &`` stopped when the terminal
    closed)."""
    server = _start(["serve", "--device", "cpu", "--port", "0"], (ignore,), tmp_path)
    line = server.stdout.readline()  # the server's own deadline: the test's timeout
    assert line.startswith("rlnb serve: http://"), line
    address = line.split()[2]
    with urllib.request.urlopen(f"{address}/openapi.json", timeout=EXIT_DEADLINE) as answer:  # uvicorn's handlers
        assert answer.status == 200  # go in before it answers: it said where it listens before they did
    assert _ignored_by(server.pid) == {ignore}
    server.send_signal(ignore)  # discarded by the kernel
    server.send_signal(signal.SIGTERM)
    _, err = server.communicate(timeout=EXIT_DEADLINE)
    assert (server.returncode, err) == (0, "")
    assert not list(tmp_path.glob(f"{SCRATCH_PREFIX}*"))


@pytest.mark.slow  # a Python process that imports torch
def test_demo_keeps_ignoring_what_it_was_started_to_ignore_and_stops_at_sigterm(tmp_path):
    """``rlnb demo`` ran under ``HeldDuringImports``, whose handler honoured an ignored SIGINT, and its own SIGHUP
    handler an ignored SIGHUP."""
    out = tmp_path / "out"
    demo = _start(["demo", "--steps", "500", "--device", "cpu", "--out", str(out)], (signal.SIGINT, signal.SIGHUP),
                  tmp_path)  # fmt: skip
    for line in demo.stdout:
        if line.lstrip().startswith("1 "):  # the first step's row
            break
    assert _ignored_by(demo.pid) == {signal.SIGINT, signal.SIGHUP}
    demo.send_signal(signal.SIGTERM)
    _, err = demo.communicate(timeout=EXIT_DEADLINE)
    assert demo.returncode == 143, err  # 128 + SIGTERM
    assert err == f"rlnb demo: stopped (SIGTERM); the steps so far are in {out / 'run'} (rlnb.History.load)\n"

"""``rlnb serve`` stopped by what a terminal or a pipe does to it: a hang-up (the terminal closed, an ssh session
dropped), its output closed (``rlnb serve | head -1``), its errors closed while it stops. Each is a clean stop: its
checkpoints' temporary folder removed, an exit status that says what happened, no traceback."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rlnb.engine.held import SCRATCH_PREFIX

ROOT = str(Path(__file__).resolve().parents[1])
EXIT_DEADLINE = 120.0
"""Seconds the server may take to start or stop: it imports torch, slowly on a loaded machine."""

pytestmark = [pytest.mark.slow, pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")]  # processes


def _serve(tmp_path: Path, **popen) -> subprocess.Popen:
    argv = [sys.executable, "-m", "rlnb.cli", "serve", "--device", "cpu", "--port", "0"]
    env = {**os.environ, "PYTHONPATH": ROOT, "TMPDIR": str(tmp_path)}
    return subprocess.Popen(argv, env=env, text=True, **popen)


def _announced(server: subprocess.Popen) -> None:
    line = server.stdout.readline()  # the server's own deadline: the test's timeout
    assert line.startswith("rlnb serve: http://"), line


def test_serve_hung_up_stops_as_at_sigterm_and_removes_its_checkpoints_folder(tmp_path):
    """SIGHUP (the terminal closed) killed it by the default action: status -1, its checkpoints' temporary folder
    left behind, its operations never told they were stopped."""
    server = _serve(tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _announced(server)
    assert list(tmp_path.glob(f"{SCRATCH_PREFIX}*"))
    server.send_signal(signal.SIGHUP)
    _, err = server.communicate(timeout=EXIT_DEADLINE)
    assert server.returncode == 0, err
    assert "Traceback" not in err and not list(tmp_path.glob(f"{SCRATCH_PREFIX}*"))


def test_serve_whose_output_is_closed_stops_with_one_line_and_exit_141(tmp_path):
    """``rlnb serve | head -1``: a ``BrokenPipeError`` traceback from the announcement, exit status 1."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the server says where it listens
    try:
        server = _serve(tmp_path, stdout=write, stderr=subprocess.PIPE)
    finally:
        os.close(write)
    _, err = server.communicate(timeout=EXIT_DEADLINE)
    assert (server.returncode, err) == (141, "rlnb serve: stopped, its output was closed\n")
    assert not list(tmp_path.glob(f"{SCRATCH_PREFIX}*"))


def test_serve_whose_reader_leaves_after_the_announcement_stops_with_one_line_and_exit_141(tmp_path):
    """``URL=$(rlnb serve | head -1)``: ``head`` reads the address and exits, and the server, which writes nothing
    more to its output, served on for ever: the script never went on (review41i F2)."""
    server = _serve(tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _announced(server)
    assert list(tmp_path.glob(f"{SCRATCH_PREFIX}*"))
    server.stdout.close()  # the reader is gone: nothing is written to find the pipe closed
    try:
        _, err = server.communicate(timeout=EXIT_DEADLINE)
    finally:
        server.kill()  # a server still serving at the deadline: not left running after the test
    assert (server.returncode, err) == (141, "rlnb serve: stopped, its output was closed\n")
    assert not list(tmp_path.glob(f"{SCRATCH_PREFIX}*"))


def test_serve_stopped_by_ctrl_c_with_its_errors_closed_exits_130(tmp_path):
    """``rlnb serve 2>&1 | ...`` whose reader is gone: the line saying it stopped raised ``BrokenPipeError`` into
    the closed pipe, a traceback no one saw, exit status 1 (and, with an operation abandoned, the process waited
    for it: the exit that skips the torch workers came after that line)."""
    read, write = os.pipe()
    try:
        server = _serve(tmp_path, stdout=subprocess.PIPE, stderr=write)
    finally:
        os.close(write)
    _announced(server)
    os.close(read)
    server.send_signal(signal.SIGINT)
    server.communicate(timeout=EXIT_DEADLINE)
    assert server.returncode == 130
    assert not list(tmp_path.glob(f"{SCRATCH_PREFIX}*"))


def test_demo_hung_up_says_where_the_steps_are_and_exits_129(tmp_path):
    """SIGHUP (the terminal closed under a demo run over ssh) killed it by the default action, its session never
    closed and no word of the steps it kept, where SIGTERM and Ctrl-C said both."""
    argv = [sys.executable, "-m", "rlnb.cli", "demo", "--steps", "500", "--device", "cpu", "--out", str(tmp_path)]
    env = {**os.environ, "PYTHONPATH": ROOT}
    with subprocess.Popen(argv, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        for line in proc.stdout:
            if line.lstrip().startswith("1 "):  # the first step's row
                break
        proc.send_signal(signal.SIGHUP)
        err = proc.stderr.read()
        proc.wait(timeout=EXIT_DEADLINE)
    assert proc.returncode == 129, err  # 128 + SIGHUP
    assert err == f"rlnb demo: stopped (SIGHUP); the steps so far are in {tmp_path / 'run'} (rlnb.History.load)\n"


def test_serve_started_with_its_output_closed_serves_and_keeps_its_files_off_that_descriptor(tmp_path):
    """``rlnb serve >&-`` (a service manager's or a script's closed stdout): uvicorn's log setup read
    ``sys.stdout.isatty()`` of ``None``, a traceback, exit 1, before it listened. The closed descriptor is the null
    device's: the lowest free descriptor is the next file opened, and what writes to stdout must not reach it."""
    import time

    import httpx

    from rlnb.testing import free_port

    port = free_port()
    argv = [sys.executable, "-m", "rlnb.cli", "serve", "--device", "cpu", "--port", str(port)]
    env = {**os.environ, "PYTHONPATH": ROOT, "TMPDIR": str(tmp_path)}
    closing = lambda: os.close(1)  # noqa: E731 - in the child, after its standard streams are set
    server = subprocess.Popen(argv, env=env, text=True, stderr=subprocess.PIPE, preexec_fn=closing)  # noqa: PLW1509
    deadline = time.monotonic() + EXIT_DEADLINE
    while server.poll() is None and time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.2)
    assert server.poll() is None, server.communicate()[1]
    assert os.readlink(f"/proc/{server.pid}/fd/1") == os.devnull
    server.send_signal(signal.SIGTERM)
    _, err = server.communicate(timeout=EXIT_DEADLINE)
    assert (server.returncode, err) == (0, "")

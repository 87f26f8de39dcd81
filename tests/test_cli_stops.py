"""The command line stopped from outside (Ctrl-C, SIGTERM, a closed pipe) at any point: one line saying what was
kept, the conventional exit status, no traceback, nothing of its own left behind."""

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from rlnb.cli import main
from rlnb.engine.held import SCRATCH_PREFIX
from rlnb.testing import free_port

ROOT = str(Path(__file__).resolve().parents[1])
EXIT_DEADLINE = 120.0
"""Seconds a stopped command may take to exit: it imports torch first, slowly on a loaded machine."""


@pytest.mark.parametrize("command", ["demo", "serve"])
def test_ctrl_c_before_the_subcommand_runs_is_one_line_and_130(command, monkeypatch, capsys):
    """Ctrl-C while the arguments are read (before a subcommand's own handler) was a KeyboardInterrupt traceback."""

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("argparse.ArgumentParser.parse_known_args", interrupted)
    assert main([command]) == 130
    assert capsys.readouterr().err == "rlnb: stopped (Ctrl-C)\n"


@pytest.mark.slow  # a Python process
def test_the_command_line_reads_its_arguments_without_the_heavy_libraries():
    """``rlnb --help`` took 2.4 s (``import rlnb``: pandas, pydantic, numpy), and a Ctrl-C in them printed a traceback
    before ``main`` ran: the console script and each ``--help`` import none of them."""
    code = (
        "import sys\n"
        "from rlnb.cli import main\n"
        "for argv in (['--help'], ['demo', '--help'], ['serve', '--help']):\n"
        "    try:\n        main(argv)\n    except SystemExit as e:\n        assert e.code == 0, e\n"
        "heavy = {'torch', 'pandas', 'pydantic', 'numpy', 'uvicorn', 'fastapi', 'transformers', 'matplotlib'}\n"
        "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}), file=sys.stderr)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": ROOT})  # fmt: skip
    assert (out.returncode, out.stderr) == (0, "[]\n")


def test_serve_stopped_by_ctrl_c_while_it_starts_says_so_and_leaves_no_checkpoints_folder(
    tmp_path, monkeypatch, capsys
):
    """Ctrl-C during the start-up (torch's import, a model's load: seconds) was a KeyboardInterrupt traceback."""

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr("rlnb.server.app.app_for", interrupted)
    assert main(["serve", "--device", "cpu", "--port", str(free_port())]) == 130
    assert capsys.readouterr().err == "rlnb serve: stopped (Ctrl-C) before it listened\n"
    assert not list(tmp_path.glob(f"{SCRATCH_PREFIX}*"))


@pytest.mark.slow  # a process that imports torch
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_serve_stopped_by_sigterm_while_it_starts_exits_0_and_removes_its_checkpoints_folder(tmp_path):
    """SIGTERM before it listened killed it by the default action (status -15): its checkpoints' temporary folder
    stayed until the next ``rlnb serve`` of that temporary directory."""
    stall = ("import os, signal, time, runpy, rlnb.server.app as a; "
             "a.app_for = lambda *x, **k: (os.kill(os.getpid(), signal.SIGTERM), time.sleep(60)); "
             "runpy.run_module('rlnb.cli', run_name='__main__')")  # fmt: skip
    env = {**os.environ, "PYTHONPATH": ROOT, "TMPDIR": str(tmp_path)}
    argv = [sys.executable, "-c", stall, "serve", "--device", "cpu", "--port", str(free_port())]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=EXIT_DEADLINE)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and not list(tmp_path.glob(f"{SCRATCH_PREFIX}*"))


def _demo(out: Path, steps: int, **popen) -> subprocess.Popen:
    argv = [sys.executable, "-m", "rlnb.cli", "demo", "--steps", str(steps), "--device", "cpu", "--out", str(out)]
    return subprocess.Popen(argv, env={**os.environ, "PYTHONPATH": ROOT}, text=True, **popen)


@pytest.mark.slow  # builds the tiny model and trains a step, twice (~6 s)
def test_demo_run_again_after_an_interrupt_says_it_replaces_the_steps_it_said_were_kept(tmp_path, monkeypatch, capsys):
    """Ctrl-C said "the steps so far are in OUT/run"; the next demo in OUT deleted them without a word."""
    import rlnb.tasks

    real = rlnb.tasks.rl_step

    def interrupted(*args, **kwargs):
        monkeypatch.setattr(rlnb.tasks, "rl_step", real)
        raise KeyboardInterrupt

    monkeypatch.setattr(rlnb.tasks, "rl_step", interrupted)
    demo = ["demo", "--steps", "1", "--device", "cpu", "--out", str(tmp_path)]
    assert main(demo) == 130
    assert "the steps so far are in" in capsys.readouterr().err
    assert main(demo) == 0
    assert capsys.readouterr().err == f"rlnb demo: replacing the earlier output in {tmp_path}: run/\n"
    assert main(demo) == 0
    replaced = f"rlnb demo: replacing the earlier output in {tmp_path}: run/, history.csv, rewards.csv, demo.png\n"
    assert capsys.readouterr().err == replaced


@pytest.mark.slow  # a process that imports torch and trains the tiny model (~10 s)
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_demo_stopped_by_sigterm_says_where_the_steps_are_and_exits_143(tmp_path):
    """SIGTERM (``timeout``, a scheduler) killed it by the default action: no word of the steps it kept."""
    with _demo(tmp_path, 500, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        for line in proc.stdout:
            if line.lstrip().startswith("1 "):  # the first step's row
                break
        proc.send_signal(signal.SIGTERM)
        err = proc.stderr.read()
        proc.wait(timeout=EXIT_DEADLINE)
    assert proc.returncode == 143, err
    assert err == f"rlnb demo: stopped (SIGTERM); the steps so far are in {tmp_path / 'run'} (rlnb.History.load)\n"


@pytest.mark.slow  # a process that imports torch and builds the tiny model (~8 s)
def test_demo_whose_output_and_errors_are_one_closed_pipe_exits_141(tmp_path):
    """``rlnb demo 2>&1 | head -2``: the line saying it stopped raised into the closed pipe too, exit status 1."""
    with _demo(tmp_path, 500, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("rlnb demo: task=first_letter")
        proc.stdout.close()  # as head does once it has its lines
        proc.wait(timeout=EXIT_DEADLINE)
    assert proc.returncode == 141

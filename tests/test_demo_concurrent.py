"""Two ``rlnb demo`` runs in one ``--out`` at once: the second is refused before anything in the folder moves,
with words that say a demo is running there (its session holds ``run/``)."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rlnb.cli import main
from rlnb.cli.demo.files import EARLIER, MANIFEST
from rlnb.history.store import RunStore


def _files(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _running_demo(out, *, earlier):
    """What a demo training in ``out`` leaves there: its session's run folder, open, the manifest naming it, and
    (``earlier``) the output of the demo before it, set aside."""
    out.mkdir()
    if earlier:
        (out / EARLIER).mkdir()
        (out / EARLIER / "history.csv").write_text("the earlier demo's")
    (out / MANIFEST).write_text(json.dumps({"run/": ""}))
    store = RunStore(out / "run")
    store.write_op({"kind": "sample"})
    return store


def test_a_second_demo_in_the_folder_of_one_that_runs_is_refused_before_it_moves_anything(tmp_path, capsys):
    out = tmp_path / "out"
    store = _running_demo(out, earlier=False)
    before = _files(out)
    try:
        # the manifest of the running demo was moved into EARLIER before the lock was tried, and left there
        assert main(["demo", "--steps", "1", "--device", "cpu", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err == (
            f"rlnb demo: {out / 'run'} is being written by another rlnb session (pid {os.getpid()}): is a demo "
            f"running in {out}? wait for it or pick another --out\n"
        ), err
        assert _files(out) == before and not (out / EARLIER).exists()
    finally:
        store.close()


def test_a_demo_in_the_folder_of_one_that_runs_is_not_told_that_a_demo_stopped_there(tmp_path, capsys):
    """The running demo set the output before it aside: that folder was said to be a stopped demo's."""
    out = tmp_path / "out"
    store = _running_demo(out, earlier=True)
    before = _files(out)
    try:
        assert main(["demo", "--steps", "1", "--device", "cpu", "--out", str(out), "--force"]) == 2
        assert capsys.readouterr().err.startswith(
            f"rlnb demo: {out / 'run'} is being written by another rlnb session (pid {os.getpid()}): is a demo "
        )
        assert _files(out) == before
    finally:
        store.close()


@pytest.mark.slow  # a process that imports torch and trains the tiny model
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_demo_in_the_folder_of_a_demo_process_training_there_is_told_it_runs(tmp_path, capsys):
    """Two real demos: the second, in the folder of the first (which set an earlier output aside), names its pid."""
    out = tmp_path / "out"
    demo = ["demo", "--steps", "1", "--device", "cpu", "--out", str(out)]
    assert main(demo) == 0  # the earlier output the first sets aside
    argv = [sys.executable, "-m", "rlnb.cli", *demo[:2], "500", *demo[3:]]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    with subprocess.Popen(argv, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as first:
        try:
            assert first.stdout is not None
            for line in first.stdout:
                if line.lstrip().startswith("1 "):  # its first step's row: it trains
                    break
            capsys.readouterr()
            assert main(demo) == 2
            assert capsys.readouterr().err == (
                f"rlnb demo: another rlnb demo is running in {out} (pid {first.pid}): wait for it to end or pick "
                "another --out\n"
            )
        finally:
            first.send_signal(signal.SIGTERM)
            first.communicate(timeout=120)
    assert first.returncode == 143 and (out / EARLIER).is_dir()  # it stopped once it had steps: the earlier kept

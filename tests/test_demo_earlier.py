"""``rlnb demo`` over an earlier demo's output, or with ``--force`` over the user's: what was there survives a run
that fails after it started. ``--force`` deleted it before training, so a Ctrl-C (or a run that then failed) had
lost the user's files; now they are set aside while it trains and deleted only once a step completed."""

import pytest

import rlnb
import rlnb.tasks.lesson
from rlnb.cli import main
from rlnb.cli.demo_files import EARLIER, MANIFEST
from rlnb.history.store import RunStore

pytestmark = pytest.mark.slow  # each builds the tiny model (~2 s) and most train a step


def _users_files(out):
    """A history.csv and rewards.csv of the user's, and a run folder rlnb wrote that no demo did."""
    out.mkdir()
    (out / "history.csv").write_text("my notes")
    (out / "rewards.csv").write_text("my rewards")
    store = RunStore(out / "run")
    store.write_op({"kind": "sample"})
    store.close()
    return {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def _files(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_forced_demo_stopped_before_it_recorded_anything_puts_the_users_files_back(tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    before = _users_files(out)

    def interrupted(*args, **kwargs):  # the first thing the session does: before any operation is recorded
        raise KeyboardInterrupt

    monkeypatch.setattr(rlnb.tasks.lesson, "log_accuracy", interrupted)
    assert main(["demo", "--steps", "1", "--device", "cpu", "--out", str(out), "--force"]) == 130
    err = capsys.readouterr().err
    assert err.endswith(f"rlnb demo: interrupted; it recorded nothing: the earlier output in {out} is back\n"), err
    assert _files(out) == before and not (out / EARLIER).exists()  # no manifest claims them as the demo's
    assert main(["demo", "--steps", "1", "--device", "cpu", "--out", str(out)]) == 2  # still the user's
    assert "holds files no earlier rlnb demo wrote there (history.csv, rewards.csv, run/)" in capsys.readouterr().err


def test_a_forced_demo_stopped_after_it_recorded_steps_keeps_both_runs_until_one_completes(
    tmp_path, monkeypatch, capsys
):
    out = tmp_path / "out"
    before = _users_files(out)
    real = rlnb.tasks.rl_step

    def interrupted(*args, **kwargs):  # after the held-out accuracy was sampled: the new run holds operations
        monkeypatch.setattr(rlnb.tasks, "rl_step", real)
        raise KeyboardInterrupt

    monkeypatch.setattr(rlnb.tasks, "rl_step", interrupted)
    demo = ["demo", "--steps", "1", "--device", "cpu", "--out", str(out)]
    assert main([*demo, "--force"]) == 130
    assert capsys.readouterr().err.endswith(
        f"rlnb demo: interrupted; the steps so far are in {out / 'run'} (rlnb.History.load); the earlier demo's "
        f"output is kept in {out / EARLIER}\n"
    )
    assert _files(out / EARLIER) == before  # the user's files, each as it was
    assert len(rlnb.History.load(out / "run").records) > 0  # and the new run's operations
    assert main([*demo, "--force"]) == 2  # a second run never sets aside over the first one's earlier output
    assert capsys.readouterr().err.startswith(f"rlnb demo: {out / EARLIER} holds an earlier demo's output")
    assert _files(out / EARLIER) == before
    (out / EARLIER / "history.csv").rename(tmp_path / "history.csv")  # the user moves what they want away
    for p in sorted((out / EARLIER).rglob("*"), reverse=True):
        p.rmdir() if p.is_dir() else p.unlink()
    (out / EARLIER).rmdir()
    assert main(demo) == 0  # the stopped run was the demo's own: replaced without --force, once a step completed
    assert not (out / EARLIER).exists() and len(rlnb.History.load(out / "run").steps) == 1
    assert (tmp_path / "history.csv").read_text() == "my notes" and (out / MANIFEST).exists()


def test_a_demo_whose_steps_all_fail_keeps_the_earlier_demos_output(tmp_path, monkeypatch, capsys):
    """Its earlier output was deleted before training; a run with no completed step is no success to replace it."""
    out = tmp_path / "out"
    demo = ["demo", "--steps", "1", "--device", "cpu", "--out", str(out)]
    assert main(demo) == 0
    before = _files(out)

    from rlnb.engine.optim.trainer import NonFiniteGradient, TrainerOptimizer

    def diverged(self, hp):  # every optim-step fails: the weights diverged
        raise NonFiniteGradient(float("nan"), ["wte.weight"])

    monkeypatch.setattr(TrainerOptimizer, "step", diverged)
    capsys.readouterr()
    assert main(demo) == 1
    assert capsys.readouterr().err.endswith(f"; the earlier demo's output is kept in {out / EARLIER}\n")
    assert _files(out / EARLIER) == before


def test_a_completed_demo_whose_earlier_output_cannot_be_deleted_says_so_in_one_line(tmp_path, monkeypatch, capsys):
    """The run completed and wrote its files; deleting what it set aside failed (a file held open on Windows, a
    read-only mount): an ``OSError`` traceback, exit 1, as if the run had failed."""
    import shutil

    out = tmp_path / "out"
    demo = ["demo", "--steps", "1", "--device", "cpu", "--out", str(out)]
    assert main(demo) == 0
    real = shutil.rmtree

    def refused(path, *args, **kwargs):
        if str(path).endswith(EARLIER):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", refused)
    capsys.readouterr()
    assert main(demo) == 0
    err = capsys.readouterr().err
    assert err.endswith(
        f"rlnb demo: the run completed, but the earlier output set aside in {out / EARLIER} could not be deleted "
        f"([Errno 13] Permission denied: '{out / EARLIER}'): delete it, or the next demo in {out} stops before "
        "training\n"
    ), err
    assert len(rlnb.History.load(out / "run").steps) == 1 and (out / EARLIER / "run").is_dir()


def test_a_demo_that_cannot_write_its_files_after_training_says_so_in_one_line(tmp_path, monkeypatch, capsys):
    """A full disk once the steps are recorded: an ``OSError`` traceback, and no word of where the steps and the
    earlier output are."""
    out = tmp_path / "out"
    demo = ["demo", "--steps", "1", "--device", "cpu", "--out", str(out)]
    assert main(demo) == 0
    before = _files(out)

    def full(self, path, *args, **kwargs):
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(rlnb.History, "to_csv", full)
    capsys.readouterr()
    assert main(demo) == 1
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == (
        f"rlnb demo: [Errno 28] No space left on device: '{out / 'history.csv'}'; the steps so far are in "
        f"{out / 'run'} (rlnb.History.load); the earlier demo's output is kept in {out / EARLIER}"
    ), err
    assert _files(out / EARLIER) == before and len(rlnb.History.load(out / "run").steps) == 1


def test_a_ctrl_c_while_the_demo_says_what_it_replaces_puts_the_earlier_output_back(tmp_path, monkeypatch, capsys):
    """Its "replacing the earlier output" line was written outside both blocks that put the output back: a Ctrl-C
    there (stderr piped into a pager that waits) left it set aside beside an empty run, and the session open."""
    import sys

    out = tmp_path / "out"
    demo = ["demo", "--steps", "1", "--device", "cpu", "--out", str(out)]
    assert main(demo) == 0
    before = _files(out)
    capsys.readouterr()
    opened = []
    real_session = rlnb.Session

    def session(*args, **kwargs):
        opened.append(real_session(*args, **kwargs))
        return opened[-1]

    class Stderr:
        def write(self, text):
            if "replacing the earlier output" in text:
                raise KeyboardInterrupt
            return sys.__stderr__.write(text)

        def flush(self):
            pass

    monkeypatch.setattr(rlnb, "Session", session)
    monkeypatch.setattr(sys, "stderr", Stderr())
    assert main(demo) == 130
    monkeypatch.undo()
    assert _files(out) == before and not (out / EARLIER).exists()
    assert opened[0].closed  # its run folder's lock let go, the backend's threads stopped

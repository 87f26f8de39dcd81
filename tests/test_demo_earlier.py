"""``rlnb demo`` over an earlier demo's output, or with ``--force`` over the user's: what was there survives a run
that fails after it started. ``--force`` deleted it before training, so a Ctrl-C (or a run that then failed) had
lost the user's files; now they are set aside while it trains and deleted only once a step completed."""

import pytest

import rlnb
import rlnb.tasks.lesson
from rlnb.cli import main
from rlnb.cli.demo.aside import DELETING, LOCK
from rlnb.cli.demo.files import EARLIER, MANIFEST
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
    """Each file's bytes, but the demo lock's (its holder's pid)."""
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file() and p.name != LOCK}


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
    """The next demo then runs (it stopped before training until the user moved the folder away): it replaces the
    stopped run, its own, and the user's files stay in the folder the stopped demo set them aside in."""
    out = tmp_path / "out"
    before = _users_files(out)
    _interrupt_the_next_step(monkeypatch)
    demo = ["demo", "--steps", "1", "--device", "cpu", "--out", str(out)]
    assert main([*demo, "--force"]) == 130
    assert capsys.readouterr().err.endswith(
        f"rlnb demo: interrupted; the steps so far are in {out / 'run'} (rlnb.History.load); the earlier demo's "
        f"output is kept in {out / EARLIER}\n"
    )
    assert _files(out / EARLIER) == before  # the user's files, each as it was
    assert len(rlnb.History.load(out / "run").records) > 0  # and the new run's operations
    assert main(demo) == 0  # the stopped run was the demo's own: replaced without --force, once a step completed
    assert capsys.readouterr().err.startswith(
        f"rlnb demo: the output stopped demos set aside stays in {out / EARLIER} (delete it once you no longer need "
        f"it); this run's earlier output goes into {out / EARLIER}-2\n"
    )  # it stopped before training while that folder was there, until the user moved or deleted it
    assert _files(out / EARLIER) == before and not (out / f"{EARLIER}-2").exists()
    assert len(rlnb.History.load(out / "run").steps) == 1 and (out / MANIFEST).exists()


def _interrupt_the_next_step(monkeypatch):
    real = rlnb.tasks.rl_step

    def interrupted(*args, **kwargs):  # once the held-out accuracy was sampled: the run holds operations
        monkeypatch.setattr(rlnb.tasks, "rl_step", real)
        raise KeyboardInterrupt

    monkeypatch.setattr(rlnb.tasks, "rl_step", interrupted)


def test_demos_stopped_one_after_another_each_keep_what_they_set_aside(tmp_path, monkeypatch, capsys):
    """Each stopped demo's aside folder is kept, numbered; the demo that completes deletes only its own."""
    out = tmp_path / "out"
    demo = ["demo", "--steps", "1", "--device", "cpu", "--out", str(out)]
    assert main(demo) == 0
    complete = _files(out)
    _interrupt_the_next_step(monkeypatch)
    assert main(demo) == 130
    partial = _files(out / "run")
    _interrupt_the_next_step(monkeypatch)
    capsys.readouterr()
    assert main(demo) == 130
    err = capsys.readouterr().err
    assert err.endswith(f"the earlier demos' outputs are kept in {out / EARLIER}, {out / EARLIER}-2\n"), err
    assert _files(out / EARLIER) == complete and _files(out / f"{EARLIER}-2" / "run") == partial
    assert main(demo) == 0
    assert capsys.readouterr().err.startswith(
        f"rlnb demo: the output stopped demos set aside stays in {out / EARLIER}, {out / EARLIER}-2 (delete it once "
        f"you no longer need it); this run's earlier output goes into {out / EARLIER}-3\n"
    )
    assert _files(out / EARLIER) == complete and _files(out / f"{EARLIER}-2" / "run") == partial
    assert not (out / f"{EARLIER}-3").exists() and len(rlnb.History.load(out / "run").steps) == 1


def test_a_demo_whose_steps_all_fail_keeps_the_earlier_demos_output(tmp_path, monkeypatch, capsys):
    """Its earlier output was deleted before training; a run with no completed step is no success to replace it."""
    out = tmp_path / "out"
    demo = ["demo", "--steps", "1", "--device", "cpu", "--out", str(out)]
    assert main(demo) == 0
    before = _files(out)

    from rlnb.engine.optim.failures import NonFiniteGradient
    from rlnb.engine.optim.trainer import TrainerOptimizer

    def diverged(self, hp, *, checked=False):  # every optim-step fails: the weights diverged
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
        if str(path).endswith(DELETING):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", refused)
    capsys.readouterr()
    assert main(demo) == 0
    err = capsys.readouterr().err
    assert err.endswith(
        f"rlnb demo: the run completed, but the earlier output it replaced, set aside in {out / DELETING}, could not "
        f"be deleted ([Errno 13] Permission denied: '{out / DELETING}'): delete it\n"
    ), err
    assert len(rlnb.History.load(out / "run").steps) == 1 and (out / DELETING / "run").is_dir()
    monkeypatch.undo()
    assert main(demo) == 0 and not (out / DELETING).exists()  # the next demo deletes it, and stops for nothing


def test_a_ctrl_c_while_a_completed_demo_deletes_what_it_replaced_exits_0_saying_it_completed(
    tmp_path, monkeypatch, capsys
):
    """It completed and wrote its files, then exited 130 saying "interrupted; the steps so far are in ...", and left
    a half-deleted output in the aside folder, which the next demo refused (later: kept as a stopped demo's)."""
    import shutil
    from pathlib import Path

    out = tmp_path / "out"
    demo = ["demo", "--steps", "1", "--device", "cpu", "--out", str(out)]
    assert main(demo) == 0
    real = shutil.rmtree

    def interrupted(path, *args, **kwargs):  # a Ctrl-C half way through the deletion
        if Path(path).name.startswith(".rlnb-demo-"):
            (Path(path) / "history.csv").unlink()
            raise KeyboardInterrupt
        return real(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", interrupted)
    capsys.readouterr()
    assert main(demo) == 0
    assert capsys.readouterr().err.endswith(
        "rlnb demo: the run completed and wrote its files; stopped deleting the output it replaced: the next demo in "
        f"{out} deletes the rest\n"
    )
    assert len(rlnb.History.load(out / "run").steps) == 1 and (out / DELETING / "run").is_dir()
    monkeypatch.undo()
    assert main(demo) == 0
    assert "stopped demos set aside" not in capsys.readouterr().err  # no half-deleted output kept as a stopped one's
    assert not (out / DELETING).exists() and not (out / EARLIER).exists()


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


def test_a_demo_whose_disk_filled_while_it_wrote_its_files_leaves_none_that_stops_the_next(tmp_path, monkeypatch):
    """A full disk half way through history.csv (seen on a 600 kB tmpfs): the empty file it left was named by no
    manifest, so the next demo there stopped before training as if it were the user's."""
    out = tmp_path / "out"
    demo = ["demo", "--steps", "1", "--device", "cpu", "--out", str(out)]
    real = rlnb.History.to_csv

    def full(self, path, *args, **kwargs):
        path.write_text("step,")  # what fitted
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(rlnb.History, "to_csv", full)
    assert main(demo) == 1
    assert not (out / "history.csv").exists() and len(rlnb.History.load(out / "run").steps) == 1
    monkeypatch.setattr(rlnb.History, "to_csv", real)
    assert main(demo) == 0  # the space freed: it runs, without --force

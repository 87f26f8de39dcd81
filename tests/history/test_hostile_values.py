"""A hostile user's values and folders: losses past the largest float, steps and completions handed in as numpy or
torch scalars, a run folder whose files are links, annotations JSON has no type for. Each must keep what was
recorded, or refuse it naming the field before anything is kept."""

import math
import os
import re
import sys
import warnings
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch

import rlnb
from rlnb import samples, wire
from rlnb._files import hold_lock, write_new
from rlnb.history import History
from rlnb.history.store import RunStore, RunStoreWarning
from rlnb.testing import FakeBackend

BATCH = [samples.cross_entropy(list(b"values"))]
ROW = {"group": 0, "prompt": "2+2=", "completion": "4", "reward": 1.0, "advantage": 0.5, "length": 2,
       "truncated": False}  # fmt: skip


def answering(losses) -> FakeBackend:
    """A backend whose forward-backwards complete with ``losses``, one each, as a hostile server may answer: ±inf
    among them (a ``FakeBackend`` of its own fails a non-finite loss ``NON_FINITE_LOSS``, as the engine does)."""
    backend, given = FakeBackend(), iter(losses)
    submit = backend.submit

    def answered(kind, body, listener):
        def told(env):
            if kind == wire.OperationKind.FORWARD_BACKWARD and env.status == wire.OperationStatus.COMPLETED:
                env = env.model_copy(update={"output": env.output.model_copy(update={"loss": next(given)})})
            listener(env)

        submit(kind, body, told)

    backend.submit = answered
    return backend


@pytest.mark.parametrize(
    ("losses", "total"),
    [((1e308, 1e308), math.inf), ((math.inf, -math.inf), math.nan), ((1e308, 1e308, -1e308), 1e308)],
)
def test_losses_whose_sum_passes_the_largest_float_are_recorded_and_summed(tmp_path, losses, total):
    """Two forward-backwards of loss 1e308 in one step (a hostile server's answer, a custom loss): ``math.fsum``
    raised ``OverflowError`` while the second was recorded (on the backend's thread: "recording forward-backward ...
    failed"), so its line never reached the run folder (PENDING for ever there) and the step's loss read 1e308."""
    session = rlnb.Session(answering(losses), runs_dir=tmp_path, run_id="big")
    for _ in losses:
        session.forward_backward(BATCH)
    session.optim_step()
    session.wait()
    session.close()
    loaded = History.load(tmp_path / "big")
    for history in (session.history, loaded):
        assert list(history.df.status.map(str)) == ["TRAINING_OPERATION_STATUS_COMPLETED"] * (len(losses) + 1)
        assert list(history.df.loss[: len(losses)]) == list(losses)
        step_loss = history.steps.loss.iloc[0]
        assert step_loss == total or math.isnan(total) and math.isnan(step_loss)


NOT_STEPS = [torch.tensor(1.7), np.array(2.5), torch.tensor(True), torch.tensor([3]), np.float64(4.0)]


@pytest.mark.parametrize("step", NOT_STEPS)
def test_a_step_that_is_no_integer_is_refused_whatever_holds_it(tmp_path, step):
    """``log(1.7, ...)`` was refused, yet ``log(torch.tensor(1.7), ...)`` was recorded at step 1 (and ``np.array(2.5)``
    at 2, ``torch.tensor(True)`` at 1, a one-element array at its value): ``int()`` cut what ``__index__`` would have
    refused. ``log_completions`` the same."""
    history = History.create({"optimizer": "adam"}, tmp_path, "steps")
    with pytest.raises(ValueError, match=r"history\.log: step must be an integer >= 0 and < 2\*\*63, got "):
        history.log(step, reward=0.5)
    with pytest.raises(ValueError, match=r"history\.log_completions: step must be an integer >= 0 and < 2\*\*63"):
        history.log_completions(step, [ROW])
    history.log(torch.tensor(3), reward=0.5)  # integers, numpy's and torch's, are steps
    history.log_completions(np.int64(3), [ROW])
    history.close()
    loaded = History.load(tmp_path / "steps")
    assert loaded.logged.to_dict("records") == [{"step": 3, "reward": 0.5}]
    assert list(loaded.completions.step) == [3]


def test_completions_of_numpy_and_torch_scalars_are_kept_as_the_numbers_they_hold(tmp_path):
    """A reward computed with numpy (``np.float32``), a length from ``len`` of a tensor's row (``np.int64``), a
    ``truncated`` from a comparison of arrays (``np.True_``), a reward as a 0-d tensor: each was refused
    ("rows[0]: reward = np.float32(0.5)"), where ``history.log`` takes them as the numbers they hold."""
    history = History.create({"optimizer": "adam"}, tmp_path, "rl")
    given = {"group": np.int64(1), "prompt": np.str_("1+1="), "completion": "2", "reward": np.float32(0.5),
             "advantage": torch.tensor(-0.25), "length": np.int32(3), "truncated": np.True_}  # fmt: skip
    history.log_completions(1, [given])
    with pytest.raises(ValueError, match=r"rows\[0\]: group = True"):  # a bool is still no group
        history.log_completions(2, [{**given, "group": np.True_}])
    with pytest.raises(ValueError, match=r"rows\[0\]: length = 2\.0"):  # nor a float a length
        history.log_completions(2, [{**given, "length": np.float64(2.0)}])
    with pytest.raises(ValueError, match=r"rows\[0\]: length = -1 \(tokens: >= 0\)"):
        history.log_completions(2, [{**given, "length": np.int64(-1)}])
    history.close()
    want = {"step": 1, "group": 1, "prompt": "1+1=", "completion": "2", "reward": 0.5, "advantage": -0.25,
            "length": 3, "truncated": True}  # fmt: skip
    for table in (history.completions, History.load(tmp_path / "rl").completions):
        assert table.to_dict("records") == [want]
    kept = history.latest_completions()[0]  # plain Python values, as JSON and the table take them
    assert {k: type(v) for k, v in kept.items()} == {k: type(v) for k, v in want.items()}


@pytest.mark.parametrize("name", ["run.lock", "ops.jsonl", "metrics.jsonl", "completions.jsonl", "config.json.tmp"])
def test_a_run_folder_whose_files_are_links_is_never_written_through(tmp_path, name):
    """A run folder from elsewhere (a tarball, ``cp -a``) whose ``run.lock`` links to the user's notes: continuing it
    (``connect(..., run_id=...)``) wrote the session's pid over them, already in the check before the model loaded;
    an ``ops.jsonl`` / ``metrics.jsonl`` link had every line appended to its target (``~/.bashrc``), a
    ``config.json.tmp`` link the config written over it."""
    with rlnb.Session(FakeBackend(), runs_dir=tmp_path / "runs", run_id="r") as first:
        first.forward_backward(BATCH)
        first.history.log_completions(0, [ROW])
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    link = tmp_path / "runs" / "r" / name
    link.unlink(missing_ok=True)
    link.symlink_to(notes)
    with pytest.raises(ValueError, match=rf"run_id 'r': .*r/{name} is a symbolic link \(to '.*notes\.txt'\)"):
        rlnb.Session(FakeBackend(), runs_dir=tmp_path / "runs", run_id="r")
    with pytest.raises(ValueError, match=rf"{name} is a symbolic link"):
        History.create({"optimizer": "adam"}, tmp_path / "runs", "r")
    # a link made after the check (between two sessions' starts): the store writes nothing through it either
    with pytest.warns(RunStoreWarning, match=rf"cannot write the run folder .*: .*{name}.* is a symbolic link"):
        store = RunStore(tmp_path / "runs" / "r")
        store.write_op({"seq": 9, "kind": "sample"})
        store.write_metrics({"step": 9, "x": 1.0})
        store.write_completions([{**ROW, "step": 9}])
        store.write_config({"run_id": "r"})
    store.close()
    assert notes.read_text() == "my notes\n"


def test_a_lock_file_that_is_a_link_is_refused_not_written_over(tmp_path):
    """``hold_lock`` (a run's, a sweep's, a server's lock) wrote its pid over what a link of that name led to."""
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    (tmp_path / "sweep.lock").symlink_to(notes)
    with pytest.raises(OSError, match=r"sweep\.lock is a symbolic link \(to '.*notes\.txt'\): .*remove the link"):
        hold_lock(tmp_path / "sweep.lock", "busy (pid {holder})")
    assert notes.read_text() == "my notes\n"


def test_numbers_annotated_from_numpy_or_torch_stay_numbers_on_disk(tmp_path):
    """``annotate(lr=np.float32(1e-3), n=np.int64(5))`` (a grid made with numpy, a sweep's ``sweep_config``) kept the
    numpy values in memory and wrote their ``str()`` to ``config.json``: the reloaded run (``rlnb.runs``, ``compare``)
    said ``"0.001"`` and ``"5"``, text, and an array was ``"[0 1 2]"``."""
    history = History.create({"optimizer": "adam"}, tmp_path, "notes")
    history.annotate(lr=np.float32(1e-3), n=np.int64(5), arr=np.arange(3), t=torch.tensor(0.5), half=np.float16(2),
                     nested={"k": [np.int64(1), (np.True_, None)]}, ok=np.bool_(False))  # fmt: skip
    history.close()
    want = {"lr": float(np.float32(1e-3)), "n": 5, "arr": [0, 1, 2], "t": 0.5, "half": 2.0,
            "nested": {"k": [1, [True, None]]}, "ok": False}  # fmt: skip
    for config in (history.config, History.load(tmp_path / "notes").config):
        got = {k: config[k] for k in want}
        assert got == want
        assert {k: type(v) for k, v in got.items()} == {k: type(v) for k, v in want.items()}


@pytest.mark.parametrize("under", ["", "sub"])
def test_a_runs_folder_that_is_a_dangling_link_is_refused_up_front(tmp_path, monkeypatch, under):
    """``runs_dir`` a link to a folder that is gone (an unmounted scratch disk, a deleted project): the model loaded,
    then "RunStoreWarning: cannot write the run folder (FileExistsError: [Errno 17] File exists: ...)" and the whole
    run in memory only."""
    (tmp_path / "runs").symlink_to(tmp_path / "unmounted")
    runs = tmp_path / "runs" / under
    said = re.escape(f"runs_dir '{runs}': {tmp_path / 'runs'} is a link to '{tmp_path / 'unmounted'}', which does not")
    for run_id in (None, "r"):
        with pytest.raises(ValueError, match=said):
            rlnb.Session(FakeBackend(), runs_dir=runs, run_id=run_id)
    monkeypatch.setenv("RLNB_RUNS_DIR", str(runs))
    with pytest.raises(ValueError, match=r"\$RLNB_RUNS_DIR .* is a link to .*, which does not exist"):
        rlnb.Session(FakeBackend())
    assert not (tmp_path / "unmounted").exists()


@pytest.mark.slow  # forks a process
def test_a_child_forked_while_a_run_is_recorded_does_not_keep_it_locked_after_close(tmp_path):
    """A process forked while a session records (a DataLoader's workers, a ``multiprocessing`` pool on Linux) shares
    the run's lock: after ``close()`` it stayed held until the child exited. A figure logged after the session ended
    then went to memory only ("another session may be writing the run"), and a new session on the run id was
    ``RunLocked`` "by another session (pid N)", N being the notebook's own pid."""
    history = History.create({"optimizer": "adam"}, tmp_path, "r")
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the worker: alive until the test ends (the pipe closes)
        os.close(write)
        os.read(read, 1)
        os._exit(0)
    try:
        os.close(read)
        history.close()
        with warnings.catch_warnings():
            warnings.simplefilter("error", RunStoreWarning)
            history.log(1, accuracy=0.5)  # after close: takes the lock for this write
        again = History.create({"optimizer": "adam"}, tmp_path, "r")
        again.close()
    finally:
        os.close(write)
        os.waitpid(child, 0)
    assert History.load(tmp_path / "r").logged.accuracy.tolist() == [0.5]


@pytest.mark.parametrize("how", ["deleted", "replaced"])
@pytest.mark.parametrize("name", ["ops.jsonl", "metrics.jsonl"])
def test_a_run_file_deleted_or_replaced_while_recording_is_said_and_nothing_is_lost(tmp_path, name, how):
    """``rm rlnb-runs/r/metrics.jsonl`` while the session records, or a sync tool (Dropbox, OneDrive) or ``git stash``
    putting a copy in its place: every later line went into the file no folder held any more, without a word."""
    session = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")
    session.forward_backward(BATCH)
    session.history.log(0, accuracy=0.25)
    session.wait()
    file = tmp_path / "r" / name
    if how == "deleted":
        file.unlink()
    else:
        copy = tmp_path / "copy"
        copy.write_bytes(file.read_bytes())
        os.replace(copy, file)
    with pytest.warns(RunStoreWarning, match=rf"{name} was deleted or replaced while the run was recorded"):
        session.optim_step()
        session.history.log(1, accuracy=0.5)
        session.wait()
    session.close()
    assert session.history.logged.accuracy.tolist() == [0.25, 0.5]  # in memory: history.save(folder) keeps it all
    assert len(session.history) == 2


def test_a_save_under_a_link_to_nothing_names_the_link(tmp_path):
    """``history.save("scratch/saved")`` with ``scratch`` a link to a folder that is gone: a bare ``FileExistsError:
    [Errno 17] File exists: 'scratch'`` (the folder itself a dangling link was already named)."""
    history = History()
    history.log(1, accuracy=0.5)
    (tmp_path / "scratch").symlink_to(tmp_path / "gone")
    folder = tmp_path / "scratch" / "saved"
    said = f"history.save: path '{folder}': {tmp_path / 'scratch'} is a link to '{tmp_path / 'gone'}', which does "
    with pytest.raises(ValueError, match=re.escape(said) + r"not exist .*give another folder \(nothing was written\)$"):
        history.save(folder)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scratch"]


HUGE = 10**400


@pytest.mark.parametrize(
    "value",
    [HUGE, -HUGE, Fraction(HUGE), Decimal("1e400"), "longdouble", "-longdouble"],
)
def test_a_figure_past_the_largest_float_is_refused_whatever_holds_it(value):
    """``np.longdouble("1e4000")`` and ``Decimal("1e400")`` were logged as inf, while the int ``10**400`` was refused:
    each is refused, naming the figure, before anything is kept; infinity itself, however held, is logged as inf."""
    if isinstance(value, str):
        if np.finfo(np.longdouble).max <= sys.float_info.max:
            pytest.skip("this platform's long double is a double")
        value = np.longdouble(value.replace("longdouble", "1e4000"))
    h = History()
    with pytest.raises(
        ValueError, match=r"history.log: reward must be a real number a float holds \(at most 1.8e\+308"
    ):
        h.log(1, reward=value)
    assert h.logged.empty
    h.log(1, a=np.longdouble("inf"), b=Decimal("-Infinity"), c=math.inf, d=torch.tensor(math.inf), e=np.float64(1e308))
    assert h.logged.to_dict("records") == [{"step": 1, "a": math.inf, "b": -math.inf, "c": math.inf, "d": math.inf,
                                            "e": 1e308}]  # fmt: skip


@pytest.mark.parametrize("name", ["config.json", "metrics.jsonl", "ops.jsonl"])
def test_a_save_never_writes_through_what_is_left_under_its_temporary_names(tmp_path, name):
    """``save`` writes each file as ``<name>.saving``, then renames it: a symbolic link of that name (planted, or
    copied with a folder) was written through, the run going into its target, and so was a hard link. A link is
    refused naming it, nothing written, its target untouched; a file left there (a killed save's) is replaced."""
    h = History()
    h.log(1, reward=0.5)
    target = tmp_path / "notes.txt"
    target.write_text("mine")
    folder = tmp_path / "saved"
    folder.mkdir()
    (folder / f"{name}.saving").symlink_to(target)
    with pytest.raises(OSError, match=rf"{re.escape(name)}\.saving is a symbolic link .*nothing was written"):
        h.save(folder)
    assert target.read_text() == "mine" and [p.name for p in folder.iterdir()] == [f"{name}.saving"]
    (folder / f"{name}.saving").unlink()
    os.link(target, folder / f"{name}.saving")  # the same file under the temporary name
    loaded = History.load(h.save(folder))
    assert target.read_text() == "mine" and loaded.logged.to_dict("records") == [{"step": 1, "reward": 0.5}]
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "metrics.jsonl", "ops.jsonl"]


def test_a_config_tmp_left_as_a_hard_link_is_never_written_through(tmp_path):
    """A run folder whose ``config.json.tmp`` is a hard link (a copy made with ``cp -al``, a killed write's leftover
    linked elsewhere): the config was written into it, over the other file's text. It is replaced, not written."""
    folder = tmp_path / "r"
    folder.mkdir()
    target = tmp_path / "notes.txt"
    target.write_text("mine")
    os.link(target, folder / "config.json.tmp")
    History.create({"optimizer": "adam"}, tmp_path, "r").close()
    assert target.read_text() == "mine" and History.load(folder).config["optimizer"] == "adam"


def test_a_link_made_between_the_check_and_the_write_fails_the_write_not_its_target(tmp_path, monkeypatch):
    """The file is created exclusively and never through a link: one put in place after the leftover was removed
    (another process racing the save) fails the write; its target keeps its text."""
    target = tmp_path / "notes.txt"
    target.write_text("mine")
    file = tmp_path / "ops.jsonl.saving"
    file.write_text("a killed save's")
    unlink = Path.unlink

    def then_a_link(self, missing_ok=False):
        unlink(self, missing_ok=missing_ok)
        if self == file:
            file.symlink_to(target)

    monkeypatch.setattr(Path, "unlink", then_a_link)
    with pytest.raises(FileExistsError):
        write_new(file, b"the run")
    assert target.read_text() == "mine" and file.is_symlink()


@pytest.mark.parametrize("name", ["run.lock", "ops.jsonl", "metrics.jsonl", "completions.jsonl"])
def test_a_run_folder_whose_files_are_hard_links_is_never_written_into(tmp_path, name):
    """A run whose files another name shares (a snapshot made with ``cp -al``, a file linked in with ``ln``):
    continuing it appended every line to the snapshot's file too, and wrote the session's pid over its ``run.lock``.
    Refused up front as a symbolic link is; a hard link made later stops the store with a ``RunStoreWarning``."""
    with rlnb.Session(FakeBackend(), runs_dir=tmp_path / "runs", run_id="r") as first:
        first.forward_backward(BATCH)
        first.history.log(0, reward=0.5)
        first.history.log_completions(0, [ROW])
    snapshot = tmp_path / "snapshot"
    snapshot.mkdir()
    os.link(tmp_path / "runs" / "r" / name, snapshot / name)
    before = (snapshot / name).read_bytes()
    with pytest.raises(ValueError, match=rf"run_id 'r': .*r/{name} is a hard link \(2 names for one file"):
        rlnb.Session(FakeBackend(), runs_dir=tmp_path / "runs", run_id="r")
    with pytest.warns(RunStoreWarning, match=rf"cannot write the run folder .*{name} is a hard link"):
        store = RunStore(tmp_path / "runs" / "r")
        store.write_op({"seq": 9, "kind": "sample"})
        store.write_metrics({"step": 9, "x": 1.0})
        store.write_completions([{**ROW, "step": 9}])
    store.close()
    assert (snapshot / name).read_bytes() == before


def test_an_empty_runs_dir_variable_is_as_if_unset(tmp_path, monkeypatch):
    """``RLNB_RUNS_DIR=`` (a shell's or CI's way to unset it) put every run straight into the working folder."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RLNB_RUNS_DIR", "")
    s = rlnb.Session(FakeBackend(), run_id="r")
    s.close()
    assert s.history.path == tmp_path / "rlnb-runs" / "r"

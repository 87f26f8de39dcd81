"""Sinks used the way a careless or hostile user would: exports repeated, given up on, run under ``-W error``."""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import struct
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import pytest

import rlnb
from rlnb import sinks
from rlnb.history import History
from rlnb.history.runs import RunContinuedWarning
from rlnb.sinks import SinkError, SinkWarning, process, stream
from rlnb.sinks.base import Point, RunInfo, Sink
from tests.support import sink_readers as read
from tests.support.hanging_sink import Hanging
from tests.support.sink_tests import (  # noqa: F401 - env: every library's state under a temporary folder
    CE,
    FAILS_AFTER_CLOSE_SCRIPT,
    LOADED_MACHINE_TIMEOUT,
    Flaky,
    assert_points,
    env,
    expected,
    four,
    pytestmark,
    read_all,
    trackio_db,
)

CLOSE = "with warnings.catch_warnings(record=True):\n"
STRICT = "    warnings.simplefilter('always')\n"
STRICT_SCRIPT = textwrap.dedent(FAILS_AFTER_CLOSE_SCRIPT).replace(CLOSE, CLOSE + STRICT)


@pytest.mark.slow  # a Python process
def test_a_sink_failure_said_at_exit_under_warnings_as_errors_reaches_stderr_once(tmp_path):
    """``python -W error``: the exit-time warning of a sink failure no call said was raised, and logged as "an exit
    step (sinks) failed" with a traceback (the flush of the other sinks skipped). It is printed to stderr, once."""
    assert STRICT_SCRIPT.count("simplefilter") == 1  # the close's own warning is recorded, not raised
    proc = subprocess.run(
        [sys.executable, "-W", "error", "-c", STRICT_SCRIPT],
        capture_output=True, text=True, timeout=300, env=os.environ,
    )  # fmt: skip
    assert proc.returncode == 0 and "ready" in proc.stdout, proc.stderr[-3000:]
    said = re.findall(r"SinkWarning: rlnb.sinks.Late dropped while writing run \S+: OSError: disk gone", proc.stderr)
    assert len(said) == 1, proc.stderr[-3000:]
    assert "exit step" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-3000:]


def test_under_warnings_as_errors_a_sinks_second_warning_is_said_later_not_lost():
    """A sink with two warnings unsaid (a close's missed deadline, then its failure): under ``-W error`` the first was
    raised and the second dropped with it. The second stays for the next call that says."""
    sink = Flaky(0, OSError("never raised"))
    sink.stall(threading.current_thread(), "first")
    sink.fail(OSError("disk gone"), "r")
    with warnings.catch_warnings():
        warnings.simplefilter("error", SinkWarning)
        with pytest.raises(SinkWarning, match="first"):
            sink.say()
    with pytest.warns(SinkWarning, match="disk gone") as said:
        sink.say()
    assert len(said) == 1


@pytest.mark.slow  # a sink's child process
def test_an_export_given_up_on_stops_the_sinks_child_process(monkeypatch, tmp_path):
    """``rlnb.export`` to a ``process=True`` sink whose set-up never answers gave up at its deadline and left the
    child running until interpreter exit (up to ``EXIT_TIMEOUT``). Giving up stops it, and the error says so."""
    made: list[process.Child] = []
    start = process.Child.__init__

    def child(self: process.Child, sink: Sink) -> None:
        start(self, sink)
        made.append(self)

    monkeypatch.setattr(process.Child, "__init__", child)
    monkeypatch.setattr(stream, "CLOSE_TIMEOUT", 0.5)
    history = History.create({}, tmp_path, "r")
    history.log(1, reward=1.0)
    history.close()
    try:
        with pytest.raises(SinkError, match="while setting up the sink; its child process was stopped"):
            rlnb.export(tmp_path / "r", Hanging(process=True))
        assert len(made) == 1 and made[0]._proc.poll() is not None  # gone once export returns
        assert not process._children
    finally:
        for each in made:
            each._proc.kill()
            each._proc.wait()


def _run(where: Path, steps: int = 3, sinks_: list[Sink] | None = None) -> History:
    from rlnb.testing import FakeBackend

    with rlnb.Session(FakeBackend(), runs_dir=where, run_id="r", sinks=sinks_ or []) as s:
        for i in range(steps):
            s.forward_backward(CE)
            s.history.log(s.optim_step().result().step, reward=i / 10)
    return s.history


def test_an_export_of_a_streamed_run_to_the_same_tensorboard_folder_is_refused(tmp_path):
    """A session streamed to TensorBoard, then ``rlnb.export`` of its run to the same logdir (or the same export
    twice): every scalar was written twice, a second event file in the run's folder. It is refused, saying where the
    run is and how to export it again; elsewhere it is written."""
    history = _run(tmp_path / "runs", sinks_=[sinks.TensorBoard(tmp_path / "tb", interval=0)])
    said = rf"holds run r already, as event files in {re.escape(str(tmp_path / 'tb' / 'r'))}: delete that folder"
    for again in (history, tmp_path / "runs" / "r"):
        with pytest.raises(SinkError, match=said + r".* nothing was written"):
            rlnb.export(again, sinks.TensorBoard(tmp_path / "tb"))
    assert len(list((tmp_path / "tb" / "r").iterdir())) == 1
    _, points, _ = read.tensorboard(tmp_path / "tb" / "r")
    assert_points(points, expected(history))
    rlnb.export(history, sinks.TensorBoard(tmp_path / "other"))
    with pytest.raises(SinkError, match="holds run r already"):
        rlnb.export(history, sinks.TensorBoard(tmp_path / "other"))


@pytest.mark.slow  # real sink libraries: MLflow's child process, W&B, Trackio
def test_an_export_again_to_the_same_place_is_refused_by_every_library(tmp_path):
    """Exporting one run twice to the same MLflow experiment, W&B folder and project, or Trackio project made a second
    run of the same name (every point twice). The second export is refused, naming the run there; one run is left."""
    history = _run(tmp_path / "runs")
    for sink in four(tmp_path, "again"):
        rlnb.export(history, sink)
    for sink in four(tmp_path, "again"):  # other sink objects, the same places
        with pytest.raises(SinkError, match=r"holds run r already, .*delete .*nothing was written"):
            rlnb.export(tmp_path / "runs" / "r", sink)
    for library, _, points, _ in read_all(tmp_path, "r", "again"):  # asserts one MLflow and one W&B run
        assert_points(points, expected(history), library)
    con = sqlite3.connect(trackio_db("again"))
    try:
        assert con.execute("select count(*) from metrics where run_name = 'r'").fetchone()[0] == len(expected(history))
    finally:
        con.close()


def test_a_new_run_named_like_one_its_sink_holds_is_left_out_there_instead_of_mixed_into_it(tmp_path):
    """A run folder deleted and its id used again (or another runs folder): the new run streamed into the
    TensorBoard folder of the old one, and TensorBoard showed both runs' steps as one run. The new run is left out of
    that sink, with a warning saying why and where everything is; a later session continuing the run streams on."""
    _run(tmp_path / "a", steps=2, sinks_=[sinks.TensorBoard(tmp_path / "tb", interval=0)])
    said = r"TensorBoard left run r out: it holds another run of that name, as event files in .*"
    with pytest.warns(SinkWarning, match=said + "rlnb.export writes it there once the other is removed"):
        _run(tmp_path / "b", steps=3, sinks_=[sinks.TensorBoard(tmp_path / "tb", interval=0)])
    _, points, _ = read.tensorboard(tmp_path / "tb" / "r")
    assert sorted(points) == [1, 2] and len(list((tmp_path / "tb" / "r").iterdir())) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", SinkWarning)
        warnings.simplefilter("ignore", RunContinuedWarning)  # it starts at step 1 again: FakeBackend has no resume
        _run(tmp_path / "a", steps=1, sinks_=[sinks.TensorBoard(tmp_path / "tb", interval=0)])
    assert len(list((tmp_path / "tb" / "r").iterdir())) == 2


@pytest.mark.slow  # W&B's wandb-core process
def test_a_wandb_offline_run_folder_deleted_while_it_is_written_drops_the_sink_instead_of_writing_nowhere(tmp_path):
    """``rm -rf wandb`` while a run streams to W&B offline: W&B went on writing into the deleted file, and nothing said
    that every later step was lost. The next write, or the close, raises naming the folder, which drops the sink with a
    warning; an export again finds nothing there and writes the whole run."""
    sink = sinks.WandB("gone", dir=tmp_path / "wb")
    for deleted_before in ("write", "close"):
        writer = sink.open(RunInfo(deleted_before, None, {"seed": 0}))
        writer.write([Point(1, {"loss": 1.0}, 0.0)], [])
        (folder,) = (tmp_path / "wb" / "wandb").glob("offline-run-*")
        shutil.rmtree(folder)
        if deleted_before == "write":
            with pytest.raises(FileNotFoundError, match="offline-run-.* was deleted while the run was written to it"):
                writer.write([Point(2, {"loss": 0.5}, 0.0)], [])
        with pytest.raises(FileNotFoundError, match="was deleted"):
            writer.close()
        assert sink.holds(RunInfo(deleted_before, None, {})) is None


@pytest.mark.slow  # W&B's wandb-core process
@pytest.mark.parametrize("how", ["file alone", "folder made anew"])
def test_a_wandb_offline_file_deleted_alone_or_its_folder_made_anew_drops_the_sink(tmp_path, how):
    """Only the offline run's folder was checked, by existence: the ``.wandb`` file deleted alone, or the folder deleted
    and made again, went unnoticed, and W&B wrote every later step into a deleted file. The file is watched by
    identity, as the other sinks' are: the next write raises naming what was deleted and the first step lost."""
    writer = sinks.WandB("gone", dir=tmp_path / "wb").open(RunInfo("r", None, {"seed": 0}))
    writer.write([Point(1, {"loss": 1.0}, 0.0)], [])
    (folder,) = (tmp_path / "wb" / "wandb").glob("offline-run-*")
    end = time.monotonic() + LOADED_MACHINE_TIMEOUT
    while not any(folder.glob("*.wandb")):  # wandb-core makes it
        assert time.monotonic() < end, f"no .wandb file in {folder} within {LOADED_MACHINE_TIMEOUT} s"
        time.sleep(0.05)
    (file,) = folder.glob("*.wandb")
    writer.write([Point(2, {"loss": 0.8}, 0.0)], [])  # watched from here at the latest
    if how == "file alone":
        file.unlink()
    else:
        shutil.rmtree(folder)
        folder.mkdir()
    named = file if how == "file alone" else folder
    said = rf"^{re.escape(str(named))} was deleted while the run was written to it: the points from step 3 on were not"
    with pytest.raises(FileNotFoundError, match=said):
        writer.write([Point(3, {"loss": 0.5}, 0.0)], [])
    with pytest.raises(FileNotFoundError, match="the run's end was not written there"):
        writer.close()


@pytest.mark.slow  # MLflow's store
def test_mlflow_finds_a_run_it_holds_whatever_quotes_its_name_has(tmp_path):
    """A run id may hold ``'`` and ``"`` (a folder name): MLflow's filter strings quote with one or the other, so a
    name with both is looked for among every run of the experiment, page by page."""
    sink = sinks.MLflow(tmp_path / "m.db", "quotes", process=False)
    sink.prepare()
    for name in ("it's", 'say "hi"', "both '\"", "plain"):
        assert sink.holds(RunInfo(name, None, {})) is None
        sink.open(RunInfo(name, None, {})).close()
        assert "as MLflow run" in (sink.holds(RunInfo(name, None, {})) or ""), name
    assert sink.holds(RunInfo("both '", None, {})) is None


@pytest.mark.slow  # imports W&B
def test_a_damaged_wandb_file_beside_the_runs_never_stops_a_run_or_an_export(tmp_path):
    """W&B's offline folder may hold a run cut short (a truncated ``.wandb`` file) or another program's file: looking
    for a run of the same name there reads past them instead of failing (which dropped the sink)."""
    root = tmp_path / "wandb"
    head = struct.pack("<HB", 0xBEE1, 0)
    cut_short = {"1-x": head + struct.pack("<IHB", 0, 50, 1) + b"\xff" * 50, "2-y": b"", "3-z": head + b"\0\0\0\0\x09"}
    for name, data in cut_short.items():
        (root / f"offline-run-{name}").mkdir(parents=True)
        (root / f"offline-run-{name}" / f"run-{name[2]}.wandb").write_bytes(b":W&B" + data)
    assert sinks.WandB("p", dir=tmp_path).holds(RunInfo("r", None, {})) is None


def test_a_tensorboard_folder_deleted_mid_run_drops_the_sink_saying_what_was_not_written(tmp_path, capfd):
    """``rm -rf runs`` while a run streams to TensorBoard: the sink was dropped with a bare ``FileNotFoundError: [Errno
    2] No such file or directory: b'.../events.out.tfevents...'`` (and TensorBoard's writer thread printed a traceback
    of its own). As W&B's, the warning now names the sink, the folder, the first step not written, and where the run
    is whole; the history keeps every step."""
    from rlnb.testing import FakeBackend

    folder = tmp_path / "tb" / "r"
    said = (rf"rlnb.sinks.TensorBoard dropped while writing run r: FileNotFoundError: {re.escape(str(folder))} was "
            r"deleted while the run was written to it: the points from step 2 on were not written there \(the run's "
            r"history has everything: rlnb.export writes the whole run again\)")  # fmt: skip
    session = rlnb.Session(FakeBackend(), runs_dir=tmp_path / "runs", run_id="r",
                           sinks=[sinks.TensorBoard(tmp_path / "tb", interval=0)])  # fmt: skip
    with pytest.warns(SinkWarning, match=said), session as s:
        s.forward_backward(CE)
        s.optim_step().result()
        s.forward_backward(CE)
        read.tensorboard_wait(folder, 1, LOADED_MACHINE_TIMEOUT)
        shutil.rmtree(tmp_path / "tb")
        s.optim_step().result()
        s.forward_backward(CE)
        s.optim_step().result()
    assert list(s.history.steps.step) == [1, 2, 3]
    assert "Exception in thread" not in capfd.readouterr().err


def test_a_tensorboard_event_file_deleted_alone_drops_the_sink_and_another_writers_does_not(tmp_path):
    """The sink watches the event file it made. It was read from tensorboard's private ``_file_name``, the folder
    watched instead were that gone, and then a deleted event file went unseen, the rest of the run written to nothing;
    another writer's event file beside it is none of the sink's."""
    folder = tmp_path / "tb" / "r"
    folder.mkdir(parents=True)
    other = folder / "events.out.tfevents.1700000000.elsewhere.1.0"  # another writer's, there before
    other.write_bytes(b"")
    writer = sinks.TensorBoard(tmp_path / "tb", interval=0).open(RunInfo("r", None, {"seed": 0}))
    writer.write([Point(1, {"loss": 1.0}, 0.0)], [])
    other.unlink()
    writer.write([Point(2, {"loss": 0.5}, 0.0)], [])  # not its file: written on
    (own,) = folder.glob(sinks.tensorboard.EVENT_FILES)
    own.unlink()
    with pytest.raises(FileNotFoundError, match=r"was deleted while the run was written to it: the points from step 3"):
        writer.write([Point(3, {"loss": 0.25}, 0.0)], [])


def test_a_tensorboard_event_file_deleted_alone_is_named_not_its_run_folder(tmp_path):
    """Only the event file deleted, its run's folder kept: the warning said the run folder was deleted. It names the
    event file now (a folder deleted whole is named as before)."""
    folder = tmp_path / "tb" / "r"
    writer = sinks.TensorBoard(tmp_path / "tb", interval=0).open(RunInfo("r", None, {"seed": 0}))
    writer.write([Point(1, {"loss": 1.0}, 0.0)], [])
    (own,) = folder.glob(sinks.tensorboard.EVENT_FILES)
    own.unlink()
    said = rf"^{re.escape(str(own))} was deleted while the run was written to it: the points from step 2 on were not"
    with pytest.raises(FileNotFoundError, match=said):
        writer.write([Point(2, {"loss": 0.5}, 0.0)], [])
    assert folder.is_dir()


def _fragment_in(inbox: Path, deadline: float = LOADED_MACHINE_TIMEOUT) -> None:
    """Wait (up to ``deadline`` seconds) until Trackio's writer thread has put a JSONL fragment in ``inbox``."""
    end = time.monotonic() + deadline
    while not any(inbox.rglob("*.jsonl")):
        assert time.monotonic() < end, f"no fragment reached {inbox} within {deadline} s"
        time.sleep(0.05)


@pytest.mark.slow  # Trackio's writer thread
def test_a_trackio_jsonl_inbox_deleted_mid_run_drops_the_sink_saying_what_was_not_written(monkeypatch):
    """Trackio on a network file system (``TRACKIO_STORAGE_MODE=jsonl``) writes JSONL fragments to an inbox folder
    that its dashboard imports, not to the project's database: the sink watched nothing, and an inbox deleted mid-run
    (the fragments not imported yet with it) was made anew by Trackio, the rest of the run written on in silence. The
    inbox is watched as the database is: the next write (or the close) raises naming it and the first step lost."""
    from trackio.fragments import local_inbox_dir

    monkeypatch.setenv("TRACKIO_STORAGE_MODE", "jsonl")
    inbox = Path(local_inbox_dir())
    writer = sinks.Trackio("jsonl-mid-run").open(RunInfo("r", None, {"seed": 0}))
    writer.write([Point(1, {"loss": 1.0}, 0.0)], [])
    _fragment_in(inbox)  # JSONL mode: step 1 went there
    shutil.rmtree(inbox)
    said = rf"^{re.escape(str(inbox))} was deleted while the run was written to it: the points from step 2 on were not"
    with pytest.raises(FileNotFoundError, match=said + r" written there \(the run's history has everything"):
        writer.write([Point(2, {"loss": 0.5}, 0.0)], [])
    with pytest.raises(FileNotFoundError, match="the run's end .*was not written there"):
        writer.close()


@pytest.mark.slow  # MLflow's store, Trackio's
@pytest.mark.parametrize("library", ["mlflow", "trackio"])
def test_a_local_mlflow_or_trackio_store_deleted_mid_run_drops_the_sink_saying_what_was_not_written(tmp_path, library):
    """The store file deleted while a run streams: MLflow failed with SQLAlchemy's "attempt to write a readonly
    database", naming no file; Trackio made a new database and wrote the rest of the run there in silence, the steps
    before it gone. The next write (or the close) now raises naming the store and the first step not written."""
    if library == "mlflow":
        sink: Sink = sinks.MLflow(tmp_path / "m.db", "gone", process=False)
        store = tmp_path / "m.db"
    else:
        sink, store = sinks.Trackio("gone-mid-run"), trackio_db("gone-mid-run")
    writer = sink.open(RunInfo("r", None, {"seed": 0}))
    writer.write([Point(1, {"loss": 1.0}, 0.0)], [])
    store.unlink()
    said = rf"^{re.escape(str(store))} was deleted while the run was written to it: the points from step 2 on were not"
    with pytest.raises(FileNotFoundError, match=said + r" written there \(the run's history has everything"):
        writer.write([Point(2, {"loss": 0.5}, 0.0)], [])
    with pytest.raises(FileNotFoundError, match="the run's end .*was not written there"):
        writer.close()
    assert not store.exists()  # nothing made anew there, holding half a run


def _held_at_open(cls: type[Sink]) -> type[Sink]:
    """``cls`` whose ``open`` waits for ``go`` (``entered`` set first): a run that has started writing, and has not yet
    made anything there."""

    class Held(cls):  # type: ignore[valid-type, misc]
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.entered, self.go = threading.Event(), threading.Event()

        def open(self, run):
            self.entered.set()
            assert self.go.wait(LOADED_MACHINE_TIMEOUT)
            return super().open(run)

    return Held


def _steps(s: rlnb.Session, n: int) -> None:
    for _ in range(n):
        s.forward_backward(CE)
        s.optim_step().result()


@pytest.mark.parametrize("library", ["tensorboard", pytest.param("mlflow", marks=pytest.mark.slow)])
def test_two_sessions_streaming_runs_of_one_name_to_one_place_at_once_write_one_and_say_so(tmp_path, library):
    """Two sessions of one process, both ``run_id="r"`` (other runs folders), streaming to one TensorBoard logdir (or
    MLflow experiment) at once: each looked there before either had written, found nothing, and both wrote, with no
    word — two event files in one folder, shown by TensorBoard as one run of both runs' steps (two MLflow runs named
    ``r``). The second is now left out of that sink, with a warning saying why and where it is whole."""
    from rlnb.testing import FakeBackend

    def make(cls: type[Sink]) -> Sink:
        if library == "tensorboard":
            return cls(tmp_path / "tb", interval=0)
        return cls(tmp_path / "m.db", "same-name", interval=0, process=False)

    plain: type[Sink] = sinks.TensorBoard if library == "tensorboard" else sinks.MLflow
    first = make(_held_at_open(plain))
    a = rlnb.Session(FakeBackend(), runs_dir=tmp_path / "a", run_id="r", sinks=[first])
    try:
        _steps(a, 2)
        assert first.entered.wait(LOADED_MACHINE_TIMEOUT)  # a's run is being written: nothing there yet
        kept = re.escape(str(tmp_path / "b" / "r"))
        said = (
            rf"{plain.__name__} left run r out: it holds another run of that name, being written there now by "
            rf"another session \(of this process or another on this machine\); .* {kept} has everything"
        )
        second = rlnb.Session(FakeBackend(), runs_dir=tmp_path / "b", run_id="r", sinks=[make(plain)])
        with pytest.warns(SinkWarning, match=said), second as b:
            _steps(b, 3)
        with pytest.raises(SinkError, match="holds run r already, being written there now by another session"):
            rlnb.export(b.history, make(plain))  # nor is an export of that name mixed into it meanwhile
    finally:
        first.go.set()
        a.close()
    if library == "tensorboard":
        assert len(list((tmp_path / "tb" / "r").iterdir())) == 1
        assert sorted(read.tensorboard(tmp_path / "tb" / "r")[1]) == [1, 2]  # a's steps only
    else:
        from mlflow import MlflowClient

        client = MlflowClient(f"sqlite:///{tmp_path / 'm.db'}")
        experiment = client.get_experiment_by_name("same-name").experiment_id
        assert len(client.search_runs([experiment], filter_string="attributes.run_name = 'r'")) == 1


@pytest.mark.slow
def test_a_run_of_one_name_being_written_by_another_process_of_this_machine_is_left_out_too(tmp_path, monkeypatch):
    """The claim on a place and run name was a set in the process: a second process (another notebook's kernel)
    streaming a run of the same name to the same TensorBoard logdir wrote into it, both runs' steps shown as one.
    The claim is now also an ``flock`` in the temporary folder, which the kernel releases when the holder ends."""
    import tempfile

    from rlnb.sinks import leases
    from rlnb.testing import FakeBackend

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    holder = textwrap.dedent(f"""
        import sys
        from rlnb import sinks
        from rlnb.sinks.base import RunInfo
        from rlnb.sinks.process import Lease
        lease = Lease(sinks.TensorBoard({str(tmp_path / "tb")!r}, interval=0))
        print(lease.claim(RunInfo("r", None, {{}})), flush=True)
        sys.stdin.read()  # holds the claim until the test closes its stdin
    """)
    child = subprocess.Popen(
        [sys.executable, "-c", holder],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path / "tmp")},
    )
    try:
        assert child.stdout.readline().strip() == "True"
        said = r"left run r out: it holds another run of that name, being written there now by another session"
        tb = sinks.TensorBoard(tmp_path / "tb", interval=0)
        with (
            pytest.warns(SinkWarning, match=said),
            rlnb.Session(FakeBackend(), runs_dir=tmp_path / "a", run_id="r", sinks=[tb]) as s,
        ):
            _steps(s, 2)
        assert not (tmp_path / "tb" / "r").exists()  # nothing written into the other process's run
    finally:
        child.stdin.close()
        child.wait(LOADED_MACHINE_TIMEOUT)
        child.stdout.close()
    where = process.place(sinks.TensorBoard(tmp_path / "tb", interval=0))
    claim = leases.take(where, "r")  # the holder ended: the kernel released its lock
    assert claim is not None
    leases.drop(claim)


def test_a_sink_attached_mid_step_gets_that_steps_whole_loss(tmp_path):
    """``sinks.attach(session.history, ...)`` between a step's forward-backwards: the sink's loss of that step was the
    sum of those after it only (half of ``History.steps``'), its times too. The step's operations so far count now;
    the steps before are not sent, as before."""
    from rlnb.testing import FakeBackend

    with rlnb.Session(FakeBackend(), record=False) as s:
        s.forward_backward(CE)
        s.optim_step().result()
        s.forward_backward(CE).result()  # step 2's first forward-backward, before the sink
        attached = sinks.attach(s.history, [sinks.TensorBoard(tmp_path / "tb", interval=0)])
        _steps(s, 2)
        attached.close(timeout=LOADED_MACHINE_TIMEOUT)
    (run,) = (tmp_path / "tb").iterdir()
    _, points, _ = read.tensorboard(run)
    want = expected(s.history)
    assert want[2]["loss"] == pytest.approx(2 * 0.5)  # two forward-backwards of FakeBackend's 1 / (1 + step 1)
    assert_points(points, {step: want[step] for step in (2, 3)})

"""W&B: an offline run whole on disk when its close returns; a run W&B holds already never written into twice."""

from __future__ import annotations

import struct
import threading
import warnings
from pathlib import Path

import pytest

import rlnb
from rlnb import sinks
from rlnb.history.runs import RunContinuedWarning
from rlnb.sinks import SinkError
from rlnb.sinks.base import Point, RunInfo
from rlnb.testing import FakeBackend
from tests.support import sink_readers as read
from tests.support.sink_tests import (  # noqa: F401 - env: every library's state under a temporary folder
    CE,
    assert_points,
    env,
    expected,
    pytestmark,
)

BLOCK = 32768
BUSY = 0.5
"""Seconds wandb-core takes to hear that a run is finished, in the tests where it is busy."""


@pytest.fixture
def busy_wandb_core(monkeypatch):
    """wandb-core busy: it hears of a finished run ``BUSY`` seconds after ``run.finish()`` returned. ``finish`` sends
    that word (``inform_finish``) without waiting for an answer, and wandb-core writes the run's last records to its
    ``.wandb`` file only then: on a loaded machine, a run read right after its close missed its last points."""
    from wandb.sdk.lib.service.service_connection import ServiceConnection

    real = ServiceConnection.inform_finish
    timers: list[threading.Timer] = []

    def later(self: ServiceConnection, run_id: str) -> None:
        timers.append(threading.Timer(BUSY, real, (self, run_id)))
        timers[-1].start()

    monkeypatch.setattr(ServiceConnection, "inform_finish", later)
    yield
    for timer in timers:
        timer.join()


def _runs(root: Path) -> list[Path]:
    return sorted((root / "wandb").glob("offline-run-*"))


@pytest.mark.slow  # W&B's wandb-core process
def test_a_wandb_offline_run_is_whole_in_its_file_when_its_close_returns(tmp_path, busy_wandb_core):
    """A run of many points (its ``.wandb`` file many blocks long), read straight after the writer's close: every
    point and the run's end are there (the file held its header alone, 7 bytes, when wandb-core was busy)."""
    sink = sinks.WandB("p", dir=tmp_path / "wb")
    writer = sink.open(RunInfo("r", None, {"seed": 0}))
    points = [Point(s, {f"figure_{i}": s + i / 100 for i in range(20)}, 0.0) for s in range(1, 1001)]
    writer.write(points, [])
    writer.close()
    (run,) = _runs(tmp_path / "wb")
    assert next(run.glob("*.wandb")).stat().st_size > 2 * 32768  # the end is read from the last blocks only
    _, got, _, exit_code = read.wandb(run)
    assert exit_code == 0
    assert got == {p.step: p.values for p in points}


@pytest.mark.slow  # W&B's wandb-core process
def test_an_export_straight_after_the_stream_closed_is_refused_not_written_twice(tmp_path, busy_wandb_core):
    """A session streamed to W&B offline, then ``rlnb.export`` of its run to the same place right after its close:
    the export looked in a ``.wandb`` file W&B had not written yet, found no run and wrote every point a second time
    (two offline runs of one W&B run id: ``wandb sync`` uploads both into one run). It is refused."""
    with rlnb.Session(FakeBackend(), runs_dir=tmp_path / "runs", run_id="r",
                      sinks=[sinks.WandB("p", dir=tmp_path / "wb", interval=0)]) as s:  # fmt: skip
        for i in range(3):
            s.forward_backward(CE)
            s.history.log(s.optim_step().result().step, reward=i / 10)
    with pytest.raises(SinkError, match=r"holds run r already, as the offline run .*offline-run-.*nothing was written"):
        rlnb.export(s.history, sinks.WandB("p", dir=tmp_path / "wb"))
    (run,) = _runs(tmp_path / "wb")
    _, points, _, exit_code = read.wandb(run)
    assert exit_code == 0
    assert_points(points, expected(s.history), "wandb")


def _log(records: list[bytes], after: bytes = b":W&B" + struct.pack("<HB", 0xBEE1, 0)) -> bytes:
    """``records`` as W&B writes a ``.wandb`` file (appended to the file ``after``, by default its header alone): a
    LevelDB-style log of 32 KiB blocks, a record cut into chunks at each block's end (first, middle, last), a block's
    tail too short for a chunk's header padded with zeros."""
    out = bytearray(after)
    for record in records:
        first, rest = True, record
        while True:
            room = BLOCK - len(out) % BLOCK
            if room < 7:
                out += b"\0" * room
                room = BLOCK
            part, rest = rest[: room - 7], rest[room - 7 :]
            kind = (1 if not rest else 2) if first else (4 if not rest else 3)
            out += struct.pack("<IHB", 0, len(part), kind) + part
            first = False
            if not rest:
                break
    return bytes(out)


def _history_of_size(size: int) -> bytes:
    """A history record of exactly ``size`` bytes."""
    from wandb.proto import wandb_internal_pb2 as pb

    for filler in range(size, size - 40, -1):
        record = pb.Record()
        record.history.item.add(key="text", value_json='"' + "x" * filler + '"')
        raw = record.SerializeToString()
        if len(raw) == size:
            return raw
    raise AssertionError(size)


@pytest.mark.slow  # imports W&B's protobuf records
@pytest.mark.parametrize("block", [0, 2])
@pytest.mark.parametrize("room", [3000, 7 + 3, 3])
def test_a_wandb_runs_end_is_found_wherever_it_falls_in_the_files_blocks(tmp_path, block, room):
    """The run's end is found whether the exit record follows a record that ends in the first block or spans three,
    ``room`` bytes before a block's end: whole in that block, cut across it and the next, or in the next after a
    padding; not found while only part of it is written, nor in a file without it."""
    from wandb.proto import wandb_internal_pb2 as pb

    from rlnb.sinks import wandb_file

    exit_ = pb.Record()
    exit_.exit.exit_code = 0
    exit_.exit.runtime = 12
    history = _history_of_size((block + 1) * (BLOCK - 7) - 7 - room)  # ends ``room`` bytes before block ``block``'s end
    whole = _log([history, exit_.SerializeToString()])
    assert len(whole) > (block + 1) * BLOCK - room + 7
    file = tmp_path / "run-x.wandb"
    for cut, ends in ((len(whole), True), (len(whole) - 1, False), (len(whole) - 9, False)):
        file.write_bytes(whole[:cut])
        assert wandb_file.ended(file) is ends, cut
    file.write_bytes(_log([history] * 3))
    assert not wandb_file.ended(file)
    file.write_bytes(b"not a log at all" * 5000)
    assert not wandb_file.ended(file)


ALREADY = ("Run ({}) already exists, but your `resume` setting does not allow resuming an existing run. Verify the run "
           "ID is correct. To resume this run, set `resume` in wandb.init() or `WANDB_RESUME` to `allow` or `must`. To "
           "start a new run, use a different run ID.")  # fmt: skip
"""wandb-core's refusal (its text in W&B 0.31's binary) of a run id its server holds, asked with ``resume="never"``."""


@pytest.mark.slow  # W&B's wandb-core process
def test_an_export_to_wandb_online_of_a_streamed_run_is_refused_and_a_later_session_writes_on(tmp_path, monkeypatch):
    """Online, nothing local says which runs W&B's server holds: an export of a run streamed there before resumed that
    W&B run (``resume="allow"``) and appended every point a second time. A new run and an export ask W&B for a new
    run (``resume="never"``), which its server refuses for a run id it holds: the export raises ``SinkError`` naming
    the W&B run; a later session of the run still writes on into it. W&B's server here: a stand-in that holds the ids
    of the runs made, in front of W&B's offline mode."""
    import wandb

    real, held, asked = wandb.init, set(), []

    def server(**kwargs: object) -> object:
        asked.append(kwargs["resume"])
        if kwargs["resume"] == "never" and kwargs["id"] in held:
            raise wandb.errors.UsageError(ALREADY.format(kwargs["id"]))
        held.add(kwargs["id"])
        return real(**{**kwargs, "mode": "offline"})

    monkeypatch.setattr(wandb, "init", server)
    online = sinks.WandB("p", mode="online", dir=tmp_path / "wb", interval=0)
    with rlnb.Session(FakeBackend(), runs_dir=tmp_path / "runs", run_id="r", sinks=[online]) as s:
        s.forward_backward(CE)
        s.optim_step().result()
    with pytest.raises(
        SinkError,
        match=r"holds run r already, as the W&B run p/rlnb-[0-9a-f]{20} \(streamed or "
        r"exported there before\): delete that run in W&B .*nothing was written",
    ):
        rlnb.export(s.history, sinks.WandB("p", mode="online", dir=tmp_path / "wb"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", sinks.SinkWarning)
        warnings.simplefilter("ignore", RunContinuedWarning)  # it starts at step 1 again: FakeBackend has no resume
        with rlnb.Session(FakeBackend(), runs_dir=tmp_path / "runs", run_id="r", sinks=[online]) as s:
            s.forward_backward(CE)
            s.optim_step().result()
    assert asked == ["never", "never", "allow"] and len(held) == 1
    assert len(_runs(tmp_path / "wb")) == 2  # the two sessions'; nothing of the export


def test_waiting_for_the_end_of_a_wandb_file_that_was_deleted_says_so_at_once(tmp_path):
    """The offline run's folder deleted (``rm -rf wandb``) while close waits for W&B to write the run's end there: it
    waited out the whole deadline (30 s) and then said W&B had not written it. It says the file was deleted, at once."""
    from rlnb.sinks import wandb_file

    with pytest.raises(FileNotFoundError, match=r"run-x\.wandb was deleted before W&B wrote the end of the run there"):
        wandb_file.wait_ended(tmp_path / "offline-run-1" / "run-x.wandb", timeout=120)


@pytest.mark.slow  # imports W&B
def test_only_wandbs_own_refusal_of_the_run_id_is_taken_for_a_run_it_holds(tmp_path, monkeypatch):
    """The refusal was any error whose text held "already exists": a ``CommError`` quoting such a text (a proxy's
    page), W&B's "artifact ... already exists" or another run's refusal was said as "holds run r already, delete that
    run in W&B", hiding the real error. It is a ``UsageError`` (wandb-core's code ``USAGE``) naming this run's id
    (W&B 0.31's text, or the older "resuming a run (<id>) that already exists"); anything else is raised as it is."""
    import wandb
    from wandb.errors import CommError, UnsupportedError, UsageError

    from rlnb.sinks.wandb import refused, run_id

    info = RunInfo("r", None, {})
    rid = run_id(info)
    older = f"The value 'never' is not a valid option for resuming a run ({rid}) that already exists."
    assert refused(UsageError(ALREADY.format(rid)), rid) and refused(UsageError(older), rid)
    others = [CommError(ALREADY.format(rid)), UnsupportedError(ALREADY.format(rid)), RuntimeError(ALREADY.format(rid)),
              UsageError(ALREADY.format("rlnb-another-run")), UsageError("Artifact 'x' already exists")]  # fmt: skip
    assert [refused(exc, rid) for exc in others] == [False] * len(others)
    sink = sinks.WandB("p", mode="online", dir=tmp_path / "wb")
    expected = [(UsageError(ALREADY.format(rid)), SinkError)] + [(exc, type(exc)) for exc in others]
    for exc, raised in expected:
        monkeypatch.setattr(wandb, "init", lambda exc=exc, **kwargs: (_ for _ in ()).throw(exc))
        with pytest.raises(raised) as got:
            sink.open(info)
        assert got.type is raised, exc  # CommError and UnsupportedError are no SinkError, nor it theirs


def _run_record(project: str, name: str) -> bytes:
    from wandb.proto import wandb_internal_pb2 as pb

    record = pb.Record()
    record.run.project, record.run.display_name = project, name
    return record.SerializeToString()


@pytest.mark.slow  # imports W&B's protobuf records
def test_wandb_looks_in_each_offline_run_file_once_however_many_runs_ask(tmp_path, monkeypatch):
    """``WandB.holds`` read every offline run's file at each new run: a sweep of N trials streamed to one W&B sink read
    N² files. It reads each file once: again only when it is another file (deleted and made anew) or, while it held no
    run record yet (wandb-core still writing its start), once it has grown."""
    from rlnb.sinks import wandb_file

    reads: list[str] = []
    real = wandb_file.project_and_name
    monkeypatch.setattr(wandb_file, "project_and_name", lambda file: reads.append(file.parent.name) or real(file))
    sink = sinks.WandB("p", dir=tmp_path)
    root = tmp_path / "wandb"

    def run(folder: str, records: list[bytes]) -> Path:
        (root / folder).mkdir(parents=True, exist_ok=True)
        (root / folder / "run-x.wandb").write_bytes(_log(records))
        return root / folder / "run-x.wandb"

    for i in range(30):
        run(f"offline-run-{i:02}", [_run_record("p", f"trial-{i}")])
    held = [sink.holds(RunInfo(f"trial-{i}", None, {})) for i in range(40)]
    assert [h is not None and f"offline-run-{i:02}" in h for i, h in enumerate(held)] == [True] * 30 + [False] * 10
    assert sorted(reads) == [f"offline-run-{i:02}" for i in range(30)]  # each once, not 40 times
    reads.clear()
    starting = run("offline-run-98", [])  # its header alone so far
    run("offline-run-00", [_run_record("p", "another")]).unlink()  # deleted: no longer held
    assert sink.holds(RunInfo("trial-0", None, {})) is None and sink.holds(RunInfo("late", None, {})) is None
    assert reads == ["offline-run-98"]
    starting.write_bytes(_log([_run_record("p", "late")]))  # wandb-core wrote the run record since
    assert "offline-run-98" in (sink.holds(RunInfo("late", None, {})) or "")
    run("new", [_run_record("p", "renamed")]).replace(root / "offline-run-01" / "run-x.wandb")  # another file there
    assert sink.holds(RunInfo("renamed", None, {})) is not None
    assert reads == ["offline-run-98", "offline-run-98", "offline-run-01"]


@pytest.mark.slow  # W&B's wandb-core process
def test_a_wandb_runs_end_is_found_however_much_follows_it_and_read_as_it_is_appended(tmp_path):
    """The end was looked for in the file's last two blocks only: an exit record followed by more than 64 KiB of
    records (W&B 0.31 writes none after it; a version that writes its summary, files or console output there would)
    was never found, and each close waited out its 30 s deadline and warned that the last points may be missing. A real
    offline run's file, its own history records appended after its exit: the end is found. Read as the file grows,
    in pieces cut anywhere, ``Reader`` gives each record once, whole, in order; from any offset, the records from that
    offset's block on."""
    from rlnb.sinks import wandb_file

    writer = sinks.WandB("p", dir=tmp_path / "wb").open(RunInfo("r", None, {"seed": 0}))
    writer.write([Point(s, {f"figure_{i}": s + i / 100 for i in range(20)}, 0.0) for s in range(1, 301)], [])
    writer.close()
    (file,) = (tmp_path / "wb" / "wandb").glob("offline-run-*/*.wandb")
    whole = list(wandb_file.records(file))
    kinds = [wandb_file._record(raw).WhichOneof("record_type") for raw in whole]
    assert kinds[-1] == "exit" and kinds.count("history") == 300
    history = [raw for raw, kind in zip(whole, kinds, strict=True) if kind == "history"]
    run = file.read_bytes()
    file.write_bytes(_log(history, after=run))
    assert file.stat().st_size - len(run) > 3 * BLOCK
    assert wandb_file.ended(file) and wandb_file.ended(file, start=len(run) - 40)
    assert not wandb_file.ended(file, start=len(run) + BLOCK)  # past the exit record's block: not there
    grown = file.read_bytes()
    growing, reader, got = tmp_path / "growing.wandb", None, []
    for cut in [*range(1, len(grown), 4093), len(grown)]:
        growing.write_bytes(grown[:cut])
        reader = reader or wandb_file.Reader(growing)
        got += list(reader.new())
    assert got == whole + history
    for start in range(0, len(grown), 9001):
        tail = list(wandb_file.Reader(file, start).new())
        assert tail == (whole + history)[len(whole) + len(history) - len(tail) :] and len(tail) > 0, start

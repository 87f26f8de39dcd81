"""How far each sink wrote a run, kept in the run folder (``rlnb.sinks.marks``): a session continuing the run sends
a sink the steps an earlier session recorded and never wrote there (its process killed, its sink dropped), and none
that the sink holds. The subprocess killed with ``kill -9`` is in ``test_sinks_killed_sink.py``."""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

import rlnb
from rlnb import samples, sinks, wire
from rlnb.history import History
from rlnb.sinks import marks
from rlnb.sinks.marks import Mark
from rlnb.sinks.points import merge, replay, unsent
from tests.support.histories import FAILED, T0, add, hand_history
from tests.support.kept_sink import WRITTEN, Kept, figures_of, written

CE = [samples.cross_entropy(list(b"hello world"))]


def a_run_with_a_failed_sample() -> History:
    """Five steps (loss 1..5), a sample that failed after step 2, a logged figure per step."""
    h = hand_history([1.0, 2.0, 3.0, 4.0, 5.0], norms=[0.1] * 5)
    error = wire.OperationError(code=wire.OperationErrorCode.INVALID_INPUT, message="bad prompt")
    h.records  # noqa: B018
    add(h, wire.OperationKind.SAMPLE, at=T0 + 20, status=FAILED, error=error)
    for step in range(1, 6):
        h.log(step, reward=step / 10)
    return h


def test_what_a_mark_does_not_hold_is_sent_with_the_steps_whole_loss():
    h = a_run_with_a_failed_sample()
    records, rows = h.records, h.logged_rows()
    whole, failed = replay(h, T0)
    by_step = {p.step: p.values for p in whole}
    fb3 = next(r.seq for r in records if r.kind == "forward-backward" and r.step == 2)  # step 3's forward-backward
    points, failures = merge(unsent(records, [], rows, Mark(fb3, frozenset(), 2)))  # rows of steps 1-2 written
    assert [p.step for p in points] == [3, 4, 5]  # step 3's point from its forward-backward written: its loss whole
    assert [p.values for p in points] == [by_step[3], by_step[4], by_step[5]]
    assert [f.seq for f in failures] == [f.seq for f in failed] and failures[0].code.endswith("INVALID_INPUT")
    sample = failed[0].seq
    _, failures = merge(unsent(records, [], rows, Mark(fb3, frozenset({sample}), 5)))
    assert failures == []  # said when it ended, ahead of the unfinished step: held
    assert unsent(records, [], rows, Mark(records[-1].seq, frozenset(), 5)) == []  # everything held
    logged_only, _ = merge(unsent(records, [], rows, Mark(records[-1].seq, frozenset(), 4)))
    assert [(p.step, p.values) for p in logged_only] == [(5, {"reward": 0.5})]


def test_a_mark_file_is_read_back_and_a_damaged_one_is_named(tmp_path):
    sink = Kept("m")
    file = marks.path(tmp_path, sink)
    assert file is not None and marks.read(file) is None  # never streamed: no mark
    marked = marks.MarkFile(file)
    marked.write(Mark(7, frozenset({9, 12}), 3))
    assert marks.read(file) == Mark(7, frozenset({9, 12}), 3)
    marked.write(Mark(8, frozenset(), 3))  # shorter: no tail of the last left
    assert marks.read(file) == Mark(8, frozenset(), 3)
    marked.close()
    marks.MarkFile(file).write(Mark(9, frozenset(), 4))  # a file opened again over a longer one
    assert marks.read(file) == Mark(9, frozenset(), 4)
    assert marks.path(tmp_path, Kept("other")) != file  # one per sink place
    for text in ("{", '{"seq": "7", "beyond": [], "logged": 0}', '{"seq": 7, "beyond": [true], "logged": 0}', "[]"):
        file.write_text(text)
        with pytest.raises(ValueError, match=f"{file.name} "):
            marks.read(file)


@pytest.mark.filterwarnings("ignore::rlnb.history.RunContinuedWarning")
def test_a_sink_dropped_mid_run_gets_what_it_missed_once_the_run_is_continued(tmp_path):
    from rlnb.testing import FakeBackend

    runs = tmp_path / "runs"
    dropped = Kept("a", fail_at=3, interval=0)
    with pytest.warns(sinks.SinkWarning, match="disk gone"), rlnb.Session(FakeBackend(), runs_dir=runs, run_id="r",
                                                                          sinks=[dropped]) as s:  # fmt: skip
        for step in range(1, 6):
            s.forward_backward(CE)
            s.optim_step().result()
            s.history.log(step, reward=step / 10)
            if step < 3:
                written("a", step)
    assert {step for step, _ in figures_of("a")} == {1, 2}  # dropped at step 3: steps 3-5 unwritten
    with rlnb.Session(FakeBackend(), runs_dir=runs, run_id="r", sinks=[Kept("a", interval=0)]):
        pass  # continued: the sink is sent what it missed, before anything new
    whole = {p.step: p.values for p in replay(History.load(runs / "r"), T0)[0]}
    got = merge(p for points, _ in WRITTEN["a"] for p in points)[0]
    assert {p.step: p.values for p in got} == whole
    assert figures_of("a") == sorted({(s, k) for s, values in whole.items() for k in values})  # each once
    with warnings.catch_warnings():
        warnings.simplefilter("error", sinks.SinkWarning)
        with rlnb.Session(FakeBackend(), runs_dir=runs, run_id="r", sinks=[Kept("a", interval=0)]):
            pass  # continued again: it holds everything, nothing is sent twice
    assert len(figures_of("a")) == sum(len(values) for values in whole.values())


@pytest.mark.filterwarnings("ignore::rlnb.history.RunContinuedWarning")
def test_a_damaged_mark_is_said_and_nothing_is_sent_twice(tmp_path):
    from rlnb.testing import FakeBackend

    runs = tmp_path / "runs"
    with rlnb.Session(FakeBackend(), runs_dir=runs, run_id="r", sinks=[Kept("d", interval=0)]) as s:
        s.forward_backward(CE)
        s.optim_step().result()
    file = marks.path(runs / "r", Kept("d"))
    assert file is not None and marks.read(file) is not None
    file.write_text("{")
    said = r"cannot tell how far it wrote run r .*rlnb.export writes the whole"
    with pytest.warns(sinks.SinkWarning, match=said), rlnb.Session(FakeBackend(), runs_dir=runs, run_id="r",
                                                                   sinks=[Kept("d", interval=0)]):  # fmt: skip
        pass
    assert {s for s, _ in figures_of("d")} == {1} and marks.read(file) is not None  # a fresh mark from then on


def test_a_recorded_stream_marks_each_batch_and_a_run_in_memory_has_no_mark(tmp_path):
    from rlnb.testing import FakeBackend

    with rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r", sinks=[Kept("w", interval=0)]) as s:
        file = marks.path(tmp_path / "r", Kept("w"))
        assert file is not None and marks.read(file) == Mark(-1, frozenset(), 0)  # from the start: none written
        for _ in range(3):
            s.forward_backward(CE)
            s.optim_step().result()
    held = marks.read(file)
    assert held is not None and held.seq == s.history.records[-1].seq and not held.beyond
    with rlnb.Session(FakeBackend(), record=False, sinks=[Kept("x", interval=0)]) as bare:
        bare.forward_backward(CE)
        bare.optim_step().result()
    assert {s for s, _ in figures_of("x")} == {1} and not math.isnan(bare.history.steps.loss.iloc[0])


@pytest.mark.filterwarnings("ignore::rlnb.history.RunContinuedWarning")
def test_a_run_exported_whole_is_not_sent_again_when_it_is_continued(tmp_path):
    from rlnb.testing import FakeBackend

    runs = tmp_path / "runs"
    dropped = Kept("e", fail_at=2, interval=0)
    with pytest.warns(sinks.SinkWarning, match="disk gone"), rlnb.Session(FakeBackend(), runs_dir=runs, run_id="r",
                                                                          sinks=[dropped]) as s:  # fmt: skip
        for _ in range(3):
            s.forward_backward(CE)
            s.optim_step().result()
            s.wait()
    WRITTEN.pop("e", None)  # its copy of the run deleted, then the whole run exported there
    rlnb.export(runs / "r", Kept("e"))
    exported = figures_of("e")
    assert {step for step, _ in exported} == {1, 2, 3}
    with rlnb.Session(FakeBackend(), runs_dir=runs, run_id="r", sinks=[Kept("e", interval=0)]):
        pass
    assert figures_of("e") == exported  # nothing twice


@pytest.mark.filterwarnings("ignore::rlnb.history.RunContinuedWarning")
def test_a_run_left_out_of_a_sink_holding_another_is_not_sent_there_when_continued(tmp_path):
    from rlnb.testing import FakeBackend

    runs = tmp_path / "runs"
    other = Kept("h", held=True, interval=0)
    session = rlnb.Session(FakeBackend(), runs_dir=runs, run_id="r", sinks=[other])
    with pytest.warns(sinks.SinkWarning, match="left run r out"), session as s:
        s.forward_backward(CE)
        s.optim_step().result()
    with rlnb.Session(FakeBackend(), runs_dir=runs, run_id="r", sinks=[Kept("h", interval=0)]):
        pass  # continued: the earlier session's steps are not mixed into the other run there
    assert figures_of("h") == []


# A sink's mark file is a run file like the others (review37h): a symbolic link there (a run folder copied with its
# links) was written through, its target's text lost; a named pipe there hung ``Session()`` for ever reading the mark.
# Now either is named in the SinkWarning and never opened through.

DEADLINE = 60
NOT_ON_WINDOWS = pytest.mark.skipif(sys.platform == "win32", reason="links need privileges; no named pipes")


def a_recorded_run(runs: Path, name: str) -> Path:
    """Run ``r`` recorded in ``runs`` with no sink, and where sink ``name``'s mark would be."""
    from rlnb.testing import FakeBackend

    with rlnb.Session(FakeBackend(), runs_dir=runs, run_id="r") as s:
        s.forward_backward(CE)
        s.optim_step().result()
    file = marks.path(runs / "r", Kept(name))
    assert file is not None and not file.exists()
    return file


def continued(runs: Path, name: str) -> list[str]:
    """The SinkWarnings of continuing run ``r`` with sink ``name``, on a thread given ``DEADLINE`` seconds."""
    from rlnb.testing import FakeBackend

    said: list[str] = []

    def continue_it() -> None:
        session = rlnb.Session(FakeBackend(), runs_dir=runs, run_id="r", sinks=[Kept(name, interval=0)])
        with pytest.warns(sinks.SinkWarning) as caught, session as s:
            s.forward_backward(CE)
            s.optim_step().result()
        said.extend(str(w.message) for w in caught if issubclass(w.category, sinks.SinkWarning))

    within_deadline(continue_it, "continuing the run")
    return said


def within_deadline(work: Callable[[], object], doing: str) -> None:
    """``work`` run on a thread given ``DEADLINE`` seconds: one that waits on a pipe fails the test, not hangs it."""
    failed: list[BaseException] = []

    def go() -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - raised again on the test's thread
            failed.append(exc)

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    thread.join(DEADLINE)
    assert not thread.is_alive(), f"{doing} still waits after {DEADLINE} s"
    if failed:
        raise failed[0]


@NOT_ON_WINDOWS
@pytest.mark.filterwarnings("ignore::rlnb.history.RunContinuedWarning")
def test_a_mark_that_is_a_link_is_named_and_its_target_never_written(tmp_path):
    file = a_recorded_run(tmp_path / "runs", "l")
    target = tmp_path / "notes.txt"
    text = "a user's notes, not a mark\n" * 3
    target.write_text(text)
    file.symlink_to(target)
    said = continued(tmp_path / "runs", "l")
    assert any(f"{file} is a symbolic link" in s and "cannot tell how far it wrote run r" in s for s in said), said
    assert target.read_text() == text and file.is_symlink()
    with pytest.raises(ValueError, match="is a symbolic link"):
        marks.read(file)
    rlnb.export(tmp_path / "runs" / "r", Kept("l"))  # a whole run exported: no mark written through the link either
    assert target.read_text() == text


@NOT_ON_WINDOWS
@pytest.mark.filterwarnings("ignore::rlnb.history.RunContinuedWarning")
def test_a_mark_that_is_a_named_pipe_is_named_and_nothing_waits_on_it(tmp_path):
    file = a_recorded_run(tmp_path / "runs", "p")
    os.mkfifo(file)
    try:
        said = continued(tmp_path / "runs", "p")
        assert any(f"{file} is a named pipe" in s for s in said), said
        within_deadline(lambda: marks.write_once(file, Mark(3, frozenset(), 0)), "writing the mark")
        within_deadline(lambda: rlnb.export(tmp_path / "runs" / "r", Kept("p")), "rlnb.export")
    finally:  # a thread still waiting on the pipe (the defect) is let go
        with contextlib.suppress(OSError):
            os.close(os.open(file, os.O_RDWR | os.O_NONBLOCK))
    assert file.is_fifo()

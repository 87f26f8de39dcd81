"""A sink's mark file (``rlnb.sinks.marks``) is a run file like the others: a symbolic link there (a run folder copied
with its links, or planted) was written through, its target's text lost; a named pipe there hung ``Session()`` for
ever as it read the mark. Now either is named in the SinkWarning and never opened through."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

import rlnb
from rlnb import samples, sinks
from rlnb.sinks import marks
from rlnb.sinks.marks import Mark
from tests.sinks.test_sinks_marks import Kept

CE = [samples.cross_entropy(list(b"hello world"))]
DEADLINE = 60
pytestmark = [
    pytest.mark.skipif(sys.platform == "win32", reason="links need privileges; no named pipes"),
    pytest.mark.filterwarnings("ignore::rlnb.history.RunContinuedWarning"),
]


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

"""The mark follows the library's store (``Writer.stored``: W&B offline and Trackio hold rows in memory a while): it
waits while the store holds less than the writer gave it, advances as the store catches up, is written whole when the
run closes, and the store is no longer asked once it caught up. Fast, with a writer whose store the test fills."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import rlnb
from rlnb.sinks import channel, marks
from rlnb.sinks.base import Failure, Point, RunInfo, Sink
from rlnb.testing import FakeBackend


class Slow(Sink):
    """A library that takes rows at once and stores them when the test says (``held``)."""

    library, extra = "json", "none"

    def __init__(self, **kw: Any):
        self.given = self.held = self.asked = 0
        self.lock = threading.Lock()
        super().__init__(**kw)

    def spec(self) -> tuple[str, str, dict[str, Any]]:
        return __name__, "Slow", {"interval": self.interval}

    def open(self, run: RunInfo) -> Slow:
        return self

    def write(self, points: list[Point], failures: list[Failure]) -> None:
        with self.lock:
            self.given += len(points) + len(failures)

    def stored(self) -> tuple[int, int]:
        with self.lock:
            self.asked += 1
            return self.given, self.held

    def close(self) -> None:
        return None


def given(sink: Slow, n: int) -> None:
    """Wait until the writer gave the library ``n`` rows (30 s at most)."""
    deadline = time.monotonic() + 30
    while sink.given < n and time.monotonic() < deadline:
        time.sleep(0.005)


def logged_now(file: Path) -> int:
    mark = marks.read(file)
    assert mark is not None
    return mark.logged


def logged(file: Path, want: int) -> int:
    """The mark's ``logged`` once it is ``want`` (30 s at most); what it is then."""
    deadline = time.monotonic() + 30
    while (mark := marks.read(file)) is None or mark.logged != want:
        if time.monotonic() > deadline:
            break
        time.sleep(0.005)
    return -1 if mark is None else mark.logged


def test_the_mark_waits_for_the_store_advances_with_it_is_written_at_close_and_stops_asking(tmp_path, monkeypatch):
    monkeypatch.setattr(channel, "RECHECK", 0.01)
    sink = Slow(interval=0)
    with rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r", sinks=[sink]) as s:
        assert s.history.path is not None
        file = marks.path(s.history.path, sink)
        assert file is not None
        for step in (1, 2):  # a batch each: a mark for each row
            s.history.log(step, reward=float(step))
            given(sink, step)
        asked = sink.asked
        time.sleep(0.2)  # twenty rechecks: the store still holds nothing
        assert sink.given == 2 and sink.asked > asked, (sink.given, sink.asked)  # it keeps asking
        assert logged_now(file) == 0  # nothing the store lacks is marked written
        sink.held = 1
        assert logged(file, 1) == 1  # the first row stored: marked, the second not
        sink.held = 2
        assert logged(file, 2) == 2
        asked = sink.asked
        time.sleep(0.2)
        assert sink.asked == asked  # caught up: the store is not asked again
        s.history.log(3, reward=3.0)  # given, never stored before the close
        given(sink, 3)
        time.sleep(0.2)
        assert logged_now(file) == 2
    assert logged_now(file) == 3  # the run closed: its library stored what it was given

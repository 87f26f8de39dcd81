"""A sink dropped in a sweep's first trial (its library failed) and given to every later trial: the user hears of the
trials it left out once, at the sweep's end, on their own thread, each trial named by its full run name. It was one
warning per trial, queued on the trial threads and said only at interpreter exit (a notebook's kernel shutdown)."""

from __future__ import annotations

import threading
import time
import warnings
from pathlib import Path

import pytest

import rlnb
from rlnb import sinks
from rlnb.sinks import base, channel, stream
from rlnb.sweep import grid, sweep
from rlnb.testing import FakeBackend
from tests.support.kept_sink import WRITTEN, Kept


@pytest.mark.parametrize("at_once", [1, 4])  # 4: the other trials were under way when the sink was dropped
def test_a_sink_dropped_in_a_sweep_says_once_at_its_end_which_trials_it_left_out(tmp_path, at_once):
    sink = Kept(f"dropped-in-sweep-{at_once}", fail_at=1, interval=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trials = sweep(rlnb.AdamParams(), grid(learning_rate=[1e-3, 2e-3, 3e-3, 4e-3]), steps=1, progress=False,
                       runs_dir=tmp_path, sinks=[sink], executor="threads", max_concurrent=at_once)  # fmt: skip
    said = [str(w.message) for w in caught if issubclass(w.category, sinks.SinkWarning)]
    at = [w.filename for w in caught if "not written there" in str(w.message)]
    assert at == [__file__], at  # at the user's sweep call, on their thread
    folder = Path(trials.attrs["path"]).name
    names = [f"{folder}/{Path(p).name}" for p in trials.run_path]
    (dropped,) = [s for s in said if "dropped while writing run" in s and "not written there" not in s]
    (first,) = [name for name in names if f"run {name}:" in dropped]  # the trial whose failure dropped it, said then
    (left,) = [s for s in said if "not written there" in s]  # one warning for the sink, not one per trial
    assert f"dropped while writing run {first} (OSError: disk gone): 3 other trials" in left, left
    assert all(name in left for name in names if name != first) and "rlnb.export" in left, left
    assert len(said) == 2, said
    assert sink not in base._UNSAID and not sink._unsaid  # nothing left for interpreter exit to say
    assert WRITTEN.get(sink.name) is None


def test_a_sweep_ended_by_an_error_leaves_its_left_out_trials_for_the_next_session_to_say(tmp_path):
    sink = Kept("dropped-in-failed-sweep", fail_at=1, interval=0)

    def bad(done: int, total: int, row: object) -> None:
        if done == total:
            raise RuntimeError("my progress bar broke")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match="progress bar broke") as raised:
            sweep(rlnb.AdamParams(), grid(learning_rate=[1e-3, 2e-3, 3e-3]), steps=1, progress=bad,
                  runs_dir=tmp_path, sinks=[sink], executor="threads", max_concurrent=1)  # fmt: skip
    assert not [w for w in caught if "not written there" in str(w.message)]  # the error is what is raised
    (left,) = [text for text in sink._unsaid if "not written there" in text]
    assert "2 other trials" in left and "rlnb.export" in left, left
    assert sink in base._UNSAID  # said at the next session's start on this thread, or at exit at the latest
    with pytest.warns(sinks.SinkWarning, match="2 other trials of the sweep are not written there"):
        base.say_all()
    assert all(Path(p).name in left for p in raised.value.trials.run_path[1:])  # type: ignore[attr-defined]


class FailsThenHangs(sinks.Sink):
    """A library whose write fails and whose close then hangs (its finish, on a server that is gone)."""

    library, extra = "json", "none"
    released = threading.Event()

    def spec(self) -> tuple[str, str, dict[str, object]]:
        return __name__, "FailsThenHangs", {"interval": self.interval}

    def open(self, run: object) -> FailsThenHangs:
        return self

    def write(self, points: object, failures: object) -> None:
        raise OSError("server gone")

    def close(self) -> None:
        self.released.wait(60)


@pytest.mark.parametrize("interval", [0, 60])  # 60: nothing written before close(), whose own batch fails
def test_a_close_does_not_wait_for_a_dropped_librarys_own_close(monkeypatch, interval):
    """A close waits for a dropped sink's writer only until it said its run left out: the library's own close, hung
    once its server is gone, was waited for the whole CLOSE_TIMEOUT, then said "did not finish writing". So it was
    still where the write that failed was close()'s own batch (review42e F1): the drop was checked once, before."""
    monkeypatch.setattr(stream, "CLOSE_TIMEOUT", 30.0)
    monkeypatch.setattr(FailsThenHangs, "released", threading.Event())
    sink = FailsThenHangs(interval=interval)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            session = rlnb.Session(FakeBackend(), record=False, sinks=[sink])
            session.history.log(0, reward=1.0)
            deadline = time.monotonic() + 30
            while not interval and sink.error is None and time.monotonic() < deadline:
                time.sleep(0.01)
            assert (sink.error is None) == bool(interval)
            start = time.monotonic()
            session.close()
            took = time.monotonic() - start
    finally:
        FailsThenHangs.released.set()
    said = [str(w.message) for w in caught if issubclass(w.category, sinks.SinkWarning)]
    assert took < 15, took  # the hung close was waited for 30 s
    assert len(said) == 1 and "dropped while writing run" in said[0], said


class HangsInWrite(FailsThenHangs):
    """A library whose write hangs (a server that stopped answering): the run falls behind it."""

    def write(self, points: object, failures: object) -> None:
        self.released.wait(60)


def test_a_close_does_not_wait_for_a_writer_hung_in_a_sink_dropped_for_its_backlog(monkeypatch):
    """A sink dropped because the run fell ``MAX_BACKLOG`` points behind its hung writer (said at once, by ``put``):
    close() waited the whole CLOSE_TIMEOUT for that writer, which only the hung thread could end (review42e)."""
    monkeypatch.setattr(stream, "CLOSE_TIMEOUT", 30.0)
    monkeypatch.setattr(channel.Channel.put, "__defaults__", (5,))  # MAX_BACKLOG, small
    monkeypatch.setattr(HangsInWrite, "released", threading.Event())
    sink = HangsInWrite(interval=0)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            session = rlnb.Session(FakeBackend(), record=False, sinks=[sink])
            for k in range(20):
                session.history.log(k, reward=1.0)
                time.sleep(0.01)
            assert sink.error is not None
            start = time.monotonic()
            session.close()
            took = time.monotonic() - start
    finally:
        HangsInWrite.released.set()
    said = [str(w.message) for w in caught if issubclass(w.category, sinks.SinkWarning)]
    assert took < 15, took
    assert len(said) == 1 and "points behind the run" in said[0], said


def test_the_deadline_a_close_gave_up_at_is_said_rounded(monkeypatch):
    """At exit, a close is given what is left of ``EXIT_TIMEOUT`` (2.99999... s): said as it was, "within 2.99999 s"
    (review42e F5)."""
    monkeypatch.setattr(HangsInWrite, "released", threading.Event())
    sink = HangsInWrite(interval=0)
    session = rlnb.Session(FakeBackend(), record=False, sinks=[sink])
    session.history.log(0, reward=1.0)
    attachment = stream._LATEST[session.history]()
    assert attachment is not None
    try:
        with pytest.warns(sinks.SinkWarning, match=r"did not finish writing within 0\.1 s;"):
            attachment.close(timeout=0.1 - 1e-7)
    finally:
        HangsInWrite.released.set()
    session.close()

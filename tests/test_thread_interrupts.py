"""A Ctrl-C while rlnb waits for one of its threads (a session's close, a sink's flush) leaves that thread's end
still waited for: CPython before 3.13 (bpo-45274) marks a live thread stopped when a KeyboardInterrupt lands in its
``Thread.join``, and every later join returned at once."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import rlnb
from rlnb import samples
from rlnb.lifecycle import threads
from rlnb.sinks.base import Sink
from rlnb.testing import FakeBackend

BATCH = [samples.cross_entropy([1, 2, 3])]


def _ctrl_c_in(seconds: float) -> threading.Timer:
    """A Ctrl-C at the main thread ``seconds`` from now (Python's handler raises it there)."""
    timer = threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    return timer


def test_a_ctrl_c_in_join_leaves_the_thread_alive_and_the_next_join_waits():
    release = threading.Event()
    thread = threads.Thread(target=release.wait, name="rlnb-test", args=(30,))
    thread.start()
    _ctrl_c_in(0.2)
    try:
        thread.join(30)
        raise AssertionError("no KeyboardInterrupt")
    except KeyboardInterrupt:
        pass
    assert thread.is_alive()
    threading.Timer(0.5, release.set).start()
    started = time.monotonic()
    thread.join(30)
    assert not thread.is_alive() and time.monotonic() - started > 0.3


def test_a_ctrl_c_in_a_close_then_a_second_close_settles_every_operation(tmp_path):
    backend = FakeBackend()
    s = rlnb.Session(backend, runs_dir=tmp_path, run_id="r")
    worker, run = backend._worker, backend._worker._run_op
    release = threading.Event()

    def deaf(*job: Any) -> Any:  # a step deaf to the stop (torch mid-kernel), until released
        release.wait(30)
        return run(*job)

    worker._run_op = deaf
    ops: list[rlnb.Operation[Any]] = [s.forward_backward(BATCH), s.optim_step()]
    time.sleep(0.2)
    _ctrl_c_in(0.3)
    try:
        s.close()
        raise AssertionError("no KeyboardInterrupt")
    except KeyboardInterrupt:
        pass
    threading.Timer(0.5, release.set).start()
    s.close()
    assert [op.status for op in ops] == ["TRAINING_OPERATION_STATUS_COMPLETED", "TRAINING_OPERATION_STATUS_FAILED"]
    assert not worker._thread.is_alive()
    df = rlnb.History.load(tmp_path / "r").df
    assert list(df.status) == ["TRAINING_OPERATION_STATUS_COMPLETED", "TRAINING_OPERATION_STATUS_FAILED"]


class _SlowSink(Sink):
    """A sink writing into a list, each write once ``release`` is set."""

    library, extra = "json", "none"

    def __init__(self) -> None:
        super().__init__(interval=0.05)
        self.written: list[object] = []
        self.release = threading.Event()

    def open(self, run):
        sink = self

        class Writer:
            def write(self, points, failures):
                sink.release.wait(30)
                sink.written.extend(points)

            def close(self):
                sink.written.append("CLOSED")

        return Writer()

    def spec(self):
        return (__name__, "_SlowSink", {})


def test_a_ctrl_c_in_a_sinks_flush_then_a_second_close_writes_everything(tmp_path):
    sink = _SlowSink()
    s = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r", sinks=[sink])
    for _ in range(2):
        s.forward_backward(BATCH)
        s.optim_step().result(30)
    _ctrl_c_in(0.5)
    try:
        s.close()
        raise AssertionError("no KeyboardInterrupt")
    except KeyboardInterrupt:
        pass
    threading.Timer(0.5, sink.release.set).start()
    s.close()
    assert sink.written and sink.written[-1] == "CLOSED", sink.written

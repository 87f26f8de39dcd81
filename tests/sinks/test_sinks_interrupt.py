"""A sink's child process (``process=True``) outlives an interrupt of its parent: Jupyter's "Interrupt kernel"
and a terminal's Ctrl-C send SIGINT to the parent's whole process group, the sink's child included."""

from __future__ import annotations

import io
import os
import signal
import time
import warnings

import pytest

import rlnb
from rlnb import samples, sinks
from rlnb.sinks import process
from rlnb.sinks.base import Point, RunInfo
from rlnb.testing import FakeBackend
from tests.support import sink_readers as read

pytest.importorskip("tensorboard")
BATCH = [samples.cross_entropy(list(b"interrupted"))]


def _child(sink: sinks.TensorBoard, deadline: float = 60.0) -> process.Child:
    """The sink's child process once its sink is made there (its imports done)."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        child = process._children.get(id(sink))
        if child is not None and child._made:
            return child
        time.sleep(0.05)
    raise AssertionError("the sink's child process was never ready")


@pytest.mark.slow  # a child process that imports TensorBoard
def test_a_sinks_child_process_outlives_an_interrupt_of_the_notebook(tmp_path):
    tb = sinks.TensorBoard(tmp_path / "tb", process=True)
    session = rlnb.Session(FakeBackend(), runs_dir=tmp_path / "runs", run_id="r", sinks=[tb])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session.forward_backward(BATCH)
        session.optim_step().result(30)
        child = _child(tb)
        os.kill(child._proc.pid, signal.SIGINT)  # what killpg(the kernel's group, SIGINT) gives the child
        time.sleep(0.5)
        for _ in range(2):  # the notebook goes on after the interrupted cell
            session.forward_backward(BATCH)
            session.optim_step().result(30)
        session.close()
    assert child._proc.poll() is not None and child._proc.returncode == 0  # it ended when its stdin closed
    assert not [w for w in caught if "dropped" in str(w.message)]
    _, points, _ = read.tensorboard(tmp_path / "tb" / "r")
    assert sorted(points) == [1, 2, 3] and all("loss" in p for p in points.values())


class _GoneAfter(io.BytesIO):
    """The child's reply pipe to a parent that is killed after ``answers`` replies (a kernel restarted mid-write)."""

    def __init__(self, answers: int) -> None:
        super().__init__()
        self.answers = answers

    def write(self, data: bytes) -> int:  # type: ignore[override]
        if self.answers == 0:
            raise BrokenPipeError(32, "Broken pipe")
        self.answers -= 1
        return super().write(data)


def _requests(*messages: object) -> io.BytesIO:
    pipe = io.BytesIO()
    for message in messages:
        process._send(pipe, message)
    pipe.seek(0)
    return pipe


@pytest.mark.slow  # imports TensorBoard
def test_a_child_whose_parent_dies_mid_write_still_finishes_its_runs(tmp_path):
    """The parent killed while the child writes a batch: the child's answer meets a closed pipe. It finishes the runs
    it holds, as when its stdin closes (``BrokenPipeError`` ended it with the library's run unfinished, unflushed)."""
    run = RunInfo("r", None, {"seed": 0})
    requests = _requests(
        ("sink", "rlnb.sinks.tensorboard", "TensorBoard", {"logdir": str(tmp_path)}),
        ("open", run),
        ("write", 0, [Point(1, {"loss": 1.0}, 0.0)], []),  # its answer finds the parent gone
        ("write", 0, [Point(2, {"loss": 0.5}, 0.0)], []),  # never read
    )
    process.serve(requests, _GoneAfter(answers=2))
    _, points, _ = read.tensorboard(tmp_path / "r")
    assert points == {1: {"loss": 1.0}}


@pytest.mark.slow  # imports TensorBoard
def test_a_child_whose_parent_dies_mid_request_finishes_its_runs(tmp_path):
    """The parent killed while it sends a batch: the child reads half a message, then the end of its stdin. It
    finishes the runs it holds (pickle's ``UnpicklingError: pickle data was truncated`` ended it with them open)."""
    run = RunInfo("r", None, {"seed": 0})
    requests = _requests(
        ("sink", "rlnb.sinks.tensorboard", "TensorBoard", {"logdir": str(tmp_path)}),
        ("open", run),
        ("write", 0, [Point(1, {"loss": 1.0}, 0.0)], []),
        ("write", 0, [Point(2, {"loss": 0.5}, 0.0)], []),
    ).getvalue()
    process.serve(io.BytesIO(requests[:-10]), io.BytesIO())
    _, points, _ = read.tensorboard(tmp_path / "r")
    assert points == {1: {"loss": 1.0}}


@pytest.mark.slow  # a child process
@pytest.mark.parametrize(
    ("end", "said"),
    [("os.kill(os.getpid(), signal.SIGKILL)", "killed by SIGKILL"), ("os._exit(3)", "exit code 3")],
)
def test_a_sinks_child_that_ends_is_said_to_by_its_exit_code_or_signal(tmp_path, monkeypatch, end, said):
    """review44c: a child killed (``kill -9``, the OOM killer) was said to have ended with "exit code None": its pipe
    closes a moment before it can be reaped, and it was asked at once. This child closes its pipe, then ends."""
    monkeypatch.setattr(process, "_START", f"import os, signal, time; os.close(1); time.sleep(0.3); {end}")
    child = process.Child(sinks.TensorBoard(tmp_path / "tb", process=True))
    try:
        with pytest.raises(RuntimeError, match=rf"the sink's child process ended \({said}\)"):
            child.call("finish", "r")
    finally:
        child.end()

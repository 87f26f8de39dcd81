"""A session whose close gave up on a slow sink (its thread still writing the run), then at once a session
continuing the run with that sink: the second is left out of the sink while the first still writes, and keeps the
run's mark (``rlnb.sinks.marks``), so that a later session continuing the run sends the sink what the second missed.
The second took the first for "another run of that name" and removed the mark: that later session then sent
nothing of it, and the warning told of another run and an ``rlnb.export`` that refused the run as held there."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import rlnb
from rlnb import samples, sinks
from rlnb.sinks import leases, stream
from rlnb.sinks.base import Failure, Point
from rlnb.testing import FakeBackend
from tests.support.kept_sink import WRITTEN, Kept, written

CE = [samples.cross_entropy(list(b"hello world"))]


class Held(Kept):
    """``Kept`` whose write of a batch from ``stop_at`` on waits for ``gate`` (a library gone slow)."""

    def __init__(self, name: str, gate: threading.Event, stop_at: int, **kw: Any):
        self.gate, self.stop_at = gate, stop_at
        super().__init__(name, **kw)

    def write(self, points: list[Point], failures: list[Failure]) -> None:
        if any(p.step >= self.stop_at for p in points):
            assert self.gate.wait(30)
        super().write(points, failures)


def steps(runs, sink: sinks.Sink, first: int, n: int) -> list[str]:
    """Continue run ``r`` with ``sink`` for ``n`` steps, each logging ``reward`` at its own step from ``first``; the
    SinkWarnings said."""
    with pytest.warns() as caught, rlnb.Session(FakeBackend(), runs_dir=runs, run_id="r", sinks=[sink]) as s:
        for step in range(first, first + n):
            s.forward_backward(CE)
            s.optim_step().result()
            s.history.log(step, reward=float(step))
            if isinstance(sink, Held) and step < sink.stop_at:
                written(sink.name, step)
    return [str(w.message) for w in caught if issubclass(w.category, sinks.SinkWarning)]


@pytest.mark.filterwarnings("ignore::rlnb.history.RunContinuedWarning")
def test_a_session_continuing_a_run_its_stalled_writer_still_writes_keeps_the_mark(tmp_path, monkeypatch):
    monkeypatch.setattr(stream, "CLOSE_TIMEOUT", 0.2)
    runs, gate = tmp_path / "runs", threading.Event()
    slow = Held("stalled", gate, stop_at=3, interval=0)
    try:
        first = steps(runs, slow, 1, 4)  # steps 1-2 written, the batch of step 3 waits: close gives up on it
        assert any("did not finish writing within 0.2 s" in said for said in first), first
        second = steps(runs, slow, 5, 2)  # at once, with the same sink: session 1's thread still writes run r
    finally:
        gate.set()
    assert slow.stalled is not None
    slow.stalled.join(30)
    (said,) = [said for said in second if "left" in said]
    assert "still being written there by an earlier session of this run" in said
    assert "another run" not in said and "rlnb.export" not in said
    steps(runs, Held("stalled", gate, 3, interval=0), 7, 1)  # later: sent what session 2 recorded, then its own step
    rewards = Counter(p.step for points, _ in WRITTEN["stalled"] for p in points if "reward" in p.values)
    assert rewards == {step: 1 for step in range(1, 8)}


@pytest.mark.slow
def test_a_claim_says_which_run_holds_it_in_another_process_too(tmp_path):
    where, root = f"Kept(name={str(tmp_path)!r})", str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": root, "TMPDIR": tempfile.gettempdir()}  # the lock files' folder: this one's
    code = (f"import sys; from rlnb.sinks import leases; assert leases.take({where!r}, 'r', 'f\\0t'); "
            "print('held', flush=True); sys.stdin.read()")  # fmt: skip
    holding = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                               text=True)  # fmt: skip
    try:
        assert holding.stdout is not None and holding.stdout.readline() == "held\n"
        assert leases.take(where, "r", "f\0t") is None  # the same run's earlier writer still holds it
        assert leases.holder(where, "r") == "f\0t"
    finally:
        holding.communicate(timeout=30)
    claim = leases.take(where, "r", "g\0u")  # released with its process
    assert claim is not None and leases.holder(where, "r") == "g\0u"
    leases.drop(claim)

"""A session whose process is killed (``kill -9``: an OOM-killed kernel) while its sink is behind, then a later
session continuing the run: every step the run folder recorded reaches the sink exactly once (the sink took none of
the killed session's unwritten steps, in silence; ``rlnb.export`` then refused the run as held there)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import rlnb

ROOT = Path(__file__).resolve().parents[2]
KILLED = """
import os, queue, signal, sys, threading
import rlnb
from rlnb import samples, sinks
import rlnb.sinks.tensorboard as tb

written, blocked, real = queue.SimpleQueue(), threading.Event(), tb._Writer.write

def write(self, points, failures):  # the library hangs at step 4: steps 4-6 stay queued in the sink
    if any(p.step > 3 for p in points):
        blocked.set()
        threading.Event().wait()
    real(self, points, failures)
    for p in points:
        written.put(p.step)

tb._Writer.write = write
runs, logdir = sys.argv[1], sys.argv[2]
s = rlnb.connect("local", model="tiny", seed=0, device="cpu", threads=1, runs_dir=runs, run_id="r",
                 checkpoint_dir=os.path.join(runs, "ck"), sinks=[sinks.TensorBoard(logdir, interval=0)])
for i in range(6):
    s.forward_backward([samples.cross_entropy(s.encode(f"n={i}"))])
    s.optim_step().result(timeout=60)
    s.history.log(i + 1, reward=float(i))
    while i < 3 and written.get(timeout=60) < i + 1:  # steps 1-3 written there, one batch each
        pass
assert blocked.wait(60)
ck = s.save_training_checkpoint().result(timeout=60).checkpoint.id
print(s.backend.checkpoint_path(ck), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def events(run_dir: Path, tag: str) -> dict[int, list[float]]:
    """Every event of ``tag`` in a TensorBoard run, by step: a step written twice has two."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    found: dict[int, list[float]] = {}
    for event in acc.Scalars(tag):
        found.setdefault(event.step, []).append(event.value)
    return found


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::rlnb.history.runs.RunContinuedWarning")
def test_a_run_continued_after_kill_9_gets_every_step_into_its_sink_once(tmp_path):
    pytest.importorskip("tensorboard")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = [str(tmp_path / "runs"), str(tmp_path / "tb")]
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(KILLED), *args], env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    assert sorted(events(tmp_path / "tb" / "r", "loss")) == [1, 2, 3]  # what the killed session's sink wrote
    kw = dict(model="tiny", seed=0, device="cpu", threads=1, runs_dir=tmp_path / "runs", run_id="r")
    with rlnb.connect("local", resume_from=done.stdout.strip(), sinks=[rlnb.sinks.TensorBoard(args[1])], **kw) as s:
        for i in range(6, 8):
            s.forward_backward([rlnb.samples.cross_entropy(s.encode(f"n={i}"))])
            s.optim_step().result(timeout=60)
    steps = s.history.steps
    found = events(tmp_path / "tb" / "r", "loss")
    assert {step: len(values) for step, values in found.items()} == {step: 1 for step in range(1, 9)}
    assert [found[step][0] for step in range(1, 9)] == pytest.approx(list(steps.loss), rel=1e-6)
    rewards = events(tmp_path / "tb" / "r", "reward")  # history.log's rows too
    assert rewards == {step: [pytest.approx(step - 1.0)] for step in range(1, 7)}

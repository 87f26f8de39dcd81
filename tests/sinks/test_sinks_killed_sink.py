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
from rlnb import sinks

ROOT = Path(__file__).resolve().parents[2]
KILLED = """
import os, queue, signal, sys, threading
import rlnb
from rlnb import sinks
from rlnb.sinks import process

written, blocked, opened = queue.SimpleQueue(), threading.Event(), process.Lease.open

def open_(self, run):  # the library hangs at step 4 (in-process or in its child): steps 4-6 stay queued here
    writer = opened(self, run)
    write = writer.write
    def hanging(points, failures):
        if any(p.step > 3 for p in points):
            blocked.set()
            threading.Event().wait()
        write(points, failures)
        for p in points:
            written.put(p.step)
    writer.write = hanging
    return writer

process.Lease.open = open_
runs, kind, where = sys.argv[1:4]
sink = sinks.TensorBoard(where, interval=0) if kind == "tensorboard" else sinks.MLflow(where, interval=0)
s = rlnb.connect("local", model="tiny", seed=0, device="cpu", threads=1, runs_dir=runs, run_id="r",
                 checkpoint_dir=os.path.join(runs, "ck"), sinks=[sink])
for i in range(6):
    s.forward_backward([rlnb.samples.cross_entropy(s.encode(f"n={i}"))])
    s.optim_step().result(timeout=60)
    s.history.log(i + 1, reward=float(i))
    while i < 3 and written.get(timeout=120) < i + 1:  # steps 1-3 written there, one batch each
        pass
assert blocked.wait(60)
ck = s.save_training_checkpoint().result(timeout=60).checkpoint.id
print(s.backend.checkpoint_path(ck), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def events(kind: str, where: Path, tag: str) -> dict[int, list[float]]:
    """Every value of ``tag`` the library holds for run ``r``, by step: a step written twice has two."""
    found: dict[int, list[float]] = {}
    if kind == "tensorboard":
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        acc = EventAccumulator(str(where / "r"), size_guidance={"scalars": 0})
        acc.Reload()
        for event in acc.Scalars(tag):
            found.setdefault(event.step, []).append(event.value)
        return found
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{where}")
    runs = client.search_runs([client.get_experiment_by_name("rlnb").experiment_id])
    assert [run.info.run_name for run in runs] == ["r"]  # continued in one MLflow run
    for metric in client.get_metric_history(runs[0].info.run_id, tag):
        found.setdefault(metric.step, []).append(metric.value)
    return found


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["tensorboard", "mlflow"])
@pytest.mark.filterwarnings("ignore::rlnb.history.runs.RunContinuedWarning")
@pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy is deprecated")  # SQLAlchemy 2.1, in MlflowClient
def test_a_run_continued_after_kill_9_gets_every_step_into_its_sink_once(kind, tmp_path, sink_env):
    pytest.importorskip(kind)
    where = tmp_path / ("tb" if kind == "tensorboard" else "m.db")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = [str(tmp_path / "runs"), kind, str(where)]
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(KILLED), *args], env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    assert sorted(events(kind, where, "loss")) == [1, 2, 3]  # what the killed session's sink wrote
    sink = sinks.TensorBoard(where) if kind == "tensorboard" else sinks.MLflow(where)
    kw = dict(model="tiny", seed=0, device="cpu", threads=1, runs_dir=tmp_path / "runs", run_id="r")
    with rlnb.connect("local", resume_from=done.stdout.strip(), sinks=[sink], **kw) as s:
        for i in range(6, 8):
            s.forward_backward([rlnb.samples.cross_entropy(s.encode(f"n={i}"))])
            s.optim_step().result(timeout=60)
    losses = events(kind, where, "loss")
    assert {step: len(values) for step, values in losses.items()} == {step: 1 for step in range(1, 9)}
    assert [losses[step][0] for step in range(1, 9)] == pytest.approx(list(s.history.steps.loss), rel=1e-6)
    rewards = events(kind, where, "reward")  # history.log's rows too
    assert rewards == {step: [pytest.approx(step - 1.0)] for step in range(1, 7)}

"""W&B offline and Trackio keep what they are given in memory a while before storing it (wandb-core's buffered
``.wandb`` writes; Trackio's queue, sent to its database every 0.5 s). A session killed (``kill -9``) once its sink's
mark covered every step, then a session continuing the run: every step of both sessions is in the library's store
(the mark said "written" when the library's ``log()`` returned: the killed session's last steps were lost for good)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

import rlnb
from rlnb import samples, sinks
from rlnb.testing.fake import FakeBackend
from tests.support.sink_readers import wandb_records
from tests.support.sink_tests import env  # noqa: F401 - every library's state under a temporary folder, $HOME too

ROOT = Path(__file__).resolve().parents[2]
STEPS = 20
KILLED = """
import glob, json, os, signal, sys, time
import rlnb
from rlnb import samples, sinks
from rlnb.testing.fake import FakeBackend

runs, kind, where, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
sink = sinks.WandB("p", dir=where, interval=0) if kind == "wandb" else sinks.Trackio("p", interval=0)
s = rlnb.Session(FakeBackend(), runs_dir=runs, run_id="r", sinks=[sink])
for i in range(n):
    s.forward_backward([samples.cross_entropy(list(b"abc"))])
    s.optim_step().result(timeout=30)
    s.history.log(i + 1, reward=float(i + 1))
(mark,) = glob.glob(os.path.join(runs, "r", "sink-*.json"))
deadline = time.monotonic() + 120  # the mark waits for the library to store the points (wandb-core: up to ~30 s)
while json.loads(open(mark).read())["logged"] < n:
    if time.monotonic() > deadline:  # killed now, the test would check the re-send, not the store holding them
        sys.exit(f"the sink's mark never covered the {n} steps: {open(mark).read()}")
    time.sleep(0.01)
os.kill(os.getpid(), signal.SIGKILL)
"""


def rows(kind: str, where: Path) -> Counter[tuple[str, int]]:
    """How many rows the library's store holds of each ``(figure, step)`` of run ``r``: a step written twice has 2."""
    held: Counter[tuple[str, int]] = Counter()
    if kind == "wandb":
        for file in sorted(where.glob("wandb/offline-run-*/run-*.wandb")):
            for record in wandb_records(file):
                if record.WhichOneof("record_type") == "history":
                    row = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item}
                    held.update((k, row["step"]) for k in ("loss", "reward") if k in row)
        return held
    con = sqlite3.connect(where / "p.db")
    try:
        for step, metrics in con.execute("select step, metrics from metrics where run_name = 'r'"):
            held.update((k, step) for k in ("loss", "reward") if k in json.loads(metrics))
    finally:
        con.close()
    return held


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["wandb", "trackio"])
@pytest.mark.filterwarnings("ignore::rlnb.history.runs.RunContinuedWarning")
def test_a_session_killed_once_its_mark_covered_every_step_loses_none_of_them_in_the_store(kind, tmp_path, sink_env):
    pytest.importorskip(kind)
    runs, where = tmp_path / "runs", tmp_path / "wb" if kind == "wandb" else Path(sink_env["TRACKIO_DIR"])
    child_env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = [str(runs), kind, str(where), str(STEPS)]
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(KILLED), *args], env=child_env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    # a batch a second: whatever is re-sent of the killed session is written in one batch with this one's steps
    sink = sinks.WandB("p", dir=where, interval=1) if kind == "wandb" else sinks.Trackio("p", interval=1)
    backend = FakeBackend()
    backend.step = backend.weights_version = STEPS  # steps past the killed session's: none merged with a re-sent one
    with rlnb.Session(backend, runs_dir=runs, run_id="r", sinks=[sink]) as s:
        for i in range(STEPS, STEPS + 2):
            s.forward_backward([samples.cross_entropy(list(b"abc"))])
            s.optim_step().result(timeout=30)
            s.history.log(i + 1, reward=float(i + 1))
    held = rows(kind, where)
    assert list(s.history.steps.step) == list(range(1, STEPS + 3))
    assert {step: n for (name, step), n in held.items() if name == "loss"} == {i: 1 for i in range(1, STEPS + 3)}
    assert {step: n for (name, step), n in held.items() if name == "reward"} == {i: 1 for i in range(1, STEPS + 3)}

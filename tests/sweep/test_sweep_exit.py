"""A sweep told to end (a SIGTERM: a kernel's Shut Down, a scheduler's stop) while a trial is in its step: its
trials open their sessions on threads, so the signal killed the process at once with no row written; and the sweep's
drain (up to 60 s) and its executors' close (up to 120 s) never looked at the hurried exit, so a Shut Down's SIGKILL
(5 s) would have cut them off too. It now ends in seconds, every trial's row recorded, saying why it stopped."""

import json
import signal
import subprocess
import sys
import time

import pytest

from rlnb.sweep.dispatch import HURRIED

STUCK_SWEEP = """
import sys, time
import rlnb
from rlnb.sweep import grid, sweep
from rlnb.tasks import Task
def stuck(prompt, completion):
    print("MARK", flush=True)
    time.sleep(60)  # a reward that does not return soon: the step the SIGTERM lands in
    return 0.0
sweep(rlnb.AdamParams(learning_rate=3e-3, weight_decay=0.0), grid(learning_rate=[1e-3, 2e-3, 4e-3]), steps=2,
      task=Task("stuck", ["a="], stuck), executor=sys.argv[2], max_concurrent=1, runs_dir=sys.argv[1], progress=False)
print("RETURNED", flush=True)
"""


@pytest.mark.slow  # a subprocess that imports torch and trains a tiny model
@pytest.mark.parametrize("executor", ["threads", "batched"])
def test_a_sigterm_mid_sweep_ends_the_process_in_seconds_with_every_row_written(tmp_path, executor):
    proc = subprocess.Popen([sys.executable, "-c", STUCK_SWEEP, str(tmp_path), executor], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "MARK\n"
        time.sleep(0.5)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    took = time.monotonic() - started
    assert proc.returncode == 128 + signal.SIGTERM and "RETURNED" not in out, err[-2000:]
    assert took < 30, took  # the 60 s reward not waited for, nor the drain's 60 s or the close's 120 s
    (rows_file,) = tmp_path.glob("*/trials.jsonl")
    rows = sorted((json.loads(line) for line in rows_file.read_text().splitlines()), key=lambda r: r["trial"])
    assert [(r["trial"], r["status"], r["reason"]) for r in rows] == [
        (0, "STOPPED", HURRIED),
        (1, "STOPPED", "stopped before it started"),
        (2, "STOPPED", "stopped before it started"),
    ], err[-2000:]

"""`rlnb demo` end to end, briefly, as a person runs it."""

import subprocess
import sys

import pandas as pd

import rlnb


def test_demo_runs_and_writes_history_and_plot(tmp_path):
    out = tmp_path / "demo"
    proc = subprocess.run(
        [sys.executable, "-m", "rlnb.cli", "demo", "--steps", "4", "--optimizer", "muon", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1].split() == ["step", "loss", "reward", "grad", "norm", "time", "status"]
    rows = [ln.split() for ln in lines[2:6]]
    assert [r[0] for r in rows] == ["1", "2", "3", "4"] and all(r[-1] == "COMPLETED" for r in rows)
    history = pd.read_csv(out / "history.csv")
    assert set(history.kind) == {"sample", "forward-backward", "optim-step", "weights-sync"}
    assert (history.status == "TRAINING_OPERATION_STATUS_COMPLETED").all()
    assert history[history.kind == "optim-step"].grad_norm.notna().all()
    assert len(pd.read_csv(out / "rewards.csv")) == 4
    assert (out / "demo.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(rlnb.History.load(out / "run").steps) == 4


def test_demo_rejects_bad_arguments():
    proc = subprocess.run([sys.executable, "-m", "rlnb.cli", "demo", "--steps", "0"], capture_output=True, text=True)
    assert proc.returncode == 2 and "--steps must be >= 1" in proc.stderr

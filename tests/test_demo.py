"""`rlnb demo` end to end, briefly, as a person runs it."""

import os
import subprocess
import sys

import pandas as pd
import pytest

import rlnb

pytestmark = pytest.mark.slow  # runs rlnb demo in a subprocess


def test_demo_runs_and_writes_history_and_plot(tmp_path):
    out = tmp_path / "demo"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlnb.cli",
            "demo",
            "--task",
            "digits",
            "--steps",
            "4",
            "--optimizer",
            "muon",
            "--out",
            str(out),
        ],
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
    norms = history[history.kind == "optim-step"].grad_norm
    assert norms.notna().all()
    # the printed norm is the recorded one to 3 significant figures: "0.000" for 0.000427 said the gradient vanished
    assert [float(r[3]) for r in rows] == pytest.approx(norms.tolist(), rel=5e-3)
    logged = pd.read_csv(out / "rewards.csv")
    assert len(logged) == 4 and {"reward", "entropy", "completions/mean_length", "frac_reward_zero_std"} <= set(logged)
    assert (out / "demo.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    run = rlnb.History.load(out / "run")
    assert len(run.steps) == 4 and list(run.steps.reward) == list(logged.reward)
    assert list(run.completions.step.unique()) == [1, 2, 3, 4] and len(run.completions) == 4 * 6 * 8
    assert str(out / "run" / "completions.jsonl") in lines[-1]


def test_demo_on_a_verified_task_prints_held_out_accuracy_before_and_after(tmp_path):
    out = tmp_path / "demo"
    proc = subprocess.run(
        [sys.executable, "-m", "rlnb.cli", "demo", "--steps", "10", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "task=first_letter" in lines[0]  # the default: a task that needs the right answer
    assert lines[1] == "held-out accuracy before training: 0.000 (64 prompts, greedy)"
    assert any(ln.strip().startswith("held-out accuracy at step 10: ") for ln in lines)
    after = next(ln for ln in lines if ln.startswith("held-out accuracy: before 0.000 -> after "))
    logged = pd.read_csv(out / "rewards.csv")
    accuracy = logged["eval/accuracy"].dropna().tolist()
    assert accuracy[0] == 0.0 and f"{accuracy[-1]:.3f}" == after.split("after ")[1].split()[0] and len(accuracy) == 2
    completions = rlnb.History.load(out / "run").completions
    assert len(completions) == 10 * 64 * 16 and set(completions.completion.str.len()) <= {0, 1}


def test_demo_lists_its_tasks():
    proc = subprocess.run([sys.executable, "-m", "rlnb.cli", "demo", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "{first_letter,addition,digits}" in proc.stdout
    proc = subprocess.run(
        [sys.executable, "-m", "rlnb.cli", "demo", "--task", "reverse"], capture_output=True, text=True
    )
    assert proc.returncode == 2 and "invalid choice: 'reverse'" in proc.stderr


def test_demo_rejects_bad_arguments():
    proc = subprocess.run([sys.executable, "-m", "rlnb.cli", "demo", "--steps", "0"], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.startswith("rlnb demo: --steps must be an integer in [1, 1000003]")


def test_demo_on_a_hugging_face_model_with_lora(hf_dirs, tmp_path):
    out = tmp_path / "demo"
    cmd = [
        sys.executable,
        "-m",
        "rlnb.cli",
        "demo",
        "--steps",
        "3",
        "--model",
        hf_dirs["qwen3"],
        "--lora",
        "4",
        "--optimizer",
        "muon",
        "--out",
        str(out),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert f"model={hf_dirs['qwen3']}" in proc.stdout and "lora rank 4" in proc.stdout
    rows = [ln.split() for ln in proc.stdout.splitlines()[3:6]]  # after the task line, accuracy and the header
    assert [r[0] for r in rows] == ["1", "2", "3"] and all(r[-1] == "COMPLETED" for r in rows)
    config = rlnb.History.load(out / "run").config
    assert config["model_kind"] == "hf" and config["lora"]["rank"] == 4


def test_demo_names_a_model_it_cannot_find(tmp_path):
    cmd = [sys.executable, "-m", "rlnb.cli", "demo", "--model", "nobody/no-such-model", "--out", str(tmp_path)]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=120, env={**os.environ, "HF_HUB_CACHE": str(tmp_path / "cache")}
    )
    assert proc.returncode == 2
    assert "'nobody/no-such-model'" in proc.stderr and "hf download nobody/no-such-model" in proc.stderr

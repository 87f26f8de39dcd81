"""Smoke runs of the benchmark scripts that the test suite keeps working (their figures are in bench/README.md)."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.timeout(1800)  # it compiles a decode step: minutes on a loaded 2-core CPU
def test_the_gpu_check_runs_on_cpu(tmp_path):
    """``gpu_check.py --tiny`` on the CPU: the same code a GPU machine runs, with its report complete."""
    pytest.importorskip("transformers")
    env = {**os.environ, "OUT": str(tmp_path), "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [sys.executable, "bench/gpu_check.py", "--tiny", "--steps", "1"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1700,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    loops = [report["adam_loop"], report["muon_loop"]]
    assert all(loop["steps_per_s"] > 0 and loop["sampler_tokens_per_s"] > 0 for loop in loops)
    assert report["muon_step"]["matrices"] > 0
    decode = report["decode"]
    assert 0.5 <= decode["matching_tokens"] <= 1.0  # bf16: most tokens agree (fp32 agreement: test_compiled.py)
    assert set(decode["tokens_per_s"]) == {
        "rlnb eager",
        "rlnb compile=True",
        "generate (default cache)",
        "generate (static cache + compile)",
    }
    assert all(v > 0 for v in decode["tokens_per_s"].values()) and 0 < decode["bandwidth"]["fraction"] < 1
    compiles = decode["compiled"]["compiles"]  # CPU: choice.compiles; one a thread count (a loaded machine's policy
    assert {c["what"] for c in compiles} == {"decode step"}  # may change it mid-run: torch's graphs are per count)
    assert len({c["threads"] for c in compiles}) == len(compiles)
    assert decode["eager"]["thread_policy"] == decode["compiled"]["thread_policy"] == "auto"  # CPU: the policy
    assert decode["threads_unchanged"]  # the sessions set their own threads, not the caller's


@pytest.mark.slow
def test_a_failing_gpu_check_section_is_recorded_and_the_others_still_run(tmp_path):
    """A GPU lease is minutes long: one section raising must not lose the figures of the others."""
    pytest.importorskip("transformers")
    env = {**os.environ, "OUT": str(tmp_path), "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [
            sys.executable,
            "bench/gpu_check.py",
            "--tiny",
            "--steps",
            "1",
            "--prompts",
            "0",
            "--only",
            "adam_loop,muon_step",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 1
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["adam_loop"]["error"].startswith("ZeroDivisionError")  # 64 completions over 0 prompts
    assert report["muon_step"]["matrices"] > 0  # the section after it still ran and was written


@pytest.mark.slow
def test_the_remote_benchs_jitter_varies_each_operations_delay(tmp_path, monkeypatch):
    """``bench_remote.py --jitter``: each op-delay x U(1, 1 + jitter), seen in the probe's own timestamps (the
    patch once replaced a ``time`` the engine no longer read, and every operation took the plain op-delay)."""
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import bench_remote

    import rlnb
    from rlnb import samples

    probe = tmp_path / "probe.txt"
    with (
        bench_remote.running_server("--op-delay", "0.3", probe=str(probe), jitter=3.0) as url,
        rlnb.connect(url, api_key="bench-key", base_model="rlnb/tiny", record=False) as s,
    ):
        for _ in range(8):  # one at a time: each runs from its RUNNING line to its COMPLETED line
            s.forward_backward([samples.cross_entropy([1, 2, 3])]).result(120)
    seen: dict[str, dict[str, float]] = {}
    for line in probe.read_text().splitlines():
        op_id, status, t = line.split()
        seen.setdefault(op_id, {})[status] = float(t)
    runs = [times["COMPLETED"] - times["RUNNING"] for times in seen.values() if "COMPLETED" in times][2:]
    assert len(runs) == 6 and min(runs) >= 0.3  # the first two (warming up) left out
    assert max(runs) - min(runs) > 0.25, runs  # seeded draws: extras of 0.23 to 0.71 s over the plain 0.3 s


@pytest.mark.slow  # a sweep's RL step, and the bench's imports (~25 s on a loaded 2-core CPU)
def test_the_lessons_bench_pairs_each_trial_with_its_own_run_after_a_stopped_sweep(tmp_path, monkeypatch):
    """``bench_lessons.py`` zipped the sweep's rows with ``histories(trials)`` (``strict=True``), which leaves out a
    trial without a run: after a sweep stopped before its second trial started, that raised. Each row is paired with
    its own run now, and the trial without one is kept (distinct NaN)."""
    import threading

    import torch

    import rlnb
    from rlnb.sweep import grid, sweep
    from rlnb.tasks import Task

    threads = torch.get_num_threads()
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import bench_lessons

    torch.set_num_threads(threads)  # the bench runs torch on one thread: not the rest of this worker's tests
    stop = threading.Event()

    def reward(prompt, completion):
        stop.set()  # in the first trial's step: the second never starts
        return float(len(completion)) / 8

    trials = sweep(rlnb.AdamParams(weight_decay=0.0), grid(learning_rate=[1e-3, 2e-3]), steps=1, stop=stop,
                   task=Task("count", [[104, 105]], reward), executor="threads", max_concurrent=1, runs_dir=tmp_path,
                   progress=False)  # fmt: skip
    assert trials.run_path.notna().tolist() == [True, False]
    rows = bench_lessons.sweep_rows(trials)
    assert [(r["lr"], r["status"]) for r in rows] == list(zip(trials.learning_rate, trials.status, strict=True))
    assert rows[0]["distinct"] >= 1 and math.isnan(rows[1]["distinct"]) and math.isnan(rows[1]["final_reward"])

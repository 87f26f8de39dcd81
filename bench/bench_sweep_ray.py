"""8 local trials through Ray against the thread pool, on this machine.

``sweep(AdamParams(weight_decay=0), grid(learning_rate=[1e-3, 3e-3, 1e-2, 3e-2]), seeds=(0, 1),
steps=N)`` — the tiny model on the digits task — with ``executor="threads"`` (``max_concurrent`` 1 and 2)
and ``executor="ray"`` on a local Ray started here with ``num_cpus=2`` (1 CPU per trial, so 2 at a
time). Ray's start-up and its first sweep (which starts the worker processes: Python, torch, rlnb)
are timed apart from the warm sweeps. Every trial must end COMPLETED.

    python bench/bench_sweep_ray.py [--local-steps 10] [--reps 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import pandas as pd

import rlnb
from rlnb.sweep import grid, sweep

CONFIGS = grid(learning_rate=[1e-3, 3e-3, 1e-2, 3e-2])
SEEDS = (0, 1)


def timed(steps: int, runs_dir: str, **options: object) -> tuple[float, pd.DataFrame]:
    start = time.perf_counter()
    trials = sweep(
        rlnb.AdamParams(weight_decay=0.0), CONFIGS, seeds=SEEDS, steps=steps, runs_dir=runs_dir, progress=False,
        **options,
    )  # fmt: skip
    wall = time.perf_counter() - start
    bad = trials[trials.status != "COMPLETED"]
    if len(bad):
        raise RuntimeError(f"{len(bad)} trial(s) did not complete:\n{bad[['trial', 'status', 'reason']]}")
    return wall, trials


def ray_part(steps: int, reps: int) -> None:
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a loopback-only bench: no token in ~/.ray
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    n = len(CONFIGS) * len(SEEDS)
    print(
        f"ray vs threads: {n} local trials x {steps} RL steps (tiny model, digits task), load {os.getloadavg()[0]:.2f}"
    )
    with tempfile.TemporaryDirectory(prefix="rlnb-bench-") as tmp:
        timed(1, tmp, max_concurrent=2)  # warm-up: torch kernels, the first sessions
        walls: dict[str, list[float]] = {"threads, 1 at a time": [], "threads, 2 at a time": [], "ray, 2 at a time": []}
        start = time.perf_counter()
        ray.init(num_cpus=2, include_dashboard=False, logging_level="error", log_to_driver=False,
                 object_store_memory=100 * 1024**2, _temp_dir=tempfile.mkdtemp(prefix="rlnb-ray-"))  # fmt: skip
        init_s = time.perf_counter() - start
        cold, _ = timed(steps, tmp, executor="ray")
        results = {}
        for _ in range(reps):
            for name, options in (
                ("threads, 1 at a time", {"max_concurrent": 1}),
                ("threads, 2 at a time", {"max_concurrent": 2}),
                ("ray, 2 at a time", {"executor": "ray"}),
            ):
                wall, trials = timed(steps, tmp, **options)
                walls[name].append(wall)
                results[name] = trials
        start = time.perf_counter()
        ray.shutdown()
        down_s = time.perf_counter() - start
    print(f"    ray.init(num_cpus=2) {init_s:.1f} s; first Ray sweep (starts the workers) {cold:.1f} s; "
          f"ray.shutdown() {down_s:.1f} s")  # fmt: skip
    med = {name: statistics.median(w) for name, w in walls.items()}
    for name, w in walls.items():
        trials = results[name]
        print(f"    {name:22s} {med[name]:6.2f} s (runs {', '.join(f'{x:.2f}' for x in w)}); trial wall median "
              f"{trials.wall_s.median():.2f} s, sum {trials.wall_s.sum():.1f} s")  # fmt: skip
    print(f"    ratio threads(2) / ray: {med['threads, 2 at a time'] / med['ray, 2 at a time']:.2f}x; "
          f"threads(1) / ray: {med['threads, 1 at a time'] / med['ray, 2 at a time']:.2f}x")  # fmt: skip
    diff = (results["ray, 2 at a time"].final_reward - results["threads, 2 at a time"].final_reward).abs().max()
    print(f"    info: largest |final_reward(ray) - final_reward(threads)| over the 8 trials: {diff:.4f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--local-steps", type=int, default=10)
    parser.add_argument("--reps", type=int, default=1)
    args = parser.parse_args()
    print("command: python " + " ".join(sys.argv))
    ray_part(args.local_steps, args.reps)

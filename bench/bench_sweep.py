"""Sweep benchmarks, in three parts (``--parts remote,ray,optuna``).

remote: time a remote sweep with 4 trials at once against one at a time; print the ratio.

``rlnb.sweep.sweep`` runs 8 trials (4 learning rates x 2 seeds, ``--steps`` RL steps each: sample ->
reward -> GRPO forward-backward -> optim-step -> weights-sync on the digits task) against one
``rlnb serve --op-delay 0.05`` (simulated compute per operation), with ``max_concurrent=4`` and with
``max_concurrent=1``. ``sweep`` calls ``rlnb.connect(url, optimizer=..., runs_dir=..., run_id=...,
base_model="rlnb/tiny")`` per trial, so each trial creates its own full-weight model resource (cap:
1 session) and its own session; on the server every session has its own worker thread, so trials
overlap. No target was set; the ideal is 4x (less what the shared CPU cores cost).
Info row: the same sweep on one shared LoRA resource (``model_resources_id=``, cap 5 sessions).

ray: 8 local trials (tiny model, digits task, 4 learning rates x 2 seeds, ``--local-steps`` RL steps)
on the thread pool (1 and 2 at a time) against Ray tasks on a local Ray with 2 CPUs (1 CPU per trial,
2 at a time; Ray's start-up and the first sweep's worker start-up are timed apart): bench_sweep_ray.py.

optuna: the sweeps page's lesson (docs/sweeps.md), pruning against none with the same budget: bench_sweep_optuna.py.

    python bench/bench_sweep.py [--parts remote,ray,optuna] [--steps 4] [--op-delay 0.05] [--reps 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from typing import Any

import httpx
import pandas as pd
from bench_remote import CountingTransport, cpu_seconds, server_process

import rlnb
from rlnb.remote.backend import APIClient
from rlnb.sweep import grid, sweep
from rlnb.wire import CreateModelResourcesRequest

CONFIGS = grid(learning_rate=[1e-3, 3e-3, 1e-2, 3e-2])
SEEDS = (0, 1)


CPU: dict[str, float] = {}
"""CPU seconds of the last ``run``: ``client`` (this process), ``server``; and ``gets``, its GET requests."""


class SharedTransport(CountingTransport):
    """One counting transport for every trial's client: closing a client must not close it."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        with self.lock:
            self.counts[request.method] += 1
        return self.inner.handle_request(request)

    def close(self) -> None:
        pass


def run(url: str, max_concurrent: int, steps: int, server_pid: int, **options: Any) -> tuple[float, pd.DataFrame]:
    with tempfile.TemporaryDirectory() as tmp:
        cpu0, server0 = time.process_time(), cpu_seconds(server_pid)
        transport = SharedTransport()
        start = time.perf_counter()
        trials = sweep(
            rlnb.AdamParams(learning_rate=1e-3),
            CONFIGS,
            seeds=SEEDS,
            steps=steps,
            target=url,
            max_concurrent=max_concurrent,
            runs_dir=tmp,
            progress=False,
            transport=transport,
            **options,
        )
        wall = time.perf_counter() - start
        CPU.update(client=time.process_time() - cpu0, server=cpu_seconds(server_pid) - server0)
        CPU["gets"] = transport.counts["GET"]
        transport.inner.close()
    bad = trials[trials.status != "COMPLETED"]
    if len(bad):
        raise RuntimeError(f"{len(bad)} trial(s) did not complete:\n{bad[['trial', 'status', 'reason']]}")
    return wall, trials


def describe(name: str, wall: float, trials: pd.DataFrame, cpu: dict[str, float], steps: int) -> str:
    busy = trials["wall_s"].sum()
    return (
        f"    {name:34s} {wall:6.2f} s   trial wall median {trials['wall_s'].median():.2f} s, "
        f"sum {busy:.1f} s -> {busy / wall:.2f} trials running on average; CPU client {cpu['client']:.1f} s"
        f" + server {cpu['server']:.1f} s = {(cpu['client'] + cpu['server']) / wall:.2f} cores busy;"
        f" {cpu['gets'] / (len(trials) * steps * 4):.1f} GETs per op"
    )


def remote_part(args: argparse.Namespace) -> None:
    n = len(CONFIGS) * len(SEEDS)
    print(
        f"sweep of {n} trials x {args.steps} RL steps (4 ops each) against rlnb serve --op-delay {args.op_delay:g}, "
        "base_model rlnb/tiny, one full-weight resource per trial"
    )
    start = time.perf_counter()
    with server_process("--op-delay", str(args.op_delay)) as (url, proc):
        run(url, 2, 1, proc.pid, base_model="rlnb/tiny")  # warm-up: the server's first sessions, torch, pools
        runs: dict[int, list[tuple[float, pd.DataFrame, dict[str, float]]]] = {1: [], 4: []}
        for _ in range(args.reps):
            for mc in (1, 4):
                wall, trials = run(url, mc, args.steps, proc.pid, base_model="rlnb/tiny")
                runs[mc].append((wall, trials, dict(CPU)))
        with APIClient(url) as client:  # info: one shared LoRA resource, 5 sessions at most
            mr = client.create_model_resources(CreateModelResourcesRequest(base_model="rlnb/tiny", lora_enabled=True))
            shared_wall, shared = run(url, 4, args.steps, proc.pid, model_resources_id=mr.id)
            shared_cpu = dict(CPU)
            client.stop_model_resources(mr.id)
    med = {mc: statistics.median(r[0] for r in rs) for mc, rs in runs.items()}
    for mc in (1, 4):
        walls = ", ".join(f"{r[0]:.2f}" for r in runs[mc])
        typical = min(runs[mc], key=lambda r: abs(r[0] - med[mc]))  # the run nearest the median, in detail
        print(f"    max_concurrent={mc}: median {med[mc]:.2f} s (runs {walls} s); the run nearest the median:")
        print(describe(f"  max_concurrent={mc}", *typical, args.steps))
    ratio = med[1] / med[4]
    print(f"    ratio max_concurrent=1 / max_concurrent=4 wall time: {ratio:.2f}x faster (ideal 4x)")
    print(
        describe("info: shared LoRA resource, mc=4", shared_wall, shared, shared_cpu, args.steps)
        + f" ({med[1] / shared_wall:.2f}x)"
    )
    rewards = runs[4][-1][1].groupby("learning_rate")["final_reward"].mean()
    print("    final reward by learning rate (mc=4): " + ", ".join(f"{k:g}: {v:.2f}" for k, v in rewards.items()))
    print(f"total {time.perf_counter() - start:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="remote,ray,optuna")
    parser.add_argument("--steps", type=int, default=4, help="remote part: RL steps per trial")
    parser.add_argument("--op-delay", type=float, default=0.05)
    parser.add_argument("--reps", type=int, default=1, help="runs of each setting (taking turns); medians shown")
    parser.add_argument("--local-steps", type=int, default=10, help="ray part: RL steps per trial")
    parser.add_argument("--budget", type=int, default=150, help="optuna part: RL steps per search")
    parser.add_argument("--figure", default="docs/assets/optuna-pruning.png", help="optuna part: where the plot goes")
    args = parser.parse_args()
    print("command: python " + " ".join(sys.argv))
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    parts = args.parts.split(",")
    if "remote" in parts:
        remote_part(args)
    if "ray" in parts:
        from bench_sweep_ray import ray_part

        ray_part(args.local_steps, args.reps)
    if "optuna" in parts:
        from bench_sweep_optuna import optuna_part

        optuna_part(args.budget, args.figure)


if __name__ == "__main__":
    main()

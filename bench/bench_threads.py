"""The thread policy measured: three engine workloads at 1 and 2 torch threads and at the count the policy
picks, with the machine as it is and with a competing process spinning on one core.

Workloads (each through the public API, recording off):

* train: 40 steps of forward-backward (8 sequences x 64 tokens, cross-entropy) + optim-step (Adam) on ``small``;
* sample: ``small``, 10 calls of 16 samples x 16 tokens;
* batched: ``run_batched`` of 16 ``tiny`` members, 3 RL steps of the demo task.

``auto`` is the policy: the rule's guess, then (sessions) each kind of operation timed at 1 and 2 threads,
the faster kept; its column shows the rule's first count and the counts the timings kept.

Conditions: "as is" (no load of ours; the other processes' load is measured and printed, because this
machine is shared) and "spinner" (one child process running ``while True: pass``). Within a condition the
three settings take turns run by run; best of ``--reps``. ``auto`` runs with the policy's choice, printed.

    python bench/bench_threads.py [--reps 3] [--workloads train,sample,batched]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import rlnb
from rlnb import samples, wire
from rlnb.batched import Member, run_batched
from rlnb.engine.threads import POLICY, CpuMeter

SETTINGS: list[int | None] = [1, 2, None]  # None: the policy decides


def counts(config: dict[str, Any]) -> str:
    """The rule's first count, and what the timings kept per kind of operation (the last decision of each)."""
    kept = {d["operation"]: d["threads"] for d in config.get("thread_decisions", [])}
    return f"{config['threads']}" + "".join(f" {SHORT.get(k, k)}:{n}" for k, n in kept.items())


K = wire.OperationKind
SHORT = {K.FORWARD_BACKWARD: "fb", K.OPTIM_STEP: "opt", K.SAMPLE: "smp"}


def train(threads: int | None) -> str:
    g = list(range(1, 65))
    batch = [samples.cross_entropy([(t * 7 + i) % 256 for t in g]) for i in range(8)]
    with rlnb.connect("local", model="small", device="cpu", record=False, threads=threads) as s:
        for _ in range(40):
            s.forward_backward(batch)
            s.optim_step(rlnb.AdamParams(learning_rate=1e-3))
        s.wait()
        return counts(s.backend.config())


def sample(threads: int | None) -> str:
    with rlnb.connect("local", model="small", device="cpu", record=False, threads=threads) as s:
        for i in range(10):
            s.sample(["n="], num_samples=16, max_tokens=16, seed=i).result()
        return counts(s.backend.config())


def batched(threads: int | None) -> str:
    members = [Member(rlnb.AdamParams(learning_rate=1e-3 * (1 + i)), seed=0) for i in range(16)]
    results = run_batched("tiny", "adam", members, steps=3, device="cpu", threads=threads)
    return counts(results[0].history.config)


WORKLOADS: dict[str, Callable[[int | None], str]] = {"train": train, "sample": sample, "batched": batched}


def other_load(seconds: float = 1.0) -> float:
    meter = CpuMeter()
    time.sleep(seconds)
    return meter.other() or 0.0


def measure(name: str, reps: int) -> dict[str, tuple[float, str]]:
    fn = WORKLOADS[name]
    for threads in SETTINGS:  # warm-up
        fn(threads)
    best: dict[str, tuple[float, str]] = {}
    for _ in range(reps):
        for threads in SETTINGS:
            start = time.perf_counter()
            used = fn(threads)
            took = time.perf_counter() - start
            key = "auto" if threads is None else f"{threads} thread{'s' if threads > 1 else ''}"
            if key not in best or took < best[key][0]:
                best[key] = (took, used)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    args = parser.parse_args()
    names = args.workloads.split(",")
    print("command: python " + " ".join(sys.argv))
    print(f"machine: {os.cpu_count()} CPUs (policy: {POLICY.cores} cores), load average {os.getloadavg()[0]:.2f}")
    for condition in ("as is", "spinner"):
        spinner = None
        if condition == "spinner":
            spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            time.sleep(1.0)
        try:
            print(
                f"\n{condition}: other processes' load {other_load():.2f} cores (measured over 1 s), "
                f"load average {os.getloadavg()[0]:.2f}"
            )
            for name in names:
                best = measure(name, args.reps)
                t1, t2 = best["1 thread"][0], best["2 threads"][0]
                ta, used = best["auto"]
                print(
                    f"    {name:8s} 1 thread {t1:6.2f} s   2 threads {t2:6.2f} s   auto {ta:6.2f} s ({used})   "
                    f"2/1 = {t2 / t1:.2f}   auto / best = {ta / min(t1, t2):.2f}"
                )
        finally:
            if spinner is not None:
                spinner.kill()
                spinner.wait()
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()

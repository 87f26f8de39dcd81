"""Time 16 trials of the demo task trained as one batched ensemble against one trial alone; print the ratio
and PASS/FAIL.

Each trial: the demo task (answer in digits), model ``tiny``, Adam, 25 RL steps (``rl_step`` defaults: 6
prompts x 8 samples, 8 tokens), seed 0; the 16 trials differ in learning rate (log-spaced 1e-4 .. 3e-2).

* alone: one trial as ``rlnb.sweep`` runs it — ``rlnb.connect("local", optimizer="adam", model="tiny",
  seed=0, runs_dir=...)`` and 25 ``rl_step`` calls, each step's reward logged;
* batched: the 16 trials through ``rlnb.batched.run_batched("tiny", "adam", members, steps=25, runs_dir=...)``;
* sequential (info): the 16 trials alone, one after another.

Wall time from before the session / ensemble is built to after every run folder is closed (models built and
runs recorded on disk, imports not), median of ``--reps`` runs with the settings taking turns, after one
warm-up of each. Also printed: CPU seconds of the process (all threads) and the machine's load average.
Target: batched <= 3x alone. Threads: the engine's thread policy decides for the session and the ensemble
alike (``--threads N`` fixes both).

The floor (``--floor``): the matmul FLOPs of one trial and of 16 (``torch.utils.flop_counter`` over
``run_batched`` of 1 and 16 members; the rest of a step is elementwise, a few percent), and this machine's
best fp32 matmul rate at the same thread count (512 x 512, best of 20). 16 trials cannot take less than
their FLOPs at that rate, whatever the overhead; the target asks for 3x one trial's wall time.

Ops (``--ops``, no timing, so it holds on a loaded machine): the torch ops (aten calls, as
``rlnb.testing.ops.OpCounter`` sees them) dispatched by the second step of an ensemble of 1, 4 and 16 of the
trials, per step phase, and what each added member adds: a count that grows with the members is a loop over them.
Also the elements the ops wrote (``OpCounter``'s ``written``: every output of an op that is not a view,
``_unsafe_view`` included): one that grows faster than the members is a copy that batching should not need.
With ``--own-seeds``, member k has seed k (the trials above share seed 0, whose uniforms are drawn once for all):
what an added member of its own seed costs.

Members (``--members``): an ensemble of one member too, so the 16-member run splits into the ensemble's fixed
cost and what each member adds; with ``--floor``, a member's matmuls at the ensemble's own rate beside it.

    python bench/bench_batched.py [--reps 3] [--threads N] [--no-sequential] [--floor] [--members] [--ops]
                                  [--own-seeds]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np
import torch

import rlnb
from rlnb.batched import SEED_STRIDE, Member, run_batched
from rlnb.tasks import digits_task, rl_step

STEPS = 25
LEARNING_RATES = [float(x) for x in np.geomspace(1e-4, 3e-2, 16)]
TARGET = 3.0


THREADS: int | None = None  # --threads; None: the thread policy decides
OWN_SEEDS = False  # --own-seeds (with --ops): member k of seed k, not every member of seed 0


def alone(lr: float, runs_dir: str) -> None:
    session = rlnb.connect(
        "local", optimizer="adam", model="tiny", seed=0, device="cpu", runs_dir=runs_dir, threads=THREADS
    )
    task, params = digits_task(), rlnb.AdamParams(learning_rate=lr)
    for i in range(STEPS):
        report = rl_step(session, task, params, seed=0 * SEED_STRIDE + i)
        session.history.log(report.step, reward=report.reward)
    session.wait()
    session.close()


def batched(runs_dir: str, k: int = 16) -> list[float]:
    """The first ``k`` of the 16 trials as one ensemble; each member's mean reward over the last 5 steps."""
    members = [
        Member(rlnb.AdamParams(learning_rate=lr), seed=0, run_id=f"lr-{i:02d}")
        for i, lr in enumerate(LEARNING_RATES[:k])
    ]
    results = run_batched("tiny", "adam", members, steps=STEPS, device="cpu", runs_dir=runs_dir, threads=THREADS)
    bad = [r.reason for r in results if r.status != "COMPLETED"]
    if bad:
        raise RuntimeError(f"{len(bad)} member(s) did not complete: {bad}")
    return [statistics.fmean(r.rewards[-5:]) for r in results]


def sequential(runs_dir: str) -> None:
    for lr in LEARNING_RATES:
        alone(lr, runs_dir)


def timed(fn: Callable[[str], object]) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        cpu, wall = time.process_time(), time.perf_counter()
        fn(tmp)
        return time.perf_counter() - wall, time.process_time() - cpu


def matmul_rate(threads: int, n: int = 512, reps: int = 20) -> float:
    """The machine's best fp32 matmul rate (FLOP/s) at ``threads`` torch threads."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    x = torch.randn(n, n)
    x @ x
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        x @ x
        best = min(best, time.perf_counter() - start)
    torch.set_num_threads(before)
    return 2 * n**3 / best


def floor(alone_s: float, batched_s: float) -> tuple[float, float]:
    """Where the floor is: 16 trials' FLOPs at this machine's best matmul rate, against 3x one trial."""
    from torch.utils.flop_counter import FlopCounterMode

    flops = {}
    for k in (1, 16):
        members = [Member(rlnb.AdamParams(learning_rate=lr), seed=0) for lr in LEARNING_RATES[:k]]
        counter = FlopCounterMode(display=False)
        with counter:
            results = run_batched("tiny", "adam", members, steps=STEPS, device="cpu", threads=THREADS)
        flops[k] = counter.get_total_flops()
    threads = results[0].history.config["threads"]
    rate = matmul_rate(threads)
    least = flops[16] / rate
    from torch.profiler import profile

    members = [Member(rlnb.AdamParams(learning_rate=lr), seed=0) for lr in LEARNING_RATES]
    with profile() as prof:  # 3 steps of the ensemble: how fast its own matmuls run, and their share
        run_batched("tiny", "adam", members, steps=3, device="cpu", threads=THREADS)
    events = prof.key_averages()
    mm = sum(e.self_cpu_time_total for e in events if e.key in ("aten::mm", "aten::addmm", "aten::bmm")) / 1e6
    total = sum(e.self_cpu_time_total for e in events) / 1e6
    achieved = flops[16] / STEPS * 3 / mm
    print(
        f"    floor: one trial {flops[1] / 1e9:.1f} GFLOP of matmuls ({flops[1] / STEPS / 1e6:.0f} MFLOP per step), "
        f"16 trials {flops[16] / 1e9:.1f} GFLOP; best matmul rate at {threads} thread(s) {rate / 1e9:.1f} GFLOP/s"
    )
    print(
        f"    floor: 16 trials need >= {least:.2f} s of matmuls alone; 3x one trial is {3 * alone_s:.2f} s; "
        f"batched took {batched_s:.2f} s = {least / batched_s:.0%} of its time at the floor rate"
    )
    print(
        f"    floor: one trial alone: {flops[1] / rate:.2f} s of its {alone_s:.2f} s are matmuls at that rate "
        f"({flops[1] / rate / alone_s:.0%}); the rest is overhead batching can share"
    )
    print(
        f"    floor: the ensemble's own matmuls run at {achieved / 1e9:.1f} GFLOP/s (profiler, 3 steps: {mm:.2f} s "
        f"of "
        f"{total:.2f} s of op time, {mm / total:.0%}); at that rate 16 trials' matmuls alone take "
        f"{flops[16] / achieved:.2f} s"
    )
    return flops[16] / 16 / rate, flops[16] / 16 / achieved


def marginal(alone_s: float, one_s: float, batched_s: float, matmul_s: tuple[float, float] | None) -> None:
    """What one more member costs (16 members against 1, same ensemble code), against what the target leaves
    each: 3x one trial alone, less the ensemble's fixed cost (the one-member run), over the 15 members added."""
    added = (batched_s - one_s) / 15
    budget = (TARGET * alone_s - one_s) / 15
    print(
        f"    members: an ensemble of 1 took {one_s:.2f} s, of 16 {batched_s:.2f} s: each member added "
        f"{added:.3f} s; the target leaves {budget:.3f} s a member ({TARGET:g}x one trial alone, less the "
        f"one-member ensemble, over 15)"
    )
    if matmul_s is not None:
        best, own = matmul_s
        least = one_s + 15 * best
        print(
            f"    members: a member's matmuls alone take {best:.3f} s at the best matmul rate "
            f"({best / budget:.0%} of that budget), {own:.3f} s at the rate the ensemble runs them "
            f"({own / budget:.0%})"
        )
        print(
            f"    members: so 16 trials take at least {least:.2f} s here (the one-member ensemble + 15 members' "
            f"matmuls at the best rate) = {least / alone_s:.2f}x one trial alone: target <= {TARGET:g}x "
            f"{'within reach' if least / alone_s <= TARGET else 'below the floor'}"
        )


def step_ops(k: int) -> dict[str, int]:
    """Torch ops of the second step of an ensemble of the first ``k`` trials: the whole step and each phase."""
    from rlnb.batched.ensemble import Ensemble
    from rlnb.testing.ops import OpCounter

    counts: dict[str, int] = {}
    originals = {name: getattr(Ensemble, name) for name in ("_step", "_sample", "_forward_backward", "_update")}

    def counted(name: str) -> Callable[..., object]:
        def run(self: Ensemble, *args: object) -> object:
            if self.records[self.live[0]].step != 1:  # the second step only (its first op is recorded as step 1)
                return originals[name](self, *args)
            with OpCounter(elements=True) as count:
                out = originals[name](self, *args)
            counts[name] = counts.get(name, 0) + sum(count.ops.values())
            counts[name + " written"] = counts.get(name + " written", 0) + sum(count.written.values())
            return out

        return run

    try:
        for name in originals:
            setattr(Ensemble, name, counted(name))
        members = [
            Member(rlnb.AdamParams(learning_rate=lr), seed=i if OWN_SEEDS else 0)
            for i, lr in enumerate(LEARNING_RATES[:k])
        ]
        run_batched("tiny", "adam", members, steps=2, device="cpu", threads=THREADS)
    finally:
        for name, fn in originals.items():
            setattr(Ensemble, name, fn)
    return counts


def ops() -> None:
    """Print ``step_ops`` at 1, 4 and 16 members and the ops each added member adds."""
    by_k = {k: step_ops(k) for k in (1, 4, 16)}
    for k, c in by_k.items():
        print(
            f"    ops: {k:2d} member(s): {c['_step']} torch ops a step (sample {c['_sample']}, "
            f"forward-backward {c['_forward_backward']}, update {c['_update']}); elements written "
            f"{c['_step written'] / 1e6:.1f} M (sample {c['_sample written'] / 1e6:.1f}, forward-backward "
            f"{c['_forward_backward written'] / 1e6:.1f}, update {c['_update written'] / 1e6:.1f})"
        )
    added = {name: (by_k[16][name] - by_k[1][name]) / 15 for name in by_k[1]}
    print(
        f"    ops: each added member adds {added['_step']:.0f} ops a step (sample {added['_sample']:.0f}, "
        f"forward-backward {added['_forward_backward']:.0f}, update {added['_update']:.0f}) and writes "
        f"{added['_step written'] / 1e6:.1f} M elements (one member alone: {by_k[1]['_step written'] / 1e6:.1f} M)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3, help="runs of each setting (taking turns); medians shown")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: the thread policy's)")
    parser.add_argument("--no-sequential", action="store_true", help="skip the 16 trials one after another")
    parser.add_argument("--floor", action="store_true", help="also measure the FLOPs floor")
    parser.add_argument(
        "--members", action="store_true", help="also time an ensemble of one member: what each added member costs"
    )
    parser.add_argument("--ops", action="store_true", help="count torch ops a step at 1, 4, 16 members; no timing")
    parser.add_argument("--own-seeds", action="store_true", help="with --ops: member k of seed k (else all seed 0)")
    args = parser.parse_args()
    global THREADS, OWN_SEEDS
    THREADS, OWN_SEEDS = args.threads, args.own_seeds
    print("command: python " + " ".join(sys.argv))
    print(
        f"machine: {os.cpu_count()} CPUs, torch {torch.__version__}, threads "
        f"{args.threads or 'as the policy picks'}, load average {os.getloadavg()[0]:.2f} at the start"
    )
    print(
        f"16 trials of the demo task (tiny, Adam, {STEPS} steps, learning rates {LEARNING_RATES[0]:.0e} .. "
        f"{LEARNING_RATES[-1]:.0e}) batched vs one trial alone (lr {LEARNING_RATES[8]:.2g})"
    )
    if args.ops:
        print(f"    ops: members of {'their own seeds (member k: seed k)' if OWN_SEEDS else 'one seed (0)'}")
        ops()
        return
    settings: dict[str, Callable[[str], object]] = {"alone": lambda d: alone(LEARNING_RATES[8], d), "batched": batched}
    if args.members:
        settings["batched 1"] = lambda d: batched(d, 1)
    if not args.no_sequential:
        settings["sequential"] = sequential
    for fn in settings.values():  # warm-up: torch's first calls, allocator, code paths
        if fn is not sequential:
            timed(fn)
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in settings}
    for _ in range(args.reps):
        for name, fn in settings.items():
            runs[name].append(timed(fn))
    med = {name: statistics.median(w for w, _ in rs) for name, rs in runs.items()}
    for name, rs in runs.items():
        walls = ", ".join(f"{w:.2f}" for w, _ in rs)
        cpu = statistics.median(c for _, c in rs)
        print(
            f"    {name:10s} median {med[name]:7.2f} s wall (runs {walls}), CPU {cpu:.2f} s "
            f"= {cpu / med[name]:.2f} cores busy"
        )
    ratio = med["batched"] / med["alone"]
    verdict = "PASS" if ratio <= TARGET else "FAIL"
    print(f"    batched 16 / alone 1: {ratio:.2f}x one trial's wall time   target <= {TARGET:g}x: {verdict}")
    if "sequential" in med:
        print(
            f"    info: sequential 16 / alone 1: {med['sequential'] / med['alone']:.2f}x; "
            f"batched is {med['sequential'] / med['batched']:.2f}x faster than one after another"
        )
    matmul_s = floor(med["alone"], med["batched"]) if args.floor else None
    if args.members:
        marginal(med["alone"], med["batched 1"], med["batched"], matmul_s)
    with tempfile.TemporaryDirectory() as tmp:
        rewards = batched(tmp)
    print(
        "    final reward (mean of the last 5 steps) by learning rate: "
        + ", ".join(f"{lr:.1e}: {r:.2f}" for lr, r in zip(LEARNING_RATES, rewards, strict=True))
    )
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()

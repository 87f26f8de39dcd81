"""What recording costs a loop of cheap local operations: the run store, and each sink on top of it.

(a) The loop: a local session (the built-in tiny model, Adam, CPU, --threads torch threads); one
    step is a forward-backward on --batch cross-entropy samples of --tokens tokens, an optim-step
    (waited for) and ``history.log(step, reward=...)``: one point per step for every sink.
    Variants, each a fresh session: ``no store`` (``record=False``), ``store`` (the run folder on
    disk), and ``store + <sink>`` for TensorBoard, MLflow (SQLite, written by its child process),
    W&B (offline; ``wandb-child``: from a child process, ``process=True``) and Trackio. Each
    session runs --warmup seconds first (the sink sets up meanwhile: MLflow starts its child and
    creates its tables, W&B starts its service), then --steps timed steps. Rounds take the
    variants in a rotated order. Per variant: the median and the minimum over rounds of the time
    per step; the minimum (the least disturbed run) decides PASS/FAIL, as other jobs on a shared
    machine only ever add time. Targets: the store adds about 1% to ``no store`` (PASS up to 2%);
    each sink adds at most 5% to ``store``. Also printed: this process's CPU per step (all its
    threads) and how long ``close()`` took.
(b) The same costs as CPU per step, which other jobs on the machine hardly change: the store's
    (recording a synthetic --points-step run to a run folder minus in memory, the fastest of 3
    each after a warm-up) and each sink's
    (``rlnb.export`` of that run minus a 1-step run, over the extra steps: the points the loop
    sends). Only this process's CPU competes with training (for the GIL and the core); the
    children's (MLflow's child, W&B's ``wandb-core``, read with psutil while it lives) runs on
    another core. Estimate = that CPU / the loop's CPU per step without a store (from a);
    targets as in (a).

Everything goes to a temporary folder (the libraries' state too: HOME, XDG dirs, TRACKIO_DIR,
WANDB_DIR), telemetry off.

    python bench/bench_sinks.py [--steps 200] [--rounds 7] [--warmup 3] [--points 3000] [--only tensorboard,mlflow]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

TMP = Path(tempfile.mkdtemp(prefix="rlnb-bench-sinks-"))
os.environ.update(
    HOME=str(TMP / "home"),
    XDG_CACHE_HOME=str(TMP / "cache"),
    XDG_CONFIG_HOME=str(TMP / "config"),
    HF_HOME=str(TMP / "hf"),
    TRACKIO_DIR=str(TMP / "trackio"),
    WANDB_DIR=str(TMP / "wandb"),
    WANDB_SILENT="true",
    MLFLOW_DISABLE_TELEMETRY="true",
    DO_NOT_TRACK="true",
)

import torch  # noqa: E402

import rlnb  # noqa: E402 - after the environment above
from rlnb import samples, sinks, wire  # noqa: E402
from rlnb.history import History  # noqa: E402
from rlnb.sinks.process import Lease  # noqa: E402

SINKS: dict[str, Callable[[str], sinks.Sink]] = {
    "tensorboard": lambda tag: sinks.TensorBoard(TMP / "tb" / tag),
    "mlflow": lambda tag: sinks.MLflow(TMP / f"mlflow-{tag}.db", "bench"),
    "wandb": lambda tag: sinks.WandB("bench", dir=TMP / "wandb"),
    "wandb-child": lambda tag: sinks.WandB("bench", dir=TMP / "wandb", process=True),
    "trackio": lambda tag: sinks.Trackio(f"bench-{tag}"),
}


def loop_run(variant: str, args: argparse.Namespace) -> tuple[float, float, float]:
    """(seconds per step, CPU seconds per step, close seconds) of one fresh session."""
    record = variant != "no store"
    attached = [SINKS[variant.removeprefix("store + ")]("loop")] if variant.startswith("store + ") else []
    session = rlnb.connect(
        "local", optimizer="adam", model="tiny", seed=0, device="cpu", record=record, runs_dir=TMP / "runs",
        sinks=attached,
    )  # fmt: skip
    batch = [samples.cross_entropy([(7 * i + j) % 256 for j in range(args.tokens)]) for i in range(args.batch)]
    params = rlnb.AdamParams(learning_rate=1e-3)

    def one() -> None:
        session.forward_backward(batch)
        step = session.optim_step(params).result().step
        session.history.log(step, reward=step % 7 / 7)

    end = time.monotonic() + args.warmup
    while time.monotonic() < end:
        one()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(args.steps):
        one()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    closing = time.perf_counter()
    session.close()
    closing = time.perf_counter() - closing
    if attached and attached[0].error is not None:
        raise SystemExit(f"{variant}: the sink failed: {attached[0].error}")
    return wall / args.steps, cpu / args.steps, closing


def part_a(args: argparse.Namespace, names: list[str]) -> float:
    """Prints the A/B figures; returns the loop's CPU per step without a store (for part b)."""
    variants = ["no store", "store"] + [f"store + {name}" for name in names]
    results: dict[str, list[tuple[float, float, float]]] = {v: [] for v in variants}
    for r in range(args.rounds):
        for variant in variants[r % len(variants) :] + variants[: r % len(variants)]:
            results[variant].append(loop_run(variant, args))
    print(
        f"(a) loop: forward-backward ({args.batch} x {args.tokens} tokens, tiny model) + optim-step (waited) + "
        f"history.log; {args.steps} steps after {args.warmup:g} s of warm-up; {args.rounds} rounds"
    )
    low = {v: min(x[0] for x in results[v]) for v in variants}
    mid = {v: statistics.median(x[0] for x in results[v]) for v in variants}
    for v in variants:
        cpu = statistics.median(x[1] for x in results[v])
        close = statistics.median(x[2] for x in results[v])
        print(
            f"    {v:<20} min {low[v] * 1e3:6.3f}  median {mid[v] * 1e3:6.3f} ms/step   CPU {cpu * 1e3:6.3f} ms/step"
            f"   close {close:5.2f} s   (runs {', '.join(f'{x[0] * 1e3:.2f}' for x in results[v])})"
        )
    for v in variants[1:]:
        base = "no store" if v == "store" else "store"
        extra, extra_mid = low[v] / low[base] - 1, mid[v] / mid[base] - 1
        target, allowed = ("about 1%", 0.02) if v == "store" else ("<= 5%", 0.05)
        print(
            f"    {v:<20} vs {base}: {extra * 100:+5.1f}% (min)  {extra_mid * 100:+5.1f}% (median)   "
            f"target {target}: {'PASS' if extra <= allowed else 'FAIL'}"
        )
    return statistics.median(x[1] for x in results["no store"])


def synthetic(n: int, store: Path | None = None, run_id: str | None = None) -> History:
    """A run of ``n`` steps as the loop records it: forward-backward + optim-step + a logged reward
    (with ``store``, recorded in a run folder there)."""
    config = {"run_id": run_id or f"synthetic-{n}", "optimizer": "adam", "model": "rlnb/tiny", "seed": 0}
    history = History.create(config, store) if store is not None else History(config=config)
    done = "TRAINING_OPERATION_STATUS_COMPLETED"
    t = 1_700_000_000.0
    for i in range(n):
        rec = history.new("forward-backward", i, None, at=t)
        history.update(
            rec,
            wire.Operation(id=f"fb-{i}", status=done, output=wire.ForwardBackwardResult(loss=3.0 / (i + 1))),
            t + 0.002,
        )
        rec = history.new("optim-step", i, {"learning_rate": 1e-3}, at=t + 0.002)
        metrics = {"grad_norm": 1.0 + 1.0 / (i + 1), "grad_clip_norm": 1.0, "learning_rate": 1e-3}
        out = wire.OptimStepResult(step=i + 1, metrics=metrics)
        history.update(rec, wire.Operation(id=f"os-{i}", status=done, output=out), t + 0.004)
        history.log(i + 1, reward=(i % 7) / 7)
        t += 0.005
    return history


def children_cpu() -> float:
    """CPU seconds of child processes: those already waited for, plus those still alive (psutil)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = usage.ru_utime + usage.ru_stime
    try:
        import psutil
    except ImportError:
        return total
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
            total += times.user + times.system
        except psutil.Error:
            continue
    return total


def export_cost(sink: sinks.Sink, history: History) -> tuple[float, float, float]:
    before = (time.perf_counter(), time.process_time(), children_cpu())
    rlnb.export(history, sink)
    after = (time.perf_counter(), time.process_time(), children_cpu())
    return after[0] - before[0], after[1] - before[1], after[2] - before[2]


def part_b(args: argparse.Namespace, names: list[str], loop_cpu: float) -> None:
    def recording(store: Path | None) -> float:
        cpu = time.process_time()
        synthetic(args.points, store).close()
        return time.process_time() - cpu

    recording(None), recording(TMP / "runs-b")  # warm-up: first-time costs are not per step
    in_memory = min(recording(None) for _ in range(3))
    store = (min(recording(TMP / "runs-b") for _ in range(3)) - in_memory) / args.points
    big = synthetic(args.points)
    print(
        f"(b) cost per step in this process (the CPU that competes with training), against the loop's "
        f"{loop_cpu * 1e3:.3f} ms of CPU per step without a store"
    )
    print(
        f"    store        per step: CPU here {store * 1e6:6.1f} us (recording {args.points} steps to a run folder "
        f"minus in memory)   estimate {store / loop_cpu * 100:4.1f}%   target about 1%: "
        + ("PASS" if store / loop_cpu <= 0.02 else "FAIL")
    )
    print(f"    each sink: rlnb.export of a {args.points}-step run minus a 1-step run, per step")
    for name in names:
        sink = SINKS[name]("export")
        lease = Lease(sink)  # keeps MLflow's child alive across the exports: its start-up is not per point
        try:  # each export a run of its own name: a sink refuses a run it holds already
            lease.ready()
            export_cost(sink, synthetic(1, run_id=f"warm-up-{name}"))  # first-time set-up out of the way
            fixed = export_cost(sink, synthetic(1, run_id=f"synthetic-1-{name}"))
            big.config["run_id"] = f"synthetic-{args.points}-{name}"  # the same steps, under this sink's name
            full = export_cost(sink, big)
        finally:
            lease.release()
        per = [(full[i] - fixed[i]) / (args.points - 1) for i in range(3)]
        share = per[1] / loop_cpu
        print(
            f"    {name:<12} per step: CPU here {per[1] * 1e6:6.1f} us   estimate {share * 100:4.1f}%   target <= 5%: "
            f"{'PASS' if share <= 0.05 else 'FAIL'}   (CPU in children {per[2] * 1e6:6.1f} us, "
            f"wall {per[0] * 1e6:6.1f} us; a 1-step run: wall {fixed[0]:.2f} s)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (tiny ops: 1 is fastest)")
    parser.add_argument("--points", type=int, default=3000)
    parser.add_argument("--only", default=",".join(SINKS), help="comma-separated sinks to measure")
    parser.add_argument("--parts", default="ab")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    names = args.only.split(",")
    print("command: python bench/bench_sinks.py " + " ".join(sys.argv[1:]))
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; torch threads {args.threads}")
    if "a" in args.parts:
        loop_cpu = part_a(args, names)
    else:
        loop_cpu = statistics.median(loop_run("no store", args)[1] for _ in range(3))
    if "b" in args.parts:
        part_b(args, names, loop_cpu)
    print(f"machine after: load average {os.getloadavg()[0]:.2f}; temporary folder (delete freely): {TMP}")


if __name__ == "__main__":
    main()

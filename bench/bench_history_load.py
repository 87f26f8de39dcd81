"""Time reading a big run folder back: ``History.load`` and ``rlnb.runs()``, in CPU seconds (the machine is shared:
wall time is noise), against the obvious floor, ``json.loads`` of the same ``ops.jsonl`` lines with the objects kept
(as a load keeps what it read: the garbage collector's scans of them count); parsing alone is printed too.

The run is recorded through rlnb's own path, not hand-written lines: ``History.create`` with a run store, then per
step a forward-backward and an optim-step (``History.new``, then ``History.update`` with RUNNING and COMPLETED
``wire.Operation`` envelopes, as the local backend sends them) and a ``log()``ed reward; ``--sessions 2`` records the
second half in a second session continuing the run (``History.create`` on the same run_id), as ``Session()`` does.
Writes nothing to the repository (the run goes to a temporary folder).

    python bench/bench_history_load.py [--steps 20000] [--sessions 1] [--reps 3] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import rlnb
from rlnb import wire
from rlnb.history import History

RUNNING, COMPLETED = wire.OperationStatus.RUNNING, wire.OperationStatus.COMPLETED
T0 = 1_700_000_000.0


def one_step(h: History, i: int) -> None:
    """Record step ``i + 1`` as the local backend would (RUNNING, COMPLETED), and its reward."""
    at = T0 + i * 0.01
    outs: tuple[tuple[str, Any], ...] = (
        ("forward-backward", wire.ForwardBackwardResult(loss=2.0 / (1 + i) ** 0.5, metrics={"clip_frac": 0.1})),
        ("optim-step", wire.OptimStepResult(step=i + 1, metrics={"grad_norm": 1.0 + (i % 7) * 0.01,
                                                                  "grad_clip_norm": 1.0, "learning_rate": 1e-3})),
    )  # fmt: skip
    for kind, out in outs:
        rec = h.new(kind, i, {"learning_rate": 1e-3} if kind == "optim-step" else None, at=at)
        h.update(rec, wire.Operation(id=f"op-{rec.seq}", status=RUNNING), at)
        h.update(rec, wire.Operation(id=f"op-{rec.seq}", status=COMPLETED, output=out), at + 0.005)
    h.log(i + 1, reward=min(1.0, i * 1e-4))


def build(root: Path, steps: int, sessions: int) -> Path:
    """A run of ``steps`` steps under ``root``, recorded by ``sessions`` sessions one after the other."""
    per = -(-steps // sessions)
    for s in range(sessions):
        h = History.create({"optimizer": "adam", "seed": 0, "model": "rlnb/tiny"}, root, "big")
        for i in range(s * per, min(steps, (s + 1) * per)):
            one_step(h, i)
        h.close()
    return root / "big"


def cpu(reps: int, fn: Callable[[], Any]) -> tuple[float, Any]:
    """Median CPU time (this process) of ``reps`` calls, and the last result."""
    times, result = [], None
    for _ in range(reps):
        start = time.process_time()
        result = fn()
        times.append(time.process_time() - start)
    return statistics.median(times), result


def json_floor(ops: Path) -> list[Any]:
    """Every line parsed and kept, as a load keeps what it read (kept objects cost the garbage collector's scans)."""
    with ops.open("rb") as fh:
        return [json.loads(line) for line in fh]


def json_parse_only(ops: Path) -> int:
    """Every line parsed, none kept: the parser's own time."""
    with ops.open("rb") as fh:
        return sum(1 for line in fh if json.loads(line))


def profile(fn: Callable[[], Any], label: str) -> None:
    prof = cProfile.Profile()
    prof.runcall(fn)
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("tottime").print_stats(12)
    print(f"    profile of {label}, by own time:")
    print("\n".join("      " + line for line in out.getvalue().splitlines() if line.strip()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--sessions", type=int, default=1, help="sessions recording the run one after the other")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="print a cProfile of History.load and rlnb.runs()")
    args = parser.parse_args()
    print("command: python " + " ".join(sys.argv))
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} (CPU seconds of this process below)")
    with tempfile.TemporaryDirectory() as tmp:
        start = time.process_time()
        run = build(Path(tmp), args.steps, args.sessions)
        ops = run / "ops.jsonl"
        lines = sum(1 for _ in ops.open("rb"))
        print(f"run of {args.steps:,} steps, {args.sessions} session(s): {lines:,} ops lines, "
              f"{ops.stat().st_size / 1e6:.1f} MB; recorded in {time.process_time() - start:.1f} s CPU")  # fmt: skip
        parse, _ = cpu(args.reps, lambda: json_parse_only(ops))
        floor, _ = cpu(args.reps, lambda: json_floor(ops))
        load, h = cpu(args.reps, lambda: History.load(run))
        listing, frame = cpu(args.reps, lambda: rlnb.runs(tmp))
        row = frame.iloc[0]
        assert row.error is None and row.operations == len(h) == 2 * args.steps, row
        assert row.steps == args.steps and row.final_loss == h.steps.loss.iloc[-1], row
        shown = (
            ("json.loads of every ops line, none kept", parse),
            ("json.loads of every ops line, kept (floor)", floor),
            ("History.load", load),
            ("rlnb.runs() (this one run)", listing),
        )
        for name, took in shown:
            print(f"    {name:43s} {took:6.3f} s   ratio to the floor {took / floor:5.2f}x")
        print(f"    rlnb.runs() / History.load: {listing / load:.2f}x")
        if args.profile:
            profile(lambda: History.load(run), "History.load")
            profile(lambda: rlnb.runs(tmp), "rlnb.runs()")


if __name__ == "__main__":
    main()

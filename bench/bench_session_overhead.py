"""The session's own cost per step, without a model (issue 20 §3). Prints figures; no target, no assertions.

A ``Session`` on ``rlnb.testing.FakeBackend`` (operations that return at once), recording into a temporary
run folder, runs --steps forward-backward + optim-step pairs (one 45-token cross-entropy sample, Adam),
pipelined --block steps at a time (submitted, then waited for), at one torch thread. Per run: a fresh session,
--warmup steps untimed, a full garbage collection, then the timed steps. Printed per run: process CPU time a
step (every thread), of it the notebook thread's (its own CPU clock: the submissions and the wait) and the
rest (the worker: envelopes, history, run store), and wall time a step; then the medians over --runs, and the
best run (the lowest CPU time).
Beside each run, "one thread": the same session on a backend that reports each operation PENDING, RUNNING and
COMPLETED from within ``submit`` (no worker thread, no queue): what the two threads add is the difference.
--profile: cProfile of both threads over one more run, the top functions of each by own time.
--calls: instead, what the CPU's load cannot blur: the Python calls a step made outside torch, on every thread, by a
session on the local engine (``tiny``, one thread, recording on: ``bench_optim.py --overhead``'s step, each step's
``result()`` waited for), and the --top files that made them (``tests/engine/test_step_calls.py`` bounds the total).
--ops: the same steps' torch (aten) ops, every thread, and the --top ops (``tests/engine/test_step_ops.py`` bounds
those past a bare loop's).
--split: where a real session's share goes (Linux): a local ``tiny`` session as ``bench_optim.py --overhead`` runs it
(recording on, the thread policy's count), --steps pipelined --block at a time, each block's CPU time a step on the
notebook thread and on the worker, the worker's split into the handlers (the engine's own work), the reports (history
and run store; of them the run store's lines) and the rest (queue, envelopes, thread policy); medians of the blocks.

    python bench/bench_session_overhead.py [--steps 2000] [--block 25] [--runs 3] [--profile]
    python bench/bench_session_overhead.py --calls [--steps 20] [--top 25]
    python bench/bench_session_overhead.py --ops [--steps 20] [--top 25]
    python bench/bench_session_overhead.py --split [--steps 300] [--block 25]
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import gc
import io
import os
import pstats
import statistics
import sys
import tempfile
import threading
import time
import uuid
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import rlnb
from rlnb import samples, wire
from rlnb.testing import FakeBackend

TOKENS = list(range(1, 46))
S = wire.OperationStatus


class OneThread(FakeBackend):
    """FakeBackend's operations, run and reported on the submitting thread (the worker thread stays idle)."""

    def submit(self, kind: wire.OperationKind, body: Any, listener: wire.Listener) -> None:
        op_id = str(uuid.uuid4())
        listener(wire.Operation(id=op_id, status=S.PENDING))
        listener(wire.Operation(id=op_id, status=S.RUNNING))
        output = self._run(kind, body, threading.Event())
        listener(wire.Operation(id=op_id, status=S.COMPLETED, output=output))


def steps(session: rlnb.Session, n: int, block: int, batch: list, hp: rlnb.AdamParams) -> None:
    for done in range(0, n, block):
        for _ in range(min(block, n - done)):
            session.forward_backward(batch)
            session.optim_step(hp)
        session.wait()


def one_run(runs: str, n: int, block: int, warmup: int, backend: type = FakeBackend) -> tuple[float, float, float]:
    """(process CPU, notebook-thread CPU, wall) seconds a step."""
    batch, hp = [samples.cross_entropy(TOKENS)], rlnb.AdamParams(learning_rate=1e-3)
    session = rlnb.Session(backend(), runs_dir=runs)
    try:
        steps(session, warmup, block, batch, hp)
        gc.collect()
        wall, cpu, mine = time.perf_counter(), time.process_time(), time.thread_time()
        steps(session, n, block, batch, hp)
        wall, cpu, mine = time.perf_counter() - wall, time.process_time() - cpu, time.thread_time() - mine
    finally:
        session.close()
    return cpu / n, mine / n, wall / n


def profile(runs: str, n: int, block: int, warmup: int, top: int) -> None:
    """cProfile on each thread, on its own CPU clock (``threading.setprofile`` reaches the worker, started after it
    is set): a wall clock would charge the waits for the interpreter lock to whatever each thread was running."""
    profiles: dict[str, cProfile.Profile] = {}

    def start(frame: object, event: str, arg: object) -> None:
        prof = profiles.setdefault(threading.current_thread().name, cProfile.Profile(time.thread_time))
        sys.setprofile(None)
        prof.enable()

    threading.setprofile(start)
    main = profiles["main"] = cProfile.Profile(time.thread_time)
    main.enable()
    try:
        one_run(runs, n, block, warmup)
    finally:
        main.disable()
        threading.setprofile(None)
    for name, prof in profiles.items():  # the worker's profile ended with its thread
        out = io.StringIO()
        stats = pstats.Stats(prof, stream=out)
        stats.sort_stats("tottime").print_stats(top)
        print(f"--- thread {name} ---")
        print("\n".join(out.getvalue().splitlines()[: top + 12]))


def counted_steps(steps: int, counting: threading.Event, started: Any, counter: Any = None) -> None:
    """``bench_optim.py --overhead``'s step on a local ``tiny`` session (one thread, recording on), each ``result()``
    waited for: 10 untimed (caches filled, the thread policy settled), then ``steps`` with ``counting`` set.
    ``started``: the profile function each new thread (the session's worker) starts with; ``counter``: this one's."""
    threading.setprofile(started)
    try:
        session = rlnb.connect("local", model="tiny", device="cpu", runs_dir=tempfile.mkdtemp(), threads=1)
    finally:
        threading.setprofile(None)
    batch, hp = [samples.cross_entropy(TOKENS)], rlnb.AdamParams(learning_rate=1e-3)
    try:
        for i in range(10 + steps):
            if i == 10:
                counting.set()
                sys.setprofile(counter)
            session.forward_backward(batch)
            session.optim_step(hp).result()
    finally:
        sys.setprofile(None)
        counting.clear()
        session.close()


def count_calls(steps: int, top: int) -> None:
    """Print the Python calls a step outside torch, all threads, and the ``top`` files that made them."""
    files: collections.Counter[str] = collections.Counter()
    counting = threading.Event()

    def count(frame: Any, event: str, arg: object) -> None:
        name = frame.f_code.co_filename
        if event == "call" and counting.is_set() and "/torch/" not in name:
            files[name.split("/rlnb/")[-1] if "/rlnb/" in name else "(not rlnb) " + os.path.basename(name)] += 1

    counted_steps(steps, counting, count, count)  # the session's worker, started then, counts too
    print(
        f"Python calls a step outside torch (local tiny, recording on), all threads: {sum(files.values()) / steps:.0f}"
    )
    for name, n in files.most_common(top):
        print(f"    {n / steps:6.1f} {name}")


class OpCounter(TorchDispatchMode):
    """Counts the aten ops run under it while ``counting`` is set, by name."""

    def __init__(self, seen: collections.Counter[str], counting: threading.Event) -> None:
        super().__init__()
        self.seen, self.counting = seen, counting

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if self.counting.is_set():
            self.seen[str(func)] += 1
        return func(*args, **(kwargs or {}))


def count_ops(steps: int, top: int) -> None:
    """Print the torch (aten) ops a step runs, every thread, and the ``top`` ops by count. A dispatch mode is per
    thread: each new thread (the worker) enters one on its first call, and keeps it until it ends."""
    seen: collections.Counter[str] = collections.Counter()
    counting = threading.Event()

    def enter(frame: Any, event: str, arg: object) -> None:
        sys.setprofile(None)
        OpCounter(seen, counting).__enter__()

    counted_steps(steps, counting, enter)
    print(f"torch ops a step (aten, local tiny, recording on), all threads: {sum(seen.values()) / steps:.0f}")
    for name, n in seen.most_common(top):
        print(f"    {n / steps:6.1f} {name}")


def split(n: int, block: int) -> None:
    """Print ``--split``'s CPU figures (see the module docstring)."""
    from rlnb.engine import handlers
    from rlnb.history.store import RunStore
    from rlnb.session.operation import Operation

    spent: collections.Counter[str] = collections.Counter()

    def timed(owner: Any, name: str, label: str) -> None:
        """``owner.name`` timed on the worker's thread (its own CPU clock) into ``spent[label]``."""
        inner = getattr(owner, name)

        def wrapper(*args: Any) -> Any:
            if threading.current_thread() is threading.main_thread():
                return inner(*args)
            start = time.thread_time()
            try:
                return inner(*args)
            finally:
                spent[label] += time.thread_time() - start

        setattr(owner, name, wrapper)

    timed(handlers, "run", "handlers")
    timed(Operation, "_update", "reports")
    timed(RunStore, "write_record", "store lines")
    session = rlnb.connect("local", model="tiny", device="cpu", runs_dir=tempfile.mkdtemp())
    tid = session.backend._worker._thread.native_id
    batch, hp = [samples.cross_entropy(TOKENS)], rlnb.AdamParams(learning_rate=1e-3)
    rows: dict[str, list[float]] = collections.defaultdict(list)
    try:
        for i in range(2 + n // block):  # two untimed blocks: the caches, the thread policy's timings
            spent.clear()
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                worker = int(f.read().split()[0]) / 1e9
            mine = time.thread_time()
            steps(session, block, block, batch, hp)
            mine = time.thread_time() - mine
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                worker = int(f.read().split()[0]) / 1e9 - worker
            if i >= 2:
                rows["notebook thread"].append(mine)
                rows["worker"].append(worker)
                for label in ("handlers", "reports", "store lines"):
                    rows[f"  {label}"].append(spent[label])
                rows["  rest"].append(worker - spent["handlers"] - spent["reports"])
    finally:
        session.close()
    print(f"CPU a step, {n} steps pipelined {block} at a time, median of the blocks (store lines: in the reports):")
    for label, values in rows.items():
        print(f"    {label:16s} {statistics.median(values) / block * 1e6:8.1f} us")


def figures(cpu: float, mine: float, wall: float) -> str:
    cpu, mine, wall = cpu * 1e6, mine * 1e6, wall * 1e6
    return f"CPU {cpu:6.1f} us/step (notebook thread {mine:6.1f}, the rest {cpu - mine:6.1f}); wall {wall:6.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=None, help="default 2000; with --calls 20")
    ap.add_argument("--block", type=int, default=25)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--calls", action="store_true")
    ap.add_argument("--ops", action="store_true")
    ap.add_argument("--split", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    print("command: python " + " ".join(sys.argv))
    if args.split:
        print(f"load average {os.getloadavg()[0]:.2f} at the start")
        split(args.steps or 300, args.block)
        print(f"load average {os.getloadavg()[0]:.2f} at the end")
        return
    if args.calls or args.ops:
        (count_calls if args.calls else count_ops)(args.steps or 20, args.top)
        return
    print(f"load average {os.getloadavg()[0]:.2f} at the start")
    args.steps = args.steps or 2000
    runs = tempfile.mkdtemp()
    rows, alone = [], []
    for _ in range(args.runs):
        rows.append(one_run(runs, args.steps, args.block, args.warmup))
        alone.append(one_run(runs, args.steps, args.block, args.warmup, OneThread)[0])
        print(f"    {figures(*rows[-1])}; one thread: CPU {alone[-1] * 1e6:6.1f} us/step")
    med = [statistics.median(r[i] for r in rows) for i in range(3)]
    print(
        f"session machinery, {args.steps} steps pipelined {args.block} at a time, median of {args.runs} runs: "
        f"{figures(*med)}; one thread: CPU {statistics.median(alone) * 1e6:.1f} us/step"
    )
    # A shared machine's slow spells double a run's CPU time (other processes on the same cores): the best run is
    # the steadier figure to compare code by.
    print(f"best run: {figures(*min(rows))}; one thread: CPU {min(alone) * 1e6:.1f} us/step")
    if args.profile:
        profile(runs, args.steps, args.block, args.warmup, args.top)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()

"""The thread policy: how many intra-op threads the engine's torch work uses, chosen on purpose.

On a few cores, torch's default (one OpenMP thread per core) is often the worst choice: when another
process, or another of this process's sessions, holds a core, every parallel region waits for its
descheduled thread, and a step can take several times longer than on one thread (``bench/bench_threads.py``).
So the engine decides, in two parts:

* The rule (``auto_threads``) gives each busy worker ``(cores - other) // busy`` threads, at least one, where
  ``other`` is the cores' worth of CPU that other processes used lately (Linux ``/proc/stat``; 0 where it
  cannot be read) and ``busy`` the workers that ran an operation in the last ``BUSY_FOR`` seconds. It is a
  first guess; the cap is ``cores // busy``: a worker never takes more than its share of this process's cores.
* The timings (``rlnb.engine.tuner``): a session times its operations at the cap and at a lower count, per
  kind and size of operation, and keeps the faster. A batched ensemble, one long call, keeps the rule's count.

``rlnb.connect(..., threads=N)`` fixes a session's count instead (nothing is timed).

Torch's count is per thread once that thread has run a parallel op (OpenMP's ``nthreads`` is a per-thread
setting), but ``torch.set_num_threads`` also sets the process default that new threads start from and MKL's
count, which are process-wide. So one ``ThreadPolicy`` per process (``POLICY``) hands out ``Lease``s: each
engine worker holds one, and before each operation applies the count to its own thread, only when it
changed. The rule is re-decided when a worker starts or stops, and at most every ``RECHECK`` seconds as the
machine's load moves. CUDA sessions take no lease: their work is on the GPU, and their CPU threads are left
as torch set them.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from rlnb import wire
from rlnb._input.checks import is_integer
from rlnb.engine import heap
from rlnb.engine.tuner import Key, Tuner, work

RECHECK = 5.0
"""Seconds between re-decisions while the set of workers stays the same (the machine's load moves slowly)."""
BUSY_FOR = 2.0
"""A worker counts as busy while it runs an operation and until this long after (or after it started)."""
MIN_WINDOW = 0.1
"""Shortest span of ``/proc/stat`` readings that measures a load (its clock ticks are 10 ms)."""


MAX_THREADS = 1024
"""The most intra-op threads a session may ask for: torch starts them all, and a mistyped count (a million)
would exhaust the process's memory or overflow torch's integer before the first operation."""


def check_threads(threads: object) -> int | None:
    """``threads`` as given to ``rlnb.connect``: None (the policy decides) or an integer in [1, ``MAX_THREADS``]."""
    if threads is None:
        return None
    if not is_integer(threads) or not 1 <= threads <= MAX_THREADS:  # type: ignore[operator]
        raise ValueError(
            f"threads must be None (the engine's thread policy decides) or an integer >= 1 and "
            f"<= {MAX_THREADS}, got {threads!r}"
        )
    return int(threads)  # type: ignore[call-overload]


def cores() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class CpuMeter:
    """Cores' worth of CPU time that other processes used between two readings, from ``/proc/stat`` (the
    busy and stolen time of the CPUs this process may use) less this process's own CPU time."""

    def __init__(self, path: str = "/proc/stat") -> None:
        self.path = path
        self._cpus = {f"cpu{i}" for i in _affinity()}
        self._last = self._sample()
        self._measured = False

    def _sample(self) -> tuple[float, float, float] | None:
        """(wall seconds, busy CPU seconds of our CPUs, this process's CPU seconds), or None off Linux."""
        try:
            with open(self.path, encoding="ascii") as f:
                lines = f.read().splitlines()
        except OSError:
            return None
        hz = os.sysconf("SC_CLK_TCK")
        busy = 0
        for line in lines:
            name, *fields = line.split()
            if name in self._cpus:
                user, nice, system, idle, iowait, irq, softirq, steal = (int(x) for x in fields[:8])
                busy += user + nice + system + irq + softirq + steal
        own = os.times()
        return time.monotonic(), busy / hz, own.user + own.system

    def other(self) -> float | None:
        """Other processes' CPU use since the previous reading, in cores; None if it cannot be measured, or if
        the previous reading is under ``MIN_WINDOW`` old (the first reading waits out its window instead)."""
        now, last = self._sample(), self._last
        if now is None or last is None:
            return None
        if now[0] - last[0] < MIN_WINDOW:
            if self._measured:
                return None
            time.sleep(MIN_WINDOW - (now[0] - last[0]))
            now = self._sample()
            if now is None:
                return None
        self._last, self._measured = now, True
        return max(0.0, (now[1] - last[1]) - (now[2] - last[2])) / (now[0] - last[0])


def _affinity() -> set[int]:
    try:
        return set(os.sched_getaffinity(0))
    except AttributeError:
        return set(range(os.cpu_count() or 1))


def auto_threads(cores: int, busy: int, other: float) -> int:
    """The rule: the cores other processes leave free, shared among the busy workers, at least one each."""
    free = cores - math.floor(other + 0.5)  # a core counts as taken once others use half of it
    return max(1, free // max(1, busy))


@dataclass(eq=False)
class Lease:
    """One worker's claim on the policy. ``ThreadUse.before`` (on the worker's own thread, before each operation)
    marks it running and sets that thread's torch count if it changed; ``ThreadUse.after`` marks it idle after it."""

    policy: ThreadPolicy
    fixed: int | None
    last_active: float = field(default_factory=time.monotonic)
    running: bool = False
    tuner: Tuner = field(default_factory=Tuner)

    def threads(self, key: Key | None = None) -> int:
        """The count this worker should use now: the fixed one, else the timings' choice for operations of
        ``key`` (``rlnb.engine.tuner``) between the rule's guess and the cap, else (no key) the guess."""
        if self.fixed is not None:
            return self.fixed
        guess, cap = self.policy.limits()
        return guess if key is None else self.tuner.choose(key, guess, cap)

    def busy(self, now: float) -> bool:
        return self.running or now - self.last_active < BUSY_FOR

    def release(self) -> None:
        self.policy.release(self)


class ThreadPolicy:
    """The process's one decision about intra-op threads (see the module docstring)."""

    def __init__(self, cpus: int | None = None, meter: Callable[[], float | None] | None = None) -> None:
        self.cores = cpus or cores()
        self._meter = meter if meter is not None else CpuMeter().other
        self._lock = threading.Lock()
        self._leases: list[Lease] = []
        self._other = 0.0
        self._decided: int | None = None
        self._at = 0.0
        self._busy = 0
        self._cap = 0

    def lease(self, fixed: int | None = None) -> Lease:
        """A worker starts: it counts as busy from now on; the decision is made again."""
        lease = Lease(self, fixed)
        with self._lock:
            self._leases.append(lease)
            self._decided = None
        return lease

    def release(self, lease: Lease) -> None:
        with self._lock:
            if lease in self._leases:
                self._leases.remove(lease)
            self._decided = None

    def limits(self) -> tuple[int, int]:
        """(guess, cap): the rule's count per busy worker, and the most a worker may try (the cores shared
        among this process's busy workers, whatever other processes use). Re-decided when a worker came or
        went, or every ``RECHECK`` seconds (not at every change of who is busy)."""
        now = time.monotonic()
        with self._lock:
            if self._decided is None or now - self._at >= RECHECK:
                busy = sum(1 for lease in self._leases if lease.busy(now)) or 1
                measured = self._meter()
                if measured is not None:
                    self._other = measured
                self._decided, self._at, self._busy = auto_threads(self.cores, busy, self._other), now, busy
                self._cap = max(1, self.cores // busy)
            return self._decided, self._cap


POLICY = ThreadPolicy()
"""The process's policy: every local session and batched ensemble on the CPU takes its lease here."""


class ThreadUse:
    """A worker's use of the policy, and what its run records: ``config()`` gives ``threads`` (the rule's count
    when it started; None on CUDA, where the policy leaves torch alone), ``thread_policy`` (``"auto"``,
    ``"fixed"`` or ``"off"``), ``malloc`` (``heap.acquire``'s answer on the CPU, else None) and, once
    timings kept a count, ``thread_decisions``: each kept count that differs
    from the one kept before for that kind and size, with the optimizer step it was kept at and the median
    milliseconds per unit of size (token or token slot) each candidate took."""

    def __init__(self, device: torch.device, threads: int | None, policy: ThreadPolicy | None = None) -> None:
        self.malloc = heap.acquire() if device.type == "cpu" else None  # first: a bad RLNB_MALLOC leaves no lease
        self._holds_heap = self.malloc == "keep freed"
        self.lease = (policy or POLICY).lease(threads) if device.type == "cpu" else None
        self.mode = "off" if self.lease is None else "auto" if threads is None else "fixed"
        self.first = self.lease.threads() if self.lease is not None else None
        self.decisions: list[dict[str, Any]] = []
        self._kept: dict[Key, int] = {}
        self._op: tuple[Key, float] | None = None
        self._count, self._step, self._start = 0, 0, 0.0

    def before(self, step: int, kind: wire.OperationKind | None = None, body: Any = None) -> None:
        """An operation (``kind``, ``body``; None: not one to time) starts on this thread at optimizer step
        ``step``: the lease counts as running and the thread's torch count is set (only if it changed). While the
        policy's decision stands, a count the timings kept is asked of ``Tuner.standing`` alone, the rule ``choose``
        follows too: three Python calls an operation fewer than ``Lease.threads``."""
        lease = self.lease
        if lease is None:
            return
        self._op = op = work(kind, body) if kind is not None and self.mode == "auto" else None
        now = time.monotonic()
        lease.running, lease.last_active = True, now
        want = lease.fixed
        if want is None and op is not None:  # a count the timings kept, while the policy's decision stands
            policy = lease.policy
            with policy._lock:  # the decision and its cap, read together as ``limits`` writes them
                cap = policy._cap if policy._decided is not None and now - policy._at < RECHECK else 0
            if cap:
                want = lease.tuner.standing(op[0], cap)
        if want is None:
            want = lease.threads(op[0] if op is not None else None)
        if want != torch.get_num_threads():
            torch.set_num_threads(want)
        self._count = want
        self._step, self._start = step, time.perf_counter()

    def after(self, ok: bool = True) -> None:
        """The operation ended (``ok``: it completed, so its time counts)."""
        if self.lease is None:
            return
        took = time.perf_counter() - self._start
        lease = self.lease  # idle from now (busy for ``BUSY_FOR`` seconds more), inline: a call an operation
        lease.running, lease.last_active = False, time.monotonic()
        if not ok or self._op is None or self._op[0] in lease.tuner.kept:  # kept: ``record`` would time nothing
            return
        kept = self.lease.tuner.record(self._op[0], self._count, took, self._op[1])
        if kept is not None and self._kept.get(kept.key) != kept.threads:
            self._kept[kept.key] = kept.threads
            kind, size = kept.key
            self.decisions.append({
                "step": self._step, "operation": kind, "size": size, "threads": kept.threads,
                "ms_per_unit": {str(n): float(f"{t * 1e3:.4g}") for n, t in sorted(kept.timed.items())},
            })  # fmt: skip

    def restore(self, previous: int) -> None:
        """Give the calling thread back the count it had (a worker that ran on a caller's thread)."""
        if self.lease is not None and torch.get_num_threads() != previous:
            torch.set_num_threads(previous)

    def close(self) -> None:
        if self.lease is not None:
            self.lease.release()
        if self._holds_heap:
            self._holds_heap = False
            heap.release()

    def config(self) -> dict[str, Any]:
        out: dict[str, Any] = {"threads": self.first, "thread_policy": self.mode, "malloc": self.malloc}
        if self.decisions:
            out["thread_decisions"] = list(self.decisions)
        return out

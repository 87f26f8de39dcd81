"""Timing the thread counts: a worker tries its operations at two intra-op thread counts and keeps the faster.

No rule about the machine predicts which count is faster on a few shared cores. Measured on this project's
2 vCPUs (``bench/bench_threads.py``): beside a competing process, batched trials ran 5-7x *slower* on two
threads than on one, a lone ``small`` session 1.4-3x *faster*; on an idle machine a ``tiny`` session behind a
notebook thread that keeps submitting ran 2-3x slower on two. So the policy's rule gives only a first guess and
a ceiling (``ThreadPolicy.limits``), and each worker times what it actually runs.

Operations are compared within a *key*: their kind and the power of two above their size (tokens for a
forward-backward, rows x ``max_tokens`` for a sample), since the faster count depends on how much work one
operation holds. For each key the worker runs one untimed operation at the guess (first calls pay for
allocations and lazy set-up), then alternates the two candidates until each has ``TRIALS`` timings, or one is
clearly slower (``CLEAR``), and keeps the one with the smaller median time per unit of size. The decision stands
for ``KEEP`` seconds, then both are timed again, as the machine's load moves. A failed operation is not timed.
"""

from __future__ import annotations

import operator
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlnb import wire

TRIALS = 3
"""Timed operations at each candidate count before one is kept (the median of 3 survives one outlier)."""
CLEAR = 1.5
"""A count whose every timing is this many times the other's slowest loses at once, before ``TRIALS``: a short
run (ten samples) should not spend a third of its operations on a count that is twice as slow."""
KEEP = 60.0
"""Seconds a decision stands before the worker times both counts again."""

Key = tuple[str, int]
"""An operation's kind and its size bucket."""
_TOKENS = operator.attrgetter("model_input.tokens")


def work(kind: wire.OperationKind, body: Any) -> tuple[Key, float]:
    """The key that makes two operations comparable, and the size that one operation's time is divided by."""
    size = 1
    if isinstance(body, wire.ForwardBackwardBody | wire.CustomForwardBackwardBody):
        try:
            size = sum(map(len, map(_TOKENS, body.samples)))  # C passes: a generator is a Python call
        except (AttributeError, TypeError):  # a crafted body (model_construct): its handler refuses it, naming the part
            size = 1
    elif isinstance(body, wire.SampleBody):
        sp = body.sampling_params
        max_tokens = getattr(sp, "max_tokens", None) or wire.DEFAULT_MAX_TOKENS  # a crafted body's dict: its handler
        n = body.num_samples or 1
        try:
            size = len(body.model_inputs) * n * max_tokens if type(n) is type(max_tokens) is int else 1
        except TypeError:  # a crafted body's model_inputs of no length: its handler refuses it, naming the field
            size = 1  # (a crafted num_samples or max_tokens of text or a float likewise: "3" * 16 is no size)
    size = max(1, size)
    return (str(kind), 1 << (size - 1).bit_length()), float(size)


@dataclass
class Decision:
    """A key's kept count, with the median seconds per unit of size each candidate took."""

    key: Key
    threads: int
    timed: dict[int, float]


@dataclass
class _State:
    times: dict[int, list[float]]
    """Each candidate's timings: the cap first, then the lower count."""
    kept: int | None = None
    at: float = 0.0


class Tuner:
    """One worker's timings (used by its own thread only). ``choose`` before an operation, ``record`` after."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._states: dict[Key, _State] = {}
        self._seen: set[Key] = set()
        self.kept: dict[Key, tuple[int, float, int]] = {}
        """Each key's kept count until ``choose`` times it again: (count, the clock's time it was kept at, the cap it
        was timed under). ``standing`` reads it; the worker asks ``standing`` alone while the policy's decision stands,
        skipping the four Python calls an operation of asking (``threads``, ``limits``, ``choose``, ``record``)."""

    def choose(self, key: Key, guess: int, cap: int) -> int:
        """The count for the next operation of ``key``: the kept one, else the candidate timed least so far."""
        if cap <= 1:
            return 1
        kept = self.standing(key, cap)
        if kept is not None:
            return kept
        st = self._states.get(key)
        if st is None or next(iter(st.times)) != cap or st.kept is not None:  # new, another cap, or a lapsed count
            other = guess if guess < cap else max(1, cap // 2)
            st = self._states[key] = _State({cap: [], other: []})
            self.kept.pop(key, None)
        if key not in self._seen:
            return guess
        high, low = st.times
        return low if len(st.times[low]) < len(st.times[high]) else high

    def standing(self, key: Key, cap: int) -> int | None:
        """The count kept for ``key`` while it stands: timed under this ``cap`` less than ``KEEP`` seconds ago; None
        once it lapsed or the cap moved (``choose`` then times both counts again). The one rule: ``choose`` and the
        worker's fast path (``ThreadUse.before``) both ask it."""
        kept = self.kept.get(key)
        if kept is None or kept[2] != cap or self._clock() - kept[1] >= KEEP:
            return None
        return kept[0]

    def record(self, key: Key, threads: int, seconds: float, size: float) -> Decision | None:
        """One operation's time; the new decision when this timing completes the trials."""
        if key not in self._seen:  # the untimed first operation
            self._seen.add(key)
            return None
        st = self._states.get(key)
        if st is None or st.kept is not None or threads not in st.times:
            return None
        st.times[threads].append(seconds / size)
        ta, tb = st.times.values()
        clear = bool(ta and tb) and (min(ta) >= CLEAR * max(tb) or min(tb) >= CLEAR * max(ta))
        if min(len(ta), len(tb)) < TRIALS and not clear:
            return None
        timed = {n: statistics.median(t) for n, t in st.times.items()}
        st.kept, st.at = min(timed, key=lambda n: (timed[n], n)), self._clock()
        self.kept[key] = (st.kept, st.at, next(iter(st.times)))
        return Decision(key, st.kept, timed)

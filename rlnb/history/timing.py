"""How long a step computed and how long it waited, from its operations' times.

A step is the operations submitted after the previous optim-step, up to and including its own (an RL
step: the previous step's weights-sync, sample, forward-backward, optim-step). Its compute time is how
long any of them was running (the union of their started → finished intervals): time between them that
nobody spent — a pause before the next click — is not in it, and neither is overlap counted twice. Its
wait is how long one of them was queued while none was running (the union of submitted → finished,
less the compute): the time spent behind another step. A weights-sync's own wait is left out: it is
submitted right behind the optim-step whose weights it publishes and waits for it by design (counted,
every step after the first would seem to wait for the one before).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from rlnb.wire import OperationKind

Times = tuple[float, float, float]
"""(submitted_at, started_at, finished_at) of one finished operation, POSIX seconds."""


UNWAITED = frozenset({OperationKind.WEIGHTS_SYNC})
"""Kinds whose wait is left out of their step's: they count from when they started. The one place for this rule:
``op_times`` reads it, and so does ``steplog.StepLog.finished``, which applies ``op_times`` inline."""


def op_times(kind: str, submitted: float, started: float, finished: float) -> Times:
    """What an operation adds to its step's times (a kind in ``UNWAITED``: its run, not its wait)."""
    return (started if kind in UNWAITED else submitted, started, finished)


def _union(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, -math.inf
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def step_times(ops: Iterable[Times]) -> tuple[float, float]:
    """(compute, wait) seconds of one step's finished operations; NaN for both when none has times."""
    ops = [t for t in ops if not any(math.isnan(x) for x in t)]
    if not ops:
        return math.nan, math.nan
    compute = _union([(started, finished) for _, started, finished in ops])
    return compute, _union([(submitted, finished) for submitted, _, finished in ops]) - compute

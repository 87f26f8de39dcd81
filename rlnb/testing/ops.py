"""``OpCounter``: the torch (aten) ops a piece of code dispatches, by name. Work counted, not timed: a count is the
same on any machine and under any load, where a time on a shared machine means little. On a small model a step is
dispatch-bound, so its op count is the cost that code can cut (``bench/bench_decode_ops.py``, the tests that bound
a decode step's ops). Imports torch: not imported by ``rlnb.testing`` itself.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["OpCounter", "per_step"]


class OpCounter(TorchDispatchMode):
    """Counts every aten op dispatched on this thread while it is entered (``with OpCounter() as count:``), by the
    op's full name (``aten.add.Tensor``) in ``ops``. Python-level work (a dispatch mode sees none) is not counted."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops[str(func)] += 1
        return func(*args, **(kwargs or {}))


def per_step(short: Counter[str], long: Counter[str], steps: int) -> dict[str, float]:
    """The ops each of ``steps`` more steps adds: ``long``'s counts less ``short``'s (two runs of the same code,
    ``long`` ``steps`` steps longer: what both run once, a prefill, cancels), divided by ``steps``; ops whose counts
    are equal are left out."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    return {op: (long[op] - short[op]) / steps for op in long.keys() | short.keys() if long[op] != short[op]}

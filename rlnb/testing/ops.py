"""``OpCounter``: the torch (aten) ops a piece of code dispatches, by name. Work counted, not timed: a count is the
same on any machine and under any load, where a time on a shared machine means little. On a small model a step is
dispatch-bound, so its op count is the cost that code can cut (``bench/bench_decode_ops.py``, the tests that bound
a decode step's ops); on a large one the elements ops read and write are (``elements=True``). Imports torch: not
imported by ``rlnb.testing`` itself.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["OpCounter", "per_step"]


class OpCounter(TorchDispatchMode):
    """Counts every aten op dispatched on this thread while it is entered (``with OpCounter() as count:``), by the
    op's full name (``aten.add.Tensor``) in ``ops``. Python-level work (a dispatch mode sees none) is not counted.

    With ``elements``, also the elements each op's tensor inputs hold (``read``) and its outputs hold (``written``),
    by the same names: what a large tensor's op costs. A view (an alias, ``_unsafe_view`` too) reads and writes
    none; an in-place op writes its whole output, even where it changes only part of it."""

    def __init__(self, elements: bool = False) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.elements = elements
        self.read: Counter[str] = Counter()
        self.written: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = str(func)
        self.ops[name] += 1
        out = func(*args, **(kwargs or {}))
        if self.elements and not func.is_view and func.overloadpacket is not torch.ops.aten._unsafe_view:
            self.read[name] += _numel((args, kwargs))
            self.written[name] += _numel(out)
        return out

    def packets(self) -> Counter[str]:
        """``ops`` by op, its overloads together (``aten.add`` for ``aten.add.Tensor`` and ``aten.add.Scalar``)."""
        by: Counter[str] = Counter()
        for name, n in self.ops.items():
            by[name.rsplit(".", 1)[0]] += n
        return by


def _numel(tree: Any) -> int:
    return sum(t.numel() for t in pytree.tree_leaves(tree) if isinstance(t, torch.Tensor))


def per_step(short: Counter[str], long: Counter[str], steps: int) -> dict[str, float]:
    """The ops each of ``steps`` more steps adds: ``long``'s counts less ``short``'s (two runs of the same code,
    ``long`` ``steps`` steps longer: what both run once, a prefill, cancels), divided by ``steps``; ops whose counts
    are equal are left out."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    return {op: (long[op] - short[op]) / steps for op in long.keys() | short.keys() if long[op] != short[op]}

"""What a member adds to an ensemble's step, counted in torch ops (deterministic, unlike wall time on a shared
machine): the step's phases run once for all members, so an added member must add few ops. A Python loop over
members in a phase (per-member losses were ~270 ops a member) shows here as a count that grows with K."""

from __future__ import annotations

import collections

import pytest
from torch.utils._python_dispatch import TorchDispatchMode

import rlnb
from rlnb.batched import Member, run_batched
from rlnb.batched.ensemble import Ensemble

pytestmark = pytest.mark.slow

PER_MEMBER = 120
"""Ops an added member may add to a step (measured: 81, of which ~70 are its samples' records and rewards)."""


class OpCount(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


def step_ops(monkeypatch: pytest.MonkeyPatch, members: int) -> int:
    """Torch ops dispatched by the second step of an ensemble of ``members`` (learning rates apart)."""
    counted: list[int] = []
    step = Ensemble._step

    def counting(self: Ensemble, i: int) -> None:
        if i != 1:
            return step(self, i)
        with OpCount() as count:
            step(self, i)
        counted.append(sum(count.ops.values()))

    monkeypatch.setattr(Ensemble, "_step", counting)
    trials = [Member(rlnb.AdamParams(learning_rate=1e-3 * (k + 1)), seed=0) for k in range(members)]
    results = run_batched("tiny", "adam", trials, steps=2, group_size=4, device="cpu", threads=1)
    assert [r.status for r in results] == ["COMPLETED"] * members
    (ops,) = counted
    return ops


def test_an_added_member_adds_few_ops_to_a_step(monkeypatch):
    one, eight = step_ops(monkeypatch, 1), step_ops(monkeypatch, 8)
    assert one > 500  # the count sees the step's ops
    assert (eight - one) / 7 <= PER_MEMBER, f"a step of 1 member: {one} ops, of 8: {eight}"

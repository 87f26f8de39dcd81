"""rlnb.testing.ops: the op counter the decode-op test and ``bench/bench_decode_ops.py`` share."""

from collections import Counter

import pytest
import torch

from rlnb.testing.ops import OpCounter, per_step


def test_the_counter_counts_each_dispatched_op_by_name_and_only_while_entered():
    x = torch.ones(3)
    with OpCounter() as count:
        y = x + 1
        y.mul_(2)
        y = x + y
    x + 1  # after the block: not counted
    assert count.ops == Counter({"aten.add.Tensor": 2, "aten.mul_.Tensor": 1})
    assert torch.equal(y, torch.full((3,), 5.0))  # the ops ran as without the counter


def test_per_step_is_the_difference_of_two_runs_per_added_step_without_equal_counts():
    short = Counter({"aten.mm.default": 10, "aten.add.Tensor": 4, "aten.arange.default": 1})
    long = Counter(
        {"aten.mm.default": 26, "aten.add.Tensor": 4, "aten.isin.Tensor_Tensor": 8, "aten.arange.default": 1}
    )
    assert per_step(short, long, 8) == {"aten.mm.default": 2.0, "aten.isin.Tensor_Tensor": 1.0}
    assert per_step(Counter({"aten.cat.default": 3}), Counter(), 1) == {"aten.cat.default": -3.0}
    with pytest.raises(ValueError, match="steps must be >= 1, got 0"):
        per_step(short, long, 0)

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


def test_with_elements_the_counter_adds_the_elements_each_op_reads_and_writes_and_none_for_a_view():
    x, y = torch.ones(3, 4), torch.ones(4)
    with OpCounter(elements=True) as count:
        z = x.exp()  # reads 12, writes 12
        z.view(12)  # a view: neither
        t = z.t().contiguous()  # t is a view; its copy (clone) reads and writes 12
        s = (t.T * y).sum(-1)  # mul reads 12 + 4, writes 12; sum reads 12, writes 3
        total = s.sum()  # another overload of sum: reads 3, writes 1
    assert count.read == Counter(
        {
            "aten.exp.default": 12,
            "aten.clone.default": 12,
            "aten.mul.Tensor": 16,
            "aten.sum.dim_IntList": 12,
            "aten.sum.default": 3,
        }
    )
    assert count.written == Counter(
        {
            "aten.exp.default": 12,
            "aten.clone.default": 12,
            "aten.mul.Tensor": 12,
            "aten.sum.dim_IntList": 3,
            "aten.sum.default": 1,
        }
    )
    assert count.ops["aten.sum.default"] == count.ops["aten.sum.dim_IntList"] == 1 and count.packets()["aten.sum"] == 2
    assert count.packets()["aten.view"] == 1 and "aten.view.default" not in count.packets()
    assert torch.equal(s, torch.full((3,), 4 * torch.e)) and torch.equal(total, s.sum())
    with OpCounter() as plain:  # without: names only
        x.exp()
    assert plain.ops == Counter({"aten.exp.default": 1}) and not plain.read and not plain.written

"""``rlnb.engine.optim.adamw.AdamW``: torch's foreach AdamW bit for bit, its step counts read in one op."""

from __future__ import annotations

import pytest
import torch

from rlnb.engine.optim.adamw import AdamW
from rlnb.testing.ops import OpCounter

SHAPES = [(7, 5), (5,), (3, 4, 2), ()]


def _weights(dtype: torch.dtype = torch.float32) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(0)
    return [torch.nn.Parameter(torch.randn(s, generator=gen).to(dtype)) for s in SHAPES]


def _twins(**options):
    """The same weights under ours and torch's AdamW (a float32 and a bfloat16 group, as torch groups by dtype)."""
    ours, theirs = _weights() + _weights(torch.bfloat16), _weights() + _weights(torch.bfloat16)
    return ours, AdamW(ours, **options), theirs, torch.optim.AdamW(theirs, **options)


def _step(opt, weights, k, hp, skip=None):
    gen = torch.Generator().manual_seed(100 + k)
    for i, p in enumerate(weights):
        p.grad = None if i == skip else torch.randn(p.shape, generator=gen).to(p.dtype) * 10.0 ** (i % 3 - 1)
    for group in opt.param_groups:
        group.update(hp)
    opt.step()


HPS = [
    {"lr": 1e-3, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1},
    {"lr": 3e-2, "betas": (0.8, 0.999), "eps": 1e-6, "weight_decay": 0.0},
    {"lr": 1e-4, "betas": (0.0, 0.5), "eps": 1e-12, "weight_decay": 1.5},
]


def test_each_step_is_torchs_adamw_bit_for_bit_even_where_step_counts_differ():
    """Six steps of changing hyperparameters (no weight decay in one), one weight without a gradient in two of them
    (its count falls behind the others', so each weight's bias corrections differ): weights, moments and counts equal
    torch's to the last bit, in both dtype groups, and so does the state dict."""
    ours, opt, theirs, ref = _twins(foreach=True)
    for k in range(6):
        hp, skip = HPS[k % 3], (1 if k in (1, 2) else None)
        _step(opt, ours, k, hp, skip)
        _step(ref, theirs, k, hp, skip)
    for p, q in zip(ours, theirs, strict=True):
        assert torch.equal(p, q)
        for key in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(opt.state[p][key], ref.state[q][key]), key
    assert opt.state[ours[1]]["step"] == 4 and opt.state[ours[0]]["step"] == 6  # the counts did differ
    mine, torchs = opt.state_dict(), ref.state_dict()
    assert mine["param_groups"] == torchs["param_groups"]
    assert mine["state"].keys() == torchs["state"].keys()


def test_a_step_reads_the_counts_in_one_op_where_torch_reads_each_twice():
    ours, opt, theirs, ref = _twins(foreach=True)
    _step(opt, ours, 0, HPS[0])
    _step(ref, theirs, 0, HPS[0])
    with OpCounter() as mine:
        _step(opt, ours, 1, HPS[0])
    with OpCounter() as torchs:
        _step(ref, theirs, 1, HPS[0])
    n = len(ours)
    assert torchs.ops["aten._local_scalar_dense.default"] == 2 * n
    assert mine.ops["aten._local_scalar_dense.default"] == 0
    assert mine.ops["aten.stack.default"] == torchs.ops["aten.stack.default"] + 2  # one a dtype group
    assert sum(mine.ops.values()) == sum(torchs.ops.values()) - 2 * n + 2


@pytest.mark.parametrize("options", [{"amsgrad": True}, {"maximize": True}, {"foreach": False}])
def test_other_options_step_through_torchs_own_step(options):
    ours, opt, theirs, ref = _twins(**{"foreach": True, **options})
    for k in range(3):
        _step(opt, ours, k, HPS[k])
        _step(ref, theirs, k, HPS[k])
    for p, q in zip(ours, theirs, strict=True):
        assert torch.equal(p, q)


def test_complex_weights_step_as_torchs_do():
    gen = torch.Generator().manual_seed(1)
    ours = torch.nn.Parameter(torch.randn(4, 3, dtype=torch.complex64, generator=gen))
    theirs = torch.nn.Parameter(ours.detach().clone())
    opt, ref = AdamW([ours], foreach=True), torch.optim.AdamW([theirs], foreach=True)
    for _ in range(3):
        grad = torch.randn(4, 3, dtype=torch.complex64, generator=gen)
        ours.grad, theirs.grad = grad.clone(), grad.clone()
        opt.step()
        ref.step()
    assert torch.equal(ours, theirs)

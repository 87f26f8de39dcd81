"""``rlnb.engine.optim.adamw.AdamW``: torch's foreach AdamW bit for bit, its step counts read in one op."""

from __future__ import annotations

import copy
import functools
import importlib
import re

import pytest
import torch

from rlnb.engine.optim.adamw import AdamW
from rlnb.testing.ops import OpCounter

SHAPES = [(7, 5), (5,), (3, 4, 2), ()]


def _weights(dtype: torch.dtype = torch.float32) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(0)
    return [torch.nn.Parameter(torch.randn(s, generator=gen).to(dtype)) for s in SHAPES]


def _twins(dtypes=(torch.float32, torch.bfloat16), **options):
    """The same weights under ours and torch's AdamW (a group a dtype, as torch groups them: float32 and bfloat16)."""
    ours, theirs = [p for d in dtypes for p in _weights(d)], [p for d in dtypes for p in _weights(d)]
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


@pytest.mark.parametrize("dtypes", [(torch.float32, torch.bfloat16), (torch.float64, torch.float16)])
def test_each_step_is_torchs_adamw_bit_for_bit_even_where_step_counts_differ(dtypes):
    """Six steps of changing hyperparameters (no weight decay in one), one weight without a gradient in two of them
    (its count falls behind the others', so each weight's bias corrections differ): weights, moments and counts equal
    torch's to the last bit, in both dtype groups, and so does the state dict."""
    ours, opt, theirs, ref = _twins(dtypes, foreach=True)
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


@pytest.fixture(params=["torch's", "after torch.compile"])
def init_group(request, monkeypatch):
    """``torch.optim.AdamW._init_group`` as torch defines it (``Adam``'s, inherited) and as any ``torch.compile`` in
    the process leaves it: dynamo's ``TorchPatcher.patch`` (``torch/_dynamo/eval_frame.py``) gives every optimizer
    class an ``_init_group`` of its own, ``Adam``'s wrapped, for good. (A wrapper alike, not ``torch._dynamo``'s:
    importing it costs 3 s.)"""
    if "_init_group" in vars(torch.optim.AdamW):  # a compile earlier in the process
        monkeypatch.delattr(torch.optim.AdamW, "_init_group")
    if request.param != "torch's":
        inherited = torch.optim.Adam._init_group
        monkeypatch.setattr(torch.optim.AdamW, "_init_group", functools.wraps(inherited)(lambda *a: inherited(*a)))


def _remove(monkeypatch, owner, name):
    """Take ``name`` from ``owner`` as a lookup sees it: from a class, from each class of its MRO that has its own
    (``AdamW``'s after ``torch.compile``, which taking ``Adam``'s alone leaves)."""
    for holder in owner.__mro__ if isinstance(owner, type) else (owner,):
        if name in vars(holder):
            monkeypatch.delattr(holder, name)


@pytest.mark.usefixtures("init_group")
@pytest.mark.parametrize(
    ("owner", "name", "said"),
    [
        (torch.optim.Optimizer, "_group_tensors_by_device_and_dtype", "Optimizer._group_tensors_by_device_and_dtype"),
        (importlib.import_module("torch.optim.adam"), "_multi_tensor_adam", "adam._multi_tensor_adam"),
        (torch.optim.AdamW, "_init_group", "AdamW._init_group"),
    ],
)
def test_a_torch_without_a_private_helper_it_builds_on_steps_through_torchs_own_step(monkeypatch, owner, name, said):
    """The step is built on torch internals (``_multi_tensor_adam``'s ops, ``_init_group``, the device and dtype
    grouping): a torch without one failed the first step with an AttributeError from inside rlnb. The optimizer
    says which is missing when it is made and steps through torch's own ``step``: torch's update, its two host reads
    a weight."""
    _remove(monkeypatch, owner, name)
    with pytest.warns(RuntimeWarning, match=rf"{re.escape(said)}.*torch's own AdamW step"):
        ours, opt, theirs, ref = _twins(foreach=True)
    monkeypatch.undo()  # the torch of the test is whole again: torch's own step uses them too
    for k in range(3):
        _step(ref, theirs, k, HPS[k])
        with OpCounter() as counted:
            _step(opt, ours, k, HPS[k])
    assert all(torch.equal(p, q) for p, q in zip(ours, theirs, strict=True))
    assert counted.ops["aten._local_scalar_dense.default"] == 2 * len(ours)


@pytest.mark.usefixtures("init_group")
def test_an_init_group_of_another_shape_is_a_missing_helper_too(monkeypatch):
    """``_init_group``'s lists are passed by position: one of another order would fill the wrong lists."""

    def reordered(self, group, grads, params_with_grad, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps):
        raise AssertionError("never called")

    monkeypatch.setattr(torch.optim.AdamW, "_init_group", reordered)  # AdamW's own: Adam's may not be the one seen
    with pytest.warns(RuntimeWarning, match=r"AdamW._init_group\(group, params_with_grad, grads, "):
        AdamW(_weights(), foreach=True)


def test_an_adam_without_a_keyword_the_step_passes_is_a_missing_helper_too(monkeypatch):
    """``adam.adam`` is also given keywords (``has_complex=``, ``foreach=``, ...): one renamed failed mid-step with a
    ``TypeError``, not with the warning and torch's own step."""
    from torch.optim import adam as adam_module

    def renamed(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, foreach=None, complex_ok=False):
        raise AssertionError("never called")

    monkeypatch.setattr(adam_module, "adam", renamed)
    with pytest.warns(RuntimeWarning, match=r"adam.adam\(params, .*has_complex="):
        AdamW(_weights(), foreach=True)


def test_a_copy_of_the_optimizer_steps_as_torchs():
    """A copy (``copy.deepcopy``, pickle) keeps what torch's ``__getstate__`` keeps: defaults, state, param groups."""
    ours, opt, theirs, ref = _twins(foreach=True)
    _step(opt, ours, 0, HPS[0])
    _step(ref, theirs, 0, HPS[0])
    clone = copy.deepcopy(opt)
    copied = [p for group in clone.param_groups for p in group["params"]]
    _step(clone, copied, 1, HPS[1])
    _step(ref, theirs, 1, HPS[1])
    assert all(torch.equal(p, q) for p, q in zip(copied, theirs, strict=True))

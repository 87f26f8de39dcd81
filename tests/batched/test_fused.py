"""``rlnb.batched.fused``: the stacked model's linear layers and target log-probs give torch's values (the linear's
bit for bit, forward and gradients) while writing fewer elements, and the forward-backward of a stacked model writes
no more than its bound a member (counted, not timed)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.func import vmap

from rlnb.batched import fused
from rlnb.batched.stacked import StackedModel
from rlnb.engine import losses
from rlnb.engine.models.tiny import TinyConfig, build_model
from rlnb.testing.ops import OpCounter


def test_the_linear_under_vmap_is_f_linear_bit_for_bit_in_one_pass():
    g = torch.Generator().manual_seed(0)
    K, B, T, C, O = 3, 5, 7, 16, 48
    x, w, b = (torch.randn(*s, generator=g).requires_grad_() for s in ((K, B, T, C), (K, O, C), (K, O)))
    layer = nn.Linear(C, O, device="meta")

    def ours(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(layer, {"weight": w, "bias": b}, (x,), strict=True)

    layer.forward = lambda x: fused.linear(layer, x)  # type: ignore[method-assign]
    with OpCounter(elements=True) as count:
        y = vmap(ours)(x, w, b)
    want = vmap(nn.functional.linear)(x, w, b)
    assert torch.equal(y, want)
    assert sum(count.written.values()) == K * B * T * O  # the output, once: no separate bias add
    weights = torch.randn(y.shape, generator=g)
    got, expected = (torch.autograd.grad((t * weights).sum(), (x, w, b)) for t in (y, want))
    assert all(torch.equal(a, e) for a, e in zip(got, expected, strict=True))
    with torch.no_grad():  # a decoding step (one row of tokens per member): vmap's own linear
        assert torch.equal(vmap(ours)(x[:, :, 0], w, b), vmap(nn.functional.linear)(x[:, :, 0], w, b))
    no_bias = nn.Linear(C, O, bias=False, device="meta")
    no_bias.forward = lambda x: fused.linear(no_bias, x)  # type: ignore[method-assign]
    plain = vmap(lambda x, w: torch.func.functional_call(no_bias, {"weight": w}, (x,), strict=True))(x, w)
    assert torch.equal(plain, vmap(nn.functional.linear)(x, w))


def test_target_logprobs_give_the_losses_values_and_gradient():
    g = torch.Generator().manual_seed(1)
    logits = (torch.randn(2, 40, 9, 31, generator=g) * 3).requires_grad_()
    targets = torch.randint(0, 31, (2, 40, 9), generator=g)
    where = torch.rand(2, 40, 9, generator=g) < 0.6
    nan_logits = torch.where(where[..., None], logits.detach(), math.nan)  # outside where: never in the entropy
    lp, entropy = fused.target_logprobs(logits, targets, where)
    want_lp, want_entropy = losses.logprobs_and_entropy(logits, targets, where)
    assert torch.equal(lp, want_lp)  # the same log-softmax, gathered
    torch.testing.assert_close(entropy, want_entropy, rtol=1e-6, atol=1e-6)
    assert torch.equal(entropy[~where], torch.zeros(int((~where).sum()))) and not entropy.requires_grad
    weights = torch.randn(lp.shape, generator=g)
    got, want = (torch.autograd.grad((t * weights).sum(), logits)[0] for t in (lp, want_lp))
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)  # an ulp or two: exp, then a product
    _, masked = fused.target_logprobs(nan_logits, targets, where)
    assert torch.equal(masked[~where], torch.zeros(int((~where).sum())))
    torch.testing.assert_close(masked[where], want_entropy[where], rtol=1e-6, atol=1e-6)


WRITTEN_PER_POSITION = 14_000
"""Elements the forward-backward of a stacked ``tiny`` model (2 layers, 64 wide, a vocabulary of 256) may write per
member and position here, its gradient's gather into ``grad`` included: 15,011 with vmap's linear (a bias ``add``
after each product) and ``losses.logprobs_and_entropy``; 13,163 with ``fused``'s."""


def test_a_members_forward_backward_writes_fewer_elements_than_its_bound():
    config = TinyConfig()
    members, rows, width = 2, 12, 10
    names = [n for n, _ in build_model(config, 0).named_parameters()]
    model = StackedModel([build_model(config, seed) for seed in range(members)], names)
    g = torch.Generator().manual_seed(2)
    ids, targets = torch.randint(0, 256, (2, members, rows, width), generator=g)
    where = torch.rand(members, rows, width, generator=g) < 0.7
    with OpCounter(elements=True) as count:
        lp, entropy = model.logprobs(ids, targets, where)
        model.backward((lp * where).sum() + 0 * entropy.sum())
    written = sum(count.written.values()) / (members * rows * width)
    assert count.packets()["aten.bmm"] > 0 and written > 1_000  # the count sees the model's work
    assert written <= WRITTEN_PER_POSITION, f"{written:.0f} elements written per position"


@pytest.mark.parametrize("where", [None, "some"])
def test_the_stacked_logprobs_keep_the_entropy_where_asked(where):
    config = TinyConfig(n_layer=1, n_embd=16, n_head=2)
    names = [n for n, _ in build_model(config, 0).named_parameters()]
    model = StackedModel([build_model(config, seed) for seed in range(2)], names)
    g = torch.Generator().manual_seed(3)
    ids, targets = torch.randint(0, 256, (2, 2, 3, 5), generator=g)
    mask = torch.rand(2, 3, 5, generator=g) < 0.5 if where else None
    lp, entropy = model.logprobs(ids, targets, mask)
    assert lp.shape == entropy.shape == (2, 3, 5) and lp.requires_grad and not entropy.requires_grad
    if mask is not None:
        assert torch.equal(entropy[~mask], torch.zeros(int((~mask).sum())))
    assert bool((entropy[mask if mask is not None else slice(None)] > 0).all())

"""Every member's loss at once (``rlnb.batched.losses``) equals ``losses.compute`` on that member's rollouts alone:
each policy loss a batched trial can train with, its loss, gradient and metrics, on ragged rollouts padded to one
width (padding must add nothing)."""

from __future__ import annotations

import math

import pytest
import torch

from rlnb.batched.losses import stacked_losses
from rlnb.engine import losses

K, B, W, HORIZON = 3, 4, 7, 32

CASES = [
    ("LOSS_TYPE_GRPO", None),
    ("LOSS_TYPE_GRPO", {"agg_type": "GRPO_LOSS_AGGREGATION_TYPE_TOKEN_MEAN"}),
    ("LOSS_TYPE_GRPO", {"agg_type": "GRPO_LOSS_AGGREGATION_TYPE_SEQUENCE_MEAN"}),
    ("LOSS_TYPE_GRPO", {"ratio_type": "GRPO_LOSS_RATIO_TYPE_SEQUENCE"}),
    ("LOSS_TYPE_PPO", None),
    ("LOSS_TYPE_CISPO", None),
    ("LOSS_TYPE_DPPO", {"delta_low": 0.01, "delta_high": 0.01}),
    ("LOSS_TYPE_DRO", {"beta": 0.3}),
    ("LOSS_TYPE_IMPORTANCE_SAMPLING", None),
]


def batch() -> tuple[torch.Tensor, ...]:
    """``[K, B, W]`` rollouts of random lengths: a prompt's slots masked, then completion slots, then padding."""
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(3, W + 1, (K, B), generator=g)
    prompt = torch.randint(1, 3, (K, B), generator=g)
    j = torch.arange(W)
    mask = ((j >= prompt[..., None]) & (j < lengths[..., None])).long()
    lp = (-torch.rand(K, B, W, generator=g) * 2).requires_grad_()
    q = torch.where(mask != 0, lp.detach() + torch.randn(K, B, W, generator=g) * 0.3, 0.0)
    adv = torch.where(mask != 0, torch.randn(K, B, 1, generator=g).expand(K, B, W), 0.0)
    entropy = torch.rand(K, B, W, generator=g)
    return lengths, lp, q, adv, mask, entropy


@pytest.mark.parametrize(("loss_type", "loss_params"), CASES, ids=[f"{t}-{p}" for t, p in CASES])
def test_every_members_loss_equals_its_own_losses_compute(loss_type, loss_params):
    lengths, lp, q, adv, mask, entropy = batch()
    cut = lambda t, k: [t[k, b, : int(lengths[k, b])] for b in range(B)]  # noqa: E731
    inputs_of = lambda k: [  # noqa: E731
        {"target_tokens": t, "logprobs": a, "advantages": b, "mask": c}
        for t, a, b, c in zip(cut(mask, k), cut(q, k), cut(adv, k), cut(mask, k), strict=True)
    ]
    params = losses.validate(loss_type, loss_params, inputs_of(0), [int(n) for n in lengths[0]])
    got, got_metrics = stacked_losses(loss_type, params, lp, q, adv, mask, entropy, HORIZON)
    (got_grad,) = torch.autograd.grad(got.sum(), lp)
    for k in range(K):
        inputs = inputs_of(k)
        want, metrics = losses.compute(loss_type, params, cut(lp, k), inputs, horizon=HORIZON, entropy=cut(entropy, k))
        (want_grad,) = torch.autograd.grad(want, lp)
        assert float(got[k].detach()) == pytest.approx(float(want.detach()), rel=1e-5, abs=1e-7)
        assert got_metrics[k] == pytest.approx(metrics, rel=1e-5, abs=1e-7)
        assert list(got_metrics[k]) == list(metrics)  # the same names, in the same order
        assert torch.allclose(got_grad[k], want_grad[k], rtol=1e-5, atol=1e-7)
        assert float(want_grad[k].abs().sum()) > 0  # the loss trains this member


def test_a_loss_with_reference_log_probs_is_refused_by_name():
    lengths, lp, q, adv, mask, entropy = batch()
    inputs = [{"target_tokens": mask[0, 0], "logprobs": q[0, 0], "advantages": adv[0, 0], "mask": mask[0, 0]}]
    params = {**losses.validate("LOSS_TYPE_GRPO", None, inputs, [W]), "beta": 0.1}
    with pytest.raises(ValueError, match="without reference log-probs, not LOSS_TYPE_GRPO"):
        stacked_losses("LOSS_TYPE_GRPO", params, lp, q, adv, mask, entropy, HORIZON)


@pytest.mark.parametrize(("loss_type", "loss_params"), CASES, ids=[f"{t}-{p}" for t, p in CASES])
def test_a_member_of_one_unpadded_rollout_gets_a_sessions_values_exactly(loss_type, loss_params):
    """The same W tokens in both layouts (one rollout a member, a session's sample as wide as the padded row): both
    run ``losses.policy_loss``, so loss and gradient are equal to the last bit, not only within the rounding of a
    different sum order."""
    _, lp, q, adv, mask, entropy = batch()
    lp, q, adv, mask, entropy = (t[:, :1] for t in (lp, q, adv, mask, entropy))  # [K, 1, W]: one row each

    def inputs_of(k):
        return [{"target_tokens": mask[k, 0], "logprobs": q[k, 0], "advantages": adv[k, 0], "mask": mask[k, 0]}]

    params = losses.validate(loss_type, loss_params, inputs_of(0), [W])
    got, got_metrics = stacked_losses(loss_type, params, lp, q, adv, mask, entropy, HORIZON)
    (got_grad,) = torch.autograd.grad(got.sum(), lp)
    for k in range(K):
        want, metrics = losses.compute(
            loss_type, params, [lp[k, 0]], inputs_of(k), horizon=HORIZON, entropy=[entropy[k, 0]]
        )
        (want_grad,) = torch.autograd.grad(want, lp)
        assert torch.equal(got[k].detach(), want.detach())
        assert torch.equal(got_grad[k], want_grad[k])
        assert got_metrics[k] == pytest.approx(metrics, rel=1e-6)  # each layout's own sums (a matmul, a bmm)


def test_a_member_of_one_counted_token_reports_that_tokens_metrics():
    """A mean over one counted token is that token's value, the other member's over its two (a denominator
    floored at 2, not 1, halved every mean of the first)."""
    lp = torch.tensor([[[-1.0, -0.5, -2.0]], [[-1.0, -0.5, -2.0]]], requires_grad=True)  # [K=2, B=1, W=3]
    q = torch.tensor([[[0.0, -0.9, 0.0]], [[-1.2, -0.9, 0.0]]])
    mask = torch.tensor([[[0, 1, 0]], [[1, 1, 0]]])
    adv = torch.ones(2, 1, 3) * mask
    entropy = torch.tensor([[[5.0, 3.0, 7.0]], [[1.0, 3.0, 7.0]]])
    inputs = [{"target_tokens": mask[0, 0], "logprobs": q[0, 0], "advantages": adv[0, 0], "mask": mask[0, 0]}]
    params = losses.validate("LOSS_TYPE_IMPORTANCE_SAMPLING", None, inputs, [3])
    _, metrics = stacked_losses("LOSS_TYPE_IMPORTANCE_SAMPLING", params, lp, q, adv, mask, entropy, HORIZON)
    ratios = [[math.exp(0.4)], [math.exp(0.2), math.exp(0.4)]]  # e^(lp - q) at each member's counted tokens
    for k, (rs, h) in enumerate(zip(ratios, [3.0, 2.0], strict=True)):
        assert metrics[k]["loss/tokens"] == len(rs) and metrics[k]["loss/entropy/mean"] == pytest.approx(h)
        assert metrics[k]["loss/ratio/mean"] == pytest.approx(sum(rs) / len(rs), rel=1e-6)
        assert metrics[k]["loss/sampler_kl/mean"] == pytest.approx(-sum(map(math.log, rs)) / len(rs), rel=1e-6)

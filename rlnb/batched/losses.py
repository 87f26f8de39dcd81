"""Every member's policy loss at once: ``losses.compute``'s maths over ``[members, rows, width]`` padded tensors.

``losses.compute`` takes one member's samples as a list of 1-D tensors (one per rollout) and joins them: called per
member, with a cut and a split per input, it cost ~270 torch ops a member a step, most of an ensemble's op count.
Here each loss is ``losses.policy_loss``, the formulas ``losses.compute`` runs too, on the padded batch, a member's
sums reduced over its rows (``_Padded``): padding carries mask 0, and ``policy_loss`` makes every masked token neutral
(log-prob 0, ratio 1, advantage 0), so it adds nothing to any sum. Per-sample quantities (SEQUENCE ratio,
SEQUENCE_MEAN, FIXED_HORIZON's sample count) are row reductions. Only sums' rounding order differs from a member's
own ``losses.compute`` (checked against it in ``tests/batched/test_losses.py``, every policy loss). Batched trials
take policy losses only, without reference log-probs (``losses.validate`` refuses GRPO's ``beta > 0`` first, as
``rl_step`` does).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from rlnb.engine.losses import Tokens, policy_loss
from rlnb.wire import LOSS_CROSS_ENTROPY, LOSS_GRPO, LossMetric


def stacked_losses(
    loss_type: str,
    params: dict[str, Any],
    lp: Tensor,
    q: Tensor,
    adv: Tensor,
    mask: Tensor,
    entropy: Tensor,
    horizon: int,
) -> tuple[Tensor, list[dict[str, float]]]:
    """Each member's loss ``[K]`` and metrics, as ``losses.compute`` gives them for that member's rows alone.

    ``lp`` (the policy's log-probs, differentiable), ``q`` (the sampler's), ``adv``, ``mask`` and ``entropy`` are
    ``[K, B, W]``: member k's B rollouts, right-padded with mask 0. ``params`` as ``losses.validate`` returns them.
    """
    if loss_type == LOSS_CROSS_ENTROPY or loss_type == LOSS_GRPO and params["beta"] > 0:
        raise ValueError(f"batched trials compute policy losses without reference log-probs, not {loss_type}")
    m = (mask != 0).to(lp.dtype)
    x = Tokens(lp, q.to(lp.dtype), adv.to(lp.dtype), m)
    loss, means = policy_loss(loss_type, params, x, _Padded(lp.shape[1], lp.shape), horizon)
    return loss, _summary(m, {LossMetric.ENTROPY: entropy, **means})


class _Padded:
    """A batched ensemble's layout (``losses.Layout``): member k's loss over its ``rows`` right-padded rows
    ``[k, :, :]`` of tensors of ``shape`` ``[members, rows, width]``."""

    def __init__(self, rows: int, shape: torch.Size) -> None:
        self.samples, self.shape = rows, shape

    def total(self, x: Tensor) -> Tensor:
        return x.sum((1, 2))

    def per_sample(self, x: Tensor) -> Tensor:
        return x.sum(-1)

    def spread(self, v: Tensor) -> Tensor:
        return v[..., None].expand(self.shape)

    def sample_mean(self, v: Tensor) -> Tensor:
        return v.mean(-1)


@torch.no_grad()
def _summary(m: Tensor, means: dict[str, Tensor]) -> list[dict[str, float]]:
    """``losses._summary`` per member: ``loss/tokens`` and each masked mean, every sum in one batched product."""
    K = m.shape[0]
    flat = m.reshape(K, -1)
    rows = torch.stack([flat, *(x.to(m.dtype).reshape(K, -1) for x in means.values())], 1)  # (K, 1 + n, B * W)
    out = []
    for count, *sums in torch.bmm(rows, flat[:, :, None])[..., 0].tolist():
        out.append({LossMetric.TOKENS: count, **{k: v / max(count, 1.0) for k, v in zip(means, sums, strict=True)}})
    return out

"""Every member's policy loss at once: ``losses.compute``'s maths over ``[members, rows, width]`` padded tensors.

``losses.compute`` takes one member's samples as a list of 1-D tensors (one per rollout) and joins them: called per
member, with a cut and a split per input, it cost ~270 torch ops a member a step, most of an ensemble's op count.
Here each loss is the same formula on the padded batch, a member's sums reduced over its rows: padding carries
mask 0, and ``losses.compute`` makes every masked token neutral (log-prob 0, ratio 1, advantage 0), so it adds
nothing to any sum. Per-sample quantities (SEQUENCE ratio, SEQUENCE_MEAN, FIXED_HORIZON's sample count) are
row reductions. Only sums' rounding order differs from a member's own ``losses.compute`` (checked against it in
``tests/batched/test_losses.py``, every policy loss). Batched trials take policy losses only, without
reference log-probs (``losses.validate`` refuses GRPO's ``beta > 0`` first, as ``rl_step`` does).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from rlnb.engine.losses import clip_bounds, clip_flags
from rlnb.wire import LOSS_NAMES
from rlnb.wire.loss_params import GRPO_PARAM_NAMES

_PPO, _CISPO, _DPPO = LOSS_NAMES["ppo"], LOSS_NAMES["cispo"], LOSS_NAMES["dppo"]
_DRO, _IS, _GRPO = LOSS_NAMES["dro"], LOSS_NAMES["importance_sampling"], LOSS_NAMES["grpo"]
_TOKEN_MEAN = GRPO_PARAM_NAMES["agg_type"]["TOKEN_MEAN"]
_SEQUENCE_MEAN = GRPO_PARAM_NAMES["agg_type"]["SEQUENCE_MEAN"]
_RATIO_SEQUENCE = GRPO_PARAM_NAMES["ratio_type"]["SEQUENCE"]


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
    m = (mask != 0).to(lp.dtype)
    on = m != 0
    lp = torch.where(on, lp, 0.0)
    lp_held = lp.detach()
    q = torch.where(on, q.to(lp.dtype), lp_held)
    adv = torch.where(on, adv.to(lp.dtype), 0.0)
    means: dict[str, Tensor] = {"loss/entropy/mean": entropy}
    if params.get("ratio_type") == _RATIO_SEQUENCE:
        r = (((lp - q) * m).sum(-1) / m.sum(-1).clamp(min=1)).exp()[..., None].expand_as(lp)
    else:
        r = (lp - q).exp()
    if loss_type == _IS:
        loss = -(r * adv * m).sum((1, 2))
    elif loss_type == _PPO:
        lo, hi = clip_bounds(params, r.dtype)
        loss = -(torch.minimum(r * adv, r.clamp(lo, hi) * adv) * m).sum((1, 2))
    elif loss_type == _CISPO:
        lo, hi = clip_bounds(params, r.dtype)
        loss = -(r.clamp(lo, hi).detach() * adv * lp * m).sum((1, 2))
    elif loss_type == _DPPO:
        dp = lp.detach().exp() - q.exp()
        outside = (adv > 0) & (dp > params["delta_high"]) | (adv < 0) & (-dp > params["delta_low"])
        loss = -(r * adv * m * ~outside).sum((1, 2))
        means["loss/trust_region/masked_fraction"] = outside
    elif loss_type == _DRO:
        loss = -((lp * adv - 0.5 * params["beta"] * (lp - q) ** 2) * m).sum((1, 2))
    elif loss_type == _GRPO and not params["beta"] > 0:
        lo, hi = clip_bounds(params, r.dtype)
        token_loss = -torch.minimum(r * adv, r.clamp(lo, hi) * adv) * m
        if params["agg_type"] == _TOKEN_MEAN:
            loss = token_loss.sum((1, 2)) / m.sum((1, 2)).clamp(min=1)
        elif params["agg_type"] == _SEQUENCE_MEAN:
            loss = (token_loss.sum(-1) / m.sum(-1).clamp(min=1)).mean(-1)
        else:  # FIXED_HORIZON
            loss = token_loss.sum((1, 2)) / max(lp.shape[1] * horizon, 1)
    else:
        raise ValueError(f"batched trials compute policy losses without reference log-probs, not {loss_type}")
    means["loss/ratio/mean"] = r
    means["loss/sampler_kl/mean"] = q - lp_held
    means.update(clip_flags(loss_type, params, r, adv))
    return loss, _summary(m, means)


@torch.no_grad()
def _summary(m: Tensor, means: dict[str, Tensor]) -> list[dict[str, float]]:
    """``losses._summary`` per member: ``loss/tokens`` and each masked mean, every sum in one batched product."""
    K = m.shape[0]
    flat = m.reshape(K, -1)
    rows = torch.stack([flat, *(x.to(m.dtype).reshape(K, -1) for x in means.values())], 1)  # (K, 1 + n, B * W)
    out = []
    for count, *sums in torch.bmm(rows, flat[:, :, None])[..., 0].tolist():
        out.append({"loss/tokens": count, **{k: v / max(count, 1.0) for k, v in zip(means, sums, strict=True)}})
    return out

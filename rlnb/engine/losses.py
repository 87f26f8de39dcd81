"""Training losses of the in-process backend, mirroring the loss types of Together AI's RL training API.

Every loss sees, per sample i, the current policy's log-probs of the target tokens (lp, one per position)
and the sample's input tensors. Notation: q = sampler `logprobs` input, A = `advantages`, m = token mask,
r = exp(lp - q) the importance ratio, clip(r) = clamp(r, low, high), sg = stop-gradient, sums run over
all tokens of the batch. Policy losses (all but cross-entropy) use a 0/1 mask: only cross-entropy honours
fractional weights; policy losses treat any non-zero weight as 1.

Which losses exist, their params (with bounds and rlnb's defaults) and their inputs come from the one
catalogue, ``rlnb.wire.LOSSES``; this module holds only the maths (the input checks are
``rlnb.engine.loss_inputs``'s, and the log-probs and entropy a loss reads ``rlnb.engine.token_logprobs``'s, re-exported
here).

Accumulation: every loss is a function of one forward-backward's batch. Gradients of several
forward-backward calls before an optim-step add up, so a mean-aggregated loss (GRPO's TOKEN_MEAN or
SEQUENCE_MEAN) over two half batches gives *twice* the gradient of one mean over the whole batch; scale
the learning rate, or the advantages, if you split a batch.
"""

from operator import itemgetter
from typing import Any, NamedTuple, Protocol

import torch

from rlnb.engine.loss_inputs import check_input, loss_mask, validate
from rlnb.engine.refusals import InvalidLossInput, check_read, mask_key
from rlnb.engine.token_logprobs import logprobs_and_entropy
from rlnb.wire import LOSS_CROSS_ENTROPY, LOSS_GRPO, LOSS_NAMES, LossMetric
from rlnb.wire.loss_params import GRPO_PARAM_NAMES

_PPO = LOSS_NAMES["ppo"]
_CISPO, _DPPO, _DRO = LOSS_NAMES["cispo"], LOSS_NAMES["dppo"], LOSS_NAMES["dro"]
_IMPORTANCE_SAMPLING = LOSS_NAMES["importance_sampling"]
_TOKEN_MEAN = GRPO_PARAM_NAMES["agg_type"]["TOKEN_MEAN"]
_SEQUENCE_MEAN = GRPO_PARAM_NAMES["agg_type"]["SEQUENCE_MEAN"]
_RATIO_SEQUENCE = GRPO_PARAM_NAMES["ratio_type"]["SEQUENCE"]
__all__ = [
    "InvalidLossInput",
    "Layout",
    "Tokens",
    "check_input",
    "check_read",
    "compute",
    "counts_all",
    "logprobs_and_entropy",
    "loss_mask",
    "mask_key",
    "policy_loss",
    "validate",
]


def compute(
    loss_type: str,
    params: dict[str, Any],
    logprobs: list[torch.Tensor],
    inputs: list[dict[str, torch.Tensor]],
    *,
    horizon: int,
    entropy: list[torch.Tensor] | None = None,
    counted: list[torch.Tensor] | None = None,
    whole: bool = False,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Loss to call .backward() on, and float metrics. logprobs[i] is lp of sample i; params as from validate;
    ``counted[i]``, if the caller made it already, is ``loss_mask(loss_type, inputs[i])`` (made here otherwise);
    ``whole``: the caller knows every position counts (``counts_all``), so no weight is 0 and none to skip.

    cross-entropy:       L = -Σ w·lp                        (token-weighted sum; w = `weights`, fractional ok)
    importance sampling: L = -Σ r·A·m
    ppo:                 L = -Σ min(r·A, clip(r)·A)·m
    cispo:               L = -Σ sg(clip(r))·A·lp·m
    dppo:                L = -Σ r·A·m·keep,  p = e^lp, p_old = e^q, keep = sg(1 - outside) with
                         outside = [A > 0 and p - p_old > delta_high  or  A < 0 and p_old - p > delta_low]
    dro:                 L = -Σ (lp·A - ½·beta·(lp - q)²)·m
    grpo:                ℓ = -(min(r·A, clip(r)·A) - beta·kl),  kl = e^(ref - lp) - (ref - lp) - 1  (k3),
                         times r when use_bias_correction_kl (the default, as TRL 1.16),
                         r_i = exp(Σ_t (lp - q)·m / Σ_t m) on every token of sample i if ratio_type is
                         SEQUENCE (GSPO), and L = Σ ℓ·m / Σ m (TOKEN_MEAN), mean_i(Σ_t ℓ·m / Σ_t m)
                         (SEQUENCE_MEAN) or Σ ℓ·m / (num_samples · horizon) (FIXED_HORIZON).
                         A denominator of 0 counts as 1, so a sample with no masked tokens adds 0.

    ``horizon`` is a constant token count: the session's maximum sequence length. FIXED_HORIZON is
    Dr. GRPO's aggregation (Liu et al. 2025, "Understanding R1-Zero-Like Training", arXiv 2503.20783;
    TRL's ``loss_type="dr_grpo"`` divides by ``max_completion_length``): the divisor depends on neither
    prompt nor completion lengths, so a token's gradient is the same in any batch of the same size.

    ``entropy`` (optional, one 1-D tensor per sample, from ``logprobs_and_entropy``) adds
    ``loss/entropy/mean``: the policy's mean token entropy over the masked tokens (TRL's ``entropy``).

    Clip metrics count a token only where the clip changes its gradient (as TRL's ``clip_ratio``):
    for PPO and GRPO ``low`` is r < low with A < 0 and ``high`` is r > high with A > 0 (the other side
    of each bound is kept by min() and still learns); for CISPO, whose clipped ratio is a coefficient,
    r outside a bound with A != 0.
    """
    lp = _joined(logprobs)
    means: dict[str, torch.Tensor] = {}  # per-token values whose masked mean is a metric (``_summary``)
    if entropy is not None:
        means[LossMetric.ENTROPY] = _joined(entropy).to(lp.device)
    # A token of weight 0 is never read, not even its own log-prob: one the model gives probability 0 (-inf, a
    # banned token in a prompt) would turn its product with the 0 weight into NaN and fail the step NON_FINITE_LOSS.
    if loss_type == LOSS_CROSS_ENTROPY:
        w = _cat(inputs, "weights", lp.device).to(lp.dtype)
        on = _joined(counted).to(lp.device) if counted is not None else (w != 0).to(lp.dtype)  # w's 0/1 mask
        return -torch.dot(w, lp if whole else torch.where(w != 0, lp, 0.0)), _summary(on, means, tokens=w)

    m = torch.cat(counted if counted is not None else [loss_mask(loss_type, x) for x in inputs]).to(lp.device)
    ref = _cat(inputs, "reference_logprobs", lp.device) if loss_type == LOSS_GRPO and params["beta"] > 0 else None
    q, adv = _cat(inputs, "logprobs", lp.device), _cat(inputs, "advantages", lp.device)
    layout = _Joined([len(t) for t in logprobs])
    loss, terms = policy_loss(loss_type, params, Tokens(lp, q, adv, m, ref), layout, horizon)
    return loss, _summary(m, {**means, **terms})


class Tokens(NamedTuple):
    """A policy loss's per-token inputs, one layout's tensors of one shape: the policy's log-probs ``lp``
    (differentiable), the sampler's ``q``, the advantages, the 0/1 mask ``m`` and the reference's log-probs
    (None unless GRPO's beta > 0)."""

    lp: torch.Tensor
    q: torch.Tensor
    adv: torch.Tensor
    m: torch.Tensor
    ref: torch.Tensor | None = None


class Layout(Protocol):
    """Where one loss's samples lie in its tensors: the reductions a policy loss needs, each layout its own
    (a session's samples joined end to end in 1-D, a batched ensemble's ``[members, rows, width]`` padded rows)."""

    samples: int
    """Samples per loss (FIXED_HORIZON's count)."""

    def total(self, x: torch.Tensor) -> torch.Tensor:
        """Σ over a loss's tokens."""

    def per_sample(self, x: torch.Tensor) -> torch.Tensor:
        """Σ over each sample's tokens."""

    def spread(self, v: torch.Tensor) -> torch.Tensor:
        """A per-sample value on each of that sample's tokens."""

    def sample_mean(self, v: torch.Tensor) -> torch.Tensor:
        """The mean of per-sample values over a loss's samples."""


def policy_loss(
    loss_type: str, params: dict[str, Any], x: Tokens, layout: Layout, horizon: int
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The loss of a policy loss type (``compute``'s formulas, written once for every layout) and the per-token
    values whose masked means are its metrics, in their order. ``params`` as from ``validate``."""
    m = x.m
    # Neither are a masked token's inputs: neutral values there (ratio 1, advantage 0), so that what a caller
    # leaves at a prompt's positions (a -100 log-prob) cannot overflow and turn a product with the 0 mask to NaN.
    on = m != 0
    lp = torch.where(on, x.lp, 0.0)
    lp_held = lp.detach()
    q = torch.where(on, x.q, lp_held)
    adv = torch.where(on, x.adv, 0.0)
    if params.get("ratio_type") == _RATIO_SEQUENCE:
        r = layout.spread((layout.per_sample((lp - q) * m) / layout.per_sample(m).clamp(min=1)).exp())
    else:
        r = (lp - q).exp()

    means: dict[str, torch.Tensor] = {}
    if loss_type == _IMPORTANCE_SAMPLING:
        loss = -layout.total(r * adv * m)
    elif loss_type == _PPO:
        lo, hi = clip_bounds(params, r.dtype)
        loss = -layout.total(torch.minimum(r * adv, r.clamp(lo, hi) * adv) * m)
    elif loss_type == _CISPO:
        lo, hi = clip_bounds(params, r.dtype)
        loss = -layout.total(r.clamp(lo, hi).detach() * adv * lp * m)
    elif loss_type == _DPPO:
        dp = lp_held.exp() - q.exp()  # p - p_old
        outside = (adv > 0) & (dp > params["delta_high"]) | (adv < 0) & (-dp > params["delta_low"])
        loss = -layout.total(r * adv * m * ~outside)
        means[LossMetric.TRUST_REGION_MASKED] = outside
    elif loss_type == _DRO:
        loss = -layout.total((lp * adv - 0.5 * params["beta"] * (lp - q) ** 2) * m)
    else:  # GRPO
        lo, hi = clip_bounds(params, r.dtype)
        obj = torch.minimum(r * adv, r.clamp(lo, hi) * adv)
        if params["beta"] > 0:
            if x.ref is None:
                raise ValueError("GRPO with beta > 0 reads reference log-probs: none were given")
            d = torch.where(on, x.ref, lp_held) - lp
            kl = d.exp() - d - 1
            if params["use_bias_correction_kl"]:  # the unbiased reverse-KL gradient (DeepSeek-V3.2)
                kl = kl * r
            obj = obj - params["beta"] * kl
            means[LossMetric.KL_REF] = kl
        token_loss = -obj * m
        if params["agg_type"] == _TOKEN_MEAN:
            loss = layout.total(token_loss) / layout.total(m).clamp(min=1)
        elif params["agg_type"] == _SEQUENCE_MEAN:
            loss = layout.sample_mean(layout.per_sample(token_loss) / layout.per_sample(m).clamp(min=1))
        else:  # FIXED_HORIZON
            loss = layout.total(token_loss) / max(layout.samples * horizon, 1)

    means[LossMetric.RATIO] = r
    means[LossMetric.SAMPLER_KL] = q - lp_held
    means.update(clip_flags(loss_type, params, r, adv))
    return loss, means


class _Joined:
    """A session's layout: its samples' 1-D tensors joined end to end, of lengths ``lens``."""

    def __init__(self, lens: list[int]) -> None:
        self.lens, self.samples = lens, len(lens)

    def total(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum()

    def per_sample(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([chunk.sum() for chunk in x.split(self.lens)])

    def spread(self, v: torch.Tensor) -> torch.Tensor:
        return v.repeat_interleave(torch.tensor(self.lens, device=v.device))

    def sample_mean(self, v: torch.Tensor) -> torch.Tensor:
        return v.mean()


def clip_flags(loss_type: str, params: dict[str, Any], r: torch.Tensor, adv: torch.Tensor) -> dict[str, torch.Tensor]:
    """The tokens each clip metric counts (PPO, GRPO, CISPO; none for the others): only where the clip changes the
    gradient, as TRL's ``clip_ratio``. One rule for a session's losses and a batched ensemble's (``batched.losses``)."""
    if loss_type not in (_PPO, LOSS_GRPO, _CISPO):
        return {}
    lo, hi = clip_bounds(params, r.dtype)
    low, high = (adv != 0, adv != 0) if loss_type == _CISPO else (adv < 0, adv > 0)
    return {LossMetric.CLIP_LOW: (r < lo) & low, LossMetric.CLIP_HIGH: (r > hi) & high}


def clip_bounds(params: dict[str, Any], dtype: torch.dtype) -> tuple[float, float]:
    """The clip thresholds within what the ratio's dtype holds: a threshold past float32's range (1e300 for
    "no clipping") clips nothing, as it says, instead of failing torch's conversion of the scalar."""
    big = torch.finfo(dtype).max
    return max(params["clip_low_threshold"], -big), min(params["clip_high_threshold"], big)


def counts_all(counted: list[torch.Tensor]) -> bool:
    """Whether every position of every sample counts (``loss_mask``'s masks all 1): no prompt, no 0 weight, so a loss
    and the entropy skip none (one host sync a forward-backward, shared by ``inputs.logprobs`` and ``compute``)."""
    return bool((counted[0] if len(counted) == 1 else torch.cat(counted)).all())  # ``_joined``, a call a step less


def _cat(inputs: list[dict[str, torch.Tensor]], key: str, device: torch.device) -> torch.Tensor:
    # ``_joined`` inlined, and ``map`` where a comprehension was: 2 Python calls an input
    return (inputs[0][key] if len(inputs) == 1 else torch.cat(list(map(itemgetter(key), inputs)))).to(device)


def _joined(tensors: list[torch.Tensor]) -> torch.Tensor:
    """``torch.cat``, without the copy for one sample (nothing here writes into its result in place)."""
    return tensors[0] if len(tensors) == 1 else torch.cat(tensors)


@torch.no_grad()
def _summary(m: torch.Tensor, means: dict[str, torch.Tensor], tokens: torch.Tensor | None = None) -> dict[str, float]:
    """``loss/tokens`` (Σ ``tokens``, default Σ m) and each of ``means``' masked mean over the 0/1 mask ``m`` (a
    denominator of 0 counts as 1). Every sum is a row of one product with ``m``, brought to the host in one
    transfer: on a GPU each ``.item()`` would wait for the device, and on a CPU each small op costs more than
    its arithmetic. ``tokens`` must be 0 where ``m`` is (cross-entropy's weights), so that Σ tokens·m = Σ tokens."""
    rows = [m] if tokens is None else [m, tokens]
    for x in means.values():  # a loop, where a generator and a comprehension would be 3 Python calls a step
        rows.append(x.to(m.dtype))
    sums = (torch.stack(rows) @ m).tolist()
    count = sums.pop(0)
    out: dict[str, float] = {LossMetric.TOKENS: sums.pop(0) if tokens is not None else count}
    for k, v in zip(means, sums, strict=True):
        out[k] = v / max(count, 1.0)
    return out

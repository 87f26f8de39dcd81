"""Training losses of the in-process backend, mirroring the loss types of Together AI's RL training API.

Every loss sees, per sample i, the current policy's log-probs of the target tokens (lp, one per position)
and the sample's input tensors. Notation: q = sampler `logprobs` input, A = `advantages`, m = token mask,
r = exp(lp - q) the importance ratio, clip(r) = clamp(r, low, high), sg = stop-gradient, sums run over
all tokens of the batch. Policy losses (all but cross-entropy) use a 0/1 mask: only cross-entropy honours
fractional weights; policy losses treat any non-zero weight as 1.

Which losses exist, their params (with bounds and rlnb's defaults) and their inputs come from the one
catalogue, ``rlnb.wire.LOSSES``; this module holds only the maths and the input checks.

Accumulation: every loss is a function of one forward-backward's batch. Gradients of several
forward-backward calls before an optim-step add up, so a mean-aggregated loss (GRPO's TOKEN_MEAN or
SEQUENCE_MEAN) over two half batches gives *twice* the gradient of one mean over the whole batch; scale
the learning rate, or the advantages, if you split a batch.
"""

import math
from typing import Any

import torch
from pydantic import ValidationError

from rlnb import wire

_CROSS_ENTROPY = "LOSS_TYPE_CROSS_ENTROPY"
_GRPO = "LOSS_TYPE_GRPO"
_PPO = "LOSS_TYPE_PPO"
_CISPO = "LOSS_TYPE_CISPO"
_DPPO = "LOSS_TYPE_DPPO"
_DRO = "LOSS_TYPE_DRO"
_IMPORTANCE_SAMPLING = "LOSS_TYPE_IMPORTANCE_SAMPLING"
_TOKEN_MEAN = "GRPO_LOSS_AGGREGATION_TYPE_TOKEN_MEAN"
_SEQUENCE_MEAN = "GRPO_LOSS_AGGREGATION_TYPE_SEQUENCE_MEAN"
_UNSPECIFIED_AGG = "GRPO_LOSS_AGGREGATION_TYPE_UNSPECIFIED"
_RATIO_SEQUENCE = "GRPO_LOSS_RATIO_TYPE_SEQUENCE"
_DTYPES = {"int64": torch.int64, "float32": torch.float32}


class InvalidLossInput(ValueError):
    """Bad loss inputs; the backend turns it into a FAILED op with
    TRAINING_OPERATION_ERROR_CODE_INVALID_INPUT. Message names the sample index and the key."""


def validate(
    loss_type: str, params: dict[str, Any] | None, inputs: list[dict[str, torch.Tensor]], seq_lens: list[int]
) -> dict[str, Any]:
    """Check the input contract before any compute; return the params dict with defaults filled in.
    A param given as None takes its default. Raise InvalidLossInput."""
    spec = wire.LOSSES.get(loss_type)
    if spec is None:
        raise InvalidLossInput(f"unknown loss type {loss_type!r}; expected one of {', '.join(wire.LOSSES)}")
    params = _check_params(spec, params)
    if not inputs:
        raise InvalidLossInput("empty batch: at least one sample is required")
    if len(inputs) != len(seq_lens):
        raise InvalidLossInput(f"got loss inputs for {len(inputs)} samples but {len(seq_lens)} model inputs")
    for i, (x, n) in enumerate(zip(inputs, seq_lens, strict=True)):
        for key in spec.required:
            if key not in x:
                raise InvalidLossInput(f"sample {i}: missing required input {key!r} for {loss_type}")
        if "mask" in spec.optional and "weights" in x and "mask" in x:
            raise InvalidLossInput(f"sample {i}: give either 'weights' or 'mask', not both")
        if loss_type == _GRPO and params["beta"] > 0 and "reference_logprobs" not in x:
            raise InvalidLossInput(f"sample {i}: missing input 'reference_logprobs', required when beta > 0")
        for key in spec.required + spec.optional:
            if key in x:
                check_input(f"sample {i}: input {key!r}", key, x[key], n)
    return params


def check_read(loss_type: str | None, inputs: list[dict[str, torch.Tensor]]) -> None:
    """Refuse a ``loss_fn_inputs`` key the operation would silently ignore (``wire.unread_inputs``), as
    ``rlnb serve`` does with a 400: a forward-backward of ``loss_type``, or a custom-forward-backward
    (None). Apart from ``validate``, which checks a loss's own inputs."""
    spec = wire.LOSSES.get(loss_type) if loss_type is not None else None
    for i, x in enumerate(inputs):
        for key in wire.unread_inputs(loss_type, x):
            if key in wire.LOSS_INPUT_DTYPES and spec is not None:
                reads = ", ".join((*spec.required, *spec.optional))
                raise InvalidLossInput(f"sample {i}: {spec.type} does not read input {key!r} (it reads {reads})")
            raise InvalidLossInput(
                f"sample {i}: no loss reads input {key!r} (the inputs are {', '.join(wire.LOSS_INPUT_DTYPES)})"
            )


def _check_params(spec: wire.LossSpec, params: dict[str, Any] | None) -> dict[str, Any]:
    """The params by the rules of ``spec.params`` (the wire model's bounds), defaults filled in. A bad value is said
    as rlnb's client says it (``wire.one_line``: the body's field, its value and its rule), every bad field at once."""
    given = {k: v for k, v in (params or {}).items() if v is not None}
    fields: dict[str, Any] = dict(spec.params.model_fields) if spec.params is not None else {}
    for key in given:
        if key not in fields:
            raise InvalidLossInput(f"unknown param {key!r} for {spec.type} (allowed: {', '.join(fields) or 'none'})")
    if spec.params is not None:
        try:
            spec.params.model_validate(given)
        except ValidationError as exc:
            missing = [str(e["loc"][0]) for e in exc.errors() if e["type"] == "missing"]
            if missing:
                raise InvalidLossInput(f"param {missing[0]!r} is required for {spec.type}") from None
            raise InvalidLossInput(wire.one_line(f"loss.{spec.params_field}", spec.params, exc)) from None
    out = {**spec.defaults, **given}
    if out.get("agg_type") == _UNSPECIFIED_AGG:  # protobuf's "unset": the default aggregation
        out["agg_type"] = spec.defaults["agg_type"]
    return {k: float(v) if isinstance(v, int) and not isinstance(v, bool) else v for k, v in out.items()}


def check_input(where: str, key: str, t: Any, n: int) -> None:
    """The one check of a loss input tensor, ``validate``'s and a custom forward-backward's alike, so a bad
    tensor reads the same wherever it comes from: a tensor of a dtype ``wire.LOSS_INPUT_DTYPES`` allows for
    ``key``, 1-D of the model input's length ``n``, finite. ``where`` names it as its caller names fields.
    Raise InvalidLossInput."""
    dtypes = tuple(_DTYPES[d] for d in wire.LOSS_INPUT_DTYPES[key])
    if not isinstance(t, torch.Tensor):
        raise InvalidLossInput(f"{where} must be a tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        raise InvalidLossInput(f"{where} must be {' or '.join(map(str, dtypes))}, got {t.dtype}")
    if t.dim() != 1 or len(t) != n:
        raise InvalidLossInput(f"{where} must be 1-D of length {n} (the model input's), got {tuple(t.shape)}")
    if t.is_floating_point() and not math.isfinite(t.sum(dtype=torch.float64)):  # one op: no finite sum overflows
        raise InvalidLossInput(f"{where} has non-finite values")


def loss_mask(loss_type: str, inputs_i: dict[str, torch.Tensor]) -> torch.Tensor:
    """1-D float 0/1 mask of the positions that count in the loss for one sample:
    m = (weights != 0), or for policy losses (mask != 0), or 1 everywhere when neither is given."""
    for key in ("weights",) if loss_type == _CROSS_ENTROPY else ("weights", "mask"):
        if key in inputs_i:
            return (inputs_i[key] != 0).float()
    return torch.ones(len(inputs_i["target_tokens"]), device=inputs_i["target_tokens"].device)


def compute(
    loss_type: str,
    params: dict[str, Any],
    logprobs: list[torch.Tensor],
    inputs: list[dict[str, torch.Tensor]],
    *,
    horizon: int,
    entropy: list[torch.Tensor] | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Loss to call .backward() on, and float metrics. logprobs[i] is lp of sample i; params as from validate.

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
        means["loss/entropy/mean"] = _joined(entropy).to(lp.device)
    # A token of weight 0 is never read, not even its own log-prob: one the model gives probability 0 (-inf, a
    # banned token in a prompt) would turn its product with the 0 weight into NaN and fail the step NON_FINITE_LOSS.
    if loss_type == _CROSS_ENTROPY:
        w = _cat(inputs, "weights", lp.device).to(lp.dtype)
        return -torch.dot(w, torch.where(w != 0, lp, 0.0)), _summary((w != 0).to(lp.dtype), means, tokens=w)

    m = torch.cat([loss_mask(loss_type, x) for x in inputs]).to(lp.device)
    # Neither are a masked token's inputs: neutral values there (ratio 1, advantage 0), so that what a caller
    # leaves at a prompt's positions (a -100 log-prob) cannot overflow and turn a product with the 0 mask to NaN.
    on = m != 0
    lp = torch.where(on, lp, 0.0)
    lp_held = lp.detach()
    q = torch.where(on, _cat(inputs, "logprobs", lp.device), lp_held)
    adv = torch.where(on, _cat(inputs, "advantages", lp.device), 0.0)
    lens = [len(t) for t in logprobs]
    if params.get("ratio_type") == _RATIO_SEQUENCE:
        seq_log_r = _seq_sum((lp - q) * m, lens) / _seq_sum(m, lens).clamp(min=1)
        r = seq_log_r.exp().repeat_interleave(torch.tensor(lens, device=lp.device))
    else:
        r = (lp - q).exp()

    if loss_type == _IMPORTANCE_SAMPLING:
        loss = -(r * adv * m).sum()
    elif loss_type == _PPO:
        lo, hi = _clip(params, r.dtype)
        loss = -(torch.minimum(r * adv, r.clamp(lo, hi) * adv) * m).sum()
    elif loss_type == _CISPO:
        lo, hi = _clip(params, r.dtype)
        loss = -(r.clamp(lo, hi).detach() * adv * lp * m).sum()
    elif loss_type == _DPPO:
        dp = lp.detach().exp() - q.exp()  # p - p_old
        outside = (adv > 0) & (dp > params["delta_high"]) | (adv < 0) & (-dp > params["delta_low"])
        loss = -(r * adv * m * ~outside).sum()
        means["loss/trust_region/masked_fraction"] = outside
    elif loss_type == _DRO:
        loss = -((lp * adv - 0.5 * params["beta"] * (lp - q) ** 2) * m).sum()
    else:  # GRPO
        lo, hi = _clip(params, r.dtype)
        obj = torch.minimum(r * adv, r.clamp(lo, hi) * adv)
        if params["beta"] > 0:
            d = torch.where(on, _cat(inputs, "reference_logprobs", lp.device), lp_held) - lp
            kl = d.exp() - d - 1
            if params["use_bias_correction_kl"]:  # the unbiased reverse-KL gradient (DeepSeek-V3.2)
                kl = kl * r
            obj = obj - params["beta"] * kl
            means["loss/kl_ref/mean"] = kl
        token_loss = -obj * m
        if params["agg_type"] == _TOKEN_MEAN:
            loss = token_loss.sum() / m.sum().clamp(min=1)
        elif params["agg_type"] == _SEQUENCE_MEAN:
            loss = (_seq_sum(token_loss, lens) / _seq_sum(m, lens).clamp(min=1)).mean()
        else:  # FIXED_HORIZON
            loss = token_loss.sum() / max(len(lens) * horizon, 1)

    means["loss/ratio/mean"] = r
    means["loss/sampler_kl/mean"] = q - lp.detach()
    if loss_type in (_PPO, _GRPO):
        lo, hi = _clip(params, r.dtype)
        means["loss/clip/low_fraction"] = (r < lo) & (adv < 0)
        means["loss/clip/high_fraction"] = (r > hi) & (adv > 0)
    elif loss_type == _CISPO:
        lo, hi = _clip(params, r.dtype)
        means["loss/clip/low_fraction"] = (r < lo) & (adv != 0)
        means["loss/clip/high_fraction"] = (r > hi) & (adv != 0)
    return loss, _summary(m, means)


def _clip(params: dict[str, Any], dtype: torch.dtype) -> tuple[float, float]:
    """The clip thresholds within what the ratio's dtype holds: a threshold past float32's range (1e300 for
    "no clipping") clips nothing, as it says, instead of failing torch's conversion of the scalar."""
    big = torch.finfo(dtype).max
    return max(params["clip_low_threshold"], -big), min(params["clip_high_threshold"], big)


ENTROPY_ROWS = 256
"""Positions per chunk of the entropy: one chunk's probabilities at a time, not the whole batch's."""


def logprobs_and_entropy(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The log-prob of each target token (differentiable) and the policy's entropy in nats at each position
    (no gradient), from ``logits`` ``[..., V]`` and ``targets`` ``[...]``. The entropy reuses the
    log-softmax the log-probs need, a chunk of positions at a time, so it costs one pass over it."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    lp = logp.gather(-1, targets[..., None])[..., 0]
    with torch.no_grad():
        flat = logp.detach().reshape(-1, logp.shape[-1])
        chunks = [_entropy(c) for c in flat.split(ENTROPY_ROWS)]
        entropy = _joined(chunks).reshape(logp.shape[:-1]) if chunks else flat.new_zeros(logp.shape[:-1])
    return lp, entropy


def _entropy(logp: torch.Tensor) -> torch.Tensor:
    """-Σ p·log p over the last axis; a log-prob of -inf (p = 0) adds 0, not NaN."""
    return -(logp.exp() * logp.clamp(min=torch.finfo(logp.dtype).min)).sum(-1)


def _cat(inputs: list[dict[str, torch.Tensor]], key: str, device: torch.device) -> torch.Tensor:
    return _joined([x[key] for x in inputs]).to(device)


def _joined(tensors: list[torch.Tensor]) -> torch.Tensor:
    """``torch.cat``, without the copy for one sample (nothing here writes into its result in place)."""
    return tensors[0] if len(tensors) == 1 else torch.cat(tensors)


def _seq_sum(x: torch.Tensor, lens: list[int]) -> torch.Tensor:
    return torch.stack([chunk.sum() for chunk in x.split(lens)])


@torch.no_grad()
def _summary(m: torch.Tensor, means: dict[str, torch.Tensor], tokens: torch.Tensor | None = None) -> dict[str, float]:
    """``loss/tokens`` (Σ ``tokens``, default Σ m) and each of ``means``' masked mean over the 0/1 mask ``m`` (a
    denominator of 0 counts as 1). Every sum is a row of one product with ``m``, brought to the host in one
    transfer: on a GPU each ``.item()`` would wait for the device, and on a CPU each small op costs more than
    its arithmetic. ``tokens`` must be 0 where ``m`` is (cross-entropy's weights), so that Σ tokens·m = Σ tokens."""
    rows = [m, *([tokens] if tokens is not None else []), *(x.to(m.dtype) for x in means.values())]
    sums = (torch.stack(rows) @ m).tolist()
    count = sums.pop(0)
    total = sums.pop(0) if tokens is not None else count
    return {"loss/tokens": total, **{k: v / max(count, 1.0) for k, v in zip(means, sums, strict=True)}}

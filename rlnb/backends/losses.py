"""Training losses of the in-process backend, mirroring the loss types of Together AI's RL training API.

Every loss sees, per sample i, the current policy's log-probs of the target tokens (lp, one per position)
and the sample's input tensors. Notation: q = sampler `logprobs` input, A = `advantages`, m = token mask,
r = exp(lp - q) the importance ratio, clip(r) = clamp(r, low, high), sg = stop-gradient, sums run over
all tokens of the batch. Policy losses (all but cross-entropy) use a 0/1 mask: only cross-entropy honours
fractional weights; policy losses treat any non-zero weight as 1.
"""

import math
from typing import Any

import torch

_CROSS_ENTROPY = "LOSS_TYPE_CROSS_ENTROPY"
_GRPO = "LOSS_TYPE_GRPO"
_IMPORTANCE_SAMPLING = "LOSS_TYPE_IMPORTANCE_SAMPLING"
_PPO = "LOSS_TYPE_PPO"
_CISPO = "LOSS_TYPE_CISPO"
_DPPO = "LOSS_TYPE_DPPO"
_DRO = "LOSS_TYPE_DRO"
LOSS_TYPES: tuple[str, ...] = (_CROSS_ENTROPY, _GRPO, _IMPORTANCE_SAMPLING, _PPO, _CISPO, _DPPO, _DRO)

_FIXED_HORIZON = "GRPO_LOSS_AGGREGATION_TYPE_FIXED_HORIZON"
_TOKEN_MEAN = "GRPO_LOSS_AGGREGATION_TYPE_TOKEN_MEAN"
_SEQUENCE_MEAN = "GRPO_LOSS_AGGREGATION_TYPE_SEQUENCE_MEAN"
_RATIO_TOKEN = "GRPO_LOSS_RATIO_TYPE_TOKEN"
_RATIO_SEQUENCE = "GRPO_LOSS_RATIO_TYPE_SEQUENCE"

# loss type -> param -> (default, allowed). allowed is a closed range (lo, hi) or a tuple of strings;
# a default of None makes the param required.
_LE_1, _GE_0, _GE_1, _UNIT = (-math.inf, 1.0), (0.0, math.inf), (1.0, math.inf), (0.0, 1.0)
_BOUNDS = {_LE_1: "<= 1", _GE_0: ">= 0", _GE_1: ">= 1", _UNIT: "in [0, 1]"}
_PARAMS: dict[str, dict[str, tuple[Any, tuple]]] = {
    _CROSS_ENTROPY: {},
    _GRPO: {
        "clip_low_threshold": (0.8, _LE_1),
        "clip_high_threshold": (1.28, _GE_1),
        "beta": (0.0, _GE_0),
        "agg_type": (_FIXED_HORIZON, (_FIXED_HORIZON, _TOKEN_MEAN, _SEQUENCE_MEAN)),
        "ratio_type": (_RATIO_TOKEN, (_RATIO_TOKEN, _RATIO_SEQUENCE)),
    },
    _IMPORTANCE_SAMPLING: {},
    _PPO: {"clip_low_threshold": (0.8, _LE_1), "clip_high_threshold": (1.2, _GE_1)},
    _CISPO: {"clip_low_threshold": (0.0, _LE_1), "clip_high_threshold": (4.0, _GE_1)},
    _DPPO: {"delta_low": (0.15, _UNIT), "delta_high": (0.15, _UNIT)},
    _DRO: {"beta": (None, _GE_0)},
}

# loss type -> (required inputs, optional inputs); other keys are ignored.
_POLICY = (("target_tokens", "logprobs", "advantages"), ("weights", "mask"))
_INPUTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    _CROSS_ENTROPY: (("target_tokens", "weights"), ()),
    _GRPO: (_POLICY[0], _POLICY[1] + ("reference_logprobs",)),
    _IMPORTANCE_SAMPLING: _POLICY,
    _PPO: _POLICY,
    _CISPO: _POLICY,
    _DPPO: _POLICY,
    _DRO: _POLICY,
}
_DTYPES: dict[str, tuple[torch.dtype, ...]] = {
    "target_tokens": (torch.int64,),
    "logprobs": (torch.float32,),
    "advantages": (torch.float32,),
    "reference_logprobs": (torch.float32,),
    "weights": (torch.int64, torch.float32),
    "mask": (torch.int64, torch.float32),
}


class InvalidLossInput(ValueError):
    """Bad loss inputs; the backend turns it into a FAILED op with
    TRAINING_OPERATION_ERROR_CODE_INVALID_INPUT. Message names the sample index and the key."""


def validate(
    loss_type: str, params: dict[str, Any] | None, inputs: list[dict[str, torch.Tensor]], seq_lens: list[int]
) -> dict[str, Any]:
    """Check the input contract before any compute; return the params dict with defaults filled in.
    A param given as None takes its default. Raise InvalidLossInput."""
    if loss_type not in LOSS_TYPES:
        raise InvalidLossInput(f"unknown loss type {loss_type!r}; expected one of {', '.join(LOSS_TYPES)}")
    params = _check_params(loss_type, params)
    if not inputs:
        raise InvalidLossInput("empty batch: at least one sample is required")
    if len(inputs) != len(seq_lens):
        raise InvalidLossInput(f"got loss inputs for {len(inputs)} samples but {len(seq_lens)} model inputs")
    required, optional = _INPUTS[loss_type]
    for i, (x, n) in enumerate(zip(inputs, seq_lens, strict=True)):
        for key in required:
            if key not in x:
                raise InvalidLossInput(f"sample {i}: missing required input {key!r} for {loss_type}")
        if "mask" in optional and "weights" in x and "mask" in x:
            raise InvalidLossInput(f"sample {i}: give either 'weights' or 'mask', not both")
        if loss_type == _GRPO and params["beta"] > 0 and "reference_logprobs" not in x:
            raise InvalidLossInput(f"sample {i}: missing input 'reference_logprobs', required when beta > 0")
        for key in required + optional:
            if key in x:
                _check_tensor(f"sample {i}: input {key!r}", x[key], _DTYPES[key], n)
    return params


def _check_params(loss_type: str, params: dict[str, Any] | None) -> dict[str, Any]:
    spec = _PARAMS[loss_type]
    given = {k: v for k, v in (params or {}).items() if v is not None}
    for key in given:
        if key not in spec:
            allowed = ", ".join(spec) or "none"
            raise InvalidLossInput(f"unknown param {key!r} for {loss_type} (allowed: {allowed})")
    out = {}
    for key, (default, allowed) in spec.items():
        v = given.get(key, default)
        if v is None:
            raise InvalidLossInput(f"param {key!r} is required for {loss_type}")
        if isinstance(allowed[0], str):
            if v not in allowed:
                raise InvalidLossInput(f"param {key!r} must be one of {', '.join(allowed)}, got {v!r}")
        else:
            lo, hi = allowed
            number = isinstance(v, int | float) and not isinstance(v, bool)
            if not (number and math.isfinite(v) and lo <= v <= hi):
                bound = _BOUNDS[allowed]
                raise InvalidLossInput(f"param {key!r} of {loss_type} must be finite and {bound}, got {v!r}")
            v = float(v)
        out[key] = v
    return out


def _check_tensor(where: str, t: Any, dtypes: tuple[torch.dtype, ...], n: int) -> None:
    if not isinstance(t, torch.Tensor):
        raise InvalidLossInput(f"{where} must be a tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        raise InvalidLossInput(f"{where} must be {' or '.join(map(str, dtypes))}, got {t.dtype}")
    if t.dim() != 1 or len(t) != n:
        raise InvalidLossInput(f"{where} must be 1-D of length {n} (the model input's), got {tuple(t.shape)}")
    if t.is_floating_point() and not torch.isfinite(t).all():
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
                         r_i = exp(Σ_t (lp - q)·m / Σ_t m) on every token of sample i if ratio_type is
                         SEQUENCE (GSPO), and L = Σ ℓ·m / Σ m (TOKEN_MEAN), mean_i(Σ_t ℓ·m / Σ_t m)
                         (SEQUENCE_MEAN) or Σ ℓ·m / (num_samples · max_i seq_len_i) (FIXED_HORIZON).
                         A denominator of 0 counts as 1, so a sample with no masked tokens adds 0.
    """
    lp = torch.cat(logprobs)
    if loss_type == _CROSS_ENTROPY:
        w = _cat(inputs, "weights", lp.device).to(lp.dtype)
        return -(w * lp).sum(), {"loss/tokens": w.sum().item()}

    q, adv = _cat(inputs, "logprobs", lp.device), _cat(inputs, "advantages", lp.device)
    m = torch.cat([loss_mask(loss_type, x) for x in inputs]).to(lp.device)
    lens = [len(t) for t in logprobs]
    if params.get("ratio_type") == _RATIO_SEQUENCE:
        seq_log_r = _seq_sum((lp - q) * m, lens) / _seq_sum(m, lens).clamp(min=1)
        r = seq_log_r.exp().repeat_interleave(torch.tensor(lens, device=lp.device))
    else:
        r = (lp - q).exp()
    lo, hi = params.get("clip_low_threshold"), params.get("clip_high_threshold")
    metrics = {}

    if loss_type == _IMPORTANCE_SAMPLING:
        loss = -(r * adv * m).sum()
    elif loss_type == _PPO:
        loss = -(torch.minimum(r * adv, r.clamp(lo, hi) * adv) * m).sum()
    elif loss_type == _CISPO:
        loss = -(r.clamp(lo, hi).detach() * adv * lp * m).sum()
    elif loss_type == _DPPO:
        dp = lp.detach().exp() - q.exp()  # p - p_old
        outside = (adv > 0) & (dp > params["delta_high"]) | (adv < 0) & (-dp > params["delta_low"])
        loss = -(r * adv * m * ~outside).sum()
        metrics["loss/trust_region/masked_fraction"] = _masked_mean(outside, m)
    elif loss_type == _DRO:
        loss = -((lp * adv - 0.5 * params["beta"] * (lp - q) ** 2) * m).sum()
    else:  # GRPO
        obj = torch.minimum(r * adv, r.clamp(lo, hi) * adv)
        if params["beta"] > 0:
            d = _cat(inputs, "reference_logprobs", lp.device) - lp
            kl = d.exp() - d - 1
            obj = obj - params["beta"] * kl
            metrics["loss/kl_ref/mean"] = _masked_mean(kl, m)
        token_loss = -obj * m
        if params["agg_type"] == _TOKEN_MEAN:
            loss = token_loss.sum() / m.sum().clamp(min=1)
        elif params["agg_type"] == _SEQUENCE_MEAN:
            loss = (_seq_sum(token_loss, lens) / _seq_sum(m, lens).clamp(min=1)).mean()
        else:  # FIXED_HORIZON
            loss = token_loss.sum() / max(len(lens) * max(lens), 1)

    metrics["loss/tokens"] = m.sum().item()
    metrics["loss/ratio/mean"] = _masked_mean(r, m)
    metrics["loss/sampler_kl/mean"] = _masked_mean(q - lp.detach(), m)
    if lo is not None:
        metrics["loss/clip/low_fraction"] = _masked_mean(r < lo, m)
        metrics["loss/clip/high_fraction"] = _masked_mean(r > hi, m)
    return loss, metrics


def _cat(inputs: list[dict[str, torch.Tensor]], key: str, device: torch.device) -> torch.Tensor:
    return torch.cat([x[key] for x in inputs]).to(device)


def _seq_sum(x: torch.Tensor, lens: list[int]) -> torch.Tensor:
    return torch.stack([chunk.sum() for chunk in x.split(lens)])


@torch.no_grad()
def _masked_mean(x: torch.Tensor, m: torch.Tensor) -> float:
    return ((x * m).sum() / m.sum().clamp(min=1)).item()

"""The losses' wire types and params models: the bounds ``rlnb serve`` enforces, written once, as field metadata that
``rules`` words the refusals from. ``losses`` catalogues them (``LOSSES``) and builds configs of them."""

from __future__ import annotations

from typing import Annotated, Literal, TypeAlias, get_args

from pydantic import Field, Strict

from rlnb.wire.base import NUMBER_ONLY, StrictBool, _Model

LossType: TypeAlias = Literal[
    "LOSS_TYPE_UNSPECIFIED",
    "LOSS_TYPE_CROSS_ENTROPY",
    "LOSS_TYPE_GRPO",
    "LOSS_TYPE_IMPORTANCE_SAMPLING",
    "LOSS_TYPE_PPO",
    "LOSS_TYPE_CISPO",
    "LOSS_TYPE_DRO",
    "LOSS_TYPE_DPPO",
]
"""The spec's loss types; ``LOSSES`` maps rlnb's short names (``"grpo"``) to them."""
GrpoLossAggregationType: TypeAlias = Literal[
    "GRPO_LOSS_AGGREGATION_TYPE_UNSPECIFIED",
    "GRPO_LOSS_AGGREGATION_TYPE_FIXED_HORIZON",
    "GRPO_LOSS_AGGREGATION_TYPE_TOKEN_MEAN",
    "GRPO_LOSS_AGGREGATION_TYPE_SEQUENCE_MEAN",
]
"""How GRPO turns token losses into one number: FIXED_HORIZON (÷ samples × max length), TOKEN_MEAN or SEQUENCE_MEAN."""
GrpoLossRatioType: TypeAlias = Literal["GRPO_LOSS_RATIO_TYPE_TOKEN", "GRPO_LOSS_RATIO_TYPE_SEQUENCE"]
"""GRPO's importance ratio per token (TOKEN) or per sample (SEQUENCE, as GSPO)."""


GRPO_PARAM_NAMES: dict[str, dict[str, str]] = {
    field: {v.removeprefix(prefix): v for v in get_args(values) if not v.endswith("_UNSPECIFIED")}
    for field, values, prefix in (("agg_type", GrpoLossAggregationType, "GRPO_LOSS_AGGREGATION_TYPE_"),
                                  ("ratio_type", GrpoLossRatioType, "GRPO_LOSS_RATIO_TYPE_"))
}  # fmt: skip
"""The short names ``loss_params`` takes for GRPO's enum params, by the names docs/losses.md gives (any case:
``"TOKEN_MEAN"``, ``"token_mean"``), as ``weights_sync`` takes ``"pipeline"``; the wire values are taken too."""

ClipLow = Annotated[float, Strict(), Field(le=1, allow_inf_nan=False), NUMBER_ONLY]
"""An absolute lower bound on the importance ratio (<= 1)."""
ClipHigh = Annotated[float, Strict(), Field(ge=1, allow_inf_nan=False), NUMBER_ONLY]
"""An absolute upper bound on the importance ratio (>= 1)."""
FLOAT32_MAX = 3.4028234663852886e38
"""The largest float32: a loss computes in float32, where a larger number is inf."""
Penalty = Annotated[float, Strict(), Field(ge=0, le=FLOAT32_MAX, allow_inf_nan=False), NUMBER_ONLY]
"""A penalty weight, at most ``FLOAT32_MAX``: past it the loss's float32 product is inf, and inf·0 NaN even where
the penalised term is 0 (a masked token): the loss would be NaN whatever the samples, naming nothing."""
Probability = Annotated[float, Strict(), Field(ge=0, le=1, allow_inf_nan=False), NUMBER_ONLY]
"""Loss params are strict numbers: a string or a bool is refused, an integer is taken as a float."""


class CrossEntropyLossParams(_Model):
    """Cross-entropy takes no params."""

    pass


class GrpoLossParams(_Model):
    """GRPO / GSPO params; unset fields take rlnb's defaults (clip 0.8 / 1.28, β 0, FIXED_HORIZON, TOKEN)."""

    clip_low_threshold: ClipLow | None = None
    """Lower bound on the importance ratio (absolute, <= 1)."""
    clip_high_threshold: ClipHigh | None = None
    """Upper bound on the importance ratio (absolute, >= 1)."""
    beta: Penalty | None = None
    """KL penalty against ``reference_logprobs`` (required input when > 0)."""
    agg_type: GrpoLossAggregationType | None = None
    """How token losses become one number; UNSPECIFIED means the default (FIXED_HORIZON)."""
    ratio_type: GrpoLossRatioType | None = None
    """TOKEN: one ratio per token; SEQUENCE: one per sample (GSPO)."""
    use_bias_correction_kl: StrictBool | None = None
    """Multiply the KL term by the importance ratio, as TRL's flag of that name (an rlnb extension: the
    service documents no such field). Only matters when ``beta`` > 0."""


class PpoLossParams(_Model):
    """PPO's clip range on the importance ratio (rlnb's defaults: 0.8 / 1.2)."""

    clip_low_threshold: ClipLow | None = None
    clip_high_threshold: ClipHigh | None = None


class CispoLossParams(_Model):
    """CISPO's clamp on its stop-gradient coefficient (rlnb's defaults: 0 / 4)."""

    clip_low_threshold: ClipLow | None = None
    clip_high_threshold: ClipHigh | None = None


class DppoLossParams(_Model):
    """DPPO's trust region in probability space (rlnb's defaults: δ 0.15 / 0.15)."""

    delta_low: Probability | None = None
    """Probability-space limit in [0, 1]."""
    delta_high: Probability | None = None


class DroLossParams(_Model):
    """DRO's penalty on the squared log-ratio; ``beta`` has no default."""

    beta: Penalty
    """Quadratic log-ratio penalty (>= 0); required."""


class LossConfig(_Model):
    """``type`` plus at most the params object that belongs to it (``rlnb serve`` answers 400 to the
    others rather than ignore them; ``loss_config`` refuses them before sending)."""

    type: LossType
    cross_entropy_params: CrossEntropyLossParams | None = None
    grpo_params: GrpoLossParams | None = None
    ppo_params: PpoLossParams | None = None
    cispo_params: CispoLossParams | None = None
    dppo_params: DppoLossParams | None = None
    dro_params: DroLossParams | None = None

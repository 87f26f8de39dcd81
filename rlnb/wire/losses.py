"""Losses: ``LOSSES``, the one catalogue of short name → wire type → params → rlnb defaults → required and optional
inputs, and the checks of a loss config made from it. The wire types and params models (with the bounds the server
enforces) are ``loss_params``'s, and importable from here."""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal, get_args

from rlnb._input.scalars import scalar
from rlnb.wire.base import _Model
from rlnb.wire.loss_params import (
    GRPO_PARAM_NAMES,
    CispoLossParams,
    CrossEntropyLossParams,
    DppoLossParams,
    DroLossParams,
    GrpoLossAggregationType,
    GrpoLossParams,
    GrpoLossRatioType,
    LossConfig,
    LossType,
    PpoLossParams,
)
from rlnb.wire.rules import validated

__all__ = [
    "LOSSES",
    "LOSS_CROSS_ENTROPY",
    "LOSS_GRPO",
    "LOSS_INPUT_DTYPES",
    "LOSS_NAMES",
    "LOSS_PARAMS_FIELD",
    "LOSS_READS",
    "CispoLossParams",
    "CrossEntropyLossParams",
    "DppoLossParams",
    "DroLossParams",
    "GrpoLossAggregationType",
    "GrpoLossParams",
    "GrpoLossRatioType",
    "GRPO_PARAM_NAMES",
    "LossConfig",
    "LossMetric",
    "LossSpec",
    "LossType",
    "PpoLossParams",
    "loss_config",
    "loss_problem",
    "needs_reference",
    "unread_inputs",
]


@dataclass(frozen=True)
class LossSpec:
    """Everything rlnb knows about one loss, in one place."""

    name: str
    """Short name accepted by ``Session.forward_backward`` (as the SDK accepts ``"ppo"``)."""
    type: LossType
    params_field: str | None
    """The ``LossConfig`` field that holds its params (None: the loss takes none)."""
    params: builtins.type[_Model] | None  # (``type`` is a field name in this class)
    """The params model; its field bounds are the only copy of the allowed ranges."""
    defaults: Mapping[str, Any]
    """rlnb's value for each param left unset (the service documents examples, not defaults)."""
    required: tuple[str, ...]
    """``loss_fn_inputs`` keys every sample must carry."""
    optional: tuple[str, ...]
    """Keys read when present; a key no loss reads, or a mask this loss does not read, is refused
    (``unread_inputs``); another loss's inputs are ignored."""

    required_params: tuple[str, ...] = field(init=False, repr=False, compare=False)
    """Its params' fields that have no default (DRO's ``beta``): if any, its params must be sent. Read once, here:
    every forward-backward checks it, and reading pydantic's ``model_fields`` cost a step 12 Python calls."""

    def __post_init__(self) -> None:
        fields = self.params.model_fields if self.params is not None else {}
        object.__setattr__(self, "required_params", tuple(name for name, f in fields.items() if f.is_required()))


class LossMetric(StrEnum):
    """The keys of a forward-backward's ``metrics`` (the API reference's forward-backward output names them): the
    engine, the ensemble runner and the fake backend write them, and the RL step reads them."""

    TOKENS = "loss/tokens"
    """The trained tokens (Σ weights for cross-entropy): the one metric that is a count, not a mean."""
    ENTROPY = "loss/entropy/mean"
    """The policy's mean token entropy (TRL's ``entropy``)."""
    KL_REF = "loss/kl_ref/mean"
    """GRPO's mean KL to the reference (beta > 0 only)."""
    RATIO = "loss/ratio/mean"
    """The mean importance ratio of policy to sampler."""
    SAMPLER_KL = "loss/sampler_kl/mean"
    """The mean log-prob of the sampler less the policy's."""
    CLIP_LOW = "loss/clip/low_fraction"
    """The tokens the low clip changed the gradient of (PPO, GRPO, CISPO)."""
    CLIP_HIGH = "loss/clip/high_fraction"
    """The tokens the high clip changed the gradient of (PPO, GRPO, CISPO)."""
    TRUST_REGION_MASKED = "loss/trust_region/masked_fraction"
    """The tokens DPPO's trust region masked out."""


_POLICY_REQUIRED = ("target_tokens", "logprobs", "advantages")
_POLICY_OPTIONAL = ("weights", "mask")
_FIXED_HORIZON = "GRPO_LOSS_AGGREGATION_TYPE_FIXED_HORIZON"

LOSSES: dict[str, LossSpec] = {
    spec.type: spec
    for spec in (
        LossSpec(
            "cross_entropy", "LOSS_TYPE_CROSS_ENTROPY", "cross_entropy_params", CrossEntropyLossParams, {},
            ("target_tokens", "weights"), (),
        ),
        LossSpec(
            "grpo", "LOSS_TYPE_GRPO", "grpo_params", GrpoLossParams,
            {
                "clip_low_threshold": 0.8,
                "clip_high_threshold": 1.28,
                "beta": 0.0,
                "agg_type": _FIXED_HORIZON,
                "ratio_type": "GRPO_LOSS_RATIO_TYPE_TOKEN",
                "use_bias_correction_kl": True,
            },
            _POLICY_REQUIRED, (*_POLICY_OPTIONAL, "reference_logprobs"),
        ),
        LossSpec(
            "importance_sampling", "LOSS_TYPE_IMPORTANCE_SAMPLING", None, None, {}, _POLICY_REQUIRED, _POLICY_OPTIONAL
        ),
        LossSpec(
            "ppo", "LOSS_TYPE_PPO", "ppo_params", PpoLossParams,
            {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}, _POLICY_REQUIRED, _POLICY_OPTIONAL,
        ),
        LossSpec(
            "cispo", "LOSS_TYPE_CISPO", "cispo_params", CispoLossParams,
            {"clip_low_threshold": 0.0, "clip_high_threshold": 4.0}, _POLICY_REQUIRED, _POLICY_OPTIONAL,
        ),
        LossSpec(
            "dro", "LOSS_TYPE_DRO", "dro_params", DroLossParams, {}, _POLICY_REQUIRED, _POLICY_OPTIONAL
        ),
        LossSpec(
            "dppo", "LOSS_TYPE_DPPO", "dppo_params", DppoLossParams,
            {"delta_low": 0.15, "delta_high": 0.15}, _POLICY_REQUIRED, _POLICY_OPTIONAL,
        ),
    )
}  # fmt: skip
"""Every loss rlnb implements, by wire type."""

LOSS_NAMES: dict[str, str] = {spec.name: spec.type for spec in LOSSES.values()}
"""Short name → wire type."""
LOSS_CROSS_ENTROPY, LOSS_GRPO = LOSS_NAMES["cross_entropy"], LOSS_NAMES["grpo"]
"""The two loss types the engine, the ensemble runner and the fake backend each branch on, named here once."""
LOSS_PARAMS_FIELD: dict[str, str | None] = {spec.type: spec.params_field for spec in LOSSES.values()}
"""Wire type → the ``LossConfig`` field it reads."""
_NOT_ITS_OWN = {
    spec.type: sorted(f for f in LOSS_PARAMS_FIELD.values() if f is not None and f != spec.params_field)
    for spec in LOSSES.values()
}
"""Wire type → the other losses' ``LossConfig`` fields, which it refuses (``loss_problem``): listed once, not a
generator per forward-backward."""
LOSS_INPUT_DTYPES: dict[str, tuple[Literal["int64", "float32"], ...]] = {
    "target_tokens": ("int64",),
    "logprobs": ("float32",),
    "advantages": ("float32",),
    "reference_logprobs": ("float32",),
    "weights": ("int64", "float32"),
    "mask": ("int64", "float32"),
}
"""The dtypes each known ``loss_fn_inputs`` key may have."""


def unread_inputs(loss_type: str | None, keys: Iterable[str]) -> list[str]:
    """The ``loss_fn_inputs`` keys an operation would silently ignore, which are refused instead: a key no
    loss reads (a misspelt ``weight`` would train on every token), and a token mask the loss does not
    read (cross-entropy weighs tokens by ``weights`` only, never by ``mask``). ``loss_type`` is the
    forward-backward's loss, None for a custom-forward-backward (which reads ``target_tokens`` and
    ``weights`` or ``mask``). Another loss's inputs may ride along, so that one batch serves several."""
    read = LOSS_READS[loss_type] if loss_type in LOSS_READS else LOSS_READS[None]
    return [key for key in keys if key not in read]


def _reads(spec: LossSpec | None) -> frozenset[str]:
    """The ``loss_fn_inputs`` keys an operation of ``spec`` reads (None: a custom-forward-backward): every known key,
    less the token mask a loss does not read."""
    masks = {"weights", "mask"} - set((*spec.required, *spec.optional) if spec is not None else ())
    return frozenset(LOSS_INPUT_DTYPES.keys() - masks if spec is not None else LOSS_INPUT_DTYPES)


LOSS_READS: dict[str | None, frozenset[str]] = {None: _reads(None), **{t: _reads(s) for t, s in LOSSES.items()}}
"""Wire loss type (None: a custom-forward-backward) → the ``loss_fn_inputs`` keys it reads; any other key is one
``unread_inputs`` refuses. A set to compare a sample's keys with (C), where the engine asked ``unread_inputs`` of every
sample (2 Python calls a forward-backward)."""


def loss_config(loss: str | LossConfig | dict[str, Any], params: dict[str, Any] | None = None) -> LossConfig:
    """A ``LossConfig`` from a short name (``"grpo"``), a wire type string, a dict or a model.

    Refuses (``ValueError``) an unknown loss, params for a loss that takes none, out-of-range params (the message
    names the field and the bound), ``params`` beside a config (which carries its own) and a config with a
    ``loss_problem`` — before anything is sent.
    """
    if params is not None and not isinstance(params, Mapping):  # [1, 2] was "ppo params have no field 1, 2"
        said = f"loss_params must be a dict of the loss's params, such as {{'beta': 0.1}}, got {params!r}"
        raise ValueError(said[:300])
    if isinstance(loss, LossConfig | dict):
        if params:  # they would be dropped without a word
            raise ValueError(
                "loss_params go with a loss name (loss='grpo', loss_params={...}); a LossConfig or dict carries its "
                "own params object (e.g. grpo_params): put them there"
            )
        given = loss if isinstance(loss, LossConfig) else validated(LossConfig, loss, "loss")
        problem = loss_problem(given)
        if problem is not None:
            raise ValueError(problem[1])
        return given
    spec = LOSSES.get(LOSS_NAMES.get(loss, loss))
    if spec is None:
        raise ValueError(f"loss must be one of {', '.join(LOSS_NAMES)} (or a LossConfig), got {loss!r}")
    if params and spec.params_field is None:
        raise ValueError(f"{spec.type} takes no params, got {params!r}")
    if params and spec.params is not None:  # a misspelt key would be sent, and refused only by the service
        unknown = sorted(set(params) - set(spec.params.model_fields))
        if unknown:
            fields = ", ".join(spec.params.model_fields) or "none, it takes no params"
            raise ValueError(f"{spec.name} params have no field {', '.join(map(repr, unknown))}; its fields: {fields}")
    if params:
        params = _wire_names(params)  # only GRPO has these fields: the unknown ones were refused above
    # pydantic's bare "Field required"; no comprehension (a Python call) where the loss requires none
    missing = [f for f in spec.required_params if f not in (params or {})] if spec.required_params else []
    if missing:
        raise ValueError(
            f"loss.{spec.params_field} is required for {spec.type} ({', '.join(missing)}: no default); "
            f"give loss_params={{{missing[0]!r}: ...}}"
        )
    config: dict[str, Any] = {"type": spec.type}
    if spec.params_field is not None and (params or spec.required_params):
        config[spec.params_field] = params or {}
    return validated(LossConfig, config, "loss_params", skip=1)  # loss_params.beta, not loss_params.grpo_params.beta


def _wire_names(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with a numpy or 0-d torch scalar as the number it holds (the wire's numbers take Python ones only,
    ``NUMBER_ONLY``; ``rlnb.AdamParams`` takes them so too), and GRPO's enum params given by a short name
    (``"TOKEN_MEAN"``) as their wire value; another value is a ``ValueError`` listing the names (pydantic's would be
    several lines of the wire values)."""
    out = dict(zip(params, map(scalar, params.values()), strict=True))
    for param, names in GRPO_PARAM_NAMES.items():
        value = out.get(param)
        if value is not None and value not in get_args(get_args(GrpoLossParams.model_fields[param].annotation)[0]):
            out[param] = names.get(value.upper()) if isinstance(value, str) else None
            if out[param] is None:
                raise ValueError(f"loss_params {param} must be one of {', '.join(names)} (or its wire name, such "
                                 f"as {next(iter(names.values()))!r}), got {value!r}")  # fmt: skip
    return out


def loss_problem(config: LossConfig) -> tuple[str, str] | None:
    """What is wrong with ``config``, as (the field, why), or None. A type that is no loss (``UNSPECIFIED``), the
    params object of another loss (refused, not ignored) and a missing params object a loss requires (DRO's).
    ``loss_config`` raises it before anything is sent; ``rlnb serve`` answers 400 with it."""
    spec = LOSSES.get(config.type)
    if spec is None:
        return "loss.type", f"loss.type must be one of {', '.join(LOSSES)}, got {config.type}"
    own = spec.params_field
    if spec.required_params and getattr(config, str(own)) is None:
        needed = ", ".join(spec.required_params)
        return f"loss.{own}", f"loss.{own} is required for {config.type} ({needed}: no default)"
    for name in _NOT_ITS_OWN[spec.type]:
        if getattr(config, name) is not None:
            takes = f"takes {own}" if own else "takes no params"
            return f"loss.{name}", f"loss.{name} does not apply to {config.type}, which {takes}"
    return None


def needs_reference(config: LossConfig) -> bool:
    """Whether every sample of ``config``'s loss must carry ``reference_logprobs``: GRPO with a KL penalty
    (``beta`` > 0), as ``LossSpec`` lists the key among GRPO's optional inputs."""
    return config.grpo_params is not None and (config.grpo_params.beta or 0.0) > 0

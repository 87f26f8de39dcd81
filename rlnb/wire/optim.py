"""Optimizers: the optim-step bodies (with the bounds the server enforces), the resource's optimizer
config, and the one catalogue of optimizer kinds (``OPTIMIZERS``). ``rlnb.params`` adds
``extra="forbid"`` and the helpers people use in notebooks."""

from __future__ import annotations

from typing import Annotated, Final, Literal, TypeAlias, get_args

from pydantic import Field, Strict

from rlnb.wire.base import NUMBER_ONLY, Int64, Newer, _Model, _Request

__all__ = [
    "ADAM",
    "MUON",
    "MUON_MATCH_ADAM",
    "MUON_ORIGINAL",
    "MUON_SCALING",
    "SCALING_NAMES",
    "OPTIMIZERS",
    "OPTIMIZER_PARAMS_FIELD",
    "AdamOptimizerConfig",
    "AdamParams",
    "MuonOptimizerConfig",
    "MuonParams",
    "MuonScaling",
    "MuonScalingStrategy",
    "OptimStepBody",
    "OptimStepResult",
    "OptimizerConfig",
    "OptimizerKind",
    "optimizer_config",
    "optimizer_kind",
    "optimizer_of",
    "muon_scaling",
]

OptimizerKind: TypeAlias = Literal["adam", "muon"]
"""The optimizer of a model resource, fixed for its life (rlnb's short names). A ``Literal``, not an enum: people
type ``optimizer="muon"``, and mypy (``strict_equality``) refuses a comparison with a name that is none of these."""
ADAM: Final = "adam"
"""AdamW for every parameter."""
MUON: Final = "muon"
"""Muon for the hidden 2-D matrices, AdamW for the rest (``MuonParams.adam``)."""
OPTIMIZERS: Final[tuple[OptimizerKind, ...]] = get_args(OptimizerKind)
"""Every ``OptimizerKind``: what ``connect(optimizer=...)`` accepts."""
OPTIMIZER_PARAMS_FIELD: Final[dict[OptimizerKind, str]] = {ADAM: "adam_params", MUON: "muon_params"}
"""Which ``OptimStepBody`` field carries each kind's per-step params."""


def optimizer_kind(value: object, name: str = "optimizer") -> OptimizerKind:
    """``value`` as an optimizer kind; a ``ValueError`` naming ``name`` and the kinds otherwise."""
    for kind in OPTIMIZERS:
        if value == kind:
            return kind
    raise ValueError(f"{name} must be one of {', '.join(OPTIMIZERS)}, got {value!r}")


MuonScalingStrategy: TypeAlias = Literal[
    "MUON_SCALING_STRATEGY_UNSPECIFIED", "MUON_SCALING_STRATEGY_MATCH_ADAM", "MUON_SCALING_STRATEGY_ORIGINAL"
]
"""The units of Muon's learning rate: ORIGINAL (Keller Jordan's) or MATCH_ADAM (an update RMS like AdamW's)."""
MuonScaling: TypeAlias = Literal["original", "match_adam"]
"""Short names of the Muon scaling strategies (``LocalBackend(muon_scaling=...)`` takes them)."""
MUON_ORIGINAL: Final = "original"
"""Keller Jordan's units: lr in spectral-norm units (0.02), the engine's default."""
MUON_MATCH_ADAM: Final = "match_adam"
"""Moonshot's units: Muon's update RMS matches AdamW's, so an AdamW learning rate carries over."""
MUON_SCALING: Final[dict[str, MuonScalingStrategy]] = {
    MUON_ORIGINAL: "MUON_SCALING_STRATEGY_ORIGINAL",
    MUON_MATCH_ADAM: "MUON_SCALING_STRATEGY_MATCH_ADAM",
}
"""``MuonScaling`` short name → the API's strategy."""
SCALING_NAMES: Final[dict[str, MuonScaling]] = {MUON_SCALING[name]: name for name in get_args(MuonScaling)}
"""The API's strategy → its short name (a session's config may hold either)."""


def muon_scaling(value: object, name: str = "muon_scaling") -> MuonScaling:
    """``value`` as a ``MuonScaling`` short name; a ``ValueError`` naming ``name`` and the names otherwise."""
    for scaling in get_args(MuonScaling):
        if value == scaling:
            return scaling
    raise ValueError(f"{name} must be {' or '.join(map(repr, MUON_SCALING))}, got {value!r}"[:300])


LearningRate = Annotated[float, Strict(), Field(gt=0, allow_inf_nan=False), NUMBER_ONLY]
UnitInterval = Annotated[float, Strict(), Field(ge=0, lt=1, allow_inf_nan=False), NUMBER_ONLY]
Positive = Annotated[float, Strict(), Field(gt=0, allow_inf_nan=False), NUMBER_ONLY]
NonNegative = Annotated[float, Strict(), Field(ge=0, allow_inf_nan=False), NUMBER_ONLY]
"""Optimizer params are strict numbers (an int is taken as a float; a bool or a string is refused)."""
NewtonSchulzSteps = Annotated[int, Strict(), Field(ge=1, le=20)]


class AdamParams(_Model):
    """Per-step AdamW overrides. Every field optional: unset means the session default."""

    learning_rate: LearningRate | None = None
    """Step size for the Adam-tuned parameters (> 0)."""
    beta1: UnitInterval | None = None
    """First-moment decay, in [0, 1)."""
    beta2: UnitInterval | None = None
    """Second-moment decay, in [0, 1)."""
    eps: Positive | None = None
    """Denominator term (> 0)."""
    weight_decay: NonNegative | None = None
    """Decoupled weight decay (>= 0)."""
    grad_clip_norm: NonNegative | None = None
    """Max global gradient norm across all parameters; 0 disables clipping; unset = 1.0."""


class MuonParams(_Model):
    """Per-step Muon overrides for the 2-D hidden matrices, plus ``adam`` for the rest."""

    learning_rate: LearningRate | None = None
    """Muon step size (> 0), in the units of the resource's scaling strategy."""
    momentum: UnitInterval | None = None
    """Momentum coefficient, in [0, 1)."""
    newton_schulz_steps: NewtonSchulzSteps | None = None
    """Newton-Schulz iterations, an integer in 1..20."""
    weight_decay: NonNegative | None = None
    """Decoupled weight decay (>= 0)."""
    grad_clip_norm: NonNegative | None = None
    """Max global gradient norm across all parameters; 0 disables clipping; unset = 1.0."""
    adam: AdamParams | None = None
    """Overrides for the Adam-tuned (non-matrix) parameters inside a Muon session."""


class OptimStepBody(_Request):
    """The optim-step request: ``adam_params`` or ``muon_params``, matching the session's optimizer."""

    adam_params: AdamParams | None = None
    muon_params: MuonParams | None = None


class OptimStepResult(_Model):
    """The output of an optim-step: the new step count (and rlnb's metrics extension)."""

    step: Int64
    """The session's optimizer-step count after this update (1 after the first step)."""
    metrics: dict[str, float] | None = None
    """rlnb extension, not in Together's API: pre-clip grad norms and the learning rates used.
    Together never sends it; clients must not require it."""


class MuonOptimizerConfig(_Model):
    """A Muon resource's optimizer config: the scaling strategy of its learning rate."""

    scaling_strategy: Annotated[MuonScalingStrategy, Newer] | None = None
    """A strategy newer than the list (R-mid's ``..._MATCH_ADAMW``, say) is kept as the server's string (``Newer``)."""


class AdamOptimizerConfig(_Model):
    """An AdamW resource's optimizer config (no fields in the API)."""

    pass


class OptimizerConfig(_Model):
    """Exactly one of ``adam`` / ``muon``: the optimizer is fixed for the resource's lifetime."""

    adam: AdamOptimizerConfig | None = None
    muon: MuonOptimizerConfig | None = None


def optimizer_config(kind: str, muon_scaling: str | None = None) -> OptimizerConfig:
    """The resource's ``optimizer_config`` for ``kind`` (``"adam"``/``"muon"``); ``muon_scaling`` is a
    short name (``"original"``, ``"match_adam"``) or the enum string, Muon only."""
    if optimizer_kind(kind) == ADAM:
        if muon_scaling is not None:
            raise ValueError("muon_scaling applies to optimizer='muon' only")
        return OptimizerConfig(adam=AdamOptimizerConfig())
    if muon_scaling is None:
        return OptimizerConfig(muon=MuonOptimizerConfig())
    strategy = MUON_SCALING.get(muon_scaling, muon_scaling)
    return OptimizerConfig(muon=MuonOptimizerConfig.model_validate({"scaling_strategy": strategy}))


def optimizer_of(config: OptimizerConfig) -> OptimizerKind:
    """The kind an ``optimizer_config`` selects (``muon`` when it names Muon, else ``adam``)."""
    return MUON if config.muon is not None else ADAM

"""Typed models of Together's RL training-session API, newest revision ("R-new", SDK ``together`` 3.1.1).

This is the one schema in rlnb: the remote client serialises requests with it and ``rlnb serve``
parses them with it. Names and enum strings are the spec's, verbatim (enums are ``Literal`` aliases,
as in the Stainless-generated SDK). Responses are parsed leniently (``extra="allow"``) so a new
server field never breaks an old client; requests are checked (types, ranges, required fields).

int64 fields are ``Int64``: they accept ``123`` or ``"123"`` and serialise to JSON as strings, the
protobuf-JSON convention the service uses (``"step": "42"``).

No torch, no httpx, no I/O here, so importing this module is cheap everywhere.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Annotated, Any, Generic, Literal, TypeAlias, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, Strict, model_validator

# ---------------------------------------------------------------------------------------------
# Scalars


def _int64(value: Any) -> Any:
    """Accept a protobuf-JSON string (``"42"``) as well as an int; reject bools and fractions."""
    if isinstance(value, bool):
        raise ValueError("expected an integer, got a bool")
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            raise ValueError(f"expected an int64 (integer or decimal string), got {value!r}") from None
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"expected an integer, got {value!r}")
        return int(value)
    return value


Int64 = Annotated[
    int,
    BeforeValidator(_int64),
    Field(ge=-(2**63), le=2**63 - 1),
    PlainSerializer(str, return_type=str, when_used="json"),
]
"""int64 on the wire: ``"123"`` or ``123`` in, ``"123"`` out (JSON)."""

FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
StrictInt = Annotated[int, Strict()]


def _finite_list(values: list[float]) -> list[float]:
    if any(isinstance(v, float) and not math.isfinite(v) for v in values):
        raise ValueError("tensor data must be finite (no NaN or Inf)")
    return values


class _Model(BaseModel):
    """Lenient base for responses and shared objects: unknown fields are kept, never fatal."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    def to_json_dict(self) -> dict[str, Any]:
        """The JSON body as sent on the wire: unset fields omitted, int64 as strings."""
        return self.model_dump(mode="json", exclude_unset=True, by_alias=True)


# ---------------------------------------------------------------------------------------------
# Enums (exact strings)

OperationStatus: TypeAlias = Literal[
    "TRAINING_OPERATION_STATUS_UNSPECIFIED",
    "TRAINING_OPERATION_STATUS_PENDING",
    "TRAINING_OPERATION_STATUS_RUNNING",
    "TRAINING_OPERATION_STATUS_COMPLETED",
    "TRAINING_OPERATION_STATUS_FAILED",
]
OperationErrorCode: TypeAlias = Literal[
    "TRAINING_OPERATION_ERROR_CODE_UNSPECIFIED",
    "TRAINING_OPERATION_ERROR_CODE_RESOURCE_EXHAUSTED",
    "TRAINING_OPERATION_ERROR_CODE_TIMEOUT",
    "TRAINING_OPERATION_ERROR_CODE_INTERNAL_ERROR",
    "TRAINING_OPERATION_ERROR_CODE_SESSION_NOT_ACTIVE",
    "TRAINING_OPERATION_ERROR_CODE_INVALID_INPUT",
    "TRAINING_OPERATION_ERROR_CODE_NON_FINITE_LOSS",
]
SessionStatus: TypeAlias = Literal[
    "TRAINING_SESSION_STATUS_UNSPECIFIED",
    "TRAINING_SESSION_STATUS_CREATING",
    "TRAINING_SESSION_STATUS_RUNNING",
    "TRAINING_SESSION_STATUS_STOPPED",
    "TRAINING_SESSION_STATUS_STOPPING",
    "TRAINING_SESSION_STATUS_ERROR",
    "TRAINING_SESSION_STATUS_EXPIRED",
]
SessionErrorCode: TypeAlias = Literal[
    "TRAINING_SESSION_ERROR_CODE_RESOURCE_UNAVAILABLE",
    "TRAINING_SESSION_ERROR_CODE_RESOURCE_AT_CAPACITY",
    "TRAINING_SESSION_ERROR_CODE_TIMED_OUT",
    "TRAINING_SESSION_ERROR_CODE_SESSION_FAILED",
]
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
GrpoLossAggregationType: TypeAlias = Literal[
    "GRPO_LOSS_AGGREGATION_TYPE_UNSPECIFIED",
    "GRPO_LOSS_AGGREGATION_TYPE_FIXED_HORIZON",
    "GRPO_LOSS_AGGREGATION_TYPE_TOKEN_MEAN",
    "GRPO_LOSS_AGGREGATION_TYPE_SEQUENCE_MEAN",
]
GrpoLossRatioType: TypeAlias = Literal["GRPO_LOSS_RATIO_TYPE_TOKEN", "GRPO_LOSS_RATIO_TYPE_SEQUENCE"]
DType: TypeAlias = Literal["D_TYPE_UNSPECIFIED", "D_TYPE_INT64", "D_TYPE_FLOAT32", "D_TYPE_BFLOAT16"]
TensorDType: TypeAlias = Literal["int64", "float32"]
WeightSyncType: TypeAlias = Literal[
    "WEIGHT_SYNC_TYPE_SYNCHRONOUS", "WEIGHT_SYNC_TYPE_BACKGROUND_PUBLISH", "WEIGHT_SYNC_TYPE_PIPELINE"
]
StopReason: TypeAlias = Literal["STOP_REASON_LENGTH", "STOP_REASON_STOP"]
CheckpointVariant: TypeAlias = Literal[
    "CHECKPOINT_VARIANT_UNSPECIFIED", "CHECKPOINT_VARIANT_MERGED", "CHECKPOINT_VARIANT_ADAPTER"
]
CheckpointType: TypeAlias = Literal["CHECKPOINT_TYPE_TRAINING", "CHECKPOINT_TYPE_INFERENCE"]
ModelResourcesStatus: TypeAlias = Literal[
    "MODEL_RESOURCES_STATUS_PENDING",
    "MODEL_RESOURCES_STATUS_CREATING",
    "MODEL_RESOURCES_STATUS_READY",
    "MODEL_RESOURCES_STATUS_ERROR",
    "MODEL_RESOURCES_STATUS_STOPPED",
    "MODEL_RESOURCES_STATUS_STOPPING",
]
ModelResourcesErrorCode: TypeAlias = Literal[
    "MODEL_RESOURCES_ERROR_CODE_CAPACITY_WAIT_TIMEOUT",
    "MODEL_RESOURCES_ERROR_CODE_PROVISIONING_FAILED",
    "MODEL_RESOURCES_ERROR_CODE_RESOURCE_UNAVAILABLE",
]
MuonScalingStrategy: TypeAlias = Literal[
    "MUON_SCALING_STRATEGY_UNSPECIFIED", "MUON_SCALING_STRATEGY_MATCH_ADAM", "MUON_SCALING_STRATEGY_ORIGINAL"
]
GpuType: TypeAlias = Literal["H100-80GB", "B200-SXM"]

TERMINAL_STATUSES: frozenset[str] = frozenset(
    {"TRAINING_OPERATION_STATUS_COMPLETED", "TRAINING_OPERATION_STATUS_FAILED"}
)

# Operation kinds, as spelled in the paths ``.../operations/<kind>``.
OperationKind: TypeAlias = Literal[
    "forward-backward",
    "custom-forward-backward",
    "optim-step",
    "weights-sync",
    "sample",
    "inference-checkpoint",
    "training-checkpoint",
]

# ---------------------------------------------------------------------------------------------
# Operation envelope

Output = TypeVar("Output")


class OperationError(_Model):
    code: OperationErrorCode | None = None
    """Why the operation failed; ``None`` when the server gave no code."""
    message: str | None = None


class Operation(_Model, Generic[Output]):
    """The envelope every operation POST returns and every GET polls."""

    id: str
    status: OperationStatus
    output: Output | None = None
    """The kind's result; present once COMPLETED (an optim-step may legitimately complete without it)."""
    error: OperationError | None = None
    """Present once FAILED."""


# ---------------------------------------------------------------------------------------------
# Forward-backward


class TensorData(_Model):
    """A flat 1-D tensor. ``shape``, if given, must equal ``[len(data)]``; sparse fields are rejected."""

    data: list[float]
    dtype: TensorDType
    shape: list[int] | None = None
    sparse_crow_indices: list[int] | None = None
    sparse_col_indices: list[int] | None = None

    @model_validator(mode="after")
    def _check(self) -> TensorData:
        _finite_list(self.data)
        if self.shape is not None and self.shape != [len(self.data)]:
            raise ValueError(f"shape {self.shape} must be 1-D and equal to the data length {len(self.data)}")
        if self.sparse_crow_indices is not None or self.sparse_col_indices is not None:
            raise ValueError("sparse tensors are reserved and rejected")
        return self


class EncodedText(_Model):
    tokens: list[Int64]


class ModelInputChunk(_Model):
    encoded_text: EncodedText


class ModelInput(_Model):
    chunks: list[ModelInputChunk]

    @classmethod
    def from_tokens(cls, tokens: list[int]) -> ModelInput:
        return cls(chunks=[ModelInputChunk(encoded_text=EncodedText(tokens=list(tokens)))])

    @property
    def tokens(self) -> list[int]:
        """All chunks' tokens, concatenated."""
        return [t for c in self.chunks for t in c.encoded_text.tokens]


class Sample(_Model):
    """One sequence. Position convention: ``model_input = (prompt + response)[:-1]`` and slot ``i`` of
    every loss tensor describes the token predicted at position ``i``."""

    model_input: ModelInput
    loss_fn_inputs: dict[str, TensorData]
    routed_experts_key: str | None = None


class CrossEntropyLossParams(_Model):
    pass


class GrpoLossParams(_Model):
    clip_low_threshold: FiniteFloat | None = None
    """Lower bound on the importance ratio (absolute, <= 1)."""
    clip_high_threshold: FiniteFloat | None = None
    """Upper bound on the importance ratio (absolute, >= 1)."""
    beta: FiniteFloat | None = None
    """KL penalty against ``reference_logprobs`` (required when > 0)."""
    agg_type: GrpoLossAggregationType | None = None
    ratio_type: GrpoLossRatioType | None = None


class PpoLossParams(_Model):
    clip_low_threshold: FiniteFloat | None = None
    clip_high_threshold: FiniteFloat | None = None


class CispoLossParams(_Model):
    clip_low_threshold: FiniteFloat | None = None
    clip_high_threshold: FiniteFloat | None = None


class DppoLossParams(_Model):
    delta_low: FiniteFloat | None = None
    """Probability-space limit in [0, 1]."""
    delta_high: FiniteFloat | None = None


class DroLossParams(_Model):
    beta: FiniteFloat
    """Quadratic log-ratio penalty; required."""


class LossConfig(_Model):
    """``type`` plus at most the params object that belongs to it."""

    type: LossType
    cross_entropy_params: CrossEntropyLossParams | None = None
    grpo_params: GrpoLossParams | None = None
    ppo_params: PpoLossParams | None = None
    cispo_params: CispoLossParams | None = None
    dppo_params: DppoLossParams | None = None
    dro_params: DroLossParams | None = None


LOSS_PARAMS_FIELD: dict[str, str | None] = {
    "LOSS_TYPE_CROSS_ENTROPY": "cross_entropy_params",
    "LOSS_TYPE_GRPO": "grpo_params",
    "LOSS_TYPE_IMPORTANCE_SAMPLING": None,
    "LOSS_TYPE_PPO": "ppo_params",
    "LOSS_TYPE_CISPO": "cispo_params",
    "LOSS_TYPE_DPPO": "dppo_params",
    "LOSS_TYPE_DRO": "dro_params",
}
"""Which params object each loss type reads (None: the loss takes no params)."""


class ForwardBackwardBody(_Model):
    samples: list[Sample]
    loss: LossConfig
    forward_only: bool | None = None
    """Compute loss and metrics without accumulating gradients (default false)."""
    return_loss_fn_outputs: bool | None = None
    """Return per-sample output tensors (``logprobs``); large and slower (default false)."""


class LossFnOutput(_Model):
    tensors: dict[str, TensorData]


class ForwardBackwardResult(_Model):
    loss: float
    """The loss; for cross-entropy a sum over trained tokens, not a mean."""
    metrics: dict[str, float] | None = None
    loss_fn_outputs: list[LossFnOutput] | None = None
    """One per sample, in request order; only when ``return_loss_fn_outputs``."""


class GradientTensor(_Model):
    data: list[float]
    dtype: DType


class CustomForwardBackwardBody(_Model):
    samples: list[Sample]
    gradients: list[GradientTensor]
    """One per sample: d loss / d logprob for each target token."""


class CustomForwardBackwardResult(_Model):
    pass


# ---------------------------------------------------------------------------------------------
# Optim-step. The bounds here are the ones the server enforces; ``rlnb.params`` adds
# ``extra="forbid"`` and the helpers people use in notebooks.

LearningRate = Annotated[float, Field(gt=0, allow_inf_nan=False)]
UnitInterval = Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)]
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]
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


class OptimStepBody(_Model):
    adam_params: AdamParams | None = None
    muon_params: MuonParams | None = None


class OptimStepResult(_Model):
    step: Int64
    """The session's optimizer-step count after this update (1 after the first step)."""
    metrics: dict[str, float] | None = None
    """rlnb extension, not in Together's API: pre-clip grad norms and the learning rates used.
    Together never sends it; clients must not require it."""


# ---------------------------------------------------------------------------------------------
# Weights-sync


class WeightsSyncBody(_Model):
    weight_sync_type: WeightSyncType


class WeightsSyncResult(_Model):
    weights_version: Int64
    """Policy version now live (0 = initial model, +1 per optim-step)."""


# ---------------------------------------------------------------------------------------------
# Sample


class SamplingParams(_Model):
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None
    top_p: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] | None = None
    top_k: Annotated[int, Field(ge=-1)] | None = None
    """-1 = off."""
    stop: list[str] | None = None
    seed: Int64 | None = None
    """Same seed + same prompt + same weights -> same tokens."""


class SampleBody(_Model):
    model_inputs: list[ModelInput]
    num_samples: Annotated[int, Field(ge=1)] | None = None
    sampling_params: SamplingParams | None = None
    prompt_logprobs: bool | None = None
    topk_prompt_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
    """0 disables; at most 20."""
    return_routed_experts: bool | None = None


class PolicyVersionSegment(_Model):
    start_token: int
    version: int


class SampledSequence(_Model):
    tokens: list[Int64]
    stop_reason: StopReason
    prompt_cache_hit_tokens: int = 0
    logprobs: list[float] | None = None
    routed_experts_key: str | None = None
    text: str | None = Field(default=None, exclude=True)
    """rlnb, client side: ``tokens`` decoded with the session's tokenizer. Never sent on the wire."""


class PromptTopLogprobs(_Model):
    token_ids: list[int] = Field(default_factory=list)
    logprobs: list[float] = Field(default_factory=list)


class SampleResult(_Model):
    policy_segments: list[PolicyVersionSegment]
    sequences: list[SampledSequence]
    prompt_logprobs: list[float] | None = None
    topk_prompt_logprobs: list[PromptTopLogprobs] | None = None


class SampleOutput(_Model):
    results: list[SampleResult]


# ---------------------------------------------------------------------------------------------
# Checkpoints


class ModelRegistryArtifact(_Model):
    id: str
    revision_id: str


class InferenceRegistration(_Model):
    adapter: ModelRegistryArtifact | None = None
    model: ModelRegistryArtifact | None = None


class InferenceCheckpoint(_Model):
    id: str
    step: Int64
    created_at: datetime
    registration: InferenceRegistration | None = None


class TrainingCheckpoint(_Model):
    id: str
    step: Int64
    created_at: datetime
    registration: ModelRegistryArtifact | None = None


class InferenceCheckpointResult(_Model):
    checkpoint: InferenceCheckpoint


class TrainingCheckpointResult(_Model):
    checkpoint: TrainingCheckpoint


class Checkpoint(_Model):
    id: str
    base_model: str
    created_at: datetime
    session_id: str
    step: Int64
    type: CheckpointType
    inference_registration: InferenceRegistration | None = None
    lora_rank: int | None = None
    training_registration: ModelRegistryArtifact | None = None


class ListMeta(_Model):
    limit: int | None = None
    has_more: bool = False
    next_cursor: str = ""


class CheckpointList(_Model):
    data: list[Checkpoint]
    meta: ListMeta


class CheckpointFile(_Model):
    filename: str
    url: str
    size: Int64


class CheckpointDownload(_Model):
    data: list[CheckpointFile]


# ---------------------------------------------------------------------------------------------
# Sessions


class LoraConfig(_Model):
    rank: Annotated[int, Field(ge=1, le=2**31 - 1)] | None = None
    """int32 on the wire (a JSON number, unlike the int64 ``seed``)."""
    alpha: Annotated[int, Field(ge=1, le=2**31 - 1)] | None = None
    """int32 on the wire."""
    dropout: Annotated[float, Field(ge=0, lt=1)] | None = None
    seed: Int64 | None = None
    train_unembed: bool | None = None
    """Also put an adapter on the output head (documented default true)."""


class WandbMetadata(_Model):
    entity: str | None = None
    group: str | None = None
    project: str | None = None
    run_id: str | None = None
    run_name: str | None = None
    url: str | None = None


class SessionMetadata(_Model):
    wandb: WandbMetadata | None = None


class PolicyState(_Model):
    applied_weights_version: Int64 = 0
    """Version actually live on the generator."""
    pending_publish: bool = False
    target_weights_version: Int64 = 0
    """Version promised by the latest weights-sync."""
    trainer_step: Int64 = 0
    """Policy version produced by the last completed optim-step."""


class SessionError(_Model):
    code: SessionErrorCode
    message: str
    occurred_at: datetime


class Session(_Model):
    id: str
    status: SessionStatus
    base_model: str
    model_resources_id: str
    created_by: str
    created_at: datetime
    updated_at: datetime
    step: Int64 = 0
    """Durable optimizer-step counter."""
    inference_checkpoints: list[InferenceCheckpoint] = Field(default_factory=list)
    training_checkpoints: list[TrainingCheckpoint] = Field(default_factory=list)
    metadata: SessionMetadata = Field(default_factory=SessionMetadata)
    policy_state: PolicyState = Field(default_factory=PolicyState)
    display_name: str | None = None
    error: SessionError | None = None
    lora_config: LoraConfig | None = None
    resume_from_checkpoint_id: str | None = None


class StartTrainingSessionRequest(_Model):
    model_resources_id: str
    display_name: str | None = None
    load_optimizer: bool | None = None
    lora_config: LoraConfig | None = None
    metadata: SessionMetadata | None = None
    resume_from_checkpoint_id: str | None = None


class UpdateSessionRequest(_Model):
    display_name: str | None = None
    metadata: SessionMetadata | None = None


class SessionList(_Model):
    data: list[Session] = Field(default_factory=list)
    meta: ListMeta = Field(default_factory=ListMeta)


# ---------------------------------------------------------------------------------------------
# Model resources


class ComputeConfigRequest(_Model):
    gpu_type: Literal["B200-SXM"] | None = None
    num_generator_replicas: Annotated[int, Field(ge=0)] | None = None
    """0 = trainer only: sampling is rejected."""


class ComputeConfig(_Model):
    num_generator_replicas: int
    gpu_type: GpuType | None = None


class MuonOptimizerConfig(_Model):
    scaling_strategy: MuonScalingStrategy | None = None


class AdamOptimizerConfig(_Model):
    pass


class OptimizerConfig(_Model):
    """Exactly one of ``adam`` / ``muon``: the optimizer is fixed for the resource's lifetime."""

    adam: AdamOptimizerConfig | None = None
    muon: MuonOptimizerConfig | None = None


class CreateModelResourcesRequest(_Model):
    base_model: str
    base_weights_ref: str | None = None
    compute_config: ComputeConfigRequest | None = None
    inactive_timeout: Annotated[int, Field(ge=300, le=86400)] | None = None
    lora_enabled: bool | None = None
    optimizer_config: OptimizerConfig | None = None


class ModelResourcesStatusDetails(_Model):
    queue_position: int | None = None


class ModelResourcesError(_Model):
    code: ModelResourcesErrorCode
    message: str
    occurred_at: datetime


class ModelResources(_Model):
    id: str
    base_model: str
    compute_config: ComputeConfig
    created_at: datetime
    created_by: str
    inactive_timeout: int
    lora_enabled: bool
    optimizer_config: OptimizerConfig
    status: ModelResourcesStatus
    status_details: ModelResourcesStatusDetails = Field(default_factory=ModelResourcesStatusDetails)
    updated_at: datetime
    base_weights_ref: str | None = None
    error: ModelResourcesError | None = None
    expires_at: datetime | None = None


class ModelResourcesList(_Model):
    data: list[ModelResources] = Field(default_factory=list)
    meta: ListMeta = Field(default_factory=ListMeta)


class ExtendExpiryRequest(_Model):
    seconds: Annotated[int, Field(ge=60, le=86400)]
    """Seconds from now the resource must stay up, 60..86400 (as the SDK documents)."""


class CostEstimate(_Model):
    currency: str
    price_per_hour: float


class SamplingDefaults(_Model):
    logprobs: int | None = None
    """Number of logprobs returned per sampled token (an integer in the spec, not a flag)."""
    max_tokens: int | None = None
    n: int | None = None
    temperature: float | None = None


class GeneratorConfig(_Model):
    context_length: int | None = None
    sampling_defaults: SamplingDefaults | None = None


class FullTrainerConfig(_Model):
    max_batch_size: int | None = None
    max_seq_length: int | None = None


class LoraTrainerConfig(_Model):
    max_batch_size: int | None = None
    max_rank: int | None = None
    max_seq_length: int | None = None


class TrainerConfig(_Model):
    full: FullTrainerConfig | None = None
    lora: LoraTrainerConfig | None = None


class SupportedComputeConfig(_Model):
    gpu_type: str
    generator_config: GeneratorConfig | None = None
    trainer_config: TrainerConfig | None = None


class SupportedModel(_Model):
    base_model: str
    default_gpu_type: str | None = None
    compute_configs: list[SupportedComputeConfig] = Field(default_factory=list)


class SupportedModels(_Model):
    data: list[SupportedModel]


# ---------------------------------------------------------------------------------------------
# Errors


class ErrorDetail(_Model):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorData(_Model):
    """The API's error body: ``{"error": {"message", "type", "param", "code"}}``."""

    error: ErrorDetail


# ---------------------------------------------------------------------------------------------
# Per-kind request and result types, in one table (client and server both read it).

REQUEST_TYPES: dict[str, type[_Model] | None] = {
    "forward-backward": ForwardBackwardBody,
    "custom-forward-backward": CustomForwardBackwardBody,
    "optim-step": OptimStepBody,
    "weights-sync": WeightsSyncBody,
    "sample": SampleBody,
    "inference-checkpoint": None,
    "training-checkpoint": None,
}
RESULT_TYPES: dict[str, type[_Model]] = {
    "forward-backward": ForwardBackwardResult,
    "custom-forward-backward": CustomForwardBackwardResult,
    "optim-step": OptimStepResult,
    "weights-sync": WeightsSyncResult,
    "sample": SampleOutput,
    "inference-checkpoint": InferenceCheckpointResult,
    "training-checkpoint": TrainingCheckpointResult,
}

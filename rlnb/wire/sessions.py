"""Training sessions and model resources: their objects, create / update requests, lists, supported models."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import Field, ValidationError, field_validator, model_validator

from rlnb.wire.base import INT32_MAX, Int64, StrictBool, StrictFloat, StrictInt, _Model, _Request, lone_surrogate
from rlnb.wire.checkpoints import InferenceCheckpoint, ListMeta, TrainingCheckpoint
from rlnb.wire.optim import OptimizerConfig
from rlnb.wire.status import (
    ModelResourcesErrorCode,
    ModelResourcesStatus,
    SessionErrorCode,
    SessionStatus,
    unknown_code,
)

__all__ = [
    "ComputeConfig",
    "ComputeConfigRequest",
    "CostEstimate",
    "CreateModelResourcesRequest",
    "ExtendExpiryRequest",
    "FullTrainerConfig",
    "GeneratorConfig",
    "GpuType",
    "LoraConfig",
    "LoraTrainerConfig",
    "ModelResources",
    "ModelResourcesError",
    "ModelResourcesList",
    "ModelResourcesStatusDetails",
    "PolicyState",
    "RequestGpuType",
    "SamplingDefaults",
    "Session",
    "SessionError",
    "SessionList",
    "SessionMetadata",
    "StartTrainingSessionRequest",
    "SupportedComputeConfig",
    "SupportedModel",
    "SupportedModels",
    "TrainerConfig",
    "UpdateSessionRequest",
    "WandbMetadata",
    "lora_config",
]

GpuType: TypeAlias = Literal["H100-80GB", "B200-SXM"]
"""What a resource runs on (responses)."""
RequestGpuType: TypeAlias = Literal["B200-SXM"]
"""The one GPU type a create request and supported-models name in SDK 3.1.1."""

# ---------------------------------------------------------------------------------------------
# Sessions


class LoraConfig(_Model):
    """LoRA adapters for a training session; unset fields take the service's defaults."""
    rank: Annotated[StrictInt, Field(ge=1, le=INT32_MAX)] | None = None
    """int32 on the wire (a JSON number, unlike the int64 ``seed``)."""
    alpha: Annotated[StrictInt, Field(ge=1, le=INT32_MAX)] | None = None
    """int32 on the wire."""
    dropout: Annotated[StrictFloat, Field(ge=0, lt=1)] | None = None
    seed: Int64 | None = None
    """Seeds the adapter initialisation only: sessions of one resource share the base weights."""
    train_unembed: StrictBool | None = None
    """Also put an adapter on the output head (documented default true)."""


def lora_config(lora: object) -> LoraConfig | bool:
    """``lora=`` as ``rlnb.connect`` takes it, checked before anything is sent: False for full weights
    (None / False), True for LoRA with the defaults, or the ``LoraConfig`` of a dict / ``LoraConfig``."""
    if lora is None or isinstance(lora, bool):
        return bool(lora)
    if isinstance(lora, LoraConfig):
        return lora
    fields = ", ".join(LoraConfig.model_fields)
    if not isinstance(lora, Mapping):
        raise ValueError(f"lora must be True, False, None or a dict with keys {fields}; got {lora!r}")
    unknown = sorted(str(k) for k in set(lora) - set(LoraConfig.model_fields))
    if unknown:
        raise ValueError(f"lora has unknown keys {unknown}; allowed: {fields}")
    try:
        return LoraConfig.model_validate(dict(lora))
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}, got {e['input']!r}" for e in exc.errors())
        raise ValueError(f"lora {problems}") from None


class WandbMetadata(_Model):
    """The W&B run a session reports to, as the service records it."""
    entity: str | None = None
    group: str | None = None
    project: str | None = None
    run_id: str | None = None
    run_name: str | None = None
    url: str | None = None

    @field_validator("*")
    @classmethod
    def _empty_is_unset(cls, value: str | None) -> str | None:
        """An empty string is no value (proto3 has no other): in a create or a PATCH it clears the field."""
        return value or None


class SessionMetadata(_Model):
    """Free-form metadata of a session (today: its W&B run)."""
    wandb: WandbMetadata | None = None


class PolicyState(_Model):
    """Which weights version the trainer made, weights-sync promised, and the sampler serves."""
    applied_weights_version: Int64 = 0
    """Version actually live on the generator."""
    pending_publish: bool = False
    target_weights_version: Int64 = 0
    """Version promised by the latest weights-sync."""
    trainer_step: Int64 = 0
    """Policy version produced by the last completed optim-step."""


class SessionError(_Model):
    """Why a session is in ERROR: a ``SessionErrorCode``, a message, and when."""
    code: SessionErrorCode
    message: str
    occurred_at: datetime

    @model_validator(mode="before")
    @classmethod
    def _unknown_code(cls, data: Any) -> Any:
        """A code newer than the catalogue is ``SESSION_FAILED``; the message keeps it (``unknown_code``)."""
        return unknown_code(data, SessionErrorCode, SessionErrorCode.SESSION_FAILED)


class Session(_Model):
    """A training session as the API returns it: status, step, policy state, checkpoints."""
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


def _unicode(value: Any, info: Any) -> Any:
    """A session keeps its label and metadata and shows them in every answer about it: text only."""
    found = lone_surrogate(value.model_dump() if isinstance(value, _Model) else value, info.field_name)
    if found is not None:
        raise ValueError(found)
    return value


class StartTrainingSessionRequest(_Request):
    """Start a session on a READY model resource, optionally resuming from a training checkpoint."""
    model_resources_id: str
    display_name: str | None = None
    load_optimizer: StrictBool | None = None
    lora_config: LoraConfig | None = None
    metadata: SessionMetadata | None = None
    resume_from_checkpoint_id: str | None = None

    _text = field_validator("display_name", "metadata")(_unicode)


class UpdateSessionRequest(_Request):
    """Change a session's display name or metadata (PATCH)."""
    display_name: str | None = None
    """Omitted: unchanged; empty string: cleared."""
    metadata: SessionMetadata | None = None

    _text = field_validator("display_name", "metadata")(_unicode)


class SessionList(_Model):
    """One page of training sessions."""
    data: list[Session] = Field(default_factory=list)
    meta: ListMeta = Field(default_factory=ListMeta)


# ---------------------------------------------------------------------------------------------
# Model resources


class ComputeConfigRequest(_Model):
    """The compute a model resource asks for: GPU type and sampler replicas."""
    gpu_type: RequestGpuType | None = None
    num_generator_replicas: Annotated[StrictInt, Field(ge=0, le=INT32_MAX)] | None = None
    """0 = trainer only: sampling is rejected."""


class ComputeConfig(_Model):
    """The compute a model resource got."""
    num_generator_replicas: int
    gpu_type: GpuType | None = None


class CreateModelResourcesRequest(_Request):
    """Create a model resource: base model, optimizer (fixed for its life), LoRA or full weights, compute."""
    base_model: str
    base_weights_ref: str | None = None
    compute_config: ComputeConfigRequest | None = None
    inactive_timeout: Annotated[StrictInt, Field(ge=300, le=86400)] | None = None
    """Seconds without activity after which the resource stops and its sessions expire (default 3600)."""
    lora_enabled: StrictBool | None = None
    optimizer_config: OptimizerConfig | None = None


class ModelResourcesStatusDetails(_Model):
    """Extra status of a model resource: its place in the capacity queue."""
    queue_position: int | None = None


class ModelResourcesError(_Model):
    """Why a model resource is in ERROR: a ``ModelResourcesErrorCode``, a message, and when."""
    code: ModelResourcesErrorCode
    message: str
    occurred_at: datetime

    @model_validator(mode="before")
    @classmethod
    def _unknown_code(cls, data: Any) -> Any:
        """A code newer than the catalogue is ``PROVISIONING_FAILED``; the message keeps it (``unknown_code``)."""
        return unknown_code(data, ModelResourcesErrorCode, ModelResourcesErrorCode.PROVISIONING_FAILED)


class ModelResources(_Model):
    """A model resource as the API returns it: the compute and optimizer that sessions run on."""
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
    """Last activity + ``inactive_timeout``, or later after ``extend-expiry``; never moves earlier.
    Null unless READY."""


class ModelResourcesList(_Model):
    """One page of model resources."""
    data: list[ModelResources] = Field(default_factory=list)
    meta: ListMeta = Field(default_factory=ListMeta)


class ExtendExpiryRequest(_Request):
    """Keep a resource from stopping for inactivity for ``seconds`` from now."""
    seconds: Annotated[StrictInt, Field(ge=60, le=86400)]
    """Seconds *from now* the resource must not stop for inactivity, 60..86400."""


class CostEstimate(_Model):
    """A resource's estimated price per hour."""
    currency: str
    price_per_hour: float


class SamplingDefaults(_Model):
    """The sampling settings a generator uses when a request leaves them unset."""
    logprobs: int
    """Number of logprobs returned per sampled token (an integer in the spec, not a flag)."""
    max_tokens: int
    n: int
    temperature: float


class GeneratorConfig(_Model):
    """What a supported model's sampler offers: context length and sampling defaults."""
    context_length: int
    sampling_defaults: SamplingDefaults


class FullTrainerConfig(_Model):
    """Limits of full-weight training of a supported model."""
    max_batch_size: int
    max_seq_length: int


class LoraTrainerConfig(_Model):
    """Limits of LoRA training of a supported model, including the largest rank."""
    max_batch_size: int
    max_rank: int
    max_seq_length: int


class TrainerConfig(_Model):
    """A supported model's trainer limits, for full weights and for LoRA."""
    full: FullTrainerConfig | None = None
    lora: LoraTrainerConfig | None = None


class SupportedComputeConfig(_Model):
    """One compute option of a supported model, with its sampler and trainer limits."""
    gpu_type: RequestGpuType
    generator_config: GeneratorConfig | None = None
    trainer_config: TrainerConfig | None = None


class SupportedModel(_Model):
    """A base model the service can train, with its compute options."""
    base_model: str
    default_gpu_type: RequestGpuType
    compute_configs: list[SupportedComputeConfig] = Field(default_factory=list)


class SupportedModels(_Model):
    """The supported-models listing."""
    data: list[SupportedModel]

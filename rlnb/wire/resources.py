"""Model resources: the compute and optimizer that sessions run on, their create request, lists, expiry, cost,
and the supported-models listing (what a resource can be made of)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import (
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import PydanticCustomError

from rlnb.wire.base import INT32_MAX, Newer, StrictBool, StrictInt, _from_server, _Model, _Request
from rlnb.wire.checkpoints import ListMeta
from rlnb.wire.optim import OptimizerConfig
from rlnb.wire.status import ModelResourcesErrorCode, ModelResourcesStatus, _CodedError

__all__ = [
    "ComputeConfig",
    "ComputeConfigRequest",
    "CostEstimate",
    "CreateModelResourcesRequest",
    "ExtendExpiryRequest",
    "FullTrainerConfig",
    "GeneratorConfig",
    "GpuType",
    "LoraTrainerConfig",
    "ModelResources",
    "ModelResourcesError",
    "ModelResourcesList",
    "ModelResourcesStatusDetails",
    "RequestGpuType",
    "SamplingDefaults",
    "SupportedComputeConfig",
    "SupportedModel",
    "SupportedModels",
    "TrainerConfig",
]

GpuType: TypeAlias = Literal["H100-80GB", "B200-SXM"]
"""What a resource runs on (responses)."""
RequestGpuType: TypeAlias = Literal["B200-SXM"]
"""The one GPU type a create request and supported-models name in SDK 3.1.1."""


class ComputeConfigRequest(_Model):
    """The compute a model resource asks for: GPU type and sampler replicas."""

    gpu_type: RequestGpuType | None = None
    num_generator_replicas: Annotated[StrictInt, Field(ge=0, le=INT32_MAX)] | None = None
    """0 = trainer only: sampling is rejected."""


class ComputeConfig(_Model):
    """The compute a model resource got."""

    num_generator_replicas: int
    gpu_type: Annotated[GpuType, Newer] | None = None


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


class ModelResourcesError(_CodedError):
    """Why a model resource is in ERROR: a ``ModelResourcesErrorCode``, a message, and when."""

    FALLBACK = ModelResourcesErrorCode.PROVISIONING_FAILED

    code: ModelResourcesErrorCode
    message: str
    occurred_at: datetime


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
    status: Annotated[ModelResourcesStatus, Newer]
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
    """Seconds *from now* the resource must not stop for inactivity: 60..86400 is ``rlnb serve``'s range (the
    reference gives none; ``APIClient.extend_expiry`` sends any positive integer for a service to judge)."""


class CostEstimate(_Model):
    """A resource's estimated price per hour."""

    currency: str
    price_per_hour: float


def _unread_from_server(value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
    """``value`` validated (None is not); from a server (``FROM_SERVER``) only, None where it is not valid."""
    try:
        if value is None:
            raise PydanticCustomError("missing", "sampling_defaults is required")
        return handler(value)
    except (ValidationError, PydanticCustomError):
        if _from_server(info):
            return None
        raise


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
    sampling_defaults: Annotated[SamplingDefaults | SkipJsonSchema[None], WrapValidator(_unread_from_server)]
    """Required (R-new), and rlnb's server always sends it; from another server, missing or unreadable defaults
    are None, so that the listing, and its ``context_length``, still reads (it made every limit unknown)."""

    @model_validator(mode="before")
    @classmethod
    def _missing_from_server(cls, data: Any, info: ValidationInfo) -> Any:
        """From a server, no ``sampling_defaults`` reads as unreadable ones (``_unread_from_server``)."""
        if _from_server(info) and isinstance(data, dict) and "sampling_defaults" not in data:
            return {**data, "sampling_defaults": None}
        return data


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

    gpu_type: Annotated[RequestGpuType, Newer]
    generator_config: GeneratorConfig | None = None
    trainer_config: TrainerConfig | None = None


class SupportedModel(_Model):
    """A base model the service can train, with its compute options."""

    base_model: str
    default_gpu_type: Annotated[RequestGpuType, Newer]
    compute_configs: list[SupportedComputeConfig] = Field(default_factory=list)


class SupportedModels(_Model):
    """The supported-models listing."""

    data: list[SupportedModel]

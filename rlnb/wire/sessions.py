"""Training sessions: their objects, LoRA config, create / update requests and lists (resources: ``resources``)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any

from pydantic import Field, Strict, ValidationError, field_validator

from rlnb._input.scalars import scalar
from rlnb.wire.base import (
    INT32_MAX,
    NUMBER_ONLY,
    Int64,
    Newer,
    StrictBool,
    StrictInt,
    _Model,
    _Request,
    lone_surrogate,
)
from rlnb.wire.checkpoints import InferenceCheckpoint, ListMeta, TrainingCheckpoint
from rlnb.wire.status import SessionErrorCode, SessionStatus, _CodedError

__all__ = [
    "LoraConfig",
    "PolicyState",
    "Session",
    "SessionError",
    "SessionList",
    "SessionMetadata",
    "StartTrainingSessionRequest",
    "UpdateSessionRequest",
    "WandbMetadata",
    "lora_config",
]


class LoraConfig(_Model):
    """LoRA adapters for a training session; unset fields take the service's defaults."""

    rank: Annotated[StrictInt, Field(ge=1, le=INT32_MAX)] | None = None
    """int32 on the wire (a JSON number, unlike the int64 ``seed``)."""
    alpha: Annotated[StrictInt, Field(ge=1, le=INT32_MAX)] | None = None
    """int32 on the wire."""
    dropout: Annotated[float, Strict(), Field(ge=0, lt=1), NUMBER_ONLY] | None = None
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
        return LoraConfig.model_validate({k: scalar(v) for k, v in lora.items()})  # np.float32 / 0-d tensor: numbers
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


class SessionMetadata(_Model):
    """Free-form metadata of a session (today: its W&B run). A request keeps an empty string as given: in a PATCH
    it clears the field, as the reference says, where ``null`` has no meaning there."""

    wandb: WandbMetadata | None = None

    def patched(self, change: SessionMetadata) -> SessionMetadata:
        """This metadata after a PATCH of ``change``: the fields it names are set (an empty string, or ``null``,
        clears one), the others are unchanged, as the API says (a PATCH that replaced the whole of it would lose the
        W&B project and entity to a PATCH of the url alone)."""
        if change.wandb is None:
            return self.read()
        given = {k: getattr(change.wandb, k) for k in change.wandb.model_fields_set}
        return self.model_copy(update={"wandb": (self.wandb or WandbMetadata()).model_copy(update=given)}).read()

    def sent(self, *, empty: bool = True) -> SessionMetadata:
        """This metadata as a request sends it: a W&B field given None is not given, absent from the body (``null``
        has no meaning in a request); with ``empty`` False (a create: nothing to clear) an empty one too. Itself when
        nothing is left out."""
        wandb = self.wandb
        given = wandb.model_dump(exclude_unset=True) if wandb is not None else {}
        kept = {k: v for k, v in given.items() if v is not None and (empty or v != "")}
        if kept == given:
            return self
        return self.model_copy(update={"wandb": WandbMetadata(**kept)})

    def read(self) -> SessionMetadata:
        """This metadata as an answer shows it: an empty W&B field is no value (proto3 JSON writes an unset string as
        ``""``), read as None; itself when none is empty."""
        wandb = self.wandb
        empty = [k for k, v in (wandb or WandbMetadata()) if v == ""]
        if not empty:
            return self
        assert wandb is not None
        return self.model_copy(update={"wandb": wandb.model_copy(update=dict.fromkeys(empty))})


class PolicyState(_Model):
    """Which weights version the trainer made, weights-sync promised, and the sampler serves."""

    applied_weights_version: Int64 = 0
    """Version actually live on the generator."""
    pending_publish: bool = False
    target_weights_version: Int64 = 0
    """Version promised by the latest weights-sync."""
    trainer_step: Int64 = 0
    """Policy version produced by the last completed optim-step."""


class SessionError(_CodedError):
    """Why a session is in ERROR: a ``SessionErrorCode``, a message, and when."""

    FALLBACK = SessionErrorCode.SESSION_FAILED

    code: SessionErrorCode
    message: str
    occurred_at: datetime


class Session(_Model):
    """A training session as the API returns it: status, step, policy state, checkpoints."""

    id: str
    status: Annotated[SessionStatus, Newer]
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

    @field_validator("metadata")
    @classmethod
    def _metadata_read(cls, value: SessionMetadata) -> SessionMetadata:
        """An empty W&B field of an answer reads as None (``SessionMetadata.read``)."""
        return value.read()


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

    @field_validator("metadata")
    @classmethod
    def _metadata_created(cls, value: SessionMetadata | None) -> SessionMetadata | None:
        """An empty W&B field of a create is left unset, as a None one (``SessionMetadata.sent``)."""
        return value.sent(empty=False) if value is not None else None

    @field_validator("resume_from_checkpoint_id")
    @classmethod
    def _resume_named(cls, value: str | None) -> str | None:
        """``""`` (an unset variable) was looked up as a checkpoint: 404 "checkpoint '' not found". Read as no value,
        as elsewhere, it would start from scratch a session meant to resume: refused, naming the field."""
        if value == "":
            raise ValueError("resume_from_checkpoint_id is empty (an empty string is no value): give a training "
                             "checkpoint's id, or leave it out to start from the base model")  # fmt: skip
        return value


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

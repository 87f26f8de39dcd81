"""Checkpoints: the checkpoint operations' results, the checkpoints collection, and downloads."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Final, Literal, TypeAlias

from pydantic import Field

from rlnb.wire.base import Int64, Newer, _Model

__all__ = [
    "Checkpoint",
    "CheckpointDownload",
    "CheckpointFile",
    "CheckpointList",
    "CheckpointType",
    "CheckpointVariant",
    "CHECKPOINT_ADAPTER",
    "CHECKPOINT_INFERENCE",
    "CHECKPOINT_MERGED",
    "CHECKPOINT_TRAINING",
    "InferenceCheckpoint",
    "InferenceCheckpointResult",
    "InferenceRegistration",
    "LIST_LIMIT_MAX",
    "ListMeta",
    "ModelRegistryArtifact",
    "TrainingCheckpoint",
    "TrainingCheckpointResult",
]

CheckpointVariant: TypeAlias = Literal[
    "CHECKPOINT_VARIANT_UNSPECIFIED", "CHECKPOINT_VARIANT_MERGED", "CHECKPOINT_VARIANT_ADAPTER"
]
"""MERGED: the full model with the trained weights applied; ADAPTER: the LoRA weights only (LoRA sessions).
UNSPECIFIED means MERGED (the SDK's default)."""
CheckpointType: TypeAlias = Literal["CHECKPOINT_TYPE_TRAINING", "CHECKPOINT_TYPE_INFERENCE"]
"""Which checkpoint operation made a checkpoint: training (resumable) or inference (loadable weights)."""
CHECKPOINT_TRAINING: Final[CheckpointType] = "CHECKPOINT_TYPE_TRAINING"
"""A training checkpoint: weights and optimizer state, for a resume."""
CHECKPOINT_INFERENCE: Final[CheckpointType] = "CHECKPOINT_TYPE_INFERENCE"
"""An inference checkpoint: weights to load, merged or as a LoRA adapter."""
CHECKPOINT_MERGED: Final[CheckpointVariant] = "CHECKPOINT_VARIANT_MERGED"
"""The full model's files with the trained weights applied (also what UNSPECIFIED means)."""
CHECKPOINT_ADAPTER: Final[CheckpointVariant] = "CHECKPOINT_VARIANT_ADAPTER"
"""A LoRA session's adapter files only."""


class ModelRegistryArtifact(_Model):
    """A model-registry entry (id and revision) a checkpoint was registered as."""

    id: str
    revision_id: str


class InferenceRegistration(_Model):
    """Where an inference checkpoint was registered: its adapter and / or merged model."""

    adapter: ModelRegistryArtifact | None = None
    model: ModelRegistryArtifact | None = None


class InferenceCheckpoint(_Model):
    """An inference checkpoint as a session lists it: id, optimizer step, time, registration."""

    id: str
    step: Int64
    created_at: datetime
    registration: InferenceRegistration | None = None


class TrainingCheckpoint(_Model):
    """A training checkpoint as a session lists it; ``resume_from_checkpoint_id`` takes its id."""

    id: str
    step: Int64
    created_at: datetime
    registration: ModelRegistryArtifact | None = None


class InferenceCheckpointResult(_Model):
    """The output of an inference-checkpoint operation."""

    checkpoint: InferenceCheckpoint


class TrainingCheckpointResult(_Model):
    """The output of a training-checkpoint operation."""

    checkpoint: TrainingCheckpoint


class Checkpoint(_Model):
    """A checkpoint in the checkpoints collection; it outlives its session and resource."""

    id: str
    base_model: str
    created_at: datetime
    session_id: str
    step: Int64
    type: Annotated[CheckpointType, Newer]
    """A type newer than the list is kept as the server's string (``Newer``): the other checkpoints still list."""
    inference_registration: InferenceRegistration | None = None
    lora_rank: int | None = None
    """The session's LoRA rank; null for a full-weight session."""
    training_registration: ModelRegistryArtifact | None = None


LIST_LIMIT_MAX = 100
"""The largest ``limit`` of one page of a list (sessions, model resources, checkpoints): 1..100 in the API."""


class ListMeta(_Model):
    """Pagination of a list response: pass ``next_cursor`` as ``after`` while ``has_more``."""

    limit: int | None = None
    has_more: bool = False
    next_cursor: str = ""
    """The ``after`` of the next page; empty when ``has_more`` is false."""


class CheckpointList(_Model):
    """One page of the checkpoints collection."""

    data: list[Checkpoint]
    meta: ListMeta


class CheckpointFile(_Model):
    """One file of a checkpoint download, with its presigned URL."""

    filename: str
    url: str
    """Presigned: fetch it without the Authorization header."""
    size: Int64


class CheckpointDownload(_Model):
    """The files of one checkpoint variant, one presigned URL each."""

    data: list[CheckpointFile] = Field(default_factory=list)

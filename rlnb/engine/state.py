"""The state one session's operations share: its models, optimizer, counters and checkpoint lists.

The worker thread alone reads and writes it once the session runs (``rlnb.engine.handlers``), but for
``LocalBackend.discard_checkpoint``, which removes a checkpoint from its lists in place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import torch
from torch import nn

from rlnb import wire
from rlnb.engine.checkpoint_files import CheckpointStore
from rlnb.engine.models.adapter import ModelAdapter
from rlnb.engine.models.compiled import Compiler
from rlnb.engine.optim.trainer import TrainerOptimizer
from rlnb.wire import OptimizerKind


@dataclass
class Engine:
    """A session's models, optimizer and counters (see the module's docstring for who touches it)."""

    adapter: ModelAdapter
    trainer: nn.Module
    sampler: nn.Module
    """A second copy for sampling, updated only by weights-sync. It shares every frozen tensor with the
    trainer (all of them under LoRA, where only the adapter is copied), so LoRA holds one base."""
    optim: TrainerOptimizer
    kind: OptimizerKind
    store: CheckpointStore
    meta: dict[str, Any]
    """What checkpoints record besides weights (base model, LoRA settings, Newton-Schulz dtype)."""
    num_generator_replicas: int = 1
    op_delay: float = 0.0
    compiler: Compiler | None = None
    """Compiles the sampler's decode step (``compile=True``); None: eager."""
    max_stop_strings: int = wire.MAX_STOP_STRINGS
    """The most stop strings a sample may give (``rlnb serve`` sets its ``--limit max_stop_strings``)."""
    max_stop_chars: int = wire.MAX_STOP_CHARS
    """The most characters of each (``--limit max_stop_chars``)."""
    step: int = 0
    weights_version: int = 0
    sample_rng: torch.Generator = field(default_factory=torch.Generator)
    training_checkpoints: list[wire.TrainingCheckpoint] = field(default_factory=list)
    inference_checkpoints: list[wire.InferenceCheckpoint] = field(default_factory=list)
    resolved: tuple[Any, ...] | None = None
    """The last optim-step body, what it held (``params.params_state``) and its checked hyperparameters
    (``stepping.step_hyperparams``)."""
    half_stepped: bool = False
    """An optim-step stopped part way (``StepFailed.half``): ``refusals.HALF_STEPPED_REFUSES`` is refused."""
    changed_at: datetime | None = None
    """When an operation last changed the session's own fields (``wire.CHANGES_SESSION``): its ``updated_at``."""

    @property
    def device(self) -> torch.device:
        return self.adapter.device

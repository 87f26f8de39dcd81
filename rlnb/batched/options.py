"""The option groups of ``run_batched``: what each RL step is (``StepOptions``, the keywords ``rl_step``
takes) and how the ensemble runs (``EngineOptions``, the keywords ``rlnb.connect`` takes).

``run_batched(..., temperature=0.7, threads=1)`` sorts its keywords into these groups with
``rlnb._input.options.take``, as ``sweep`` does; each group checks its fields when it is built, before a model is
made, naming the field.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from rlnb.engine.model_setup import resolve_device
from rlnb.engine.models.hf import DTYPES
from rlnb.engine.optim.muon import ns_dtype_for
from rlnb.engine.options import MuonOptions, check_device
from rlnb.engine.threads import check_threads
from rlnb.tasks.rl import check_loss, check_temperature
from rlnb.tasks.task import check_group_size
from rlnb.wire import LOSS_PARAMS_FIELD, MAX_NUM_SAMPLES, LossConfig, MuonScaling, loss_config


@dataclass(frozen=True)
class StepOptions:
    """Each member's RL step, as ``rl_step`` takes these: ``group_size`` samples per prompt (None: the
    task's), sampling ``temperature``, and the policy ``loss`` with its ``loss_params``."""

    group_size: int | None = None
    temperature: float = 1.0
    loss: str = "grpo"
    loss_params: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "group_size", check_group_size(self.group_size, MAX_NUM_SAMPLES, optional=True))
        check_temperature(self.temperature)
        check_loss(self.loss, self.loss_params)  # as rl_step checks it: bad loss params raise here

    def config(self) -> LossConfig:
        return loss_config(self.loss, self.loss_params)

    def loss_type_and_params(self) -> tuple[str, dict[str, Any] | None]:
        """The loss's wire type and its params as the engine's losses read them."""
        config = self.config()
        field = LOSS_PARAMS_FIELD[config.type]
        given = getattr(config, field) if field else None
        return config.type, given.model_dump(exclude_none=True) if given is not None else None


@dataclass(frozen=True)
class EngineOptions:
    """Where and how the ensemble trains, as ``rlnb.connect`` takes these: ``device``, ``ns_dtype`` (Muon's
    Newton-Schulz dtype; None: the device's), ``muon_scaling`` (Muon's too: an Adam ensemble refuses both, as an Adam
    session does) and ``threads`` (None: the thread policy)."""

    device: str | torch.device = "auto"
    ns_dtype: str | torch.dtype | None = None
    muon_scaling: MuonScaling | None = None
    threads: int | None = None

    def __post_init__(self) -> None:
        MuonOptions(self.muon_scaling, self.ns_dtype)  # connect's checks: ns_dtype=torch.float32 is taken there too
        object.__setattr__(self, "threads", check_threads(self.threads))  # np.int64(2) kept as a plain int
        check_device(self.device)

    def torch_device(self) -> torch.device:
        return resolve_device(self.device)

    def ns(self) -> torch.dtype:
        """Newton-Schulz's compute dtype on this device."""
        if self.ns_dtype is None:
            return ns_dtype_for(self.torch_device())
        return self.ns_dtype if isinstance(self.ns_dtype, torch.dtype) else DTYPES[self.ns_dtype]


ENGINE_OPTIONS = frozenset(f.name for f in dataclasses.fields(EngineOptions))

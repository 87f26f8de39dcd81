"""The one place a session's backend is built: the resource's model, optimizer and replicas, and where
its checkpoints go."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from rlnb import wire
from rlnb.server.records import SessionBackend
from rlnb.server.settings import ServerSettings
from rlnb.server.state import CHECKPOINTS


def checkpoint_dir(settings: ServerSettings) -> Path | None:
    """Where sessions write checkpoints: ``checkpoint_dir``, else ``<state_dir>/checkpoints`` (kept across
    restarts), else each session's own temporary folder."""
    if settings.checkpoint_dir is not None:
        return settings.checkpoint_dir
    return settings.state_dir / CHECKPOINTS if settings.state_dir is not None else None


def planned_lora(
    resource: wire.ModelResources, lora: wire.LoraConfig | None, saved: wire.LoraConfig | None
) -> wire.LoraConfig | None:
    """The LoRA settings a session of ``resource`` will use, said by its create's answer (which said ``null``, read as
    full weights, or a part-null config while CREATING): what it asked for, else the settings ``saved`` with the
    checkpoint it resumes (as the build takes them), else the defaults. The build's own replace them once it runs."""
    if not resource.lora_enabled:
        return None
    from rlnb.engine.checkpoints import LORA_FIELDS
    from rlnb.engine.models.lora import LoraSettings

    kept = saved.model_dump(include=set(LORA_FIELDS), exclude_none=True) if saved is not None else {}
    given = lora.model_dump(exclude_none=True) if lora is not None else {}
    return wire.LoraConfig(**LoraSettings.from_config({**kept, **given}).as_dict())


def make_backend(
    settings: ServerSettings,
    resource: wire.ModelResources,
    lora: wire.LoraConfig | None,
    resume: Path | None,
    load_optimizer: bool | None,
) -> SessionBackend:
    """A session's backend: the resource's model (seeded by ``base_seed``, the same for every session of
    it), optimizer and replicas; LoRA adapters seeded by the session's own ``lora_config.seed``."""
    import copy

    from torch import nn

    from rlnb.engine.backend import LocalBackend

    model = settings.models[resource.base_model]
    if isinstance(model, nn.Module):  # one module for every session trained them all at once (a LoRA one adapted it)
        model = copy.deepcopy(model)

    muon, match_adam = resource.optimizer_config.muon, wire.MUON_MATCH_ADAM  # None: the engine's own, "original"
    adapters: dict[str, Any] | bool | None = None
    if resource.lora_enabled:
        adapters = (lora or wire.LoraConfig()).model_dump(exclude_none=True) or True
    backend = LocalBackend(
        wire.optimizer_of(resource.optimizer_config),
        model,
        seed=settings.base_seed,
        sampling_seed=secrets.randbits(62),  # sessions share base weights, not their unseeded samples
        device=settings.device,
        muon_scaling=match_adam if muon and muon.scaling_strategy == wire.MUON_SCALING[match_adam] else None,
        num_generator_replicas=resource.compute_config.num_generator_replicas,
        checkpoint_dir=checkpoint_dir(settings),
        resume_from=resume,
        load_optimizer=load_optimizer,
        op_delay=settings.op_delay,
        lora=adapters,
        dtype=settings.dtype,
        trust_remote_code=settings.trust_remote_code,
        threads=settings.threads,
    )
    # the server checked its own stop limits (a 400 past them): its engine takes what it took
    backend.engine.max_stop_strings, backend.engine.max_stop_chars = settings.max_stop_strings, settings.max_stop_chars
    backend.engine.adapter.shown_name = resource.base_model  # an adapter download names no folder of the server's
    return backend

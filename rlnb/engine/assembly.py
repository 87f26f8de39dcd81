"""A ``LocalBackend``'s ``Engine`` put together from its checked options: apart from the backend, which reads the
options, resumes a run and serves the session, because what the handlers work on is its own concept."""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import nn

from rlnb.engine import checkpoints, model_setup
from rlnb.engine.checkpoint_files import CheckpointStore
from rlnb.engine.dtypes import WEIGHT_DTYPES
from rlnb.engine.models.adapter import ModelAdapter
from rlnb.engine.models.compiled import Compiler
from rlnb.engine.models.hf import DTYPES
from rlnb.engine.models.lora import LoraSettings
from rlnb.engine.optim.muon import ns_dtype_for
from rlnb.engine.optim.split import split_params
from rlnb.engine.optim.trainer import TrainerOptimizer
from rlnb.engine.options import CheckpointOptions, ModelOptions, MuonOptions, eos_ids
from rlnb.engine.state import Engine
from rlnb.text.prompts import tokenizer_spec
from rlnb.wire import MUON, MUON_ORIGINAL, OptimizerKind


def build_optimizer(
    kind: OptimizerKind, adapter: ModelAdapter, trainer: nn.Module, muon: MuonOptions, ns: torch.dtype
) -> TrainerOptimizer:
    """The session's optimizer on ``trainer``: made before a resume copies a checkpoint's weights in, so that the
    checkpoint's optimizer state is checked against it first (it reads the weights' names, shapes and dtypes only)."""
    split = split_params(trainer, adapter.embedding_params(), muon.muon_split) if kind == MUON else None
    if split is not None and not split.muon and muon.muon_split is None:
        warnings.warn(
            "no trainable weight of this model is a hidden matrix: Muon moves nothing, and this Muon session steps "
            "every weight with AdamW (see session.backend.optim.split.describe()); choose Muon's matrices by name "
            "with connect(..., muon_split={'pattern*': 'muon'})",
            UserWarning,
            stacklevel=2,
        )
    return TrainerOptimizer(trainer, kind, split, muon_scaling=muon.muon_scaling or MUON_ORIGINAL, ns_dtype=ns)


def build_engine(
    optim: TrainerOptimizer,
    adapter: ModelAdapter,
    trainer: nn.Module,
    lora: LoraSettings | None,
    mo: ModelOptions,
    ns: torch.dtype,
    saved: CheckpointOptions,
    op_delay: float,
    compiler: Compiler | None,
) -> Engine:
    """What the handlers work on: the two copies of the model (on the adapter's device, the sampler's taken from the
    trainer's weights as they are), the optimizer, the checkpoint store."""
    kind = optim.kind
    replicas = mo.num_generator_replicas
    return Engine(
        adapter=adapter,
        trainer=trainer,
        # trainer-only (no generator replicas): nothing samples, so the sampler is the trainer
        sampler=model_setup.build_sampler(trainer, adapter.device, lora) if replicas else trainer,
        optim=optim,
        kind=kind,
        store=CheckpointStore(saved.checkpoint_dir, lora=lora is not None),
        meta={
            "base_model": adapter.name,
            "base_model_dir": checkpoints.model_dir(adapter),
            "base_fingerprint": adapter.fingerprint,
            "base_dtype": adapter.base_dtype,
            "base_config": adapter.base_config,
            "base_tokenizer": adapter.base_tokenizer,
            "seed": mo.seed if adapter.kind == "builtin" else None,  # builds the base a LoRA checkpoint adapts
            "lora": lora.as_dict() if lora else None,
            "ns_dtype": str(ns).removeprefix("torch."),
            "optimizer_kind": kind,
        },
        num_generator_replicas=replicas,
        op_delay=op_delay,
        compiler=compiler,
    )


def ns_dtype(given: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """Muon's Newton-Schulz dtype: ``given`` by name or dtype, else the device's (``ns_dtype_for``)."""
    if given is None:
        return ns_dtype_for(device)
    if isinstance(given, torch.dtype):
        return given
    if given not in DTYPES:
        raise ValueError(f"ns_dtype must be one of {sorted(DTYPES)}, got {given!r}")
    return DTYPES[given]


def reopen_options(mo: ModelOptions, muon: MuonOptions, engine: Engine) -> dict[str, Any]:
    """The options, as ``connect`` takes them, that open this session's model again as it is (with ``model=`` and a
    checkpoint of it as ``resume_from``): what shapes the model (its dtype, tokenizer, end tokens, trust in its
    folder's code, LoRA, sampler copies, seed and device) and, for Muon, the optimizer. Find LR's copy opens with them:
    without them the copy of a bfloat16 session trained in float32, and a trusted-code or ``tokenizer=`` session's copy
    was refused."""
    base = engine.adapter.base_dtype  # "auto" took the folder's: the same folder would give it, a new module not
    shaped: dict[str, Any] = {
        "dtype": base if base in WEIGHT_DTYPES else mo.dtype,
        "tokenizer": tokenizer_spec(mo.tokenizer),
        "eos_token_id": mo.eos_token_id,
        "trust_remote_code": mo.trust_remote_code,
        "lora": engine.meta["lora"],
        "num_generator_replicas": mo.num_generator_replicas,
        "seed": mo.seed,  # builds the built-in base a LoRA checkpoint adapts
        "device": str(engine.adapter.device),
    }
    if engine.kind == MUON:  # an Adam session refuses Muon's options
        shaped.update(
            muon_scaling=engine.optim.muon_scaling, ns_dtype=engine.meta["ns_dtype"], muon_split=muon.muon_split
        )
    return shaped


def recorded(reopen: dict[str, Any]) -> dict[str, Any]:
    """What a run's config records of ``reopen_options`` beyond the backend's own keys: printable (a tokenizer object
    by its name or folder), for the history and its sinks."""
    tokenizer = reopen["tokenizer"]
    if tokenizer is not None and not isinstance(tokenizer, str):
        tokenizer = str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__)
    return {
        "tokenizer": tokenizer,
        "trust_remote_code": reopen["trust_remote_code"],
        "eos_token_id": eos_ids(reopen["eos_token_id"]) or None,
        "num_generator_replicas": reopen["num_generator_replicas"],
    }

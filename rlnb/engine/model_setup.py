"""A session's model, made from its options: the device, the tokenizer, the model behind its adapter (LoRA-adapted,
with a checkpoint's weights when resuming) and the sampler's copy of it; ``LocalBackend`` only runs what this
makes."""

from __future__ import annotations

import copy
import hashlib
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from rlnb.engine import base_identity, checkpoints
from rlnb.engine.models import packed
from rlnb.engine.models.adapter import ModelAdapter, model_dtype
from rlnb.engine.models.factory import build_adapter
from rlnb.engine.models.hf import ModelLoadError
from rlnb.engine.models.lora import LoraSettings, apply_lora, refuse_adapted, undo_lora
from rlnb.engine.models.tied_head import tie_head, untie_head
from rlnb.engine.optim.trainer import TrainerOptimizer
from rlnb.engine.options import ModelOptions, check_device, eos_ids
from rlnb.errors import OptionRefused
from rlnb.text.prompts import tokenizer_spec


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """``"auto"`` picks CUDA when available, else CPU; asking for CUDA without it is an error now, not later."""
    resolved = check_device(device)
    if resolved is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise OptionRefused(
            "device", f"device={str(device)!r} but this torch has no CUDA device (torch {torch.__version__})"
        )
    return resolved


class ModelRefused(OptionRefused, ModelLoadError):
    """A model the engine cannot load (``ModelLoadError``) as the refusal of ``model=`` (``OptionRefused``)."""


def load_tokenizer(spec: str, trust_remote_code: bool = False) -> Any:
    """A Hugging Face tokenizer from a local folder or a cached hub id (``rlnb.connect``'s ``tokenizer=``)."""
    from rlnb.engine.models import hf

    return hf.load_tokenizer(hf.resolve(spec, "tokenizer"), spec, trust_remote_code)


_IN_USE: weakref.WeakKeyDictionary[nn.Module, Callable[[], bool]] = weakref.WeakKeyDictionary()
"""The modules given as ``model=`` to a session, each with whether that session is still open: it trains them in
place, so a second open session on one would step the same weights."""


def claim(model: object, is_open: Callable[[], bool]) -> None:
    """Record that an open session trains ``model`` (an ``nn.Module``; names and folders load their own copy)."""
    if isinstance(model, nn.Module):
        _IN_USE[model] = is_open


def refuse_in_use(model: object) -> None:
    """A ``ValueError`` for a module an open session trains: two sessions on one module shared its weights, and
    each one's optim-step moved the other's model, silently."""
    is_open = _IN_USE.get(model) if isinstance(model, nn.Module) else None
    if is_open is not None and is_open():
        raise OptionRefused(
            "model",
            f"model ({type(model).__name__}) is the model of another open session, which trains it in place: two "
            "sessions on one module would step the same weights; close that session first, or pass a copy "
            "(copy.deepcopy(model))",
        )


def build_model(
    model: str | nn.Module,
    options: ModelOptions,
    device: torch.device,
    lora: LoraSettings | None,
    resume: dict[str, Any] | None,
    make_optimizer: Callable[[ModelAdapter, nn.Module], TrainerOptimizer],
) -> tuple[ModelAdapter, nn.Module, TrainerOptimizer]:
    """The model behind its adapter, the module that trains (with LoRA adapters when asked), with the checkpoint's
    weights when resuming, and its optimizer (``make_optimizer``: the backend's, which loads a resumed run's state).
    All of the checkpoint is checked before its weights are copied in (the optimizer's state in ``make_optimizer``),
    and a ``model=`` module that LoRA adapted for a session that then fails to open is given its own layers back."""
    refuse_adapted(model)  # before a tokenizer or the model loads
    refuse_in_use(model)
    tokenizer = tokenizer_spec(options.tokenizer)
    if isinstance(tokenizer, str):
        tokenizer = load_tokenizer(tokenizer, options.trust_remote_code)
    try:
        adapter = build_adapter(
            model, tokenizer=tokenizer, seed=options.seed, dtype=options.dtype, device=device,
            eos_token_id=eos_ids(options.eos_token_id), trust_remote_code=options.trust_remote_code,
        )  # fmt: skip
    except ModelLoadError as exc:  # the models' error, an ensemble's and a sweep's too: here the refusal of model=
        raise ModelRefused("model", str(exc)).with_traceback(exc.__traceback__) from exc.__cause__
    eos_ids(options.eos_token_id, adapter.vocab_size)  # the vocabulary is known now: before the session starts
    adapter.fingerprint = fingerprint(adapter.module)  # of the base as loaded: before LoRA renames its layers
    adapter.base_config = base_identity.config_fields(adapter.module)  # before a resume unties a head
    adapter.base_tokenizer = base_identity.tokenizer_digest(adapter.codec)
    adapter.base_dtype = str(model_dtype(adapter.module)).removeprefix("torch.")
    if resume is not None:  # before LoRA adapts a model= module in place
        checkpoints.check_resume(resume, adapter, lora, options.seed)
    trainer = adapter.module
    if lora is not None:
        trainer = apply_lora(trainer, adapter.lora_targets(lora.train_unembed), lora)
    untied, tied_config = False, getattr(getattr(trainer, "config", None), "tie_word_embeddings", None)
    try:
        weights = checkpoints.check_weights(resume, adapter, trainer, lora) if resume is not None else None
        # a merged head LoRA trained apart from a tied embedding stays apart (before the optimizer takes its weights)
        untied = weights is not None and lora is None and adapter.kind == "hf" and untie_head(trainer, weights)
        optim = make_optimizer(adapter, trainer)
        if weights is not None:  # last: a refusal before leaves model= as it was
            checkpoints.copy_weights(trainer, weights, lora)
    except BaseException as refused:
        try:
            if trainer is not adapter.module:
                undo_lora(trainer, adapter.module)
            if untied:
                tie_head(trainer, tied_config)
        except Exception as undo:  # the refusal stays the error the user reads
            refused.add_note(f"putting the model= module back as it was failed too: {undo!r}")
        raise
    return adapter, trainer, optim


FINGERPRINT_VALUES = 4096
"""Evenly spaced values of each tensor a fingerprint reads: any two real models differ in them."""


@torch.no_grad()
def fingerprint(module: nn.Module) -> str:
    """A digest of a model's weights: each tensor's name, shape, dtype and ``FINGERPRINT_VALUES`` of its values.
    A checkpoint keeps its base model's, so a resume knows that base wherever its folder is now (by its path, a
    moved or copied folder would be refused), and tells it from other weights at the same path (a LoRA adapter of
    one base would load onto another). It reads a few thousand values per tensor, not gigabytes."""
    digest = hashlib.sha256()
    for name, tensor in module.state_dict().items():
        flat = tensor.detach().reshape(-1)
        sample = flat[:: max(1, flat.numel() // FINGERPRINT_VALUES)][:FINGERPRINT_VALUES]
        digest.update(f"{name}|{tuple(tensor.shape)}|{tensor.dtype}|".encode())
        digest.update(sample.to("cpu", torch.float64).numpy().tobytes())
    return digest.hexdigest()[:32]


def sampler_copy(trainer: nn.Module) -> nn.Module:
    """The sampler: a copy of the trainer that shares every tensor training never changes (frozen
    parameters, non-persistent buffers such as rotary tables and causal masks) and owns copies of the others
    (trainable parameters, and persistent buffers: a BatchNorm's running statistics move with every training
    forward, and the sampler must not see them before a weights-sync). Full-weight sessions get a full second
    copy; LoRA sessions only a second adapter."""
    memo: dict[int, Any] = {id(p): p for p in trainer.parameters() if not p.requires_grad}
    memo.update({id(b): b for m in trainer.modules() for name, b in m.named_buffers(recurse=False)
                 if name in m._non_persistent_buffers_set})  # fmt: skip
    sampler = copy.deepcopy(trainer, memo)
    for p in sampler.parameters():
        p.requires_grad_(False)  # shared tensors are frozen already; the copies need no grad either
    return sampler.eval()


def build_sampler(trainer: nn.Module, device: torch.device, lora: LoraSettings | None) -> nn.Module:
    """The sampler copy, its large linear layers packed for the CPU (``rlnb.engine.models.packed``; not under
    LoRA, whose sampler shares the base weights)."""
    sampler = sampler_copy(trainer)
    if lora is None and packed.available(device):
        packed.pack(sampler)
    return sampler

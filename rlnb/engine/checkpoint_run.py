"""The run a training checkpoint goes on with (``load_optimizer=True``): its optimizer state, the gradients it
accumulated for its next optim-step, its generators' states. All of it is checked (``load_optimizer``) before the
checkpoint's weights are copied into the model (``checkpoints.copy_weights``), and taken after (``restore_run``,
``restore_sample_rng``): a refused resume leaves a ``model=`` module as it was."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from rlnb.engine.checkpoint_checks import check_generator, check_tensors
from rlnb.engine.checkpoints import CheckpointMismatch
from rlnb.engine.models.adapter import model_dtype
from rlnb.engine.models.hf import failure_text
from rlnb.engine.models.lora import dropout_generator
from rlnb.engine.oom import out_of_memory
from rlnb.engine.optim.trainer import TrainerOptimizer


def load_optimizer(
    state: dict[str, Any], optim: TrainerOptimizer, trainer: nn.Module, path: Path, sample_rng: bool
) -> None:
    """Load a training checkpoint's optimizer state into the session's new ``optim``, and check the rest that
    ``restore_run`` and (``sample_rng``: unless seeded anew) ``restore_sample_rng`` take: the gradients saved for the
    next optim-step, the generators' states. Asked before ``copy_weights``: a refusal leaves the model as it was."""
    saved, here = state.get("base_dtype"), str(model_dtype(trainer)).removeprefix("torch.")
    if state.get("lora") is None and saved not in (None, here):  # LoRA's: ``checkpoints.check_resume``; older: none
        raise CheckpointMismatch(f"resume_from {str(path)!r}: its run trained {saved} weights, this session's are "
                                 f"{here}: its weights and optimizer state would go on cast, not the run that was "
                                 f"saved; resume with dtype={saved!r}, or load_optimizer=False to start a new run "
                                 f"from its weights in {here}", dtype=saved)  # fmt: skip
    try:
        optim.load_state_dict(state["optimizer"])
    except Exception as exc:  # noqa: BLE001 - KeyError, TypeError, ValueError of a state of another kind or model
        if out_of_memory(exc):  # its tensors are copied: no fault of the state; the build says memory ran out
            raise
        raise CheckpointMismatch(f"resume_from {str(path)!r}: its optimizer state does not fit this session's "
                                 f"{optim.kind} optimizer ({failure_text(exc)}); load_optimizer=False loads its "
                                 "weights alone") from None  # fmt: skip
    params = {n: p for n, p in trainer.named_parameters() if p.requires_grad}
    check_tensors(path, "grads", state.get("grads") or {}, params)
    for name, grad in (state.get("grads") or {}).items():
        if name not in params or grad.shape != params[name].shape:  # each a dense tensor: check_tensors
            raise CheckpointMismatch(f"resume_from {str(path)!r}: its gradient {name!r} (for the next optim-step) "
                                     "fits no trainable weight of this model; load_optimizer=False loads its weights "
                                     "alone")  # fmt: skip
    dropout = dropout_generator(trainer)
    if dropout is not None:
        check_generator(path, "dropout_rng", state.get("dropout_rng"), dropout.device)
    if sample_rng:
        check_generator(path, "sample_rng", state.get("sample_rng"), torch.device("cpu"))


def restore_run(state: dict[str, Any], trainer: nn.Module) -> int:
    """Give ``trainer`` the gradients a training checkpoint accumulated for its next optim-step (saved between a
    forward-backward and it) and LoRA dropout's generator state, as ``load_optimizer`` checked them; the step it was
    saved at."""
    params = dict(trainer.named_parameters())
    for name, grad in (state.get("grads") or {}).items():
        params[name].grad = grad.detach().to(params[name], copy=True)
    dropout, saved = dropout_generator(trainer), state.get("dropout_rng")
    if dropout is not None and saved is not None:  # an older checkpoint has none: the LoRA seed's draws
        dropout.set_state(saved.cpu())
    return int(state["step"])


def restore_sample_rng(state: dict[str, Any], rng: torch.Generator) -> None:
    """Unseeded samples draw on from the generator a training checkpoint saved (an older one has none: the seed's),
    as ``load_optimizer`` checked it. The generator is the CPU's: a checkpoint loaded onto a GPU has its state there."""
    saved = state.get("sample_rng")
    if saved is not None:
        rng.set_state(saved.cpu())

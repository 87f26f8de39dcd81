"""Checkpoint files of the in-process backend.

* A **training checkpoint** is one ``<id>.pt`` (``torch.save``): the trainable weights (the whole model
  for a full-weight session, only the adapter for LoRA: the base is rebuilt from the model it names),
  the optimizer state, the gradients forward-backwards accumulated for the next optim-step, the step, the
  sampler's generator (unseeded samples go on after a resume, from the checkpoint's weights: the sampler of a
  resumed session holds them, weights version = step, as a new session's holds the weights it opens with, even where
  the saving session had not synced them yet), LoRA dropout's generator (its masks go on), the
  Newton-Schulz dtype and the LoRA settings —
  all that resume needs to give the same next step as a session that never stopped.
* An **inference checkpoint** is a folder ``<id>/``: ``merged/`` holds the full model with the trained
  weights applied, in a format ``transformers.AutoModelForCausalLM.from_pretrained`` loads (a GPT-2
  checkpoint for the built-in models); a LoRA session adds ``adapter/``, the adapter alone in peft's
  format. ``rlnb.json`` says what it is, with the SHA-256 of each ``merged/`` weight file (checked at resume).

A file given as ``resume_from`` may be anything. Whatever is wrong with it — not a checkpoint, a field
missing or of the wrong type, weights or an optimizer state that do not fit, a damaged weights file — is
a ``ValueError`` naming the file and the problem, never a library's raw error (and never torch's advice
to load with ``weights_only=False``, which would run code in the file).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, BinaryIO

import torch
from torch import nn

from rlnb.engine import base_identity
from rlnb.engine import checkpoint_checks as checks
from rlnb.engine.checkpoint_checks import check_digests, check_lora, check_records, check_tensors, file_digests
from rlnb.engine.checkpoint_checks import damaged as _damaged
from rlnb.engine.checkpoint_files import UnsafeCheckpointFile, open_regular, refuse_pipes, writing
from rlnb.engine.inputs import INT64_MAX
from rlnb.engine.models.adapter import ModelAdapter
from rlnb.engine.models.hf import DTYPES, failure_text
from rlnb.engine.models.lora import LoraSettings, dropout_generator, merged_state_dict, save_adapter
from rlnb.engine.oom import out_of_memory
from rlnb.wire import LoraConfig


class CheckpointMismatch(ValueError):
    """The checkpoint belongs to another kind of session (another base model, LoRA or not, another rank). ``dtype``:
    the weights' dtype it needs, where that is what differs (its words advise ``dtype=``; ``rlnb serve``'s, its
    ``--dtype``)."""

    def __init__(self, message: str, dtype: str | None = None) -> None:
        super().__init__(message)
        self.dtype = dtype


def save_training(path: Path, trainer: nn.Module, optim_state: dict[str, Any], step: int, meta: dict[str, Any]) -> None:
    lora = meta.get("lora") is not None
    weights = {k: v for k, v in trainer.state_dict().items() if not lora or "lora_" in k}
    grads = {n: p.grad for n, p in trainer.named_parameters() if p.grad is not None}  # saved between fb and step
    state = {"type": "training", "weights": weights, "optimizer": optim_state, "grads": grads, "step": step, **meta}
    dropout = dropout_generator(trainer)
    if dropout is not None:  # LoRA's masks after a resume are those of the run that never stopped
        state["dropout_rng"] = dropout.get_state()
    with writing(path) as target, open(target, "wb") as fh:  # a Python file: a failed write keeps its errno
        torch.save(state, fh)


def save_inference(path: Path, adapter: ModelAdapter, trainer: nn.Module, step: int, meta: dict[str, Any]) -> None:
    with writing(path) as target:
        adapter.save_merged(merged_state_dict(trainer), target / "merged")
        if meta.get("lora") is not None:
            save_adapter(trainer, target / "adapter", adapter.shown_name)
        digests = file_digests(target / "merged")  # checked at resume: safetensors checks no checksum
        (target / "rlnb.json").write_text(
            json.dumps({"type": "inference", "step": step, **meta, "merged_sha256": digests}, indent=2, allow_nan=False)
        )


EXPECTED = "a training checkpoint (<id>.pt) or an inference checkpoint folder (<id>/ with rlnb.json)"


def load(path: Path, device: torch.device) -> dict[str, Any]:
    """A checkpoint's contents: for training ones everything saved; for inference ones ``rlnb.json``.
    Anything else is a ``ValueError`` naming the path and what was expected (not torch's unpickling text)."""
    if not path.exists():
        raise ValueError(f"resume_from {str(path)!r} does not exist: expected {EXPECTED}")
    if path.is_dir():
        refuse_pipes(path)
        return {**_inference_meta(path), "path": path}
    with open_regular(path, path) as fh:  # one open for all the reads: nothing put in its place later is read
        return _training(path, fh, device)


def _training(path: Path, fh: BinaryIO, device: torch.device) -> dict[str, Any]:
    try:
        state = torch.load(fh, map_location=device, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch's texts name no file, and some advise weights_only=False
        if out_of_memory(exc):  # no fault of the file, unless a changed size asked for it: the build says it ran out
            if _zip_start(fh):
                check_records(path, fh)
            raise
        problem = failure_text(exc)
    else:
        if not isinstance(state, dict) or state.get("type") != "training" or "weights" not in state:
            raise ValueError(f"resume_from {str(path)!r} is a torch file but not an rlnb training checkpoint")
        _check_fields(path, state, _TRAINING)
        weights = state["weights"]
        if not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in weights.items()):
            raise _damaged(path, "its weights are not named tensors")
        if _zip_start(fh):  # torch.load checks no CRC-32: a changed byte in a tensor loaded as another number
            check_records(path, fh)
        return {**state, "path": path}
    kind, _, detail = problem.partition(": ")  # outside ``except``: no torch error in the context chain
    said = f"(torch.load: {kind}){': ' + detail if detail else ''}"
    if _zip_start(fh):  # torch.save's own format: a copy cut short reads as "[Errno 22] Invalid argument" or so
        raise _damaged(path, f"it is a torch file, damaged or cut short {said}")
    raise ValueError(f"resume_from {str(path)!r} is not an rlnb checkpoint {said}; expected {EXPECTED}")


def _zip_start(fh: BinaryIO) -> bool:
    """Whether the file begins as a zip archive does, which every ``torch.save`` file does."""
    try:
        fh.seek(0)
        return fh.read(4) == b"PK\x03\x04"
    except OSError:
        return False


def _inference_meta(path: Path) -> dict[str, Any]:
    file = path / "rlnb.json"
    try:
        with open_regular(path, file) as fh:
            meta = json.loads(fh.read().decode("utf-8"))
    except UnsafeCheckpointFile:
        raise
    except (OSError, ValueError, RecursionError) as exc:
        problem = type(exc).__name__
    else:
        if not isinstance(meta, dict) or meta.get("type") != "inference":
            raise ValueError(f"resume_from {str(path)!r}: its rlnb.json is not an rlnb inference checkpoint's")
        _check_fields(file, meta, _INFERENCE)
        return meta
    raise ValueError(
        f"resume_from {str(path)!r} is a folder but not an rlnb inference checkpoint (rlnb.json: {problem}); "
        f"expected {EXPECTED}"
    )


_OPTIONAL: dict[str, type] = {
    "base_model_dir": str, "base_fingerprint": str, "base_dtype": str, "lora": dict, "ns_dtype": str, "seed": int,
    "grads": dict, "merged_sha256": dict,  # an inference checkpoint's: absent in an older rlnb's
    "base_config": dict, "base_tokenizer": str,  # absent in an older rlnb's: its resume checks the weights alone
}  # fmt: skip
_INFERENCE: dict[str, type] = {"base_model": str, "step": int, **_OPTIONAL}
_TRAINING: dict[str, type] = {**_INFERENCE, "weights": dict, "optimizer": dict}
"""The fields resume reads, and their types (those of ``_OPTIONAL`` may be null or absent)."""


def _check_fields(file: Path, state: dict[str, Any], fields: dict[str, type]) -> None:
    for name, kind in fields.items():
        value = state.get(name)
        if value is None and name in _OPTIONAL:
            continue
        if value is None:
            raise _damaged(file, f"it has no {name}")
        if not isinstance(value, kind) or isinstance(value, bool):
            raise _damaged(file, f"its {name} is {type(value).__name__}, expected {kind.__name__}")
    if state.get("lora") is not None:
        check_lora(file, state["lora"])
    if not 0 <= state["step"] < INT64_MAX:  # a step is an int64 on the wire, and the next one must fit too
        raise _damaged(file, f"its step is {state['step']}{', past 2**63 - 2' if state['step'] > 0 else ''}")
    if state.get("ns_dtype") is not None and state["ns_dtype"] not in DTYPES:
        raise _damaged(file, f"its ns_dtype {state['ns_dtype']!r} is not one of {sorted(DTYPES)}")


def model_dir(adapter: ModelAdapter) -> str | None:
    """The resolved folder a Hugging Face model was loaded from (None for hub ids, built-ins, modules):
    resume compares folders by where they are, not by how their path was spelled."""
    path = Path(adapter.name).expanduser()
    return str(path.resolve()) if adapter.kind == "hf" and path.is_dir() else None


def check_resume(state: dict[str, Any], adapter: ModelAdapter, lora: LoraSettings | None, seed: int) -> None:
    """A ``CheckpointMismatch`` if the checkpoint is of another model or LoRA set-up (``seed``: the session's, which
    builds a built-in model's base weights). Asked before LoRA adapts the model: a ``model=`` module, adapted in place
    for a resume then refused, took no later session, the one the refusal advised included."""
    saved, here = state.get("base_model_dir"), model_dir(adapter)
    same = saved == here if saved and here else state["base_model"] == adapter.name
    if not same and state.get("base_fingerprint") != adapter.fingerprint:  # not the same weights moved elsewhere
        raise CheckpointMismatch(
            f"checkpoint is of model {saved or state['base_model']!r}, this session's model is {here or adapter.name!r}"
        )
    if changed := base_identity.differences(state, adapter.base_config, adapter.base_tokenizer, here or adapter.name):
        raise CheckpointMismatch(changed)
    if state["type"] == "inference" and lora is not None:
        raise CheckpointMismatch("a LoRA session resumes from a training checkpoint, not an inference checkpoint")
    if state["type"] != "inference" and (state.get("lora") is None) != (lora is None):
        raise CheckpointMismatch(
            "checkpoint and session differ in LoRA: resume a LoRA checkpoint in a LoRA session, and vice versa"
        )
    if state["type"] != "inference" and lora is not None:
        _check_lora(state, adapter, lora, seed)


def check_weights(
    state: dict[str, Any], adapter: ModelAdapter, trainer: nn.Module, lora: LoraSettings | None
) -> dict[str, torch.Tensor]:
    """A checkpoint's weights, once ``check_resume`` has taken it, checked against ``trainer`` and not yet copied into
    it (``copy_weights``): what else of the checkpoint must fit (``checkpoint_run.load_optimizer``) refuses first, so
    a refused resume leaves a ``model=`` module as it was."""
    if state["type"] == "inference":
        check_digests(state["path"], state.get("merged_sha256"))
        weights = _merged_weights(adapter, state["path"] / "merged")
    else:
        weights = state["weights"]
    own = trainer.state_dict()
    check_tensors(state["path"], "weights", weights, own)
    if problem := checks.misfit(weights, own, strict=lora is None):  # before any tensor is copied into the model
        raise CheckpointMismatch(f"checkpoint does not fit this session's model: {problem}")
    return weights


def copy_weights(trainer: nn.Module, weights: dict[str, torch.Tensor], lora: LoraSettings | None) -> None:
    """Copy ``check_weights``' weights into ``trainer``. Only what ``misfit`` does not foresee fails here (torch
    cannot copy a tensor in): the tensors that fit are copied by then, which the error says."""
    try:
        trainer.load_state_dict(weights, strict=lora is None)
    except RuntimeError as exc:
        detail = " ".join(str(exc).split())[:300]
        raise CheckpointMismatch(f"checkpoint does not fit this session's model: {detail}; the weights that fit were "
                                 "copied in by then (a module given as model= holds them)") from None  # fmt: skip


LORA_FIELDS = ("rank", "alpha", "dropout", "train_unembed")
"""The LoRA settings a resumed adapter must share with its checkpoint (LoRA's ``seed`` only drew the initial
adapter, which the checkpoint's weights replace, and seeded dropout's generator, whose state it carries)."""


def with_saved_lora(config: LoraConfig | bool, state: dict[str, Any] | None) -> dict[str, Any] | LoraConfig | bool:
    """``lora=`` with the settings it leaves out taken from the checkpoint it resumes, which the adapter must keep:
    a resume with ``lora=True``, or ``{"rank": 4}`` alone as Together's Tinker shim sends, of a run made with
    ``alpha`` 8 or ``train_unembed`` false would take the defaults in their place and be refused."""
    saved = state.get("lora") if state is not None else None
    if not isinstance(saved, dict):
        return config
    given = {} if isinstance(config, bool) else config.model_dump(exclude_none=True)
    return {**{name: saved[name] for name in LORA_FIELDS if name in saved}, **given}


def _check_lora(state: dict[str, Any], adapter: ModelAdapter, lora: LoraSettings, seed: int) -> None:
    """A ``CheckpointMismatch`` naming the first LoRA setting, or a built-in model's base ``seed`` (its LoRA
    checkpoint keeps only the adapter: the base is rebuilt from the seed), that differs from the checkpoint's."""
    saved = state["lora"]
    for name in LORA_FIELDS:
        if name in saved and saved[name] != getattr(lora, name):
            raise CheckpointMismatch(
                f"checkpoint's LoRA {name} is {saved[name]!r}, this session's is {getattr(lora, name)!r}: the resumed "
                f"run would not be the saved one; resume with lora={saved!r}"
            )
    base_seed = state.get("seed")
    if adapter.kind == "builtin" and base_seed is not None and base_seed != seed:
        raise CheckpointMismatch(
            f"checkpoint's seed is {base_seed}, this session's is {seed}: a LoRA checkpoint of a built-in model keeps "
            f"only the adapter, and seed builds the base weights it adapts; resume with seed={base_seed}"
        )
    if state.get("base_dtype") not in (None, adapter.base_dtype):  # an older checkpoint has none
        raise CheckpointMismatch(
            f"checkpoint's LoRA adapter was trained on {state['base_dtype']} base weights, this session's are "
            f"{adapter.base_dtype}: it adapts the weights as they were; resume with dtype={state['base_dtype']!r}",
            dtype=state["base_dtype"],
        )
    if state.get("base_fingerprint") not in (None, adapter.fingerprint):  # an older checkpoint has none
        raise CheckpointMismatch(
            f"checkpoint's LoRA adapter was trained on other base weights than this session's model "
            f"{model_dir(adapter) or adapter.name!r} (the same name or folder, other weights): it keeps only the "
            f"adapter, which adapts the weights it was trained on; resume with the model it was made from"
        )


def _merged_weights(adapter: ModelAdapter, merged: Path) -> dict[str, torch.Tensor]:
    """An inference checkpoint's merged weights, or a ``ValueError`` naming the folder and what is wrong. A ``merged/``
    that is gone is said so before transformers sees its path: a relative one reads as a hub id
    (``ckpt-infer-…/merged``), which it went to look for on the network."""
    if not merged.is_dir():
        raise ValueError(f"resume_from {str(merged.parent)!r}: its merged weights folder {merged} is gone (deleted by "
                         "hand?): nothing to resume from")  # fmt: skip
    try:
        return adapter.load_merged(merged)
    except Exception as exc:  # noqa: BLE001 - missing, damaged (SafetensorError), of another model (KeyError)
        if out_of_memory(exc):  # no fault of the folder: the session's build says memory ran out
            raise
        problem = failure_text(exc)
    raise ValueError(f"resume_from {str(merged.parent)!r}: its merged weights in {merged} cannot be loaded ({problem})")

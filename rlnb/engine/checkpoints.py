"""Checkpoint files of the in-process backend.

* A **training checkpoint** is one ``<id>.pt`` (``torch.save``): the trainable weights (the whole model
  for a full-weight session, only the adapter for LoRA: the base is rebuilt from the model it names),
  the optimizer state, the step, the Newton-Schulz dtype and the LoRA settings — all that resume needs
  to give the same next step as a session that never stopped.
* An **inference checkpoint** is a folder ``<id>/``: ``merged/`` holds the full model with the trained
  weights applied, in a format ``transformers.AutoModelForCausalLM.from_pretrained`` loads (a GPT-2
  checkpoint for the built-in models); a LoRA session adds ``adapter/``, the adapter alone in peft's
  format. ``rlnb.json`` says what it is.
"""

from __future__ import annotations

import contextlib
import errno
import json
import pickle
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from rlnb.engine.models.adapter import ModelAdapter
from rlnb.engine.models.lora import LoraSettings, merged_state_dict, save_adapter

Variant = Literal["merged", "adapter"]


class CheckpointMismatch(ValueError):
    """The checkpoint belongs to another kind of session (another base model, LoRA or not, another rank)."""


class CheckpointStore:
    """Where a session's checkpoints go (default: a fresh temporary folder, made on first use)."""

    def __init__(self, directory: str | Path | None) -> None:
        self._dir = Path(directory) if directory else None
        self.paths: dict[str, Path] = {}

    def path_for(self, name: str) -> Path:
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="rlnb-checkpoints-"))
        self._dir.mkdir(parents=True, exist_ok=True)
        return self._dir / name

    def path(self, ckpt_id: str) -> Path:
        if ckpt_id not in self.paths:
            raise KeyError(f"no checkpoint {ckpt_id!r} in this session")
        return self.paths[ckpt_id]

    def files(self, ckpt_id: str, variant: Variant = "merged") -> list[Path]:
        """The files a download of ``variant`` serves: the ``.pt`` of a training checkpoint; ``merged/``
        or ``adapter/`` of an inference checkpoint."""
        path = self.path(ckpt_id)
        if path.is_file():
            return [path]
        folder = path / variant
        if not folder.is_dir():
            raise ValueError(
                f"checkpoint {ckpt_id} has no {variant} variant (the adapter exists only for LoRA sessions)"
            )
        return sorted(p for p in folder.rglob("*") if p.is_file())


class DiskFull(OSError):
    """A checkpoint could not be written because the disk (or the user's quota) is full."""


_FULL = {errno.ENOSPC, errno.EDQUOT}
_FULL_TEXTS = ("No space left on device", "Disk quota exceeded", "os error 28", "os error 122")
"""How a full disk reads in the errors of safetensors (Rust's io::Error) and of code that drops the errno."""


def disk_full(exc: BaseException) -> bool:
    """Whether a failed write failed for lack of space, looking down the chain: torch.save into a Python
    file reports torch's ``unexpected pos`` with the OSError as its context."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError) and cause.errno in _FULL or any(t in str(cause) for t in _FULL_TEXTS):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


@contextlib.contextmanager
def _writing(path: Path) -> Iterator[None]:
    """A save that fails leaves nothing behind; one that fails on a full disk raises ``DiskFull`` saying so."""
    try:
        yield
    except Exception as exc:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        if disk_full(exc):
            raise DiskFull(
                f"the disk is full: checkpoint {path.name} could not be written to {path.parent} (nothing of it was "
                "kept); free space there and save again"
            ) from None
        raise


def save_training(
    path: Path, trainer: nn.Module, optim_state: dict[str, Any], step: int, meta: dict[str, Any]
) -> None:
    lora = meta.get("lora") is not None
    weights = {k: v for k, v in trainer.state_dict().items() if not lora or "lora_" in k}
    with _writing(path), open(path, "wb") as fh:  # a Python file: a failed write keeps its errno (torch's own does not)
        torch.save({"type": "training", "weights": weights, "optimizer": optim_state, "step": step, **meta}, fh)


def save_inference(
    path: Path, adapter: ModelAdapter, trainer: nn.Module, step: int, meta: dict[str, Any]
) -> None:
    with _writing(path):
        adapter.save_merged(merged_state_dict(trainer), path / "merged")
        if meta.get("lora") is not None:
            save_adapter(trainer, path / "adapter")
        (path / "rlnb.json").write_text(json.dumps({"type": "inference", "step": step, **meta}, indent=2))


EXPECTED = "a training checkpoint (<id>.pt) or an inference checkpoint folder (<id>/ with rlnb.json)"


def load(path: Path, device: torch.device) -> dict[str, Any]:
    """A checkpoint's contents: for training ones everything saved; for inference ones ``rlnb.json``.
    Anything else is a ``ValueError`` naming the path and what was expected (not torch's unpickling text)."""
    if not path.exists():
        raise ValueError(f"resume_from {str(path)!r} does not exist: expected {EXPECTED}")
    if path.is_dir():
        try:
            meta = json.loads((path / "rlnb.json").read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(
                f"resume_from {str(path)!r} is a folder but not an rlnb inference checkpoint "
                f"(rlnb.json: {type(exc).__name__}); expected {EXPECTED}"
            ) from exc
        if not isinstance(meta, dict) or meta.get("type") != "inference":
            raise ValueError(f"resume_from {str(path)!r}: its rlnb.json is not an rlnb inference checkpoint's")
        return {**meta, "path": path}
    try:
        state = torch.load(path, map_location=device, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError) as exc:  # torch's texts name no file
        raise ValueError(
            f"resume_from {str(path)!r} is not an rlnb checkpoint (torch.load: {type(exc).__name__}); "
            f"expected {EXPECTED}"
        ) from exc
    if not isinstance(state, dict) or state.get("type") != "training" or "weights" not in state:
        raise ValueError(f"resume_from {str(path)!r} is a torch file but not an rlnb training checkpoint")
    return dict(state)


def model_dir(adapter: ModelAdapter) -> str | None:
    """The resolved folder a Hugging Face model was loaded from (None for hub ids, built-ins, modules):
    resume compares folders by where they are, not by how their path was spelled."""
    path = Path(adapter.name).expanduser()
    return str(path.resolve()) if adapter.kind == "hf" and path.is_dir() else None


def restore_weights(
    state: dict[str, Any], adapter: ModelAdapter, trainer: nn.Module, lora: LoraSettings | None
) -> None:
    """Load a checkpoint's weights into ``trainer``, checking that it belongs to this kind of session."""
    saved, here = state.get("base_model_dir"), model_dir(adapter)
    same = saved == here if saved and here else state["base_model"] == adapter.name
    if not same:
        raise CheckpointMismatch(
            f"checkpoint is of model {saved or state['base_model']!r}, this session's model is {here or adapter.name!r}"
        )
    if state["type"] == "inference":
        if lora is not None:
            raise CheckpointMismatch("a LoRA session resumes from a training checkpoint, not an inference checkpoint")
        trainer.load_state_dict(adapter.load_merged(state["path"] / "merged"))
        return
    if (state.get("lora") is None) != (lora is None):
        raise CheckpointMismatch(
            "checkpoint and session differ in LoRA: resume a LoRA checkpoint in a LoRA session, and vice versa"
        )
    try:
        result = trainer.load_state_dict(state["weights"], strict=lora is None)
    except RuntimeError as exc:  # torch: shapes or names differ (another base model, another LoRA rank)
        detail = " ".join(str(exc).split())[:300]
        raise CheckpointMismatch(f"checkpoint does not fit this session's model: {detail}") from None
    missing = [k for k in result.missing_keys if "lora_" in k]
    if missing or result.unexpected_keys:
        raise CheckpointMismatch(
            "checkpoint does not fit this session's model: "
            f"missing {missing[:3]}, unexpected {result.unexpected_keys[:3]}"
        )

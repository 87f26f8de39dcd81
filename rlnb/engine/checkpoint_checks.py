"""What ``torch.load`` does not check in a training checkpoint (``rlnb.engine.checkpoints``): the CRC-32 that
``torch.save`` writes for each record of its zip (a byte changed inside a tensor loaded as another number), and
that the weights and gradients it holds are finite floating-point tensors (NaN weights opened a session whose every
forward-backward then failed ``NON_FINITE_LOSS`` naming nothing; integer ones were cast to the model's dtype in
silence); its LoRA settings against the wire's rules; and an inference checkpoint's merged weight files against
the SHA-256 its ``rlnb.json`` holds for each (safetensors checks no checksum). Each problem is a ``ValueError``
naming the file and the record, tensor or field."""

from __future__ import annotations

import hashlib
import re
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

import torch
from pydantic import ValidationError

from rlnb import _files
from rlnb.wire import LoraConfig

CHUNK = 1 << 20
"""Bytes read at a time while a record's CRC-32 is computed: never a whole tensor in memory at once."""


def damaged(file: Path, problem: str) -> ValueError:
    return ValueError(f"resume_from {str(file)!r} is not a usable rlnb checkpoint: {problem}")


def check_lora(path: Path, lora: dict[Any, Any]) -> None:
    """A checkpoint's saved LoRA settings held to the wire's rules (``LoraConfig``, as ``lora=`` is): resume takes them
    for the settings ``lora=`` leaves out, and an infinite ``alpha`` or a bool was pydantic's ``ValidationError``
    naming no file, a text ``rank`` a ``TypeError``. A field rlnb does not save is not read, and left alone."""
    for name, value in lora.items():
        if name not in LoraConfig.model_fields:
            continue
        try:
            LoraConfig.model_validate({name: value})
        except ValidationError as exc:
            raise damaged(path, f"its lora {name} is {value!r}: {exc.errors()[0]['msg']}") from None


def check_records(path: Path, fh: BinaryIO) -> None:
    """Each record's CRC-32 as ``torch.save`` wrote it, read a chunk at a time from ``fh`` (``path`` opened, the file
    ``torch.load`` read: not one put in its place since). A record whose CRC is 0 is not checked:
    ``torch.serialization.set_crc32_options(False)`` saves 0 for every record, which torch loads."""
    try:
        with zipfile.ZipFile(fh) as archive:
            for info in archive.infolist():
                if info.CRC == 0:
                    continue
                try:
                    with archive.open(info) as record:
                        while record.read(CHUNK):  # zipfile compares the CRC-32 once the record is read whole
                            pass
                except zipfile.BadZipFile as exc:  # zipfile's word for a bad CRC-32 and for a bad header alike
                    if not str(exc).startswith("Bad CRC-32"):
                        raise damaged(path, f"its record {info.filename}'s zip header is damaged ({exc}): the file "
                                            "was changed or damaged after torch.save wrote it") from None  # fmt: skip
                    raise damaged(path, f"its record {info.filename} fails its CRC-32 check (the file was changed or "
                                        "damaged after torch.save wrote it)") from None  # fmt: skip
    except (zipfile.BadZipFile, EOFError) as exc:
        raise damaged(path, f"it is a torch file, damaged or cut short ({type(exc).__name__}: {exc})") from None
    except OSError as exc:
        raise damaged(path, f"it could not be read again to check it ({type(exc).__name__}: {exc})") from None


def check_tensors(path: Path, field: str, tensors: dict[str, Any], model: Mapping[str, torch.Tensor]) -> None:
    """Each of ``tensors`` (a checkpoint's ``weights`` or ``grads``) finite, and floating-point where the model's tensor
    of that name is (``model``: its state dict or trainable weights; an integer buffer may stay an integer)."""
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise damaged(path, f"its {field}' {name!r} is {type(t).__name__}, expected a tensor")
        if kind := _not_dense(t):  # torch's finite check raises its own error for them, naming no file
            raise damaged(path, f"its {field}' {name!r} is a {kind} tensor, expected a dense one holding its values")
        own = model.get(name)
        if own is not None and own.is_floating_point() and not t.is_floating_point():
            raise damaged(path, f"its {field}' {name!r} is {t.dtype}, expected floating-point (the model's is "
                                f"{own.dtype})")  # fmt: skip
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise damaged(path, f"its {field}' {name!r} is not finite (NaN or inf): the run had diverged when it was "
                                "saved, or the file was changed")  # fmt: skip


def _not_dense(t: torch.Tensor) -> str | None:
    """What ``t`` is if not a dense tensor of values: sparse, or on the meta device (no values at all)."""
    if t.is_meta:
        return "meta"
    if t.layout != torch.strided:
        return "sparse" if "sparse" in str(t.layout) else str(t.layout).removeprefix("torch.")
    return None


def check_generator(path: Path, field: str, saved: Any, device: torch.device) -> None:
    """``saved``, a checkpoint's generator state (None: an older checkpoint has none), one that a generator on
    ``device`` takes: tried on a new one, so that it is refused before the checkpoint's weights are copied."""
    try:
        if saved is not None:
            torch.Generator(device=device).set_state(saved.cpu() if isinstance(saved, torch.Tensor) else saved)
    except (TypeError, RuntimeError):  # torch's text names no file
        raise damaged(path, f"its {field} is no generator state") from None


def misfit(tensors: Mapping[str, torch.Tensor], model: Mapping[str, torch.Tensor], strict: bool) -> str | None:
    """Why ``tensors`` (a checkpoint's weights) cannot load into a model whose state dict is ``model``, or None.
    Asked before the load: torch's ``load_state_dict`` copies every tensor that fits, then raises for the others, and
    a refused resume left a ``model=`` module half overwritten. ``strict``: every tensor of the model must be there (a
    LoRA session needs only its adapters', ``lora_`` in their names)."""
    shapes = [f"{k} is {tuple(t.shape)}, the model's {tuple(model[k].shape)}" for k, t in tensors.items()
              if k in model and t.shape != model[k].shape]  # fmt: skip
    missing = [k for k in model if k not in tensors and (strict or "lora_" in k)]
    unexpected = [k for k in tensors if k not in model]
    said = [f"{what} {names[:3]}" for what, names in (("missing", missing), ("unexpected", unexpected)) if names]
    return "; ".join(shapes[:3] + said) or None


WEIGHT_FILES = (".safetensors", ".bin", ".pt")
"""The suffixes of the weight files ``save_merged`` writes (safetensors, shards included, or torch's formats)."""
_SHA256 = re.compile(r"[0-9a-f]{64}")


def file_digests(folder: Path) -> dict[str, str]:
    """The SHA-256 of each file of ``folder`` (an inference checkpoint's ``merged/``: its weights and what a loader
    reads with them, a config, a shard index, tokenizer files; small beside the weights), by file name."""
    return {f.name: _sha256(f) for f in sorted(folder.iterdir()) if f.is_file()}


def check_digests(path: Path, digests: dict[str, Any] | None) -> None:
    """``path``'s ``merged/`` files that ``digests`` lists are there, each with its SHA-256 (None: an older checkpoint,
    saved without digests, is not checked; an older rlnb listed the weight files alone). A weight file it does not
    list is refused: it corrupts no saved file, but a loader picks its files by name and could read it in their
    place, unchecked; any other file is left alone. Only plain names of ``merged/`` are read: a crafted ``../`` or a
    device would be read whole."""
    merged = path / "merged"
    if digests is None or not merged.is_dir():  # a folder that is gone is said so by the loader
        return
    for name, digest in digests.items():
        if not isinstance(name, str) or Path(name).name != name or name.startswith(".") or "\\" in name:
            raise damaged(path, f"its merged_sha256 names {name!r}, not a file of merged/")
        if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
            raise damaged(path, f"its merged_sha256[{name!r}] is {digest!r}, not a SHA-256 (64 hex digits)")
    on_disk = {f.name for f in merged.iterdir() if f.suffix in WEIGHT_FILES} if merged.is_dir() else set()
    for name in sorted(on_disk - digests.keys()):
        raise damaged(path, f"its merged/{name} is a weight file that was not in merged/ when it was saved "
                            "(merged_sha256 does not list it): a loader could read it in place of the saved weights, "
                            "unchecked; move it out of merged/ to resume")  # fmt: skip
    for name in digests:  # all there before any is read
        if not (merged / name).is_file():
            raise damaged(path, f"its merged/{name} is missing (merged_sha256 lists it)")
    for name, digest in digests.items():
        file = merged / name
        try:
            got = _sha256(file)
        except OSError as exc:
            raise damaged(path, f"its merged/{name} could not be read ({type(exc).__name__}: {exc})") from None
        if got != digest:
            raise damaged(path, f"its merged/{name} fails its SHA-256 check (the file was changed or damaged after "
                                "it was saved)")  # fmt: skip


def _sha256(file: Path) -> str:
    with open(file, "rb", opener=_files.regular) as fh:  # a pipe put there after the checks above: refused, not read
        return hashlib.file_digest(fh, "sha256").hexdigest()

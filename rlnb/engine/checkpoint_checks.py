"""What ``torch.load`` does not check in a training checkpoint (``rlnb.engine.checkpoints``): the CRC-32 that
``torch.save`` writes for each record of its zip (a byte changed inside a tensor loaded as another number), and
that the weights and gradients it holds are finite floating-point tensors (NaN weights opened a session whose every
forward-backward then failed ``NON_FINITE_LOSS`` naming nothing; integer ones were cast to the model's dtype in
silence). Each problem is a ``ValueError`` naming the file and the record or tensor."""

from __future__ import annotations

import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

CHUNK = 1 << 20
"""Bytes read at a time while a record's CRC-32 is computed: never a whole tensor in memory at once."""


def damaged(file: Path, problem: str) -> ValueError:
    return ValueError(f"resume_from {str(file)!r} is not a usable rlnb checkpoint: {problem}")


def check_records(path: Path) -> None:
    """Each record's CRC-32 as ``torch.save`` wrote it, read a chunk at a time. A record whose CRC is 0 is not
    checked: ``torch.serialization.set_crc32_options(False)`` saves 0 for every record, which torch loads."""
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if info.CRC == 0:
                    continue
                try:
                    with archive.open(info) as record:
                        while record.read(CHUNK):  # zipfile compares the CRC-32 once the record is read whole
                            pass
                except zipfile.BadZipFile:
                    raise damaged(path, f"its record {info.filename} fails its CRC-32 check (the file was changed or "
                                        "damaged after torch.save wrote it)") from None  # fmt: skip
    except (zipfile.BadZipFile, EOFError) as exc:
        raise damaged(path, f"it is a torch file, damaged or cut short ({type(exc).__name__}: {exc})") from None
    except OSError as exc:  # deleted or made unreadable since torch.load read it
        raise damaged(path, f"it could not be read again to check it ({type(exc).__name__}: {exc})") from None


def check_tensors(path: Path, field: str, tensors: dict[str, Any], model: Mapping[str, torch.Tensor]) -> None:
    """Each of ``tensors`` (a checkpoint's ``weights`` or ``grads``) finite, and floating-point where the model's tensor
    of that name is (``model``: its state dict or trainable weights; an integer buffer may stay an integer)."""
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise damaged(path, f"its {field}' {name!r} is {type(t).__name__}, expected a tensor")
        own = model.get(name)
        if own is not None and own.is_floating_point() and not t.is_floating_point():
            raise damaged(path, f"its {field}' {name!r} is {t.dtype}, expected floating-point (the model's is "
                                f"{own.dtype})")  # fmt: skip
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise damaged(path, f"its {field}' {name!r} is not finite (NaN or inf): the run had diverged when it was "
                                "saved, or the file was changed")  # fmt: skip

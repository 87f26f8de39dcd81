"""Running out of memory, told apart from other failures (one test for the handlers, ``rlnb serve``'s session builds
and ``LocalBackend``'s), and the error a session's build that ran out raises: torch's CPU allocator said only
"[enforce fail at alloc_cpu.cpp:127] ...", and a load that ran out read as a refusal of the model. Torch-free:
``rlnb serve`` imports it without torch."""

from __future__ import annotations

import errno
import sys
from pathlib import Path
from typing import Any

from rlnb.errors import RlnbError

ALLOCATOR_TEXTS = ("DefaultCPUAllocator", "Cannot allocate memory")
"""What torch's CPU allocator (no error type of its own) and a failed mmap (ENOMEM's words) say."""


class ModelOutOfMemory(RlnbError, MemoryError):
    """A session's model did not fit in memory while it was built; the message says what it keeps and what to
    change."""


def out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc``, or an error it was raised from, is running out of memory: the host's ``MemoryError``, torch's
    ``OutOfMemoryError`` (CUDA), its CPU allocator's ``RuntimeError``, an ``OSError`` ENOMEM. An error raised while
    one was handled counts, unless raised ``from None``: that says the memory was not its cause."""
    torch = sys.modules.get("torch")  # an error torch raised means torch is imported
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, MemoryError) or torch is not None and isinstance(cause, torch.OutOfMemoryError):
            return True
        if isinstance(cause, OSError) and cause.errno == errno.ENOMEM:
            return True
        if isinstance(cause, RuntimeError) and any(t in str(cause) for t in ALLOCATOR_TEXTS):
            return True
        cause = cause.__cause__ or (None if cause.__suppress_context__ else cause.__context__)  # ``from None``: not it
    return False


def build_refusal(exc: BaseException, name: str, weights: tuple[int, str] | None, copies: int, options: Any,
                  device: Any, resuming: object = None) -> ModelOutOfMemory:  # fmt: skip
    """The error for a build that ran out (``exc``): the weights' bytes (``weights``: bytes and where counted, None
    if unknown) × the ``copies`` the session keeps, and the advice it has not taken already (``options``: its
    ``ModelOptions``); ``resuming``: the checkpoint (``resume_from``) the build was reading, named."""
    said = " ".join(f"{type(exc).__name__}: {exc}".split()).removesuffix(":")[:300]
    size = ""
    if weights is not None:
        held = "copies" if copies > 1 else "copy"
        size = (f": its weights take {weights[0] / 2**30:.3g} GiB ({weights[1]}), and this session keeps {copies} "
                f"{held} of them ({copies * weights[0] / 2**30:.3g} GiB) before training adds their gradients and the "
                "optimizer's state")  # fmt: skip
    advice = []
    if not options.lora:
        advice.append("lora=True (one copy of the base weights; small adapters train)")
    if options.num_generator_replicas:
        advice.append("num_generator_replicas=0 (no sampler copy: a session that only trains)")
    if options.dtype in ("auto", "float32"):  # full-weight: the optimizer's float32 masters come with the build
        full = ", with lora=True: full-weight training keeps a float32 master of each weight it trains"
        advice.append(f"dtype='bfloat16' (half the bytes of float32{'' if options.lora else full})")
    advice.append("a smaller model, or memory freed")
    source = f" from the checkpoint {str(resuming)!r} (resume_from)" if resuming is not None else ""
    return ModelOutOfMemory(f"out of memory building the session's model {name} on {device}{source}{size}. To fit: "
                            f"{', '.join(advice)}. ({said})")  # fmt: skip


def weights_of(model: object, trainer: Any) -> tuple[int, str] | None:
    """The bytes of a session's weights and how they were counted: the built model's (or a ``model=`` module's)
    parameters, else the weight files transformers loads from a Hugging Face folder; None where neither is known."""
    module = trainer if trainer is not None else model if hasattr(model, "parameters") else None
    if module is not None:
        params = list(module.parameters())
        dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in params})
        return sum(p.numel() * p.element_size() for p in params), "/".join(dtypes)
    folder = Path(str(model))
    if not isinstance(model, str) or not folder.is_dir():
        return None
    # what transformers loads: the safetensors weights (shards too) where there are any; never a Trainer's optimizer.pt
    files = sorted(folder.glob("model*.safetensors")) or sorted(folder.glob("pytorch_model*.bin"))
    return (sum(f.stat().st_size for f in files), "on disk") if files else None

"""The memory an ensemble holds at once, checked before its members' models are built.

Every member's weights, gradients, optimizer state, KV cache and activations are held together (one forward and one
backward for all), so memory grows with the members: ~14 MB per ``tiny`` member on the digits task. Nothing checked
it up front: an ensemble far past the memory built a model per member and, where Linux overcommits memory, was
killed by the kernel, with no error naming the ensemble. ``check_memory`` compares an estimate (``member_bytes``)
with the memory free now (``rlnb.engine.memory.free_memory``: CUDA's, or the host's and its cgroup's) and refuses an
ensemble that cannot fit, naming ``members`` and the most that fit. ``build_members`` checks again as each member's
model is built, and the members the memory no longer holds fail alone (``RESOURCE_EXHAUSTED``, ``MemberResult.built``
False, no run folder), to be run again (a sweep does so).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import torch
from torch import nn

from rlnb.batched.reasons import failure_reason
from rlnb.engine.memory import free_memory
from rlnb.engine.models.tiny import TinyConfig
from rlnb.engine.oom import out_of_memory
from rlnb.errors import describe
from rlnb.wire import OperationErrorCode as Code

T = TypeVar("T")

STATUS = Path("/proc/self/status")
"""Linux's account of this process: its mapped size (``VmSize``), which ``ulimit -v`` bounds."""

STATE_COPIES = 7
"""Copies of a member's parameters held at once: its module as built, its row of the stacked weights, the
forward's copy of them, the gradient, the backward's gradient before it is gathered, and AdamW's two moments
(Muon's momentum takes the place of one of them)."""
ACTIVATIONS_PER_LAYER = 17
"""Values of width ``n_embd`` that the backward keeps per layer, row and token: the two layer norms, q, k and v, the
attention's output and projection, the MLP's 4x-wide input and activation, and the residual stream."""


class EnsembleTooLarge(ValueError):
    """More members than the free memory holds; ``most`` fit (0: not one), so a caller may run them in smaller
    ensembles (a sweep does)."""

    def __init__(self, message: str, most: int) -> None:
        super().__init__(message)
        self.most = most


def member_bytes(config: TinyConfig, parameters: int, rows: int, tokens: int, itemsize: int = 4) -> int:
    """Bytes one member holds at the peak of a step: ``parameters`` times ``STATE_COPIES``, and per sampled row and
    token its KV cache (keys and values of every layer), the activations the backward keeps (``n_embd`` wide,
    ``ACTIVATIONS_PER_LAYER`` per layer, plus attention's scores, mask and weights over ``tokens`` keys per head)
    and its logits with their log-softmax, probabilities and gradient (``vocab_size`` wide, four times). On the digits
    task it is a little under the process's measured peak growth per member: 13.0 MiB of 14.4 (``tiny``, Adam; of
    13.6 with Muon), 50.9 of 52.6 (``small``), so an ensemble it refuses would not have fit."""
    c = config
    per_token = 2 * c.n_layer * c.n_embd + c.n_layer * (ACTIVATIONS_PER_LAYER * c.n_embd + 3 * c.n_head * tokens)
    per_token += 4 * c.vocab_size
    return itemsize * (STATE_COPIES * parameters + rows * tokens * per_token)


def check_memory(model: str, members: int, module: nn.Module, rows: int, tokens: int, device: torch.device) -> None:
    """``EnsembleTooLarge`` (a ``ValueError``) naming ``members`` and the most that fit when ``members`` members of
    ``module`` (``rows`` sampled rows of ``tokens`` tokens each per step) would need more than the memory free on
    ``device`` now; nothing where that cannot be read."""
    each = _each(module, rows, tokens)
    free, where = room(device)
    if free is None or members * each <= free:
        return
    raise EnsembleTooLarge(
        f"members: an ensemble of {members} {model!r} members holds ~{members * each / 2**30:.2f} GiB at once "
        f"(~{each / 2**20:.1f} MiB each: weights, gradients, optimizer state, KV cache and activations of {rows} rows "
        f"x {tokens} tokens), more than the {free / 2**30:.2f} GiB {where}: at most {free // each} members "
        "here; pass fewer per call (a sweep's ensembles hold up to 32)",
        int(free // each),
    )


def build_members(
    members: int, module: nn.Module, rows: int, tokens: int, device: torch.device, build: Callable[[int], T]
) -> tuple[list[T], str | None]:
    """``build(i)`` for members 1 to ``members - 1`` (member 0's ``module`` is built), each only once the memory free
    now still holds it and those built before it (``check_memory`` at the ensemble's start is one snapshot: what
    others took since, another ensemble or a trial on a thread, left the last members to exhaust it, and the whole
    ensemble with them). The members built, and why the others were not (None: all were)."""
    each, held = _each(module, rows, tokens), _parameter_bytes(module)
    built: list[T] = []
    for i in range(1, members):
        free, where = room(device)
        need = (i + 1) * each - (i - 1) * held  # as check_memory counts: the i - 1 modules built since are in use now
        if free is not None and need > free:
            return built, failure_reason(
                Code.RESOURCE_EXHAUSTED,
                f"member {i}'s model was not built: with it the {i + 1} members built so "
                f"far need ~{need / 2**30:.2f} GiB more (~{each / 2**20:.1f} MiB each), more than the "
                f"{free / 2**30:.2f} GiB {where} now (the memory shrank since the ensemble's start); members {i} to "
                f"{members - 1} did not train: run them again, or fewer at once",
            )
        try:
            built.append(build(i))
        except Exception as exc:  # torch's CPU allocator raises a plain RuntimeError: ``out_of_memory`` reads it
            if not out_of_memory(exc):
                raise
            return (
                built,
                failure_reason(
                    Code.RESOURCE_EXHAUSTED,
                    f"member {i}'s model could not be built ({describe(exc)}); "
                    f"members {i} to {members - 1} did not train: run them again, or fewer at once",
                ),
            )
    return built, None


def room(device: torch.device) -> tuple[int | None, str]:
    """The bytes an ensemble may still take on ``device`` (None: unknown) and where they are, in words."""
    free, where = free_memory(device), f"free on {device}"
    mappable = address_space_left() if device.type == "cpu" else None
    if mappable is not None and (free is None or mappable < free):
        free, where = mappable, "this process may still map (ulimit -v)"
    return free, where


def _each(module: nn.Module, rows: int, tokens: int) -> int:
    first = next(module.parameters())
    parameters = sum(p.numel() for p in module.parameters())
    return member_bytes(module.config, parameters, rows, tokens, first.element_size())  # type: ignore[arg-type]


def _parameter_bytes(module: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters())


def address_space_left() -> int | None:
    """What ``ulimit -v`` (``RLIMIT_AS``) leaves this process to map: the limit less its mapped size now; None where
    there is no limit or it cannot be read (no ``/proc``). Under it the free memory is no bound: 400 ``tiny`` members
    under 3 GB failed ``RESOURCE_EXHAUSTED`` only after 26 s of building and sampling."""
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return None
    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    if limit == resource.RLIM_INFINITY:
        return None
    try:
        with STATUS.open() as status:
            mapped = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return max(0, int(limit) - mapped)

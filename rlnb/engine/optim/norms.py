"""The pre-clip gradient norm and the clip factor, a session's step (``TrainerOptimizer``) and a batched run's
(``rlnb.batched.optim``) alike: one place, so that both clip and report as ``torch.nn.utils.clip_grad_norm_`` does."""

from __future__ import annotations

import torch
from torch import Tensor

CLIP_EPS = 1e-6  # torch.nn.utils.clip_grads_with_norm_: coef = max_norm / (total_norm + 1e-6)


def norm_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a norm of ``dtype`` gradients is taken in, a session's (``total_norm``) and a batched run's alike:
    float32 for float16 ones (past 65504 their norm was inf though each was finite, and the step failed instead of
    clipping them), else their own, as ``get_total_norm`` takes it."""
    return torch.float32 if dtype == torch.float16 else dtype


def total_norm(grads: list[Tensor]) -> Tensor:
    """The global 2-norm of ``grads``, ``get_total_norm``'s (``clip_grad_norm_``'s, bit for bit), in ``norm_dtype``."""
    if any(norm_dtype(d) != d for d in {g.dtype for g in grads}):  # a call per dtype, not per gradient
        norms = [torch.linalg.vector_norm(g, dtype=norm_dtype(g.dtype)) for g in grads]
        return torch.linalg.vector_norm(torch.stack(norms))
    return torch.nn.utils.get_total_norm(grads)


def wide_norm(grads: list[Tensor], like: Tensor) -> Tensor:
    """``total_norm`` taken again in float64, returned in ``like``'s dtype: where that overflowed (float32's and
    bfloat16's sum of squares passes 3.4e38 once the norm passes 1.8e19) though every gradient is finite. Inf still
    where the norm itself is past ``like``'s range."""
    norms = [torch.linalg.vector_norm(g, dtype=torch.float64) for g in grads]
    return torch.linalg.vector_norm(torch.stack(norms)).to(like.dtype) if norms else like.new_zeros(())


def clip_coefficient(max_norm: float | Tensor, total: Tensor) -> Tensor:
    """The factor ``clip_grads_with_norm_`` multiplies the gradients by, min(1, max_norm / (total + 1e-6)), computed as
    it computes it, in ``total``'s dtype: what a step reports is what it applied. Worked in Python's float64,
    grad_clip_norm 1e-300 was reported as 5e-302 while the gradients became exactly 0 (1e-300 is 0 in float32)."""
    return (max_norm / (total + CLIP_EPS)).clamp(max=1.0)


CLIPS_MARGIN = 1.1
"""How far past the norm ``max_norm`` must be for ``clips`` to answer in Python: the factor's float32 (or bfloat16)
arithmetic rounds by far less than 10%."""


def clips(max_norm: float, grad_norm: float) -> bool:
    """Whether the clip factor may be below 1 (``max_norm`` > 0 and not well above ``grad_norm + CLIP_EPS``). False
    means ``clip_coefficient`` is exactly 1: its 4 ops and a host sync a step, and the multiply by 1, are skipped."""
    return max_norm > 0 and not max_norm > CLIPS_MARGIN * (grad_norm + CLIP_EPS)


def scale_grads(grads: list[Tensor], coef: Tensor) -> None:
    """Multiply ``grads`` by ``clip_coefficient``'s factor in place, as ``clip_grads_with_norm_`` does once it has
    computed that factor again (4 ops): one foreach multiply per device."""
    for device in {g.device for g in grads}:
        torch._foreach_mul_([g for g in grads if g.device == device], coef.to(device))

"""Muon's maths: Newton-Schulz orthogonalisation and the momentum update, as pure tensor functions.

Muon (Keller Jordan, github.com/KellerJordan/Muon, muon.py) replaces each hidden weight matrix's
momentum update by the nearest semi-orthogonal matrix, so every direction of the matrix moves at a
similar rate. It is only defined for 2-D hidden weights: embeddings, the output head, norms and biases
stay on AdamW (``rlnb.engine.optim.split``). The Muon update of one matrix ``W`` (rows x cols) with gradient
``G``, learning rate η, weight decay λ, momentum β and k Newton-Schulz steps is::

    B ← β·B + (1 - β)·G                  momentum as an EMA (B starts at 0)
    U ← (1 - β)·G + β·B                  Nesterov look-ahead
    O ← NS_k(U)                          ≈ U (UᵀU)^(-1/2), see newton_schulz
    W ← W·(1 - η·λ)                      decoupled weight decay, as AdamW
    W ← W - η·s·O                        s = max(1, rows/cols)^½                 ("original", KJ)
                                         s = 0.2·max(rows, cols)^½               ("match_adam", Moonshot)

``TrainerOptimizer`` (``rlnb.engine.optim.trainer``) applies it.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import torch
from torch import Tensor

from rlnb import wire

NS_COEFFS = (3.4445, -4.7750, 2.0315)
"""Quintic Newton-Schulz coefficients (a, b, c) of KellerJordan/Muon ``zeropower_via_newtonschulz5``.

Tuned to maximise the slope at zero, so that small singular values grow fast in few steps; the price is
that singular values land around Uniform(0.5, 1.5) instead of at exactly 1, which KJ found not to hurt."""
NS_EPS = 1e-7  # KellerJordan/Muon: keeps the Frobenius normalisation finite for an all-zero update
MATCH_ADAM_RMS = 0.2  # Moonshot, "Muon is Scalable for LLM Training" (arXiv:2502.16982) section 2.2


@functools.cache
def cpu_has_fast_bf16() -> bool:
    """Whether this CPU multiplies bf16 matrices in hardware (AVX512-BF16 or AMX-BF16), from its feature
    flags: the same answer in every process on the machine, unlike a timing.

    Without those units bf16 matmul is emulated and runs 14-100x slower than fp32; with them it runs
    about 2x faster. A cap on torch's or oneDNN's instruction set (``ATEN_CPU_CAPABILITY``,
    ``ONEDNN_MAX_CPU_ISA``) below AVX-512 turns the units off, so it counts too. Non-x86 CPUs: fp32."""
    if torch.backends.cpu.get_cpu_capability() not in ("AVX512", "AVX512_BF16", "AMX"):
        return False
    isa = os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL").upper()
    if isa not in ("ALL", "DEFAULT") and "BF16" not in isa and "AMX" not in isa:
        return False
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    flags = set(next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines() if line.startswith("flags")), []))
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def ns_dtype_for(device: torch.device) -> torch.dtype:
    """Newton-Schulz compute dtype: bf16 on CUDA (KJ's choice) and on CPUs with bf16 matmul units,
    fp32 on the others (where bf16 would be 14-100x slower). Decided from the hardware, never timed."""
    if device.type == "cuda" or (device.type == "cpu" and cpu_has_fast_bf16()):
        return torch.bfloat16
    return torch.float32


def newton_schulz(G: Tensor, steps: int, dtype: torch.dtype | None = None) -> Tensor:
    """Orthogonalise ``G`` ``[rows, cols]`` (or a stack ``[k, rows, cols]``): ≈ U·Vᵀ where G = U·S·Vᵀ.

    Quintic Newton-Schulz iteration of KellerJordan/Muon ``zeropower_via_newtonschulz5``::

        X ← G / (‖G‖_F + 1e-7)                          (transposed first when rows > cols)
        repeat ``steps`` times:  A = X·Xᵀ;  X ← a·X + (b·A + c·A²)·X      with (a, b, c) = NS_COEFFS

    Each step maps every singular value σ of X to a·σ + b·σ³ + c·σ⁵ and leaves the singular vectors
    alone. Dividing by the Frobenius norm puts all σ in [0, 1], where the iteration pushes them towards 1.
    Transposing tall matrices makes A the smaller Gram matrix. A stack is orthogonalised matrix by matrix
    with batched matmuls, which on CPU is faster than a Python loop over equal-shaped matrices.

    ``dtype`` is the compute dtype; None means fp32 (exact enough to test against). The optimizer
    passes ``ns_dtype_for(device)``. The result has G's dtype.
    """
    if G.ndim not in (2, 3):
        raise ValueError(f"newton_schulz needs a matrix [rows, cols] or a stack [k, rows, cols], got {tuple(G.shape)}")
    dtype = dtype or torch.float32
    a, b, c = NS_COEFFS
    X = G.to(dtype).reshape(-1, *G.shape[-2:])  # [k, rows, cols]
    tall = G.size(-2) > G.size(-1)
    if tall:
        X = X.mT  # [k, cols, rows]
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + NS_EPS)
    for _ in range(steps):
        A = X @ X.mT  # [k, m, m], m = min(rows, cols)
        B = torch.baddbmm(A, A, A, beta=b, alpha=c)  # b·A + c·A²
        X = torch.baddbmm(X, B, X, beta=a)  # a·X + B·X
    if tall:
        X = X.mT
    return X.reshape(G.shape).to(G.dtype)


def shape_scale(rows: int, cols: int, scaling: wire.MuonScaling) -> float:
    """The update's scale s for a ``rows`` x ``cols`` matrix (module docstring): "original" or "match_adam"; another
    name is a ``ValueError`` (a misspelt one was read as "match_adam")."""
    if wire.muon_scaling(scaling) == wire.MUON_ORIGINAL:
        return float(max(1.0, rows / cols) ** 0.5)
    return float(MATCH_ADAM_RMS * max(rows, cols) ** 0.5)


def muon_update(
    grad: Tensor,
    momentum_buffer: Tensor,
    beta: float | Tensor,
    ns_steps: int,
    nesterov: bool = True,
    dtype: torch.dtype | None = None,
) -> Tensor:
    """Muon's direction for ``grad`` (a matrix or a stack of them): momentum, Nesterov, then NS.

    Updates ``momentum_buffer`` in place (B ← β·B + (1 - β)·G) and leaves ``grad`` alone; returns
    NS(U) with U = (1 - β)·G + β·B when ``nesterov`` else B. ``beta`` may be a tensor that broadcasts against a
    stack (one momentum per matrix: batched trials). Learning rate, shape scale and weight decay
    are the caller's. KJ's version lerps into ``grad``; not mutating it keeps a raised step side-effect free.
    """
    momentum_buffer.lerp_(grad, 1 - beta)
    update = grad.lerp(momentum_buffer, beta) if nesterov else momentum_buffer
    return newton_schulz(update, ns_steps, dtype)

"""The optimizers behind optim-step: AdamW, or Muon for hidden matrices with AdamW for the rest.

Together's optim-step carries the hyperparameters of *this* step (``adam_params`` or ``muon_params``),
so the caller owns the schedule: ``TrainerOptimizer.step(hp)`` writes them into the optimizer every
call instead of fixing them at construction. The optimizer kind is fixed per session.

Muon (Keller Jordan, github.com/KellerJordan/Muon, muon.py) replaces each hidden weight matrix's
momentum update by the nearest semi-orthogonal matrix, so every direction of the matrix moves at a
similar rate. It is only defined for 2-D hidden weights: embeddings, the output head, norms and biases
stay on AdamW (``split_params``). The Muon update of one matrix ``W`` (rows x cols) with gradient ``G``,
learning rate η, weight decay λ, momentum β and k Newton-Schulz steps is::

    B ← β·B + (1 - β)·G                  momentum as an EMA (B starts at 0)
    U ← (1 - β)·G + β·B                  Nesterov look-ahead
    O ← NS_k(U)                          ≈ U (UᵀU)^(-1/2), see newton_schulz
    W ← W·(1 - η·λ)                      decoupled weight decay, as AdamW
    W ← W - η·s·O                        s = max(1, rows/cols)^½                 ("original", KJ)
                                         s = 0.2·max(rows, cols)^½               ("match_adam", Moonshot)
"""

from __future__ import annotations

import copy
import functools
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

import torch
from torch import Tensor, nn

from rlnb.params import ADAM_FIELDS, MUON_FIELDS, AdamParams, MuonParams, Resolved

NS_COEFFS = (3.4445, -4.7750, 2.0315)
"""Quintic Newton-Schulz coefficients (a, b, c) of KellerJordan/Muon ``zeropower_via_newtonschulz5``.

Tuned to maximise the slope at zero, so that small singular values grow fast in few steps; the price is
that singular values land around Uniform(0.5, 1.5) instead of at exactly 1, which KJ found not to hurt."""
NS_EPS = 1e-7  # KellerJordan/Muon: keeps the Frobenius normalisation finite for an all-zero update
CLIP_EPS = 1e-6  # torch.nn.utils.clip_grads_with_norm_: coef = max_norm / (total_norm + 1e-6)
MATCH_ADAM_RMS = 0.2  # Moonshot, "Muon is Scalable for LLM Training" (arXiv:2502.16982) section 2.2


@functools.cache
def _cpu_bf16_is_faster() -> bool:
    """Whether this CPU multiplies bf16 matrices faster than fp32, measured once (a few ms).

    CPUs with only AVX2 run bf16 matmul 40-100x slower than fp32; CPUs with AVX512-BF16 or AMX run it
    faster. Neither can be read reliably from torch, so time one 256x256 product of each."""
    x = torch.randn(256, 256)

    def best(t: Tensor) -> float:
        t @ t  # warm-up: first call pays for kernel selection
        runs = []
        for _ in range(3):
            start = time.perf_counter()
            t @ t
            runs.append(time.perf_counter() - start)
        return min(runs)

    return best(x.bfloat16()) < best(x)


def ns_dtype_for(device: torch.device) -> torch.dtype:
    """Newton-Schulz compute dtype: bf16 on CUDA (KJ's choice) and on CPUs with fast bf16 matmul,
    fp32 on the others (where bf16 would be 40-100x slower)."""
    if device.type == "cuda" or (device.type == "cpu" and _cpu_bf16_is_faster()):
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


def muon_update(
    grad: Tensor,
    momentum_buffer: Tensor,
    beta: float,
    ns_steps: int,
    nesterov: bool = True,
    dtype: torch.dtype | None = None,
) -> Tensor:
    """Muon's direction for ``grad`` (a matrix or a stack of them): momentum, Nesterov, then NS.

    Updates ``momentum_buffer`` in place (B ← β·B + (1 - β)·G) and leaves ``grad`` alone; returns
    NS(U) with U = (1 - β)·G + β·B when ``nesterov`` else B. Learning rate, shape scale and weight decay
    are the caller's. KJ's version lerps into ``grad``; not mutating it keeps a raised step side-effect free.
    """
    momentum_buffer.lerp_(grad, 1 - beta)
    update = grad.lerp(momentum_buffer, beta) if nesterov else momentum_buffer
    return newton_schulz(update, ns_steps, dtype)


@dataclass
class ParamSplit:
    """Which trainable parameters Muon updates and which AdamW updates, as (name, parameter) pairs."""

    muon: list[tuple[str, nn.Parameter]]
    adam: list[tuple[str, nn.Parameter]]

    def describe(self) -> str:
        """One row per parameter (group, name, shape, size) and a count per group."""
        rows = [("muon", n, p) for n, p in self.muon] + [("adam", n, p) for n, p in self.adam]
        width = max([len(n) for _, n, _ in rows] + [4])
        lines = [f"{'group':<6} {'name':<{width}} {'shape':<14} {'params':>10}"]
        for g, n, p in rows:
            shape = "x".join(map(str, p.shape)) or "scalar"
            lines.append(f"{g:<6} {n:<{width}} {shape:<14} {p.numel():>10,}")
        for group, members in (("muon", self.muon), ("adam", self.adam)):
            lines.append(f"{group}: {len(members)} tensors, {sum(p.numel() for _, p in members):,} params")
        return "\n".join(lines)


def split_params(model: nn.Module, vocab_size: int | None = None) -> ParamSplit:
    """Muon gets the 2-D hidden matrices; AdamW gets everything else.

    AdamW's share: parameters of ``nn.Embedding`` modules (a lookup table gets sparse row gradients,
    not a matrix-shaped update), the output head, and every parameter that is not 2-D (norms, biases,
    scalars). The output head is the model's last 2-D parameter when its first dimension (a Linear's
    out_features) equals ``vocab_size``. Matching *any* matrix with a vocab-sized dimension would
    misroute hidden matrices whose width happens to equal the vocabulary (the tiny model's MLP is 4·64
    = 256 wide, like its byte vocabulary). ``vocab_size`` None reads ``model.config.vocab_size`` when
    there is one. Frozen parameters (requires_grad False) belong to neither group.
    """
    if vocab_size is None:
        vocab_size = getattr(getattr(model, "config", None), "vocab_size", None)
    embedding = {id(p) for m in model.modules() if isinstance(m, nn.Embedding) for p in m.parameters()}
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    matrices = [(n, p) for n, p in named if p.ndim == 2 and id(p) not in embedding]
    if matrices and matrices[-1][1].shape[0] == vocab_size:
        matrices.pop()  # the output head
    in_muon = {id(p) for _, p in matrices}
    return ParamSplit(muon=matrices, adam=[(n, p) for n, p in named if id(p) not in in_muon])


class NonFiniteGradient(Exception):
    """The pre-clip gradient norm is NaN or infinite; ``step`` raised before changing anything."""

    def __init__(self, grad_norm: float, names: list[str]) -> None:
        where = ", ".join(names) if names else "none (the norm itself overflowed)"
        super().__init__(f"gradient norm is {grad_norm}; non-finite gradients in: {where}")
        self.grad_norm = grad_norm
        self.names = names


@dataclass
class StepStats:
    grad_norm: float  # global L2 norm of all gradients, before clipping
    grad_norm_muon: float | None  # the Muon group's share (muon kind only)
    grad_norm_adam: float | None  # the AdamW group's share (muon kind only)
    clipped: bool  # gradients were scaled down
    clip_coef: float  # factor applied to the gradients: min(1, max_norm / (grad_norm + 1e-6)); 1 when off
    learning_rate: float  # the step's top-level learning rate (AdamW's or Muon's)
    adam_learning_rate: float | None  # muon kind: the learning rate of the AdamW group


def _validate(hp: Any, cls: type[AdamParams] | type[MuonParams], keys: tuple[str, ...], where: str) -> None:
    """Every key present, each within the API's bounds (the rules of ``rlnb.params``, not a copy)."""
    if not isinstance(hp, Mapping):
        raise ValueError(f"{where} must be a mapping, got {type(hp).__name__}")
    missing = [k for k in keys if k not in hp]
    if missing:
        raise ValueError(f"{where} is missing {', '.join(missing)}")
    if not isinstance(hp, Resolved):  # ``params.resolve`` output was checked once already (issue 10)
        cls(**{k: hp[k] for k in keys})  # raises InvalidParams (a ValueError) naming the field and the range


class TrainerOptimizer:
    """One training session's optimizer: ``kind`` "adam" (AdamW on everything) or "muon".

    ``step(hp)`` runs, in this order:

    1. g = ‖(∇θ for every trainable θ with a gradient)‖₂, the pre-clip global norm, computed as
       ``clip_grad_norm_`` does (same call, same order) so that clipping matches it bit for bit; for
       Muon also the norm of each group (g² = g_muon² + g_adam² up to rounding).
    2. g not finite → ``NonFiniteGradient``; parameters, gradients and optimizer state are untouched
       (the caller decides what to do with the gradients).
    3. grad_clip_norm c > 0: ∇ ← ∇·min(1, c / (g + 1e-6)) on all gradients, exactly
       ``torch.nn.utils.clip_grad_norm_``; c = 0 turns clipping off. For Muon the top-level
       ``grad_clip_norm`` is this global clip and ``hp["adam"]["grad_clip_norm"]`` is ignored: one
       norm over the whole model, so the two groups keep their relative scale.
    4. AdamW (``torch.optim.AdamW``, foreach) with this step's lr, betas, eps and weight decay, on all
       parameters (adam kind) or on the AdamW group with ``hp["adam"]`` (muon kind).
    5. Muon kind: the module docstring's update on each hidden matrix, batched over equal shapes.

    ``muon_scaling`` picks the shape scale s: "original" (KJ) or "match_adam" (Moonshot: gives Muon's
    update the RMS of an AdamW update, so AdamW's learning rate and weight decay carry over; the same
    as ``torch.optim.Muon(adjust_lr_fn="match_rms_adamw")``).
    """

    def __init__(
        self,
        model: nn.Module,
        kind: Literal["adam", "muon"],
        vocab_size: int | None = None,
        muon_scaling: Literal["original", "match_adam"] = "original",
        ns_dtype: torch.dtype | None = None,
    ) -> None:
        if kind not in ("adam", "muon"):
            raise ValueError(f"kind must be 'adam' or 'muon', got {kind!r}")
        if muon_scaling not in ("original", "match_adam"):
            raise ValueError(f"muon_scaling must be 'original' or 'match_adam', got {muon_scaling!r}")
        self.kind = kind
        self.muon_scaling = muon_scaling
        first = next(model.parameters(), None)
        device = first.device if first is not None else torch.device("cpu")
        # Only Muon runs Newton-Schulz: an Adam session never pays for the dtype probe.
        self.ns_dtype = ns_dtype or (ns_dtype_for(device) if kind == "muon" else torch.float32)
        """Newton-Schulz compute dtype (default: ``ns_dtype_for`` the model's device)."""
        if kind == "muon":
            self.split = split_params(model, vocab_size)
        else:
            self.split = ParamSplit(muon=[], adam=[(n, p) for n, p in model.named_parameters() if p.requires_grad])
        self._named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]  # model order
        if not self._named:
            raise ValueError("the model has no trainable parameters")
        adam_params = [p for _, p in self.split.adam]
        self._adamw = torch.optim.AdamW(adam_params, foreach=True) if adam_params else None
        # Muon matrices grouped by shape: each group is orthogonalised as one stacked batch. Measured on a
        # 2-core CPU, a Muon step is 22% faster than matrix by matrix for "tiny" and 3% at n_embd 256
        # (stacking costs copies; the batched matmuls win back more).
        self._muon_groups: dict[tuple[int, int], list[tuple[str, nn.Parameter]]] = {}
        for name, p in self.split.muon:
            self._muon_groups.setdefault((p.shape[0], p.shape[1]), []).append((name, p))
        self.momentum: dict[str, Tensor] = {}  # Muon's buffer B per matrix, by name; created at first use

    @torch.no_grad()
    def step(self, hp: Mapping[str, Any]) -> StepStats:
        """Clip and apply this step's update; ``hp`` holds every key of adam_params / muon_params."""
        if self.kind == "muon":
            _validate(hp, MuonParams, MUON_FIELDS, "muon_params")
            _validate(hp.get("adam"), AdamParams, ADAM_FIELDS, "muon_params.adam")
            adam_hp = hp["adam"]
        else:
            _validate(hp, AdamParams, ADAM_FIELDS, "adam_params")
            adam_hp = hp

        get_total_norm = torch.nn.utils.get_total_norm
        total = get_total_norm([p.grad for _, p in self._named if p.grad is not None])
        grad_norm = total.item()
        norm_muon = norm_adam = None
        if self.kind == "muon":
            norm_muon, norm_adam = (
                get_total_norm([p.grad for _, p in group if p.grad is not None]).item()
                for group in (self.split.muon, self.split.adam)
            )
        if not math.isfinite(grad_norm):
            bad = [n for n, p in self._named if p.grad is not None and not p.grad.isfinite().all()]
            raise NonFiniteGradient(grad_norm, bad)

        max_norm = hp["grad_clip_norm"]
        clip_coef = min(1.0, max_norm / (grad_norm + CLIP_EPS)) if max_norm > 0 else 1.0
        if max_norm > 0:
            torch.nn.utils.clip_grads_with_norm_([p for _, p in self._named], max_norm, total)

        if self._adamw is not None:
            for group in self._adamw.param_groups:
                group.update(
                    lr=adam_hp["learning_rate"],
                    betas=(adam_hp["beta1"], adam_hp["beta2"]),
                    eps=adam_hp["eps"],
                    weight_decay=adam_hp["weight_decay"],
                )
            self._adamw.step()
        if self.kind == "muon":
            self._muon_step(hp)

        return StepStats(
            grad_norm=grad_norm,
            grad_norm_muon=norm_muon,
            grad_norm_adam=norm_adam,
            clipped=clip_coef < 1.0,
            clip_coef=clip_coef,
            learning_rate=hp["learning_rate"],
            adam_learning_rate=adam_hp["learning_rate"] if self.kind == "muon" else None,
        )

    def _muon_step(self, hp: Mapping[str, Any]) -> None:
        lr, wd = hp["learning_rate"], hp["weight_decay"]
        for (rows, cols), members in self._muon_groups.items():
            live = [(n, p) for n, p in members if p.grad is not None]
            if not live:
                continue
            for n, p in live:
                if n not in self.momentum:
                    self.momentum[n] = torch.zeros_like(p)
            bufs = [self.momentum[n] for n, _ in live]
            grad = torch.stack([cast(Tensor, p.grad) for _, p in live])  # [k, rows, cols]
            buf = torch.stack(bufs)  # [k, rows, cols]
            update = muon_update(grad, buf, hp["momentum"], int(hp["newton_schulz_steps"]), dtype=self.ns_dtype)
            for b, new in zip(bufs, buf.unbind(0), strict=True):  # the stacked buffer back into per-matrix state
                b.copy_(new)
            if self.muon_scaling == "original":
                scale = max(1.0, rows / cols) ** 0.5
            else:
                scale = MATCH_ADAM_RMS * max(rows, cols) ** 0.5
            for (_, p), u in zip(live, update.unbind(0), strict=True):
                p.mul_(1 - lr * wd).add_(u, alpha=-lr * scale)

    def zero_grad(self) -> None:
        """Drop all gradients (set to None, so the next backward allocates fresh ones)."""
        for _, p in self._named:
            p.grad = None

    def state_dict(self) -> dict[str, Any]:
        """AdamW's state dict and Muon's momentum buffers by parameter name.

        Like ``torch.optim.Optimizer.state_dict`` the tensors are the live ones: clone or ``torch.save``
        to keep a snapshot.
        """
        return {
            "kind": self.kind,
            "adamw": self._adamw.state_dict() if self._adamw is not None else None,
            "momentum": dict(self.momentum),
        }

    def load_state_dict(self, sd: Mapping[str, Any]) -> None:
        """Restore from ``state_dict()`` of an optimizer of the same kind on the same architecture.

        Tensors are copied, so the source optimizer and this one never share state.
        """
        if sd.get("kind") != self.kind:
            raise ValueError(f"state is for a {sd.get('kind')!r} optimizer, this one is {self.kind!r}")
        matrices = dict(self.split.muon)
        for name, buf in sd["momentum"].items():
            if name not in matrices or buf.shape != matrices[name].shape:
                raise ValueError(f"momentum buffer {name!r} {tuple(buf.shape)} matches no Muon matrix of this model")
        if self._adamw is not None:
            # deepcopy: torch.optim.Optimizer.load_state_dict keeps the given tensors when dtype and
            # device already match, and two optimizers sharing exp_avg would each update it
            self._adamw.load_state_dict(copy.deepcopy(sd["adamw"]))
        self.momentum = {n: b.detach().to(matrices[n], copy=True) for n, b in sd["momentum"].items()}

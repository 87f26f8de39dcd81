"""The optimizer of a stacked model: AdamW, or Muon plus AdamW, with every member's own hyperparameters.

``TrainerOptimizer`` (``rlnb.engine.optim.trainer``) steps one session; here one step updates K members of a
``StackedModel`` at once, each with its own learning rate, betas, eps, weight decay, clip norm, momentum and
Newton-Schulz steps, held as ``[K, 1]`` tensors that broadcast over the members' rows. The maths is
``TrainerOptimizer.step``'s, in the same order (see its docstring), so a member's update equals the one its
trial alone would make, to float rounding:

1. per member, the pre-clip norm g of all its gradients (for Muon also of each group); ``norms()``;
2. a member whose g is not finite is dropped by the caller before ``step`` (its state stays as it was);
3. clipping ∇ ← ∇·min(1, c / (g + 1e-6)) with the member's c (c = 0: off), as ``clip_grads_with_norm_``, the factor
   reported as applied (``clip_coefficient``);
4. Muon: ``muon_update`` (momentum, Nesterov, Newton-Schulz) on every member's matrices of one shape as one
   stack ``[K * n, rows, cols]``, worked out on copies of the momentum and held: its allocations come before
   anything moves;
5. AdamW as ``torch.optim.AdamW(foreach=True)`` computes it: decay, moments, bias corrections, update —
   written out on the AdamW group's columns because torch's optimizer takes one scalar per hyperparameter;
6. Muon: the held updates applied in place, W ← W·(1 - η·λ) - η·s·O per member, and the momentum moved.

An exception in 1-4 (out of memory) changes nothing: ``StepFailed(trial=True)`` (``rlnb.engine.optim.failures``, a
trial's words) not half, the gradients zeroed; one in 5-6 (AdamW allocates after it has moved its weights) leaves every
member half-stepped, and ``StepFailed`` says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from rlnb import wire
from rlnb.batched.stacked import StackedModel
from rlnb.engine.optim.failures import StepFailed
from rlnb.engine.optim.limits import StepLimits
from rlnb.engine.optim.muon import muon_update, shape_scale
from rlnb.engine.optim.norms import clip_coefficient, norm_dtype, wide_norm
from rlnb.engine.optim.split import split_params
from rlnb.engine.optim.trainer import StepStats
from rlnb.params import AdamHyperparams, Hyperparams, MuonHyperparams, check_hyperparams


@dataclass
class Norms:
    """Per-member pre-clip gradient norms ``[K]``: all parameters, and for Muon each group."""

    total: Tensor
    muon: Tensor | None
    adam: Tensor | None

    def select(self, rows: Tensor) -> Norms:
        pick = lambda t: t.index_select(0, rows) if t is not None else None  # noqa: E731
        return Norms(self.total.index_select(0, rows), pick(self.muon), pick(self.adam))


def _column(values: Sequence[float], like: Tensor, dims: int = 2) -> Tensor:
    """Per-member values (computed in float64 by the caller, as torch computes its Python scalars) as a
    ``[K, 1, ...]`` tensor of the parameters' dtype, to broadcast over each member's row."""
    return torch.tensor(list(values), dtype=like.dtype, device=like.device).view(-1, *([1] * (dims - 1)))


def plan(
    model: nn.Module, kind: wire.OptimizerKind, roles: Sequence[nn.Parameter]
) -> tuple[list[str], list[list[str]]]:
    """The AdamW group's names and the Muon matrices' names grouped by shape, for one member of the ensemble:
    the split a session of this model makes (``split_params`` with the adapter's embedding roles), and the
    shape groups in the order ``TrainerOptimizer`` stacks them."""
    if kind == wire.ADAM:
        return [n for n, p in model.named_parameters() if p.requires_grad], []
    split = split_params(model, roles)
    groups: dict[tuple[int, ...], list[str]] = {}
    for name, p in split.muon:
        groups.setdefault(tuple(p.shape), []).append(name)
    return [n for n, _ in split.adam], list(groups.values())


def _contiguous(spans: Sequence[tuple[int, int]], start: int, what: str) -> int:
    """The end of ``spans`` if they tile the columns from ``start`` without a gap, in order."""
    for a, b in spans:
        if a != start:
            raise ValueError(f"{what} must lie in contiguous columns of the layout, in order")
        start = b
    return start


class StackedOptimizer:
    """AdamW (kind "adam") or Muon + AdamW (kind "muon") for every member of ``model``.

    ``adam`` names the AdamW group's parameters and ``muon`` the Muon matrices grouped by shape; the
    model's layout must hold the AdamW group first, then each Muon shape group contiguously.
    """

    def __init__(
        self,
        model: StackedModel,
        kind: wire.OptimizerKind,
        adam: Sequence[str],
        muon: Sequence[Sequence[str]] = (),
        muon_scaling: wire.MuonScaling = wire.MUON_ORIGINAL,
        ns_dtype: torch.dtype = torch.float32,
    ) -> None:
        self.model, self.kind, self.muon_scaling, self.ns_dtype = model, kind, muon_scaling, ns_dtype
        cols = model.columns
        self.adam_end = _contiguous([cols[n][:2] for n in adam], 0, "the AdamW group")
        self.groups: list[tuple[int, int, int, int, int]] = []
        """Muon shape groups: ``(start, stop, n, rows, cols)``, one stack of n matrices per member."""
        start = self.adam_end
        for names in muon:
            shape = cols[names[0]][2]
            if len(shape) != 2 or any(cols[n][2] != shape for n in names):  # a layer norm's vector: an IndexError
                raise ValueError(f"Muon group {list(names)} must hold matrices of one shape")
            stop = _contiguous([cols[n][:2] for n in names], start, f"Muon group {list(names)}")
            self.groups.append((start, stop, len(names), shape[0], shape[1]))
            start = stop
        left = [n for n, (a, _, _) in cols.items() if a >= start]
        if left:  # their gradients counted in the norms, and nothing updated them: every step left them as built
            raise ValueError(f"every weight must be in the AdamW group or a Muon group; in neither: {', '.join(left)}")
        K = model.members
        self.exp_avg = torch.zeros(K, self.adam_end, device=model.device, dtype=model.dtype)
        self.exp_avg_sq = torch.zeros_like(self.exp_avg)
        self.momentum = [
            torch.zeros(K * n, r, c, device=model.device, dtype=model.dtype) for *_, n, r, c in self.groups
        ]
        """Muon's buffer B of each shape group, ``[K * n, rows, cols]`` (member-major)."""
        self.steps = 0
        """AdamW's step count (every member steps together; a failed member leaves the ensemble)."""
        scales = [shape_scale(r, c, muon_scaling) for *_, r, c in self.groups]
        self.limits = StepLimits([model.dtype], [model.dtype] if scales else [], max(scales, default=1.0))
        """What a member's step must fit in the weights, as a session's optim-step checks it."""

    def keep(self, index: Sequence[int]) -> None:
        """Drop every member not in ``index`` (the model is told separately)."""
        rows = torch.tensor(list(index), dtype=torch.long, device=self.exp_avg.device)
        self.exp_avg = self.exp_avg.index_select(0, rows)
        self.exp_avg_sq = self.exp_avg_sq.index_select(0, rows)
        self.momentum = [
            buf.view(-1, n, r, c).index_select(0, rows).view(-1, r, c)
            for buf, (*_, n, r, c) in zip(self.momentum, self.groups, strict=True)
        ]

    @torch.no_grad()
    def norms(self) -> Norms:
        """As ``get_total_norm``: each parameter's norm, then the norm of those (one reduction over a whole
        row in float32 would be ~1e-6 off for a model of 150k weights), in a session's ``norm_dtype`` (float16's
        taken in float16 would be inf past 65504 though every gradient is finite). The optim-step's first
        allocations: an exception is ``StepFailed``, nothing moved, the gradients zeroed."""
        try:
            return self._norms()
        except Exception as exc:
            self.model.grad.zero_()
            raise StepFailed(exc, half=False, trial=True) from exc

    def _norms(self) -> Norms:
        g = self.model.grad
        dtype = norm_dtype(g.dtype)
        each = torch.stack(
            [torch.linalg.vector_norm(g[:, a:b], dim=1, dtype=dtype) for a, b, _ in self.model.columns.values()], 1
        )
        total = torch.linalg.vector_norm(each, dim=1)
        if self.kind == wire.ADAM:
            return Norms(total, None, None)
        starts = torch.tensor([a for a, _, _ in self.model.columns.values()], device=g.device)
        adam = starts < self.adam_end
        norm = torch.linalg.vector_norm
        return Norms(total, norm(each[:, ~adam], dim=1), norm(each[:, adam], dim=1))

    def non_finite(self, k: int, norms: Norms, max_norm: float) -> tuple[list[str], float]:
        """Member ``k``'s parameters whose gradient is not finite, in the model's order (as a session's step names
        them: ``NonFiniteGradient``), and its norm: every one finite and a clip on, taken again in float64 into
        ``norms`` to clip them by, as a session's step takes it (``wide_norm``)."""
        g, columns = self.model.grad[k], self.model.columns
        order = [name for name, _ in self.model.base.named_parameters()]
        bad = [n for n in order if not bool(torch.isfinite(g[columns[n][0] : columns[n][1]]).all())]
        if not bad and max_norm > 0:
            spans = [(a, b, a < self.adam_end) for a, b, _ in columns.values()]
            for part, adam in ((norms.total, None), (norms.muon, False), (norms.adam, True)):
                if part is not None:
                    part[k] = wide_norm([g[a:b] for a, b, is_adam in spans if adam in (None, is_adam)], part)
        return bad, float(norms.total[k])

    def refusal(self, hp: Hyperparams) -> str | None:
        """Why a session's optim-step on these weights would refuse ``hp`` (``INVALID_INPUT``, nothing changed: a decay
        that erases them, eps 0 in their dtype, a step size past it), or None."""
        try:
            check_hyperparams(self.kind, hp)
            self.limits.check(hp)
        except ValueError as exc:
            return str(exc)
        return None

    @torch.no_grad()
    def step(self, hps: Sequence[Hyperparams], norms: Norms) -> list[StepStats]:
        """Clip and update every member: ``hps[k]`` is member k's hyperparameters (``params.resolved()``),
        ``norms`` from ``norms()`` (all finite). Raises ``StepFailed`` (the gradients zeroed) where an exception
        stops it: not half before anything moved, half after (module docstring)."""
        if len(hps) != self.model.members:
            raise ValueError(f"{len(hps)} hyperparameter sets for {self.model.members} members")
        for hp in hps:
            check_hyperparams(self.kind, hp)
        muon_hps = [hp for hp in hps if isinstance(hp, MuonHyperparams)]  # all of them, or none
        adam_hps = [hp.adam if isinstance(hp, MuonHyperparams) else hp for hp in hps]
        grad_norms = norms.total.tolist()
        max_norms = [float(hp.grad_clip_norm) for hp in hps]
        try:  # a clipped gradient is dropped with the others
            coef = torch.ones_like(norms.total)
            if any(c > 0 for c in max_norms):
                # a session's clip_coefficient, c in the norms' dtype (in float16 weights' own, 1e5 was inf: no clip);
                # on where the given c > 0, as a session's (1e-300 is 0 in float32, yet clips to 0)
                c = _column(max_norms, norms.total)[:, 0]
                on = torch.tensor([c > 0 for c in max_norms], device=coef.device)
                coef = torch.where(on, clip_coefficient(c, norms.total), coef)
            coefs = coef.tolist()
            if any(f != 1.0 for f in coefs):  # a factor of 1 changes nothing: no pass over every gradient for it
                self.model.grad.mul_(coef[:, None])
            updates = self._muon_updates(muon_hps) if self.kind == wire.MUON else []
        except Exception as exc:
            self.model.grad.zero_()
            raise StepFailed(exc, half=False, trial=True) from exc
        try:
            if self.adam_end:
                self._adamw(adam_hps)
            self._muon_apply(updates)
            self.model.refresh()  # the forward's copies of the weights
        except Exception as exc:
            self.model.grad.zero_()
            raise StepFailed(exc, half=True, trial=True) from exc
        muon = norms.muon.tolist() if norms.muon is not None else None
        adam = norms.adam.tolist() if norms.adam is not None else None
        return [
            StepStats(
                grad_norm=grad_norms[k],
                grad_norm_muon=muon[k] if muon is not None else None,
                grad_norm_adam=adam[k] if adam is not None else None,
                clipped=coefs[k] < 1.0,
                clip_coef=coefs[k],
                learning_rate=hps[k].learning_rate,
                adam_learning_rate=adam_hps[k].learning_rate if self.kind == wire.MUON else None,
            )
            for k in range(len(hps))
        ]

    def _adamw(self, hps: Sequence[AdamHyperparams]) -> None:
        """``torch.optim.adamw._multi_tensor_adamw`` (no amsgrad, not capturable), one scalar per member."""
        self.steps += 1
        t = float(self.steps)
        p, g = self.model.flat[:, : self.adam_end], self.model.grad[:, : self.adam_end]
        col = lambda f: _column([f(hp) for hp in hps], p)  # noqa: E731
        p.mul_(col(lambda hp: 1 - hp.learning_rate * hp.weight_decay))
        self.exp_avg.lerp_(g, col(lambda hp: 1 - hp.beta1))
        self.exp_avg_sq.mul_(col(lambda hp: hp.beta2))
        self.exp_avg_sq.addcmul_(g * col(lambda hp: 1 - hp.beta2), g)
        step_size = col(lambda hp: (hp.learning_rate / (1 - hp.beta1**t)) * -1)
        # sqrt(v) / c + eps as torch's div_ then add_ round it, in one pass (addcdiv: eps + 1 * (sqrt(v) / c))
        denom = torch.addcdiv(col(lambda hp: hp.eps), self.exp_avg_sq.sqrt(), col(lambda hp: (1 - hp.beta2**t) ** 0.5))
        p.addcdiv_(self.exp_avg * step_size, denom)  # addcdiv(value=s) computes (s * m) / d, so s goes first

    def _muon_updates(self, hps: Sequence[MuonHyperparams]) -> list[tuple[Tensor, Tensor, Tensor]]:
        """Each shape group's update -η·s·O ``[K, n, rows, cols]`` (Newton-Schulz batched over the members that share
        a step count), its decay factors 1 - η·λ and its momentum's lerp weights 1 - β, worked out on copies of the
        momentum: the step's allocations, before anything moves. Held until ``_muon_apply``: as much memory again as
        every member's Muon matrices, and while one group is worked out its gradient's and momentum's copies and
        Newton-Schulz's own."""
        K, out = self.model.members, []
        ns_steps = [hp.newton_schulz_steps for hp in hps]
        distinct = sorted(set(ns_steps))
        for (start, stop, n, rows, cols), buf in zip(self.groups, self.momentum, strict=True):
            grad = self.model.grad[:, start:stop].reshape(K * n, rows, cols)  # member-major: row k * n + i
            beta = _column([hp.momentum for hp in hps for _ in range(n)], grad, dims=3)
            if len(distinct) == 1:
                update = muon_update(grad, buf.clone(), beta, distinct[0], dtype=self.ns_dtype)
            else:  # Newton-Schulz batched over the members that share a step count
                update = torch.empty_like(grad)
                for steps in distinct:
                    pick = [k * n + i for k in range(K) if ns_steps[k] == steps for i in range(n)]
                    rows_of = torch.tensor(pick, device=grad.device)
                    sub = buf.index_select(0, rows_of)  # a copy, which ``muon_update`` moves
                    update[rows_of] = muon_update(grad[rows_of], sub, beta[rows_of], steps, dtype=self.ns_dtype)
            scale = shape_scale(rows, cols, self.muon_scaling)
            lr = _column([-hp.learning_rate * scale for hp in hps], grad, dims=4)
            decay = _column([1 - hp.learning_rate * hp.weight_decay for hp in hps], grad, dims=4)
            out.append((update.view(K, n, rows, cols).mul_(lr), decay, (1 - beta).view(K, n, 1, 1)))
        return out

    def _muon_apply(self, updates: Sequence[tuple[Tensor, Tensor, Tensor]]) -> None:
        """The weights and momentum moved by ``_muon_updates``' results, in place: nothing allocated to fail part way.
        Each buffer takes ``muon_update``'s lerp again (the same elementwise op on the same values, bit for bit)."""
        K = self.model.members
        for (start, stop, n, rows, cols), buf, (update, decay, weight) in zip(
            self.groups, self.momentum, updates, strict=True
        ):
            buf.view(K, n, rows, cols).lerp_(self.model.grad[:, start:stop].view(K, n, rows, cols), weight)
            self.model.flat[:, start:stop].view(K, n, rows, cols).mul_(decay).add_(update)

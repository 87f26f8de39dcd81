"""The optimizer behind optim-step: AdamW, or Muon for hidden matrices with AdamW for the rest.

Together's optim-step carries the hyperparameters of *this* step (``adam_params`` or ``muon_params``),
so the caller owns the schedule: ``TrainerOptimizer.step(hp)`` writes them into the optimizer every
call instead of fixing them at construction. ``hp`` is an ``AdamHyperparams`` / ``MuonHyperparams``
(``rlnb.params``), resolved from params checked when they were built: nothing here checks them again.
The optimizer kind is fixed per session. Muon's maths is in ``rlnb.engine.optim.muon``; the Muon/AdamW
split in ``rlnb.engine.optim.split``; the gradient norm and clip factor in ``rlnb.engine.optim.norms``.
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from rlnb import wire
from rlnb.engine.optim.adamw import AdamW
from rlnb.engine.optim.failures import NonFiniteGradient, StepFailed
from rlnb.engine.optim.limits import StepLimits
from rlnb.engine.optim.loaded import check_adamw_state, check_finite
from rlnb.engine.optim.masters import Masters
from rlnb.engine.optim.muon import muon_update, ns_dtype_for, shape_scale
from rlnb.engine.optim.norms import clip_coefficient, clips, scale_grads, total_norm, wide_norm
from rlnb.engine.optim.split import ParamSplit, split_params
from rlnb.params import ADAM_DEFAULTS, AdamHyperparams, Hyperparams, MuonHyperparams, check_hyperparams

_MuonUpdates = tuple[
    list[tuple[list[tuple[str, Tensor]], list[Tensor], list[Tensor], float, Tensor]], dict[str, Tensor]
]
"""``TrainerOptimizer._muon_updates``' result: per group its weights, their gradients and momentum buffers, its shape
scale and its stacked update; the momentum buffers a first step makes."""


@dataclass
class StepStats:
    grad_norm: float  # global L2 norm of all gradients, before clipping
    grad_norm_muon: float | None  # the Muon group's share (muon kind only)
    grad_norm_adam: float | None  # the AdamW group's share (muon kind only)
    clipped: bool  # gradients were scaled down
    clip_coef: float  # factor applied to the gradients, as applied (``clip_coefficient``); 1 when off
    learning_rate: float  # the step's top-level learning rate (AdamW's or Muon's)
    adam_learning_rate: float | None  # muon kind: the learning rate of the AdamW group


class TrainerOptimizer:
    """One training session's optimizer: ``kind`` "adam" (AdamW on everything) or "muon".

    ``step(hp)`` runs, in this order:

    1. g = ‖(∇θ for every trainable θ with a gradient)‖₂, the pre-clip global norm, computed as
       ``clip_grad_norm_`` does (same call, same order) so that clipping matches it bit for bit (float16
       gradients: in float32, ``total_norm``); for
       Muon also the norm of each group (g² = g_muon² + g_adam² up to rounding).
    2. g not finite → ``NonFiniteGradient``; parameters, gradients and optimizer state are untouched
       (the caller decides what to do with the gradients).
    3. grad_clip_norm c > 0: ∇ ← ∇·min(1, c / (g + 1e-6)) on all gradients, exactly
       ``torch.nn.utils.clip_grad_norm_``; c = 0 turns clipping off. For Muon the top-level
       ``grad_clip_norm`` is this global clip and ``hp.adam.grad_clip_norm`` is not read (params refuse any
       other value: ``rlnb.params.check_adam_clip``): one norm over the whole model, so the two groups keep
       their relative scale.
    4. Muon kind: the ``rlnb.engine.optim.muon`` update of each hidden matrix, batched over equal shapes, worked out
       on copies and held: its allocations come before anything moves.
    5. AdamW (``torch.optim.AdamW``, foreach, bit for bit: ``rlnb.engine.optim.adamw``) with this step's lr, betas,
       eps and weight decay, on all parameters (adam kind) or on the AdamW group with ``hp.adam`` (muon kind).
    6. Muon kind: the held updates applied, in place.
    7. A half-precision (bfloat16, float16) weight, which 4-6 stepped as its float32 master with float32 state
       (``rlnb.engine.optim.masters``; its gradient read as float32 after 3), is set to the master rounded.

    An exception in 1-4 (out of memory) changes nothing (the caller drops the gradients, clipped in place);
    one in 5-7 leaves the weights half-stepped: ``StepFailed`` says which (``rlnb.engine.optim.failures``).

    ``muon_scaling`` picks the shape scale s: "original" (KJ) or "match_adam" (Moonshot: gives Muon's
    update the RMS of an AdamW update, so AdamW's learning rate and weight decay carry over; the same
    as ``torch.optim.Muon(adjust_lr_fn="match_rms_adamw")``).
    """

    def __init__(
        self,
        model: nn.Module,
        kind: wire.OptimizerKind,
        split: ParamSplit | None = None,
        muon_scaling: wire.MuonScaling = wire.MUON_ORIGINAL,
        ns_dtype: torch.dtype | None = None,
    ) -> None:
        wire.optimizer_kind(kind, "kind")
        if muon_scaling not in wire.MUON_SCALING:
            raise ValueError(f"muon_scaling must be 'original' or 'match_adam', got {muon_scaling!r}")
        self.kind = kind
        self.muon_scaling = muon_scaling
        first = next(model.parameters(), None)
        device = first.device if first is not None else torch.device("cpu")
        # Only Muon runs Newton-Schulz: an Adam session never pays for the dtype probe.
        self.ns_dtype = ns_dtype or (ns_dtype_for(device) if kind == wire.MUON else torch.float32)
        """Newton-Schulz compute dtype (default: ``ns_dtype_for`` the model's device)."""
        if kind == wire.MUON:
            self.split = split or split_params(model)
        else:
            self.split = ParamSplit(muon=[], adam=[(n, p) for n, p in model.named_parameters() if p.requires_grad])
        self._named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]  # model order
        if not self._named:
            raise ValueError("the model has no trainable parameters")
        self.masters = Masters(self._named)
        """The float32 masters of half-precision weights, which the optimizer steps (``rlnb.engine.optim.masters``)."""
        self._half = bool(self.masters.half)
        self._adam_stepped = self.masters.stepped(self.split.adam)
        self._stepped = dict(self.masters.stepped(self.split.muon) + self._adam_stepped)
        adam_params = [p for _, p in self._adam_stepped]
        self._adamw = AdamW(adam_params, foreach=True) if adam_params else None  # torch's, its counts read at once
        self._told_no_adam = False  # the one warning that a Muon step's chosen ``adam`` moves nothing here
        # Muon matrices grouped by shape: each group is orthogonalised as one stacked batch. Measured on a
        # 2-core CPU, a Muon step is 22% faster than matrix by matrix for "tiny" and 3% at n_embd 256
        # (stacking costs copies; the batched matmuls win back more).
        # Keyed by the stored shape and the update's shape scale s, which reads the layer's (fan_out, fan_in).
        self._muon_groups: dict[tuple[int, int, float], list[tuple[str, Tensor]]] = {}
        for name, p in self.split.muon:
            scale = shape_scale(*self.split.fan_shape(name, p), muon_scaling)
            self._muon_groups.setdefault((p.shape[0], p.shape[1], scale), []).append((name, self._stepped[name]))
        self.momentum: dict[str, Tensor] = {}  # Muon's buffer B per matrix, by name; created at first use
        self.limits = StepLimits(
            [p.dtype for _, p in self.split.adam], [p.dtype for _, p in self.split.muon],
            max((scale for *_, scale in self._muon_groups), default=1.0), [p.dtype for p in adam_params],
        )  # fmt: skip
        """What a step's hyperparameters must fit in these weights (``check``)."""

    def check(self, hp: Hyperparams) -> None:
        """Refuse ``hp`` unless it is this kind's (a ``TypeError``) and fits these weights (``StepLimits.check``)."""
        check_hyperparams(self.kind, hp)
        self.limits.check(hp)

    @torch.no_grad()
    def step(self, hp: Hyperparams, *, checked: bool = False) -> StepStats:
        """Clip and apply this step's update with ``hp``, this optimizer kind's hyperparameters; ``checked``: the
        caller has just passed ``hp`` to ``check`` (the engine's handler, which names a refusal ``INVALID_INPUT``)."""
        if not checked:
            self.check(hp)
        muon = hp if isinstance(hp, MuonHyperparams) else None
        adam_hp = hp.adam if isinstance(hp, MuonHyperparams) else hp
        try:  # a ``try`` costs no Python call a step
            total = total_norm([p.grad for _, p in self._named if p.grad is not None])
            grad_norm = total.item()
            norm_muon = norm_adam = None
            if self.kind == wire.MUON:
                norm_muon, norm_adam = (
                    total_norm([p.grad for _, p in group if p.grad is not None]).item()
                    for group in (self.split.muon, self.split.adam)
                )
            if not math.isfinite(grad_norm):
                total, norm_muon, norm_adam = self._taken_wide(total, hp.grad_clip_norm)
                grad_norm = total.item()
            max_norm = hp.grad_clip_norm
            coef = clip_coefficient(max_norm, total) if clips(max_norm, grad_norm) else None
            clip_coef = 1.0 if coef is None else coef.item()
            if coef is not None and clip_coef != 1.0:  # a factor of 1 leaves every (finite) gradient as it is
                scale_grads([p.grad for _, p in self._named if p.grad is not None], coef)
            if self._half:  # float32 copies of the (clipped) gradients, for the masters' step
                self.masters.take_grads()
            updates = None if muon is None else self._muon_updates(muon)
        except NonFiniteGradient:
            raise
        except Exception as exc:  # nothing moved yet (a clipped gradient is the caller's to drop)
            raise StepFailed(exc, half=False) from exc
        try:
            if self._adamw is not None:
                for group in self._adamw.param_groups:
                    group.update(
                        lr=adam_hp.learning_rate,
                        betas=(adam_hp.beta1, adam_hp.beta2),
                        eps=adam_hp.eps,
                        weight_decay=adam_hp.weight_decay,
                    )
                self._adamw.step()
            if muon is not None and updates is not None:
                self._muon_apply(updates, muon)
            if self._half:
                self.masters.copy_down()
        except Exception as exc:
            raise StepFailed(exc, half=True) from exc
        if muon is not None:
            self._tell_no_adam(muon.adam)

        return StepStats(
            grad_norm=grad_norm,
            grad_norm_muon=norm_muon,
            grad_norm_adam=norm_adam,
            clipped=clip_coef < 1.0,
            clip_coef=clip_coef,
            learning_rate=hp.learning_rate,
            adam_learning_rate=adam_hp.learning_rate if self.kind == wire.MUON else None,
        )

    def _taken_wide(self, total: Tensor, max_norm: float) -> tuple[Tensor, float | None, float | None]:
        """A norm that is not finite: ``NonFiniteGradient`` naming the gradients that are not, or, every one finite,
        the norms taken again in float64 (``wide_norm``) for the clip to scale them by. With no clip it fails too:
        AdamW's squares of such gradients overflow as well, and would freeze their weights in silence."""
        bad = [n for n, p in self._named if p.grad is not None and not p.grad.isfinite().all()]
        if bad or not max_norm > 0:
            raise NonFiniteGradient(total.item(), bad, unclipped=not bad)
        groups = [self._named, *((self.split.muon, self.split.adam) if self.kind == wire.MUON else ())]
        total, *parts = (wide_norm([p.grad for _, p in g if p.grad is not None], total) for g in groups)
        if not math.isfinite(total.item()):  # past float32's range even so
            raise NonFiniteGradient(total.item(), [])
        return total, *([x.item() for x in parts] if parts else [None, None])

    def _tell_no_adam(self, adam: AdamHyperparams) -> None:
        """Warn once where ``muon_params.adam`` differs from the defaults but no weight is AdamW's (say LoRA factors
        without ``train_unembed``): the step is the same whatever it says, so a sweep over it would compare equals."""
        values = {k: getattr(adam, k) for k in ADAM_DEFAULTS if k != "grad_clip_norm"}  # clip: never read (Muon's)
        chosen = {k: v for k, v in values.items() if v != ADAM_DEFAULTS[k]}
        if self._adamw is None and chosen and not self._told_no_adam:
            self._told_no_adam = True
            warnings.warn(
                f"muon_params.adam ({', '.join(f'{k}={v:g}' for k, v in chosen.items())}) changes nothing: "
                "no trainable weight of this model is in the AdamW group, every one is a Muon matrix "
                "(see session.backend.optim.split.describe())",
                UserWarning,
                stacklevel=3,
            )

    def _muon_updates(self, hp: MuonHyperparams) -> _MuonUpdates:
        """Each Muon group's update (its weights, shape scale, stacked Newton-Schulz result) and the momentum buffers a
        first step makes, worked out on copies: the step's allocations, before anything moves. Held until
        ``_muon_apply``: as much memory again as the Muon matrices."""
        groups, fresh = [], {}
        for (_, _, scale), members in self._muon_groups.items():
            live = [(n, p) for n, p in members if p.grad is not None]
            if not live:
                continue
            bufs = []
            for n, p in live:
                b = self.momentum.get(n)
                if b is None:
                    b = fresh[n] = torch.zeros_like(p)
                bufs.append(b)
            grads = [p.grad for _, p in live if p.grad is not None]
            buf = torch.stack(bufs)  # a copy [k, rows, cols], which ``muon_update`` moves
            update = muon_update(torch.stack(grads), buf, hp.momentum, hp.newton_schulz_steps, dtype=self.ns_dtype)
            groups.append((live, grads, bufs, scale, update))
        return groups, fresh

    def _muon_apply(self, updates: _MuonUpdates, hp: MuonHyperparams) -> None:
        """The momentum and weights moved by ``_muon_updates``' results, in place: nothing allocated to fail part way.
        Each buffer takes ``muon_update``'s lerp again (the same elementwise op, bit for bit)."""
        lr, wd = hp.learning_rate, hp.weight_decay
        groups, fresh = updates
        self.momentum.update(fresh)
        for live, grads, bufs, scale, update in groups:
            torch._foreach_lerp_(bufs, grads, 1 - hp.momentum)
            for (_, p), u in zip(live, update.unbind(0), strict=True):
                p.mul_(1 - lr * wd).add_(u, alpha=-lr * scale)

    def zero_grad(self) -> None:
        """Drop all gradients (set to None, so the next backward allocates fresh ones)."""
        for _, p in self._named:
            p.grad = None
        if self._half:
            self.masters.drop_grads()

    def state_dict(self) -> dict[str, Any]:
        """AdamW's state dict, Muon's momentum buffers and the float32 masters (``Masters.synced``) by parameter name.

        Like ``torch.optim.Optimizer.state_dict`` the tensors are the live ones: clone or ``torch.save``
        to keep a snapshot.
        """
        return {
            "kind": self.kind,
            "adamw": self._adamw.state_dict() if self._adamw is not None else None,
            "momentum": dict(self.momentum),
            "muon_scaling": self.muon_scaling if self.kind == wire.MUON else None,
            "masters": self.masters.synced() if self._half else None,
        }

    def load_state_dict(self, sd: Mapping[str, Any]) -> None:
        """Restore from ``state_dict()`` of an optimizer of the same kind on the same architecture.

        Tensors are copied, so the source optimizer and this one never share state. A state without masters (an older
        checkpoint's) leaves them to be taken from the weights (``Masters.load``).
        """
        if sd.get("kind") != self.kind:
            raise ValueError(f"state is for a {sd.get('kind')!r} optimizer, this one is {self.kind!r}")
        scaling = sd.get("muon_scaling")
        if self.kind == wire.MUON and scaling is not None and scaling != self.muon_scaling:
            raise ValueError(
                f"its Muon learning rates are in muon_scaling={scaling!r} units, this session's in "
                f"{self.muon_scaling!r}: the same rates move matrices by other amounts; resume with "
                f"muon_scaling={scaling!r} (over the API: scaling_strategy {wire.MUON_SCALING.get(scaling, scaling)})"
            )
        matrices = dict(self.split.muon)
        for name, buf in sd["momentum"].items():
            if name not in matrices or buf.shape != matrices[name].shape:
                raise ValueError(f"momentum buffer {name!r} {tuple(buf.shape)} matches no Muon matrix of this model")
            check_finite(f"momentum buffer {name!r}", buf)
        self.masters.load(sd.get("masters"))
        if self._adamw is not None:
            own = [{k: v for k, v in g.items() if k != "params"} for g in self._adamw.param_groups]
            # deepcopy: torch.optim.Optimizer.load_state_dict keeps the given tensors when dtype and
            # device already match, and two optimizers sharing exp_avg would each update it
            self._adamw.load_state_dict(copy.deepcopy(sd["adamw"]))
            for group, options in zip(self._adamw.param_groups, own, strict=True):
                group.update(options)  # torch takes the state's options too: a saved maximize=True ascended the loss
            check_adamw_state(self._adamw, self._adam_stepped)
        self.momentum = {n: b.detach().to(self._stepped[n], copy=True) for n, b in sd["momentum"].items()}

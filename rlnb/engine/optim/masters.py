"""Float32 master copies of the half-precision (bfloat16, float16) trainable weights, which the optimizer steps.

Stepped in their own dtype, half-precision weights lose the update: an AdamW move below half a bfloat16 weight's
spacing (|w|·2^-9) rounds away, so LayerNorm gains near 1 never move at lr 1e-3 and decoupled weight decay does
nothing; float16 moments underflow ((1-β2)·g² is 0 below g ≈ 1e-3 while the first moment is not), and the update
becomes lr·m/eps, hundreds of times the learning rate. Mixed precision as Megatron, DeepSpeed and torch AMP do it:
the optimizer steps a float32 copy of each such weight with float32 state (AdamW's moments, Muon's momentum), reading
the gradient as float32; the weight the model runs (forward, weights-sync, checkpoints' weights) is the master
rounded to its dtype after each step. Float32 weights have no master: the optimizer steps them directly.

A weight written from outside the step (a resume's ``load_state_dict``, a notebook's edit, through ``torch.no_grad()``
or ``.data``) is seen by comparing it with its master rounded at each step and each save: where they differ, the master
is taken from the weight; where they are equal (a resume that loaded the masters saved with these very weights) the
master keeps its float32 digits. A write through ``.data`` leaves the version counter as it was, so only the values
tell; one cast and compare per half-precision weight, none for a float32 model.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor, nn

from rlnb.engine.optim.loaded import check_finite

HALF = (torch.bfloat16, torch.float16)
"""The dtypes whose trainable weights get a float32 master."""


class Masters:
    """The float32 masters of ``named``'s half-precision weights (none for a float32 model), by name."""

    def __init__(self, named: list[tuple[str, nn.Parameter]]) -> None:
        self.half = [(n, p) for n, p in named if p.dtype in HALF]
        self.of: dict[str, Tensor] = {n: p.detach().to(torch.float32, copy=True) for n, p in self.half}
        self._pairs = [(p, self.of[n]) for n, p in self.half]

    def stepped(self, named: list[tuple[str, nn.Parameter]]) -> list[tuple[str, Tensor]]:
        """``named`` with each half-precision weight replaced by its master: what the optimizer steps."""
        return [(n, self.of.get(n, p)) for n, p in named]

    def take_grads(self) -> None:
        """Each master's gradient: its weight's, read as float32 (None where the weight has none); each master taken
        from its weight first where the weight is no longer the master rounded (the module's docstring)."""
        for p, master in self._pairs:
            _follow(p, master)
            master.grad = None if p.grad is None else p.grad.to(torch.float32)

    def copy_down(self) -> None:
        """Each weight set to its stepped master, rounded to its dtype; the masters' gradients dropped."""
        if self._pairs:
            torch._foreach_copy_([p for p, _ in self._pairs], [m for _, m in self._pairs])
        for _, master in self._pairs:
            master.grad = None

    def drop_grads(self) -> None:
        """The masters' gradients dropped, as the weights' are (``TrainerOptimizer.zero_grad``)."""
        for _, master in self._pairs:
            master.grad = None

    def synced(self) -> dict[str, Tensor]:
        """The masters, each taken from its weight first where the weight is no longer the master rounded: the state
        a training checkpoint saves with those weights."""
        for p, master in self._pairs:
            _follow(p, master)
        return dict(self.of)

    def load(self, saved: Mapping[str, Tensor] | None) -> None:
        """Take a checkpoint's masters (a ``ValueError`` naming one that fits no weight or is not finite). Saved or
        not (a float32 run's, or an older checkpoint's: None), the next step compares each weight with its master
        (the resume copies the checkpoint's weights in after this), so a master that does not round to its weight
        is taken from the weight."""
        saved = saved or {}
        for name, master in saved.items():
            own = self.of.get(name)
            if own is None or master.shape != own.shape:
                raise ValueError(f"float32 master {name!r} {tuple(master.shape)} matches no half-precision weight")
            check_finite(f"float32 master {name!r}", master)
        for name, master in saved.items():
            self.of[name].copy_(master)


def _follow(weight: Tensor, master: Tensor) -> None:
    """``master`` taken from ``weight`` where the weight is not the master rounded: written from outside the step."""
    if not torch.equal(weight, master.to(weight.dtype)):
        master.copy_(weight)

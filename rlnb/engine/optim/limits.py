"""What an optim-step's hyperparameters must fit in the weights they update (``StepLimits``): a session's
``TrainerOptimizer`` and a batched run's ``StackedOptimizer`` refuse alike what would corrupt or half-step them."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rlnb.engine.refusals import check_step
from rlnb.params import Hyperparams


@dataclass
class StepLimits:
    """What a step's hyperparameters must fit in the weights they update, given the dtypes of the AdamW group and
    of the Muon group, Muon's largest shape scale s, and the dtypes AdamW's arithmetic runs in (``eps_dtypes``; default
    ``adam_dtypes``): a half-precision weight's float32 master's (``rlnb.engine.optim.masters``), where its ``eps`` is
    added. A step size is bounded by the weights' own dtypes: past float16's 65504 one step makes them inf."""

    adam_dtypes: list[torch.dtype]
    muon_dtypes: list[torch.dtype]
    muon_scale: float = 1.0
    eps_dtypes: list[torch.dtype] | None = None

    def __post_init__(self) -> None:
        self.adam_dtypes = sorted(set(self.adam_dtypes), key=str)
        self.muon_dtypes = sorted(set(self.muon_dtypes), key=str)
        self.eps_dtypes = self.adam_dtypes if self.eps_dtypes is None else sorted(set(self.eps_dtypes), key=str)
        # once, not at every optim-step: each dtype's smallest positive number (half of it rounds to 0), and the
        # largest number the AdamW group's and the Muon group's weights hold
        self._smallest = [
            (str(d).removeprefix("torch."), torch.finfo(d).smallest_normal * torch.finfo(d).eps)
            for d in self.eps_dtypes
        ]
        self._adam_max = min((torch.finfo(d).max for d in self.adam_dtypes), default=math.inf)
        self._muon_max = min((torch.finfo(d).max for d in self.muon_dtypes), default=math.inf)

    def check(self, hp: Hyperparams) -> None:
        """A ``ValueError`` naming the field when ``hp`` would corrupt or half-step these weights (the rule and its
        words: ``rlnb.engine.refusals.check_step``, which ``FakeBackend`` calls too)."""
        check_step(hp, self._smallest, self._adam_max, self._muon_max, self.muon_scale)

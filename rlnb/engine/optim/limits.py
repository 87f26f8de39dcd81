"""What an optim-step's hyperparameters must fit in the weights they update (``StepLimits``): a session's
``TrainerOptimizer`` and a batched run's ``StackedOptimizer`` refuse alike what would corrupt or half-step them."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rlnb.params import Hyperparams, MuonHyperparams


@dataclass
class StepLimits:
    """What a step's hyperparameters must fit in the weights they update, given the dtypes of the AdamW group and
    of the Muon group and Muon's largest shape scale s."""

    adam_dtypes: list[torch.dtype]
    muon_dtypes: list[torch.dtype]
    muon_scale: float = 1.0

    def __post_init__(self) -> None:
        self.adam_dtypes = sorted(set(self.adam_dtypes), key=str)
        self.muon_dtypes = sorted(set(self.muon_dtypes), key=str)
        # once, not at every optim-step: each dtype's smallest positive number (half of it rounds to 0), and the
        # largest number the AdamW group's and the Muon group's weights hold
        self._smallest = [(d, torch.finfo(d).smallest_normal * torch.finfo(d).eps) for d in self.adam_dtypes]
        self._adam_max = min((torch.finfo(d).max for d in self.adam_dtypes), default=math.inf)
        self._muon_max = min((torch.finfo(d).max for d in self.muon_dtypes), default=math.inf)

    def check(self, hp: Hyperparams) -> None:
        """A ``ValueError`` naming the field when ``hp`` would corrupt or half-step these weights. An AdamW ``eps`` that
        is 0 in the weights' dtype (1e-50 in float32; the default 1e-8 in float16) turned every weight whose gradient
        is 0 (an unused token's embedding row) into 0/0 = NaN; a step size past what the dtype holds (lr 1e39)
        failed torch's conversion half-way through the step (AdamW's moments and step count moved)."""
        adam = hp.adam if isinstance(hp, MuonHyperparams) else hp
        prefix = "muon_params.adam." if isinstance(hp, MuonHyperparams) else "adam_params."
        for dtype, tiny in self._smallest:
            least = float(f"{tiny:.3g}")  # the bound checked is the one the error names (1e-45 passed ">= 1.4e-45")
            if adam.eps < least:
                hint = " (or load the model with dtype='bfloat16' or 'float32')" if dtype == torch.float16 else ""
                what = "0" if adam.eps <= tiny / 2 else f"below {least:g}, the least positive number"
                raise ValueError(
                    f"{prefix}eps {adam.eps:g} is {what} in {str(dtype).removeprefix('torch.')}, the dtype of the "
                    f"weights AdamW updates: an eps of 0 there turns every weight whose gradient is 0 into 0/0 = NaN; "
                    f"give {prefix}eps >= {least:g}{hint}"
                )
        adam_max, muon_max = self._adam_max, self._muon_max
        # what the update multiplies by, (field, value, the largest the weights hold); the decay's 1 - lr * wd is
        # checked first, and kept in (0, 1] (rlnb.params.check_decay)
        factors = [(f"{prefix}learning_rate", adam.learning_rate / (1 - adam.beta1), adam_max)]  # lr / (1 - beta1^t)
        if isinstance(hp, MuonHyperparams):
            factors.append(("muon_params.learning_rate", hp.learning_rate * self.muon_scale, muon_max))
        for field, value, largest in factors:
            if value > largest:
                raise ValueError(
                    f"{field} is too large: the update would multiply by {value:.3g}, past the {largest:.3g} the "
                    "weights' dtype holds; give a smaller one"
                )

"""Checks of an optimizer state loaded from a checkpoint (``TrainerOptimizer.load_state_dict``): what would fail or
corrupt the next step is refused naming the weight, before any step runs on it."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from rlnb.engine.optim.adamw import AdamW


def check_adamw_state(adamw: AdamW, params: Sequence[tuple[str, Tensor]]) -> None:
    """A ``ValueError`` naming the weight whose loaded AdamW state would fail or corrupt the next step: moments
    missing or of another shape (torch's step raised), not finite, a negative second moment (its square root is
    NaN), or a step count that is not a whole number >= 0 (a negative one makes the bias correction negative, its
    square root NaN, and the weights NaN)."""
    for name, p in params:
        state = adamw.state.get(p)
        if not state:
            continue
        for key in ("step", "exp_avg", "exp_avg_sq"):
            value = state.get(key)
            if not isinstance(value, Tensor) or value.shape != (p.shape if key != "step" else ()):
                got = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
                raise ValueError(f"AdamW's {key} for {name} is {got}, expected a tensor of its shape")
            check_finite(f"AdamW's {key} for {name}", value)
        negative = int((state["exp_avg_sq"] < 0).sum())
        if negative:
            raise ValueError(f"AdamW's exp_avg_sq for {name} has {negative} negative value(s), expected >= 0")
        step = float(state["step"])
        if step < 0 or not step.is_integer():
            raise ValueError(f"AdamW's step for {name} is {step:g}, expected a whole number >= 0")


def check_finite(what: str, t: Tensor) -> None:
    """A ``ValueError`` saying ``what`` is not finite unless every element of ``t`` is."""
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{what} is not finite")

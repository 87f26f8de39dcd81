"""What an optimizer steps with: ``AdamHyperparams`` / ``MuonHyperparams``, every field filled in.

``resolve`` makes them from an optim-step body (the defaults, ``ADAM_DEFAULTS`` / ``MUON_DEFAULTS``, for what it
leaves unset); ``check_hyperparams`` is what the engine checks before a step (the right kind; a decay that keeps the
weights); ``check_adam_clip`` refuses a Muon ``adam.grad_clip_norm`` that the step would not use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlnb import wire
from rlnb.errors import InvalidParams

ADAM_DEFAULTS: dict[str, float] = {
    "learning_rate": 1e-4,
    "beta1": 0.9,
    "beta2": 0.95,
    "eps": 1e-8,
    "weight_decay": 0.1,
    "grad_clip_norm": 1.0,
}
MUON_DEFAULTS: dict[str, float | int] = {
    "learning_rate": 0.02,
    "momentum": 0.95,
    "newton_schulz_steps": 5,
    "weight_decay": 0.0,
    "grad_clip_norm": 1.0,
}


@dataclass(frozen=True, slots=True)
class AdamHyperparams:
    """Every AdamW hyperparameter of one step, defaults filled in: what ``AdamParams.resolved()`` gives
    and the optimizers' ``step`` takes. Made from params that were checked when they were built."""

    learning_rate: float
    beta1: float
    beta2: float
    eps: float
    weight_decay: float
    grad_clip_norm: float


@dataclass(frozen=True, slots=True)
class MuonHyperparams:
    """Every Muon hyperparameter of one step, and ``adam``'s for the other parameters (see ``AdamHyperparams``)."""

    learning_rate: float
    momentum: float
    newton_schulz_steps: int
    weight_decay: float
    grad_clip_norm: float
    adam: AdamHyperparams


Hyperparams = AdamHyperparams | MuonHyperparams
HYPERPARAMS: dict[wire.OptimizerKind, type[AdamHyperparams] | type[MuonHyperparams]] = {
    wire.ADAM: AdamHyperparams,
    wire.MUON: MuonHyperparams,
}
"""What an optimizer of each kind steps with."""


def check_hyperparams(optimizer: wire.OptimizerKind, hp: Any) -> None:
    """``TypeError`` unless ``hp`` is the hyperparameters of ``optimizer`` (a dict, or Adam's for a Muon
    optimizer, would fail half-way through a step); ``InvalidParams`` where its decay would erase the weights
    (``check_decay``, the field named as in an optim-step body)."""
    expected = HYPERPARAMS[optimizer]
    if not isinstance(hp, expected):
        raise TypeError(
            f"a {optimizer} optimizer steps with {expected.__name__} (params.resolved()), not {type(hp).__name__}"
        )
    check_decay(hp, wire.OPTIMIZER_PARAMS_FIELD[optimizer])


DECAY_RULE = "learning_rate * weight_decay must be < 1"
"""Decoupled weight decay multiplies every weight by 1 - learning_rate * weight_decay each step."""


def decay_rule_holds(learning_rate: float, weight_decay: float) -> bool:
    """Whether ``DECAY_RULE`` holds: the one test of it, for the params and for rates rounded to fit it."""
    return learning_rate * weight_decay < 1


def check_decay(hp: Hyperparams, owner: str) -> None:
    """``InvalidParams`` (``owner``'s ``weight_decay``, Muon's ``adam.weight_decay`` too) where ``DECAY_RULE`` fails:
    at 1 a step erased every weight, past it flipped their sign, in silence."""
    parts = [("", hp)] + ([("adam.", hp.adam)] if isinstance(hp, MuonHyperparams) else [])
    errors = []
    for at, part in parts:
        if not decay_rule_holds(part.learning_rate, part.weight_decay):
            product = part.learning_rate * part.weight_decay
            said = (
                f"{DECAY_RULE}, got {part.learning_rate:g} * {part.weight_decay:g} = {product:g}: decoupled decay "
                "multiplies every weight by 1 - that each step (0 erases them, less flips their sign); give a smaller "
                "learning_rate or weight_decay"
            )
            errors.append((f"{at}weight_decay", part.weight_decay, said))
    if errors:
        raise InvalidParams(owner, errors)


def check_adam_clip(params: wire.MuonParams | None, owner: str) -> None:
    """``InvalidParams`` (``owner``'s ``adam.grad_clip_norm``) where Muon's ``adam`` sets a clip other than the one a
    Muon step uses: one global norm over all parameters, Muon's own ``grad_clip_norm`` (unset: 1.0). A nested one
    taken and never read would let ``adam=AdamParams(grad_clip_norm=0.01)`` clip nothing, in silence. The same value
    (or none) is taken: AdamW's params reused for Muon's ``adam`` carry one."""
    if params is None or params.adam is None or params.adam.grad_clip_norm is None:
        return
    adam = params.adam
    clip = params.grad_clip_norm if params.grad_clip_norm is not None else MUON_DEFAULTS["grad_clip_norm"]
    if adam.grad_clip_norm != clip:
        said = (
            f"must be unset or equal to grad_clip_norm ({clip:g}): a Muon step clips one global norm over all "
            "parameters by Muon's own grad_clip_norm, and does not read this one; set grad_clip_norm instead"
        )
        raise InvalidParams(owner, [("adam.grad_clip_norm", adam.grad_clip_norm, said)])


def _given(params: wire._Model | None, exclude: set[str] | None = None) -> dict[str, Any]:
    """The fields a user (or a request) set; ``None`` counts as unset, as on the wire."""
    return {} if params is None else params.model_dump(exclude_unset=True, exclude_none=True, exclude=exclude)


def adam_hyperparams(params: wire.AdamParams | None) -> AdamHyperparams:
    """``params`` (or none) with the Adam defaults filled in."""
    return AdamHyperparams(**{**ADAM_DEFAULTS, **_given(params)})


def muon_hyperparams(params: wire.MuonParams | None) -> MuonHyperparams:
    """``params`` (or none) with the Muon defaults filled in, and its ``adam``'s with the Adam ones."""
    own = {**MUON_DEFAULTS, **_given(params, exclude={"adam"})}
    return MuonHyperparams(**own, adam=adam_hyperparams(params.adam if params is not None else None))


def resolve(optimizer: wire.OptimizerKind, body: wire.OptimStepBody) -> Hyperparams:
    """The hyperparameters of an optim-step body for a session whose optimizer is ``optimizer``: its params
    (checked when the body was built or parsed) with the defaults filled in. A body that carries only the
    other optimizer's params, or both, is a ``ValueError`` saying so (the other's would be ignored)."""
    mine = wire.OPTIMIZER_PARAMS_FIELD[optimizer]
    others = [f for k, f in wire.OPTIMIZER_PARAMS_FIELD.items() if k != optimizer and getattr(body, f) is not None]
    if getattr(body, mine) is None and others:
        raise ValueError(f"this session's optimizer is {optimizer}: send {mine}, not {others[0]}")
    if others:
        raise ValueError(f"this session's optimizer is {optimizer}: send {mine} only, not {mine} and {others[0]}")
    if optimizer == wire.MUON:
        check_adam_clip(body.muon_params, mine)
    return adam_hyperparams(body.adam_params) if optimizer == wire.ADAM else muon_hyperparams(body.muon_params)

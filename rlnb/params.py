"""Optimizer configs for ``optim-step``: ``AdamParams`` and ``MuonParams``.

They reuse the field definitions (and bounds) of ``rlnb.wire`` and add what a notebook needs:
unknown fields rejected, a ``ValueError`` that names the field, the value and the allowed range,
``request_body()`` (the exact JSON sent) and ``resolved()`` (the values the local backend uses).

Params are checked once, when they are built (``AdamParams(...)``, or the server parsing a body).
Resolving them (``resolved()``, ``resolve(optimizer, body)``) fills in the defaults and gives a frozen
``AdamHyperparams`` / ``MuonHyperparams``: what the optimizers' ``step`` takes, with nothing left to check.

Unset is not zero: ``grad_clip_norm=0`` turns clipping *off*, while an unset ``grad_clip_norm``
(or ``None``) means the session default 1.0. Unset fields are therefore omitted from the body, never
sent as 0.

Defaults the local backend applies to unset fields (``resolved()``):

============  ==================  ========================================================
optimizer     field               default
============  ==================  ========================================================
Adam          learning_rate       1e-4
Adam          beta1, beta2        0.9, 0.95
Adam          eps                 1e-8
Adam          weight_decay        0.1
Adam          grad_clip_norm      1.0 (0 = off)
Muon          learning_rate       0.02 (spectral-norm units, "original" scaling)
Muon          momentum            0.95 (Nesterov)
Muon          newton_schulz_steps 5
Muon          weight_decay        0
Muon          grad_clip_norm      1.0 (0 = off)
Muon.adam     (non-matrix params) the Adam defaults above
============  ==================  ========================================================
"""

from __future__ import annotations

import numbers
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, cast

from annotated_types import Ge, Gt, Le, Lt
from pydantic import ConfigDict, ValidationError

from rlnb import wire
from rlnb._options import is_integer
from rlnb.errors import InvalidParams
from rlnb.prompts import scalar

ADAM_DEFAULTS: dict[str, float] = {
    "learning_rate": 1e-4, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1, "grad_clip_norm": 1.0,
}  # fmt: skip
MUON_DEFAULTS: dict[str, float | int] = {
    "learning_rate": 0.02, "momentum": 0.95, "newton_schulz_steps": 5, "weight_decay": 0.0, "grad_clip_norm": 1.0,
}  # fmt: skip


def _allowed(model: type[wire._Model], loc: tuple[Any, ...], err_type: str) -> str:
    """Describe a field's allowed values from its own metadata, so the rule lives in one place."""
    if err_type in ("extra_forbidden", "no_such_attribute"):  # AdamParams(lr=...), or p.lr = ...
        return f"unknown field; allowed fields are {', '.join(model.model_fields)}"
    field = model.model_fields.get(str(loc[0])) if loc else None
    if field is not None and field.annotation is not None:
        args = getattr(field.annotation, "__args__", ())
        sub = next((a for a in args if isinstance(a, type) and issubclass(a, wire._Model)), None)
        if sub is not None and len(loc) > 1:
            return _allowed(sub, loc[1:], err_type)
        if sub is not None:  # the object itself (``adam=5``) is no params: not "a finite number"
            return f"must be {sub.__name__} or a dict of its fields ({', '.join(sub.model_fields)}); or unset"
    if field is None:
        return err_type
    bounds: list[Any] = []
    for arg in getattr(field.annotation, "__args__", ()):
        for meta in getattr(arg, "__metadata__", ()):
            bounds.extend(getattr(meta, "metadata", [meta]))
    lo = next((f">= {m.ge}" for m in bounds if isinstance(m, Ge)), None) or next(
        (f"> {m.gt}" for m in bounds if isinstance(m, Gt)), None
    )
    hi = next((f"<= {m.le}" for m in bounds if isinstance(m, Le)), None) or next(
        (f"< {m.lt}" for m in bounds if isinstance(m, Lt)), None
    )
    kind = (
        "an integer (not a bool or float)"
        if field.annotation is not None and "int" in str(field.annotation)
        else "a finite number"
    )
    rng = " and ".join(b for b in (lo, hi) if b)
    return f"must be {kind}" + (f", {rng}" if rng else "") + "; or unset for the default"


def _plain(value: Any) -> Any:
    """A numpy or torch scalar as the Python number it holds: a numpy integer (np.arange's) is an int, as everywhere
    in rlnb; a numpy or torch bool a bool, refused as ``True`` is (``np.True_`` was taken as 1.0)."""
    value = scalar(value)
    return int(value) if is_integer(value) and not isinstance(value, int) else value


def _refuse_arrays(model: Any, data: Mapping[str, Any]) -> None:
    """An array is no number, whatever its size: torch's ``tensor([0.1])`` was taken as 0.1 (pydantic calls its
    ``__float__``) while numpy's ``array([0.1])`` was refused."""
    arrays = [(k, v) for k, v in data.items() if getattr(v, "shape", ()) != () and k in model.model_fields]
    if arrays:
        raise InvalidParams(model.__name__, [(k, v, _allowed(model, (k,), "float_type")) for k, v in arrays])


def _invalid(model: Any, exc: ValidationError) -> InvalidParams:
    errors = [
        (".".join(str(p) for p in e["loc"]), e.get("input"), _allowed(model, e["loc"], e["type"])) for e in exc.errors()
    ]
    return InvalidParams(model.__name__, errors)


class _Params:
    """Mixin: friendly errors, exact request body, resolved values."""

    _body_key: ClassVar[str]

    def __init__(self, **data: Any) -> None:
        """``None`` is unset, as on the wire: left out of the fields set, so no body carries it as null."""
        data = {k: _plain(v) for k, v in data.items() if v is not None}
        _refuse_arrays(type(self), data)
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise _invalid(type(self), exc) from None

    def __setattr__(self, name: str, value: Any) -> None:
        """An assignment is checked as the constructor checks: the same errors, numpy integers, ``adam`` as a dict
        (pydantic's own check said "Input should be a valid integer" of ``np.int64(5)``)."""
        if name == "adam" and not isinstance(value, AdamParams) and isinstance(value, dict | wire.AdamParams):
            value = MuonParams(adam=value).adam
        _refuse_arrays(type(self), {name: _plain(value)})
        try:
            super().__setattr__(name, _plain(value))
        except ValidationError as exc:
            raise _invalid(type(self), exc) from None
        if value is None:  # unset again: omitted from the body, not sent as null
            cast(wire._Model, self).model_fields_set.discard(name)

    def request_body(self) -> dict[str, Any]:
        """The exact optim-step JSON body, unset fields omitted."""
        return {self._body_key: cast(wire._Model, self).to_json_dict()}

    def scaled(self, factor: float) -> Any:
        """A copy whose learning rate(s) are ``factor`` × the effective ones (Muon: its ``adam`` too) —
        what a schedule sends at a step. Unset rates are made explicit from the defaults first. ``factor`` is a finite
        number > 0 (``"2"`` was Python's "can't multiply sequence"; NaN or 0 an error naming only the rate)."""
        factor = scalar(factor)  # np.float32(0.5), torch.tensor(0.5): the number
        rule = f"scaled: factor must be a finite number > 0 (a schedule's multiplier), got {factor!r}"[:300]
        if isinstance(factor, bool) or not isinstance(factor, numbers.Real):
            raise TypeError(rule)
        if not 0 < factor <= sys.float_info.max:  # NaN, inf, 10**400 (an OverflowError in float()) too
            raise ValueError(rule)
        data = cast(wire._Model, self).model_dump(exclude_unset=True)
        resolved = cast(Any, self).resolved()
        data["learning_rate"] = resolved.learning_rate * factor
        if isinstance(resolved, MuonHyperparams):
            data["adam"] = {**(data.get("adam") or {}), "learning_rate": resolved.adam.learning_rate * factor}
        return type(self)(**data)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Any:
        """A copy, with ``update``'s fields checked as the constructor checks them (pydantic's own copy took
        them unchecked: ``learning_rate=-1`` stepped up the loss, a misspelt ``lr`` was dropped)."""
        if not update:
            return super().model_copy(deep=deep)  # type: ignore[misc]  # a mixin: BaseModel comes later in the MRO
        return type(self)(**{**cast(wire._Model, self).model_dump(exclude_unset=True), **update})

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        """Inverse of ``request_body()`` (also accepts the inner object). Beside ``adam_params`` / ``muon_params``
        a body holds nothing: another key (``learning_rate`` put beside it) is refused, not dropped."""
        if not isinstance(data, Mapping):  # None, a list: "argument after ** must be a mapping"
            raise TypeError(f"{cls.__name__}.from_dict takes a dict (request_body() or its inner object), got {data!r}")
        if cls._body_key not in data:
            return cls(**data)
        inner, extra = data[cls._body_key], [k for k in data if k != cls._body_key]
        if extra:
            rule = f"an optim-step body holds {cls._body_key} only; put its fields inside {cls._body_key}"
            raise InvalidParams("optim-step body", [(k, data[k], rule) for k in extra])
        if inner is None or isinstance(inner, cls):  # null is unset on the wire: the defaults
            return inner or cls()
        if not isinstance(inner, dict):
            raise InvalidParams("optim-step body", [(cls._body_key, inner, f"must be a dict of {cls.__name__} fields")])
        return cls(**inner)


class AdamParams(_Params, wire.AdamParams):
    """AdamW hyperparameters for one optim-step; unset fields use the session defaults."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
    _body_key: ClassVar[str] = "adam_params"

    def resolved(self) -> AdamHyperparams:
        """Every field's effective value on the local backend (defaults filled in)."""
        return _adam(self)


class MuonParams(_Params, wire.MuonParams):
    """Muon hyperparameters for the 2-D hidden matrices, and ``adam`` for every other parameter."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
    _body_key: ClassVar[str] = "muon_params"
    adam: AdamParams | None = None

    def __init__(self, **data: Any) -> None:
        adam = data.get("adam")
        if isinstance(adam, wire.AdamParams) and not isinstance(adam, AdamParams):  # rlnb.wire's: its fields
            adam = data["adam"] = adam.model_dump(exclude_unset=True)
        if isinstance(adam, dict):
            try:
                data["adam"] = AdamParams(**adam)
            except InvalidParams as exc:
                raise InvalidParams("MuonParams.adam", exc.errors) from None
        super().__init__(**data)

    def resolved(self) -> MuonHyperparams:
        """Every field's effective value on the local backend; ``adam`` resolved the same way."""
        return _muon(self)


OptimizerParams = AdamParams | MuonParams
ADAM_FIELDS: tuple[str, ...] = tuple(AdamParams.model_fields)
MUON_FIELDS: tuple[str, ...] = tuple(name for name in MuonParams.model_fields if name != "adam")
"""Muon's own fields (``adam`` holds an ``AdamParams``)."""


PARAMS: dict[wire.OptimizerKind, type[AdamParams] | type[MuonParams]] = {"adam": AdamParams, "muon": MuonParams}
"""The params class of each optimizer kind."""


def params_for(optimizer: wire.OptimizerKind, params: OptimizerParams | dict[str, Any] | None) -> OptimizerParams:
    """``params`` as a session of ``optimizer`` takes them (None: the defaults; a dict is parsed), or
    ``TypeError`` for the other kind."""
    expected = PARAMS[optimizer]
    if params is None:
        return expected()
    if isinstance(params, dict):
        mine = wire.OPTIMIZER_PARAMS_FIELD[optimizer]
        other = next((f for k, f in wire.OPTIMIZER_PARAMS_FIELD.items() if k != optimizer and f in params), None)
        if other is not None:  # dropped for want of the key, or read as an unknown field of this kind's params
            raise TypeError(
                f"this session's optimizer is {optimizer}: send {mine} only, not {other} "
                "(the optimizer is fixed when the session is created)"
            )
        return expected.from_dict(params)
    if not isinstance(params, expected):
        raise TypeError(
            f"this session's optimizer is {optimizer}: pass {expected.__name__}, not {type(params).__name__} "
            "(the optimizer is fixed when the session is created)"
        )
    return params


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
    "adam": AdamHyperparams, "muon": MuonHyperparams,
}  # fmt: skip
"""What an optimizer of each kind steps with."""


def check_hyperparams(optimizer: str, hp: Any) -> None:
    """``TypeError`` unless ``hp`` is the hyperparameters of ``optimizer`` (a dict, or Adam's for a Muon
    optimizer, would fail half-way through a step)."""
    expected = HYPERPARAMS[cast(wire.OptimizerKind, optimizer)]
    if not isinstance(hp, expected):
        raise TypeError(
            f"a {optimizer} optimizer steps with {expected.__name__} (params.resolved()), not {type(hp).__name__}"
        )


def _given(params: wire._Model | None, exclude: set[str] | None = None) -> dict[str, Any]:
    """The fields a user (or a request) set; ``None`` counts as unset, as on the wire."""
    return {} if params is None else params.model_dump(exclude_unset=True, exclude_none=True, exclude=exclude)


def _adam(params: wire.AdamParams | None) -> AdamHyperparams:
    return AdamHyperparams(**{**ADAM_DEFAULTS, **_given(params)})


def _muon(params: wire.MuonParams | None) -> MuonHyperparams:
    own = {**MUON_DEFAULTS, **_given(params, exclude={"adam"})}
    return MuonHyperparams(**own, adam=_adam(params.adam if params is not None else None))


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
    return _adam(body.adam_params) if optimizer == "adam" else _muon(body.muon_params)

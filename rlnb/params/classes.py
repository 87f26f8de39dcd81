"""The params a notebook builds: ``AdamParams`` / ``MuonParams``, checked when they are built (constructor,
assignment, ``model_copy``, ``from_dict``), with ``request_body()`` and ``resolved()``; ``params_for`` picks a
session's kind.
"""

from __future__ import annotations

import numbers
import sys
from collections.abc import Mapping
from typing import Any, ClassVar, cast

from pydantic import ConfigDict, ValidationError

from rlnb import wire
from rlnb._input.scalars import scalar
from rlnb.errors import InvalidParams

from .fields import invalid, plain_fields, refuse_arrays, unwrapped
from .hyperparams import (
    AdamHyperparams,
    MuonHyperparams,
    adam_hyperparams,
    check_adam_clip,
    check_decay,
    muon_hyperparams,
)


class _Params:
    """Mixin: friendly errors, exact request body, resolved values."""

    _body_key: ClassVar[str]

    def __init__(self, **data: Any) -> None:
        """``None`` is unset, as on the wire: left out of the fields set, so no body carries it as null."""
        data = plain_fields(type(self), data)
        refuse_arrays(type(self), data)
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise invalid(type(self), exc) from None
        self._check()

    def __setattr__(self, name: str, value: Any) -> None:
        """An assignment is checked as the constructor checks: the same errors, numpy integers, ``adam`` as a dict
        (pydantic's own check says "Input should be a valid integer" of ``np.int64(5)``)."""
        if name == "adam" and not isinstance(value, AdamParams) and isinstance(value, dict | wire.AdamParams):
            value = MuonParams(adam=value).adam
        given = plain_fields(type(self), {name: value}).get(name)
        refuse_arrays(type(self), {name: given})
        fields_set, before = cast(wire._Model, self).model_fields_set, getattr(self, name, None)
        was_set = name in fields_set
        try:
            super().__setattr__(name, given)
        except ValidationError as exc:
            raise invalid(type(self), exc) from None
        if value is None:  # unset again: omitted from the body, not sent as null
            fields_set.discard(name)
        try:
            self._check()
        except InvalidParams:  # refused: the params stay as they were
            super().__setattr__(name, before)
            (fields_set.add if was_set else fields_set.discard)(name)
            raise

    def __delattr__(self, name: str) -> None:
        """``del p.learning_rate`` unsets the field, as ``p.learning_rate = None`` does: pydantic's own removed the
        attribute, and reading it raised ``AttributeError``."""
        if name in cast(Any, type(self)).model_fields:
            setattr(self, name, None)
        else:
            super().__delattr__(name)

    def _check(self) -> None:
        """The rules that tie fields together (each field's own range is pydantic's): ``check_decay``."""
        check_decay(cast(Any, self).resolved(), type(self).__name__)

    @classmethod
    def model_validate(cls, obj: Any, **options: Any) -> Any:
        """As the constructor: ``None`` unset, the same checks and the same ``InvalidParams`` (pydantic's own, which
        calls ``__init__``, raised them wrapped in a ``ValidationError``, which ``except InvalidParams`` missed)."""
        try:
            return cast(Any, super()).model_validate(obj, **options)
        except ValidationError as exc:
            raise unwrapped(cls, exc) from None

    @classmethod
    def model_validate_json(cls, json_data: Any, **options: Any) -> Any:
        """``model_validate`` of a JSON text (``null`` is unset), with its errors."""
        try:
            return cast(Any, super()).model_validate_json(json_data, **options)
        except ValidationError as exc:
            raise unwrapped(cls, exc) from None

    @classmethod
    def model_validate_strings(cls, obj: Any, **options: Any) -> Any:
        """``model_validate`` of strings, with its errors (a string is no number here, as for the constructor)."""
        try:
            return cast(Any, super()).model_validate_strings(obj, **options)
        except ValidationError as exc:
            raise unwrapped(cls, exc) from None

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
        rates = {"learning_rate": resolved.learning_rate}
        data["learning_rate"] = resolved.learning_rate * factor
        if isinstance(resolved, MuonHyperparams):
            rates["adam.learning_rate"] = resolved.adam.learning_rate
            data["adam"] = {**(data.get("adam") or {}), "learning_rate": resolved.adam.learning_rate * factor}
        try:
            return type(self)(**data)
        except InvalidParams as exc:  # 1e-320 underflows a rate to 0.0: the error would name a rate the user never gave
            gives = ", ".join(f"{name} {rate!r} * {factor!r} = {rate * factor!r}" for name, rate in rates.items())
            said = f"it gives {gives}, out of range ({'; '.join(str(exc).splitlines())})"
            raise InvalidParams(f"{type(self).__name__}.scaled", [("factor", factor, said)]) from None

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Any:
        """A copy, with ``update``'s fields checked as the constructor checks them (pydantic's own copy takes
        them unchecked: ``learning_rate=-1`` would step up the loss, a misspelt ``lr`` be dropped)."""
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
        return adam_hyperparams(self)


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

    def _check(self) -> None:
        """``check_decay``, and ``check_adam_clip``: an ``adam.grad_clip_norm`` the step would not use."""
        super()._check()
        check_adam_clip(self, type(self).__name__)

    def resolved(self) -> MuonHyperparams:
        """Every field's effective value on the local backend; ``adam`` resolved the same way."""
        return muon_hyperparams(self)


OptimizerParams = AdamParams | MuonParams
ADAM_FIELDS: tuple[str, ...] = tuple(AdamParams.model_fields)
MUON_FIELDS: tuple[str, ...] = tuple(name for name in MuonParams.model_fields if name != "adam")
"""Muon's own fields (``adam`` holds an ``AdamParams``)."""
MUON_ADAM_FIELDS: tuple[str, ...] = tuple(name for name in ADAM_FIELDS if name != "grad_clip_norm")
"""The fields of Muon's ``adam`` that a Muon step reads: all but ``grad_clip_norm`` (the clip is Muon's own, one
global norm; ``check_adam_clip``)."""


PARAMS: dict[wire.OptimizerKind, type[AdamParams] | type[MuonParams]] = {wire.ADAM: AdamParams, wire.MUON: MuonParams}
"""The params class of each optimizer kind."""


def kind_of(params: OptimizerParams) -> wire.OptimizerKind:
    """The optimizer kind ``params`` are for (its class's key in ``PARAMS``): ``TypeError`` for anything else."""
    for kind, cls in PARAMS.items():
        if isinstance(params, cls):
            return kind
    names = " or ".join(cls.__name__ for cls in PARAMS.values())
    raise TypeError(f"params must be {names}, got {type(params).__name__}")


def params_for(optimizer: wire.OptimizerKind, params: OptimizerParams | dict[str, Any] | None) -> OptimizerParams:
    """``params`` as a session of ``optimizer`` takes them, a checked copy (None: the defaults; a dict is parsed), or
    ``TypeError`` for the other kind."""
    expected = PARAMS[optimizer]
    if params is None:
        return expected()
    if isinstance(params, AdamHyperparams | MuonHyperparams):  # was told "the optimizer is fixed", whatever the kind
        name = type(params).__name__
        raise TypeError(
            f"params must be {expected.__name__} (or a dict of its fields), not {name}, which .resolved() gives for "
            f"reading: pass the {name.replace('Hyperparams', 'Params')} it came from"
        )
    if isinstance(params, dict):
        mine = wire.OPTIMIZER_PARAMS_FIELD[optimizer]
        other = next((f for k, f in wire.OPTIMIZER_PARAMS_FIELD.items() if k != optimizer and f in params), None)
        if other is not None:  # dropped for want of the key, or read as an unknown field of this kind's params
            raise TypeError(
                f"this session's optimizer is {optimizer}: send {mine} only, not {other} "
                "(the optimizer is fixed when the session is created)"
            )
        params = expected.from_dict(params)
    if not isinstance(params, expected) and type(params) is getattr(wire, expected.__name__):
        name = expected.__name__  # said "pass AdamParams, not AdamParams": the right optimizer, the wire's class
        raise TypeError(f"params must be rlnb.{name} (or a dict of its fields), not rlnb.wire.{name}, the body the "
                        f"wire sends: pass rlnb.{name}(...)")  # fmt: skip
    if not isinstance(params, expected):
        raise TypeError(
            f"this session's optimizer is {optimizer}: pass {expected.__name__}, not {type(params).__name__} "
            "(the optimizer is fixed when the session is created)"
        )
    return rebuilt(params)


def rebuilt(params: OptimizerParams) -> OptimizerParams:
    """A copy of ``params`` built again by its constructor, so checked by its own validators: pydantic's
    ``model_construct`` (its public skip-validation path) makes params unchecked, and an in-process session stepped
    with ``learning_rate=-5`` or NaN (every weight NaN after) where ``rlnb serve`` refused the same body. A copy too:
    a later change to ``params`` does not reach a step already submitted."""
    fields = {name: getattr(params, name, None) for name in params.model_fields_set}
    adam = fields.get("adam")
    if isinstance(adam, AdamParams):  # taken as it is by MuonParams: its own fields are checked again
        fields["adam"] = {name: getattr(adam, name, None) for name in adam.model_fields_set}
    return type(params)(**fields)


def params_state(params: object) -> tuple[Any, ...] | None:
    """What a plain ``AdamParams`` or ``MuonParams`` holds now (copies), to tell whether the same object given again
    has changed since it was checked or resolved: its fields, their types, the fields set and, for a Muon, the same of
    its ``adam`` (an object that may change inside). None for anything else (a dict, a subclass, the wire's classes):
    no state to trust."""
    if type(params) is not AdamParams and type(params) is not MuonParams:
        return None
    fields = dict(params.__dict__)
    adam = fields.get("adam")
    return (
        fields,
        [*map(type, fields.values())],
        set(params.__pydantic_fields_set__),
        None if adam is None else params_state(adam),
    )

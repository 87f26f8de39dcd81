"""A field's rule in words, read from its model's own pydantic metadata, so that each bound lives once, here in
``rlnb.wire``: what the user-facing checks (optimizer, sampling and loss params) say instead of pydantic's report of
several lines per field, with its link."""

from __future__ import annotations

import functools
import reprlib
import types
import typing
from collections.abc import Iterable, Iterator, Mapping
from itertools import compress, repeat
from operator import is_not
from typing import Any, TypeVar

from annotated_types import Ge, Gt, Le, Lt
from pydantic import ValidationError
from pydantic.fields import FieldInfo

from rlnb.wire.base import _Model

__all__ = ["arrays", "field_rule", "given", "one_line", "validated"]

M = TypeVar("M", bound=_Model)

SCALAR_ERRORS = frozenset({
    "float_type", "float_parsing", "int_type", "int_parsing", "int_from_float", "finite_number", "bool_type",
    "greater_than", "greater_than_equal", "less_than", "less_than_equal",
})  # fmt: skip
"""pydantic's error types for a number (or flag) out of its range or of the wrong type: said by the field's own
bounds, not pydantic's words."""


def field_rule(model: type[_Model], loc: tuple[Any, ...], err_type: str, msg: str = "") -> str:
    """What ``model``'s field at ``loc`` allows, in words, from its own metadata (``must be a finite number, >= 0
    and <= 1; or unset for the default``); an error that is no number's (a wrong literal) is pydantic's ``msg``."""
    if err_type in ("extra_forbidden", "no_such_attribute"):  # AdamParams(lr=...), or p.lr = ...
        return f"unknown field; allowed fields are {', '.join(model.model_fields)}"
    field = model.model_fields.get(str(loc[0])) if loc else None
    if field is not None and field.annotation is not None:
        sub = _params_model(field)
        if sub is not None and len(loc) > 1:
            return field_rule(sub, loc[1:], err_type, msg)
        if sub is not None:  # the object itself (``adam=5``) is no params: not "a finite number"
            return f"must be {sub.__name__} or a dict of its fields ({', '.join(sub.model_fields)}); or unset"
    if field is None or (msg and err_type not in SCALAR_ERRORS):
        return msg or err_type
    kind = _kind(field.annotation)
    if kind is None:  # a field that holds no number (a literal, a list): pydantic's words
        return msg or err_type
    lo, hi = (bound_text(b) for b in bounds(field))
    rng = " and ".join(b for b in (lo, hi) if b)
    unset = "" if field.is_required() else "; or unset for the default"  # DRO's beta has no default
    return f"must be {kind}" + (f", {rng}" if rng else "") + unset


_KINDS = ((bool, "True or False"), (int, "an integer (not a bool or float)"), (float, "a finite number"))


def _kind(annotation: Any) -> str | None:
    """The number (or flag) a field holds, in words, from its type (through ``Annotated`` and ``| None``); None for
    any other type. Read from the annotation's text, a type of ``rlnb.wire.checkpoints`` (check-*int*-s), a
    ``Literal["int64", ...]`` or a description saying "point" in its metadata would be "an integer"."""
    held = set(_types(annotation))
    return next((said for kind, said in _KINDS if kind in held), None)


def _types(annotation: Any) -> Iterator[Any]:
    """The types an annotation allows: ``Annotated[float, ...] | None`` is float and None."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        yield from _types(typing.get_args(annotation)[0])
    elif origin is typing.Union or origin is types.UnionType:
        for arg in typing.get_args(annotation):
            yield from _types(arg)
    else:
        yield annotation


def bounds(field: FieldInfo) -> tuple[Ge | Gt | None, Le | Lt | None]:
    """``field``'s lower and upper bound, from its metadata: a required field's (DRO's beta) are on it, an optional
    one's on its annotation's arguments."""
    marks: list[Any] = list(field.metadata)
    for arg in getattr(field.annotation, "__args__", ()):
        for meta in getattr(arg, "__metadata__", ()):
            marks.extend(getattr(meta, "metadata", [meta]))
    lo = next((m for m in marks if isinstance(m, Ge)), None) or next((m for m in marks if isinstance(m, Gt)), None)
    hi = next((m for m in marks if isinstance(m, Le)), None) or next((m for m in marks if isinstance(m, Lt)), None)
    return lo, hi


def bound_text(bound: Ge | Gt | Le | Lt | None) -> str | None:
    """``>= 0``, ``< 1``...: a bound in words."""
    if bound is None:
        return None
    sign, value = {Ge: (">=", "ge"), Gt: (">", "gt"), Le: ("<=", "le"), Lt: ("<", "lt")}[type(bound)]
    return f"{sign} {getattr(bound, value)}"


@functools.lru_cache(maxsize=1024)
def _params_model(field: FieldInfo) -> type[_Model] | None:
    """The wire model a field holds (``grpo_params``' ``GrpoLossParams``), or None. Kept per field (a ``FieldInfo``,
    hashed by identity), in C: a generator would be 2 Python calls a forward-backward's body."""
    args = getattr(field.annotation, "__args__", ())
    return next((a for a in args if isinstance(a, type) and issubclass(a, _Model)), None)


def one_line(owner: str, model: type[_Model], exc: ValidationError, skip: int = 0) -> str:
    """``exc`` (of validating ``model``) as ``owner.field = value is invalid: rule``, its fields joined by ``; ``
    into one line; ``skip`` leading parts of each field's path are left out of its name (``grpo_params`` where the
    user gave ``loss_params``)."""
    return _said(owner, model, exc.errors(), skip)


def _said(owner: str, model: type[_Model], errors: Iterable[Mapping[str, Any]], skip: int) -> str:
    parts = []
    for e in errors:
        name = ".".join(str(p) for p in e["loc"][skip:])
        rule = field_rule(model, e["loc"], e["type"], e.get("msg", ""))
        parts.append(f"{owner}.{name} = {reprlib.repr(e.get('input'))} is invalid: {rule}")
    return "; ".join(parts)


def arrays(model: type[_Model], data: Mapping[str, Any], loc: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """An error (pydantic's shape) for each array among ``data``'s fields, a params object's (a dict) too: an array is
    no number, whatever its size. pydantic takes torch's ``tensor([0.5])`` as 0.5 (its ``__float__``) where numpy's
    ``array([0.5])`` is refused. The one array check: ``validated``'s, and ``rlnb.params``' (``refuse_arrays``)."""
    out: list[dict[str, Any]] = []
    for key, value in data.items():
        field = model.__pydantic_fields__.get(str(key))  # ``model_fields`` is a class property: 2 calls a read
        sub = _params_model(field) if field is not None else None
        if sub is not None and isinstance(value, Mapping):
            out += arrays(sub, value, (*loc, str(key)))
        elif field is not None and getattr(value, "shape", ()) != ():
            out.append({"loc": (*loc, str(key)), "input": value, "type": "float_type"})
    return out


def given(**fields: Any) -> dict[str, Any]:
    """``fields`` without the None ones, for a request model's data: an optional field the caller left unset is then
    absent from the body (``to_json_dict`` writes the fields set), where ``null`` is no value the reference's optional
    fields take for their default. C passes: a comprehension would be a second Python call a forward-backward."""
    return dict(compress(fields.items(), map(is_not, fields.values(), repeat(None))))


def validated(model: type[M], data: dict[str, Any], owner: str, skip: int = 0) -> M:
    """``model`` of ``data``; a bad field a ``ValueError`` of one line (``one_line``), as a bad optimizer field is said,
    where pydantic's report took three lines and a link per field. An array is refused as an optimizer field refuses
    it, whatever its size (``arrays``)."""
    refused = arrays(model, data)
    if refused:
        raise ValueError(_said(owner, model, refused, skip))
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ValueError(one_line(owner, model, exc, skip)) from None

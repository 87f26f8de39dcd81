"""Why a params field is refused, in words: its allowed values, read from its own pydantic metadata by
``wire.field_rule`` (so each rule lives in one place, ``rlnb.wire``), and the numbers notebooks hand in (numpy's,
torch's) taken as the Python numbers they hold.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

from annotated_types import Ge
from pydantic import ValidationError

from rlnb import wire
from rlnb._input.checks import is_integer
from rlnb._input.scalars import scalar
from rlnb.errors import InvalidParams
from rlnb.wire.rules import bounds


def plain_fields(model: Any, data: Mapping[str, Any]) -> dict[str, Any]:
    """``data``'s values ``plain``, ``None`` left out (unset, as on the wire), and -0.0 as 0.0 in a field whose range
    starts at 0 (``signless_zero``): ``weight_decay=-0.0`` would be sent as ``"weight_decay": -0.0`` and recorded so,
    a sign that means nothing there. A field that must be > 0 keeps -0.0, for its refusal to show what was given."""
    out = {}
    zeros = signless_zero(model)
    for name, value in data.items():
        if value is not None:
            value = plain(value)
            out[name] = 0.0 if isinstance(value, float) and value == 0 and name in zeros else value
    return out


@functools.cache
def signless_zero(model: Any) -> frozenset[str]:
    """``model``'s fields whose range starts at 0 inclusive (``>= 0``: ``beta1``, ``weight_decay``...), from the
    wire's own bounds: where 0 is taken, -0.0 is the same number."""
    return frozenset(name for name, field in model.model_fields.items() if _from_zero(bounds(field)[0]))


def _from_zero(low: Any) -> bool:
    return isinstance(low, Ge) and low.ge == 0


def plain(value: Any) -> Any:
    """A numpy or torch scalar as the Python number it holds: a numpy integer (np.arange's) is an int, as everywhere
    in rlnb; a numpy or torch bool a bool, refused as ``True`` is (not taken as 1.0)."""
    value = scalar(value)
    return int(value) if is_integer(value) and not isinstance(value, int) else value


def refuse_arrays(model: Any, data: Mapping[str, Any]) -> None:
    """An array is no number, whatever its size (``wire.arrays``, a nested params dict's too): torch's
    ``tensor([0.1])`` would be taken as 0.1 (pydantic calls its ``__float__``) while numpy's ``array([0.1])`` is
    refused."""
    refused = wire.arrays(model, data)
    if refused:
        raise _said(model, refused)


def invalid(model: Any, exc: ValidationError) -> InvalidParams:
    return _said(model, exc.errors())


def _said(model: Any, errors: Iterable[Mapping[str, Any]]) -> InvalidParams:
    """``errors`` (pydantic's shape) as one ``InvalidParams``, each field's rule in words."""
    said = [
        (".".join(str(p) for p in e["loc"]), e.get("input"), wire.field_rule(model, e["loc"], e["type"]))
        for e in errors
    ]
    return InvalidParams(model.__name__, said)


def unwrapped(model: Any, exc: ValidationError) -> Exception:
    """The constructor's own ``InvalidParams`` where pydantic's ``model_validate`` (which calls ``__init__``) wrapped it
    in a ``ValidationError``; a value that is no dict of fields (None, a list, the other kind's params) a
    ``TypeError``, and text that is no JSON a ``ValueError``, naming the class."""
    errors = exc.errors()
    inner = errors[0].get("ctx", {}).get("error") if len(errors) == 1 else None
    if isinstance(inner, InvalidParams):
        return inner
    if errors[0]["type"] == "model_type":
        return TypeError(f"{model.__name__} takes a dict of its fields, got {errors[0]['input']!r}"[:300])
    return invalid(model, exc) if errors[0]["loc"] else ValueError(f"{model.__name__}: {errors[0]['msg']}"[:300])

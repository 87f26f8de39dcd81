"""Scalars and base models shared by every schema: ``Int64``, finite floats, lenient responses, strict requests."""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Iterable
from enum import Enum
from typing import Annotated, Any, Final

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    PlainSerializer,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    Strict,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WithJsonSchema,
)
from pydantic_core import core_schema

from rlnb._input.shown import shown

__all__ = [
    "FROM_SERVER",
    "FiniteFloat",
    "Newer",
    "INT32_MAX",
    "INT64_MAX",
    "Int64",
    "LogProb",
    "NON_FINITE_JSON",
    "NUMBER_ONLY",
    "StrictBool",
    "StrictFloat",
    "StrictInt",
    "ErrorData",
    "ErrorDetail",
    "_Model",
    "_Request",
    "_finite_list",
    "json_float",
    "lone_surrogate",
    "non_finite",
    "shown",
]


_DECIMAL: Final = re.compile(r"\s*-?[0-9]+\s*", re.ASCII)
"""An int64 as a decimal string: ``Int64``'s schema pattern (``^-?\\d+$``) with ASCII spaces around allowed, as
``int()`` allows them; its digits ASCII."""


def _int64(value: Any) -> Any:
    """Accept a protobuf-JSON string (``"42"``) as well as an int; reject bools and fractions."""
    if _a_bool(value):
        raise ValueError("expected an integer, got a bool")
    if isinstance(value, str):
        try:  # ASCII digits, as the schema's pattern says: int() read "1_000", "+5" and "\u0663" (an Arabic 3) too
            if _DECIMAL.fullmatch(value) is None:
                raise ValueError
            return int(value)
        except ValueError:  # also past int()'s 4,300 digits
            raise ValueError(f"expected an int64 (integer or decimal string), got {shown(value)}") from None
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"expected an integer, got {value!r}")
        return int(value)
    return value


def _a_bool(value: Any) -> bool:
    """Whether ``value`` is a bool, numpy's or torch's scalar one too (``np.True_``, a 0-d array or tensor of bools):
    neither is an ``int``, and pydantic reads ``np.True_`` as token 1. Told by type and dtype, never by calling the
    value: any object with a ``shape`` of ``()`` would have its ``item()`` called, whose exception would escape the
    field's error (and whose hang hang the check). Either library is looked up only if it is loaded: a value of it means
    it is."""
    if isinstance(value, bool):
        return True
    np, torch = sys.modules.get("numpy"), sys.modules.get("torch")
    if np is not None and isinstance(value, np.generic | np.ndarray):
        return value.ndim == 0 and value.dtype == np.bool_
    return torch is not None and isinstance(value, torch.Tensor) and value.ndim == 0 and value.dtype == torch.bool


AS_INTS: Final = {"int64": "int"}
"""The serialisation context in which int64 values are written as plain integers (``to_json_dict``)."""


def _as_ints(info: SerializationInfo) -> bool:
    context = info.context
    return context is not None and context.get("int64") == AS_INTS["int64"]


def _int64_json(value: int, info: SerializationInfo) -> str | int:
    """A decimal string (protobuf JSON, what the service sends), or a plain integer in request bodies
    (``to_json_dict``; what the SDK sends, 2 bytes shorter per token)."""
    return value if _as_ints(info) else str(value)


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
INT64_MAX: Final = _INT64_MAX
"""The largest int64: the wire's token ids stop there (int64 tensor data is held as floats, exact to 2**53)."""
_INT64_OUT: Final = {"type": "string", "pattern": r"^-?\d+$", "description": "int64 as a decimal string"}
INT32_MAX = 2**31 - 1
"""The largest int32, the type of the API's plain-number integer fields (counts, ranks; int64 ones are ``Int64``)."""
Int64 = Annotated[
    int,
    BeforeValidator(_int64),
    Field(ge=_INT64_MIN, le=_INT64_MAX),
    PlainSerializer(_int64_json, return_type=str | int, when_used="json"),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": _INT64_MIN, "maximum": _INT64_MAX},
                {"type": "string", "pattern": r"^\s*-?\d+\s*$"},
            ],
            "description": "int64: an integer or a decimal string",
        },
        mode="validation",
    ),
    WithJsonSchema(_INT64_OUT, mode="serialization"),
]
"""int64 on the wire: ``"123"`` or ``123`` in; ``"123"`` out of the server, ``123`` in a client's request
body (``to_json_dict``); the OpenAPI schema says both."""


FROM_SERVER: Final = {"from_server": True}
"""The validation context of what a server answers (``model_validate(..., context=FROM_SERVER)``): the
fields marked ``Newer`` keep a value newer than rlnb's list there, and only there."""


def _from_server(info: ValidationInfo) -> bool:
    """Whether a validation reads a server's answer (``FROM_SERVER``): the one test of it (``Newer``'s, and a listing's
    unreadable ``sampling_defaults``)."""
    return isinstance(info.context, dict) and bool(info.context.get("from_server"))


def _newer(value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
    """The enum member, or (from a server only) the server's own string for a value newer than the list."""
    try:
        return handler(value)
    except ValidationError:
        if isinstance(value, str) and value and _from_server(info):
            return value
        raise


def _as_sent(value: Any, handler: SerializerFunctionWrapHandler) -> Any:
    """A member as the enum serialises it; a newer string as it is (the enum's serialiser warned on it)."""
    return handler(value) if isinstance(value, Enum) else value


class _Newer:
    """``Newer``'s validator and serialiser. The serialiser declares no return schema, so the JSON schema stays the
    list's in both modes (a ``WrapSerializer`` takes one from its function's annotation, and changed it)."""

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        serialization = core_schema.wrap_serializer_function_ser_schema(_as_sent, return_schema=None)
        return core_schema.with_info_wrap_validator_function(_newer, handler(source), serialization=serialization)


Newer = _Newer()
"""Marks a response's enum whose list a newer API revision may extend (a GPU type, a stop reason, a session's or
resource's status): a server's value that is not in it is kept as its string, as the official SDK keeps it,
instead of refusing the whole answer (``connect`` failed on a new GPU type and left the resource it created
running), and serialised as it came. The JSON schema is the list's; outside ``FROM_SERVER`` (the server's own
journal) the list holds."""

FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
"""A float that is not NaN or ±Inf: JSON has no spelling for them."""
NON_FINITE_JSON: Final = ("-Infinity", "Infinity", "NaN")
"""How protobuf JSON (the service's convention, as ``Int64``'s strings) spells the doubles JSON has no number for:
the one spelling in rlnb (a history's CSV and Parquet export writes it too); ``float()`` reads each back."""


def json_float(value: float) -> float | str:
    """``value`` as JSON can carry it: itself if finite, else its ``NON_FINITE_JSON`` string."""
    if math.isfinite(value):
        return value
    return NON_FINITE_JSON[2] if math.isnan(value) else NON_FINITE_JSON[value > 0]


_LOGPROB_SCHEMA: Final = {
    "anyOf": [{"type": "number"}, {"type": "string", "enum": list(NON_FINITE_JSON)}],
    "description": "a log-prob: a number, or -Infinity (probability 0) as protobuf JSON spells it",
}
LogProb = Annotated[
    float,
    PlainSerializer(json_float, return_type=float | str, when_used="json"),
    WithJsonSchema(_LOGPROB_SCHEMA),
]
"""A log-prob on the wire. A token the model gives probability 0 (its logit -inf: a masked or banned token) has
log-prob -inf, which JSON has no number for: it is sent as the string ``"-Infinity"`` (protobuf JSON's spelling;
``"Infinity"``, ``"NaN"`` likewise) and read back as ``float("-inf")``, the value the in-process engine gives.
Plain floats were answered as a 500 ("Out of range float values are not JSON compliant") on every GET."""


class _NumberOnly:
    """``NUMBER_ONLY``'s schema: the field's own (its bounds in C), after an ``isinstance`` check done in C too, so a
    model built on a hot path makes no Python call more; JSON (whose numbers are ints and floats) skips the check."""

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        own = handler(source)
        number = core_schema.custom_error_schema(
            core_schema.is_instance_schema((int, float)), custom_error_type="float_type"
        )
        return core_schema.json_or_python_schema(json_schema=own, python_schema=core_schema.chain_schema([number, own]))


NUMBER_ONLY: Final = _NumberOnly()
"""Marks a scalar float field (last in its ``Annotated``, after its bounds, which stay in C there) as taking a Python
``int`` or ``float`` only (a subclass too: ``np.float64``; a bool is refused by ``Strict``): pydantic's strict float
takes any object with ``__float__``, so ``GrpoLossParams(beta=torch.tensor([0.1]))`` would be
``beta=0.10000000149011612``.
A tensor of any shape (a 0-d one too), a numpy ``float32`` or integer, a ``Decimal`` is no JSON number: refused
(``float_type``) in a wire model built by hand; rlnb's own entry points (``rlnb.AdamParams``, ``loss_params=``, the
sampling arguments, ``lora=``) take a numpy or 0-d torch scalar as the number it holds before building one."""

StrictInt = Annotated[int, Strict()]
"""An integer: no bool, no string, no float (the schema says ``integer``)."""
StrictFloat = Annotated[float, Strict(), NUMBER_ONLY]
"""A number: a Python integer or float, no bool, no string (the schema says ``number``), nor any other object with
``__float__`` (a tensor's element, a numpy float32: ``NUMBER_ONLY``, in C). A tensor's data list holds these."""
StrictBool = Annotated[bool, Strict()]
"""``true`` or ``false``, not ``1`` or ``"yes"`` (the schema says ``boolean``)."""


def non_finite(values: Iterable[Any]) -> float | None:
    """The first NaN or ±Inf among ``values``, None when there is none: JSON cannot carry them."""
    return next((v for v in values if isinstance(v, float) and not math.isfinite(v)), None)


def lone_surrogate(value: Any, where: str) -> str | None:
    """The first string in ``value`` (nested dicts and lists walked) holding a lone surrogate (``"\\udcff"``: half
    of a UTF-16 pair, which JSON's escapes can spell), named from ``where``; None when every string is valid Unicode.
    No UTF-8 answer can carry one, so a request that stored one made every later answer showing it fail."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return f"{where} holds a lone surrogate at character {exc.start}: it is not valid Unicode text"
        return None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    return next((found for k, v in items if (found := lone_surrogate(v, f"{where}.{k}")) is not None), None)


def _finite_list(values: list[float]) -> list[float]:
    if non_finite(values) is not None:
        raise ValueError("tensor data must be finite (no NaN or Inf)")
    return values


class _Model(BaseModel):
    """Lenient base for responses and shared objects: unknown fields are kept, never fatal.

    In the serialization (response) JSON schema every field is required, because the server always
    sends every field (``null`` when unset); fields that may be ``null`` say so in their type.
    """

    model_config = ConfigDict(extra="allow", populate_by_name=True, json_schema_serialization_defaults_required=True)

    def to_json_dict(self) -> dict[str, Any]:
        """The JSON body a client sends: unset fields omitted, int64 as plain integers (as the SDK sends
        them; the server accepts both and answers with strings)."""
        return self.model_dump(mode="json", exclude_unset=True, by_alias=True, context=AS_INTS)


class _Request(_Model):
    """Base for top-level request bodies: an unknown field is a 400 naming it, never silently dropped
    (a body that only *refers* to its real content, e.g. through ``payload_id``, must not pass for it)."""

    model_config = ConfigDict(extra="forbid")


class ErrorDetail(_Model):
    """The inside of an API error body: ``message``, ``type``, and ``param`` / ``code`` when known."""

    message: str
    type: str
    param: str | None = None
    """The request field at fault, when there is one."""
    code: str | None = None


class ErrorData(_Model):
    """The API's error body: ``{"error": {"message", "type", "param", "code"}}``."""

    error: ErrorDetail

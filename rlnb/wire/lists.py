"""Lists of token ids and log-probs, the long lists of the sample path, validated and written as JSON in C passes
where they hold what they should (plain ints, decimal strings, finite floats); anything else goes item by item
through ``Int64``'s and ``LogProb``'s own rules, which convert or name it as before. A Python step per item was most
of a big batch's or a long sample's cost."""

from __future__ import annotations

import math
from itertools import repeat
from operator import is_
from typing import Annotated, Any

from pydantic import (
    FailFast,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    ValidatorFunctionWrapHandler,
    WithJsonSchema,
    WrapSerializer,
    WrapValidator,
)

from rlnb.wire.base import _INT64_MAX, _INT64_MIN, _INT64_OUT, _LOGPROB_SCHEMA, Int64, LogProb, _as_ints

__all__ = ["Int64List", "LogProbList", "only"]


def only(values: list[Any], kind: type) -> bool:
    """Whether every item of ``values`` is exactly a ``kind`` (a bool is no int, a subclass is not the class), in
    passes at C speed: the fast paths' test, a Python loop per token was most of a big batch's cost. Types are
    compared by identity: ``list.count`` fell back to ``==``, and a class whose metaclass says it equals ``int`` passed
    as one, its objects sent as token ids."""
    return all(map(is_, map(type, values), repeat(kind)))


def _plain_ids(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """A list of plain ints, or of decimal strings (the service's int64s), in int64's range: plain ints in a list of
    its own, in C passes. Anything else (floats, bools, numpy ints, text ``int()`` cannot read, a value out of
    range) through ``Int64``'s rules item by item, which convert or name it as before."""
    if type(value) is list:
        ids = value[:] if only(value, int) else _decimal_ids(value)
        if ids is not None and (not ids or _INT64_MIN <= min(ids) <= max(ids) <= _INT64_MAX):
            return ids
    return handler(value)


def _decimal_ids(values: list[Any]) -> list[int] | None:
    """``values``' ints if each is a decimal string (``int()`` reads it, in ASCII without ``_`` or ``+``: as ``Int64``
    reads one), else None."""
    if not only(values, str):
        return None
    joined = "".join(values)
    if not joined.isascii() or "_" in joined or "+" in joined:
        return None
    try:
        return list(map(int, values))
    except ValueError:
        return None


def _ids_json(value: Any, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
    """A list of plain ints as ``Int64`` writes each (``_int64_json``), in C passes; anything else item by item."""
    if type(value) is not list or not only(value, int):
        return handler(value)
    return value[:] if _as_ints(info) else list(map(str, value))


Int64List = Annotated[
    list[Int64],
    FailFast(),  # one error, not one per item: 2 M bad items built 2 M error dicts (GBs) for the first
    WrapValidator(_plain_ids),
    WrapSerializer(_ids_json, when_used="json"),
    WithJsonSchema({"type": "array", "items": _INT64_OUT}, mode="serialization"),
]
"""A list of ``Int64`` (token ids), validated and written as JSON without a Python step per item where it holds
plain ints or decimal strings: the same values, errors and JSON as ``list[Int64]``."""


def _logprobs_json(value: Any, handler: SerializerFunctionWrapHandler) -> Any:
    """A list of finite floats as itself (what ``json_float`` keeps of each), in C passes: one NaN or inf makes the sum
    one (so may big finite values), and the list goes item by item, each non-finite one as its string."""
    if type(value) is list and only(value, float) and math.isfinite(sum(value)):
        return value[:]
    return handler(value)


LogProbList = Annotated[
    list[LogProb],
    WrapSerializer(_logprobs_json, when_used="json"),
    WithJsonSchema({"type": "array", "items": _LOGPROB_SCHEMA}),
]
"""A list of ``LogProb`` (a sequence's, a prompt's), written as JSON without a Python step per item where each is
finite: the same JSON as ``list[LogProb]``."""

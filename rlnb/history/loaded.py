"""A run folder's line read back (``from_row``: an operation's record; ``logged_row``: a ``log()`` row): a value of
the wrong type is left out, not trusted, and named to the caller (``record.warn_bad`` says it).
"""

from __future__ import annotations

import math
from typing import Any

from rlnb.history.jsontext import NON_FINITE, number, numbers
from rlnb.history.record import COLUMNS, FLOATS, INT64, LATEST_TIME, TIMES, Record, fits_float, fits_int64
from rlnb.text.prompts import escaped, surrogate

_INTS = ("step", "weights_version")
_TEXTS = ("op_id", "status")
_OPTIONAL_TEXTS = ("error_code", "error_message", "na_reason")
TEXT_FIELDS = frozenset({"kind", *_TEXTS, *_OPTIONAL_TEXTS})
"""Text a record holds as valid Unicode: a lone surrogate (a server's ``"\\ud800"`` escape in an error message, a hand
edit) is kept written as its escape. It failed ``History.df`` (pandas' text columns hold UTF-8) from then on, in every
load of the run, ``rlnb.runs()`` and the plots too."""


def _valid(name: str, v: Any) -> bool:
    """Whether a loaded value fits the ``Record`` field (``None`` stands for NaN in float fields)."""
    if name in TIMES:
        return v is None or (fits_float(v) and not abs(v) > LATEST_TIME)  # NaN is a time not yet reached
    if name in FLOATS:
        return v is None or fits_float(v)
    if name in _INTS:  # step counts and versions: never below 0 (``log`` refuses a negative step too)
        return v is None or (fits_int64(v) and v >= 0)
    if name in _TEXTS:
        return isinstance(v, str)
    if name in _OPTIONAL_TEXTS:
        return v is None or isinstance(v, str)
    if name == "metrics":
        return isinstance(v, dict) and all(fits_float(x) for x in v.values())
    if name == "params":
        return isinstance(v, dict)
    return True


def _text(value: str) -> str:
    """``value`` as valid Unicode: a lone surrogate written as its escape (``TEXT_FIELDS``); ASCII, at once."""
    return value if value.isascii() else escaped(value)


def _numbers(name: str, v: Any) -> Any:
    """A loaded field's value with its ``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` as the floats (``jsontext``)
    where it holds numbers; a text field's as written."""
    if name in FLOATS or name in TIMES:
        return number(v)
    if name == "metrics" and isinstance(v, dict):
        return {k: number(x) for k, x in v.items()}
    return numbers(v) if name == "params" else v


def from_row(row: dict[str, Any], bad: list[str]) -> Record | None:
    """A Record from a loaded line: ``None`` without a usable ``seq`` and ``kind``; a field of the wrong
    type keeps its default and is named in ``bad``. A value of the usual type (``_FAST``: a float, ASCII text, a dict
    of floats) is kept at once, as ``_field`` would keep it; any other goes through ``_field``'s checks."""
    seq, kind = row.get("seq"), row.get("kind")
    if not (fits_int64(seq) and seq >= 0 and isinstance(kind, str)):
        bad.append(f"seq, kind = {seq!r}, {kind!r}"[:80])
        return None
    values: dict[str, Any] = {}
    for name, limit, usual, inside in _FAST:
        if name not in row:
            continue
        v = row[name]
        t = type(v)
        if limit:  # a figure or time: a float, or its NON_FINITE spelling, within the limit
            if t is str:
                v = NON_FINITE.get(v, v)
            if type(v) is float and not abs(v) > limit:
                values[name] = v
                continue
        elif (
            t in usual
            and (t is not str or v.isascii())
            and (t is not int or 0 <= v < INT64)
            and (t is not dict or {*map(type, v.values())} <= inside)
        ):
            values[name] = v
            continue
        _field(name, row[name], bad, values)
    return Record(**values)


def _field(name: str, v: Any, bad: list[str], values: dict[str, Any]) -> None:
    """Put a loaded field's value in ``values`` as the ``Record`` holds it, or name it in ``bad``."""
    v = _numbers(name, v)
    if not _valid(name, v):
        bad.append(f"{name} = {v!r}"[:80])
        return
    values[name] = math.nan if v is None and (name in FLOATS or name in TIMES) else v
    if isinstance(v, str) and name in TEXT_FIELDS:
        values[name] = _text(v)


_TYPES: dict[str, frozenset[type]] = {
    "seq": frozenset({int}),
    "kind": frozenset({str}),
    **{name: frozenset({str}) for name in _TEXTS},
    **{name: frozenset({str, type(None)}) for name in _OPTIONAL_TEXTS},
    **{name: frozenset({int, type(None)}) for name in _INTS},
    "metrics": frozenset({dict}),
    "params": frozenset({dict}),
}
_INSIDE = {"metrics": frozenset({float}), "params": frozenset({float, int, bool, type(None)})}
_FAST = tuple(
    (
        name,
        math.inf if name in FLOATS else LATEST_TIME if name in TIMES else 0.0,
        _TYPES.get(name, frozenset()),
        _INSIDE.get(name, frozenset()),
    )
    for name in COLUMNS
)
"""Each field in ``COLUMNS`` order, for ``from_row``: its limit (the largest absolute value of a figure or time; 0
for the others), the types of a value kept as read (text: ASCII; an int: from 0 to int64), and those of a dict's
values kept as read (``metrics``' floats; ``params``' plain values, which ``numbers`` leaves as they are)."""


def logged_row(row: dict[str, Any], bad: list[str]) -> dict[str, Any] | None:
    """A ``log()`` row from ``metrics.jsonl``: an integer ``step`` and numbers; other values are left out, and so is
    a figure whose name is not valid Unicode (written before ``log`` refused it): no table column holds it."""
    step = row.get("step")
    if not (fits_int64(step) and step >= 0):
        bad.append(f"step = {step!r}"[:80])
        return None
    kept: dict[str, Any] = {"step": step}
    for k, v in row.items():
        if k == "step":
            continue
        v = number(v)
        if surrogate(k) is not None:
            bad.append(f"{k!r}: a name that is not valid Unicode text (a lone surrogate)")
        elif v is None or fits_float(v):
            kept[k] = math.nan if v is None else float(v)
        else:
            bad.append(f"{k} = {v!r}"[:80])
    return kept

"""A run folder's line read back (``from_row``: an operation's record; ``logged_row``: a ``log()`` row): a value of
the wrong type is left out, not trusted, and named to the caller (``record.warn_bad`` says it).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

from rlnb.history.figures import SESSION_FIELD
from rlnb.history.jsontext import NON_FINITE, number, numbers
from rlnb.history.record import COLUMNS, INT64, LATEST_TIME, SHAPES, Record, Shape, fits_float, fits_int64
from rlnb.text.prompts import escaped, surrogate

_NUMBERS = frozenset({Shape.FIGURE, Shape.TIME})
"""Shapes whose ``None`` (JSON's null) is a missing number: the ``Record`` holds NaN."""
_TEXTS = frozenset({Shape.TEXT, Shape.MAYBE_TEXT})
"""Shapes of text a record holds as valid Unicode: a lone surrogate (a server's ``"\\ud800"`` escape in an error
message, a hand edit) is kept written as its escape. It failed ``History.df`` (pandas' text columns hold UTF-8) from
then on, in every load of the run, ``rlnb.runs()`` and the plots too."""


class _Check(NamedTuple):
    """How a value of one ``Shape`` is read back: the full check, and the value of the usual type kept at once."""

    fits: Callable[[Any], bool]
    """Whether a loaded value (``_numbers``'d: ``None`` stands for NaN in a number) fits the shape."""
    limit: float
    """A number's largest absolute value (a float within it is kept at once); 0 for the others."""
    usual: frozenset[type]
    """The types of a value kept as read (text: ASCII; an int: from 0 below int64)."""
    inside: frozenset[type] = frozenset()
    """The types of a dict's values kept as read (``numbers`` leaves them as they are)."""


_NONE = type(None)
_CHECKS = {
    Shape.COUNT: _Check(lambda v: v is None or (fits_int64(v) and v >= 0), 0.0, frozenset({int, _NONE})),
    Shape.FIGURE: _Check(lambda v: v is None or fits_float(v), math.inf, frozenset()),
    Shape.TIME: _Check(lambda v: v is None or (fits_float(v) and not abs(v) > LATEST_TIME), LATEST_TIME, frozenset()),
    Shape.TEXT: _Check(lambda v: isinstance(v, str), 0.0, frozenset({str})),
    Shape.MAYBE_TEXT: _Check(lambda v: v is None or isinstance(v, str), 0.0, frozenset({str, _NONE})),
    Shape.FIGURES: _Check(
        lambda v: isinstance(v, dict) and all(fits_float(x) for x in v.values()),
        0.0, frozenset({dict}), frozenset({float}),
    ),
    Shape.PARAMS: _Check(
        lambda v: isinstance(v, dict), 0.0, frozenset({dict}), frozenset({float, int, bool, _NONE})
    ),
}  # fmt: skip
"""Each shape's checks: a count is never below 0 (``log`` refuses a negative step too); a time past ``LATEST_TIME``
is damage (NaN is a time not reached yet)."""


def _text(value: str) -> str:
    """``value`` as valid Unicode: a lone surrogate written as its escape (``_TEXTS``); ASCII, at once."""
    return value if value.isascii() else escaped(value)


def _numbers(shape: Shape, v: Any) -> Any:
    """A loaded field's value with its ``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` as the floats (``jsontext``)
    where it holds numbers; a text field's as written."""
    if shape in _NUMBERS:
        return number(v)
    if shape is Shape.FIGURES and isinstance(v, dict):
        return {k: number(x) for k, x in v.items()}
    return numbers(v) if shape is Shape.PARAMS else v


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
    shape = SHAPES[name]
    v = _numbers(shape, v)
    if not _CHECKS[shape].fits(v):
        bad.append(f"{name} = {v!r}"[:80])
        return
    values[name] = math.nan if v is None and shape in _NUMBERS else v
    if isinstance(v, str) and shape in _TEXTS:
        values[name] = _text(v)


_FAST = tuple((name, *_CHECKS[SHAPES[name]][1:]) for name in COLUMNS)
"""Each field in ``COLUMNS`` order, for ``from_row``: its name and its shape's ``limit``, ``usual`` and ``inside``
(a field ``SHAPES`` misses fails here, at import)."""


def logged_row(row: dict[str, Any], bad: list[str]) -> tuple[dict[str, Any], int | None] | None:
    """A ``log()`` row from ``metrics.jsonl`` and the session that logged it (``SESSION_FIELD``; None in a run folder
    an older rlnb wrote, or where it is no session's number): an integer ``step`` and numbers; other values are left
    out, and so is a figure whose name is not valid Unicode (written before ``log`` refused it): no table column holds
    it."""
    step = row.get("step")
    if not (fits_int64(step) and step >= 0):
        bad.append(f"step = {step!r}"[:80])
        return None
    session = row.get(SESSION_FIELD)
    if session is not None and not (fits_int64(session) and session >= 0):
        bad.append(f"{SESSION_FIELD} = {session!r}"[:80])
        session = None
    kept: dict[str, Any] = {"step": step}
    for k, v in row.items():
        if k in ("step", SESSION_FIELD):
            continue
        v = number(v)
        if surrogate(k) is not None:
            bad.append(f"{k!r}: a name that is not valid Unicode text (a lone surrogate)")
        elif v is None or fits_float(v):
            kept[k] = math.nan if v is None else float(v)
        else:
            bad.append(f"{k} = {v!r}"[:80])
    return kept, session

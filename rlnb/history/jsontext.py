"""Standard JSON for every file a run writes (``config.json``, the ``.jsonl`` lines, the exports' dict cells): the
floats JSON has no number for (NaN, ±Infinity) as the strings protobuf's JSON mapping spells them with
(``wire.NON_FINITE_JSON``, as the API sends a log-prob of -inf), read back as those floats. Written bare (``NaN``), as
Python's json does, jq, JavaScript's ``JSON.parse`` and DuckDB refused the text. Where a field holds a number (a
record's loss, a logged figure) its string reads back as the float (``number``), and a text field's stays text; in
a free-form dict (the config, ``params``) a text value spelled so (a note ``"NaN"``) reads back as the float too
(``numbers``): JSON cannot tell them apart.
"""

from __future__ import annotations

import json
import math
from typing import Any

from rlnb import wire

NON_FINITE = {text: float(text) for text in wire.NON_FINITE_JSON}
"""Each spelling of ``wire.NON_FINITE_JSON``, and the float it stands for."""


LINE = json.JSONEncoder(separators=(",", ":"), default=str, allow_nan=False)
"""The encoder of a ``.jsonl`` line: compact, and never a bare ``NaN`` (``spelled`` comes first)."""


def line(row: dict[str, Any]) -> str:
    """One line of a run folder's ``.jsonl`` file, its non-finite floats ``spelled``."""
    return LINE.encode(spelled(row)) + "\n"


def number(value: Any) -> Any:
    """A value read from a field that holds a number: a ``NON_FINITE`` string as its float, anything else as read
    (a bare ``NaN`` of an older rlnb's file was read as the float already)."""
    return NON_FINITE.get(value, value) if isinstance(value, str) else value


_AS_IS = frozenset({str, int, bool, type(None)})
"""Types ``spelled`` keeps without a call of its own: a record line's fields are mostly these and finite floats, and a
call per field cost a training step about 30 Python calls a line (four lines a step), inlined in its comprehensions."""
_BY_SIGN = {sign: wire.json_float(sign * math.inf if sign else math.nan) for sign in (-1, 0, 1)}
"""``wire.json_float``'s spellings by ``(v > 0) - (v < 0)``: -1 -Infinity, 1 Infinity, 0 (NaN compares false) NaN."""


def spelled(value: Any) -> Any:
    """``value`` with each non-finite float in it as its ``NON_FINITE`` string."""
    if isinstance(value, float):
        return wire.json_float(value)
    if isinstance(value, dict):
        return {
            k: v
            if type(v) in _AS_IS
            else (v if math.isfinite(v) else _BY_SIGN[(v > 0) - (v < 0)])
            if type(v) is float
            else spelled(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [
            v
            if type(v) in _AS_IS
            else (v if math.isfinite(v) else _BY_SIGN[(v > 0) - (v < 0)])
            if type(v) is float
            else spelled(v)
            for v in value
        ]
    return value


def numbers(value: Any) -> Any:
    """``spelled`` undone: each ``NON_FINITE`` string in ``value`` as its float."""
    if isinstance(value, str):
        return NON_FINITE.get(value, value)
    if isinstance(value, dict):
        return {k: numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [numbers(v) for v in value]
    return value


def config_text(config: dict[str, Any]) -> str:
    """A run's ``config.json``: standard JSON (``spelled``); what JSON has no type for as its ``str()``."""
    return json.dumps(spelled(config), indent=2, default=str)


NAMES = frozenset({"run_id", "label"})
"""The config fields that name a run (its folder, its line in ``compare``): text, whatever they spell."""


def config_values(config: dict[str, Any]) -> dict[str, Any]:
    """A ``config.json`` as read, its ``NON_FINITE`` strings as floats (``numbers``), ``NAMES`` as written."""
    return {k: v if k in NAMES else numbers(v) for k, v in config.items()}

"""Standard JSON for every file a run writes (``config.json``, the ``.jsonl`` lines, the exports' dict cells): the
floats JSON has no number for (NaN, ±Infinity) as the strings protobuf's JSON mapping spells them with
(``wire.NON_FINITE_JSON``, as the API sends a log-prob of -inf), read back as those floats. Written bare (``NaN``), as
Python's json does, jq, JavaScript's ``JSON.parse`` and DuckDB refused the text. Where a field holds a number (a
record's loss, a logged figure) its string reads back as the float (``number``), and a text field's stays text. In
``config.json``, free-form, a text value spelled so (a note ``"NaN"``) is listed under ``TEXTS`` and stays text; in
``params`` (numbers only, the optimizer's) and an older rlnb's ``config.json`` it reads back as the float
(``numbers``): JSON cannot tell them apart.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from json.encoder import encode_basestring_ascii
from typing import Any

from rlnb import wire

NON_FINITE = {text: float(text) for text in wire.NON_FINITE_JSON}
"""Each spelling of ``wire.NON_FINITE_JSON``, and the float it stands for."""


_C_ENCODER = getattr(json.encoder, "c_make_encoder", None)  # not in json.encoder's __all__: None where it is absent
LINE = json.JSONEncoder(separators=(",", ":"), default=str, allow_nan=False)
"""The encoder of a ``.jsonl`` line: compact, and never a bare ``NaN`` (``spelled`` comes first)."""
LINE_CHUNKS = (
    _C_ENCODER(None, str, encode_basestring_ascii, None, ":", ",", False, False, False)
    if _C_ENCODER is not None  # CPython's C encoder; an interpreter without it takes ``LINE`` itself
    else lambda value, _level: LINE.iterencode(value)
)
"""``LINE``'s C core, called as ``JSONEncoder.encode`` calls it (less its two Python calls a line, eight a step); no
markers: a value that holds itself is a ``RecursionError``, as ``spelled`` made of it."""


def line(row: dict[str, Any]) -> str:
    """One line of a run folder's ``.jsonl`` file (a sweep's ``trials.jsonl``, a server's journal), its non-finite
    floats ``spelled``. Never an error: what the encoder refuses (a key JSON has no text for, ``writable``) is written
    as ``writable`` makes it: raised into the writer, it would lose a record's line, a trial's row, a server's state."""
    try:
        return "".join(LINE_CHUNKS(spelled(row), 0)) + "\n"
    except (ValueError, TypeError, RecursionError):  # rare: kept off the line of every step
        return LINE.encode({_key(k): writable(v) for k, v in row.items()}) + "\n"


def writable(value: Any) -> Any:
    """``value`` as a JSON file can hold it: ``spelled``, and its keys too (``_key``): a NaN key (``{nan: 1}``) as
    ``"NaN"``, a numpy number's as the number's text, a tuple's as its ``str()``. A value that still cannot be written
    (one holding itself, nested past Python's recursion limit) is its ``str()`` (as ``default=str`` writes an object
    JSON has no type for), or else its type's name."""
    try:
        keyed = _keyed(value)
        LINE.encode(keyed)
        return keyed
    except (ValueError, TypeError, RecursionError):
        try:
            return str(value)
        except Exception:  # noqa: BLE001 - a str() that fails (or recurses) is not the record's loss
            return f"<{type(value).__name__} that JSON cannot hold>"


def _keyed(value: Any) -> Any:
    """``spelled``, with every dict key as JSON text (``_key``)."""
    if isinstance(value, dict):
        return {_key(k): _keyed(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_keyed(v) for v in value]
    return spelled(value)


def _key(key: Any) -> str:
    """A dict key as JSON writes it (``1.5`` as ``"1.5"``, ``True`` as ``"true"``), a non-finite float's as its
    ``NON_FINITE`` spelling (JSON's own is a bare ``NaN``), anything else (a numpy scalar, a tuple) as its ``str()``."""
    if isinstance(key, str):
        return key
    if isinstance(key, float):
        return float.__repr__(key) if math.isfinite(key) else str(wire.json_float(key))
    if key is None or isinstance(key, bool | int):
        return json.dumps(key)
    return str(key)


def number(value: Any) -> Any:
    """A value read from a field that holds a number: a ``NON_FINITE`` string as its float, anything else as read
    (a bare ``NaN`` of an older rlnb's file is read as the float already)."""
    return NON_FINITE.get(value, value) if isinstance(value, str) else value


_AS_IS = frozenset({str, int, bool, type(None)})
"""Types ``spelled`` keeps without a call of its own: a record line's fields are mostly these and finite floats, and a
call per field cost a training step about 30 Python calls a line (four lines a step), inlined in its comprehensions."""
_BY_SIGN = {sign: wire.json_float(sign * math.inf if sign else math.nan) for sign in (-1, 0, 1)}
"""``wire.json_float``'s spellings by ``(v > 0) - (v < 0)``: -1 -Infinity, 1 Infinity, 0 (NaN compares false) NaN."""
_FLOAT = frozenset({float})
"""The value types of a dict ``spelled`` keeps as it is if they are finite (a record's ``metrics`` and ``params``),
checked without a Python call (``type`` and ``math.isfinite`` mapped): a call and a comprehension for each such dict
cost a training step 16 Python calls."""


def row_line(row: dict[str, Any]) -> str:
    """``line(row)``, the same bytes, for a row whose values are mostly plain (a record's): ``row`` is spelled in
    place by a loop, ``spelled``'s dict case without its call and comprehension (8 Python calls a training step);
    a value other than a finite float or a dict of them is spelled by ``spelled``."""
    for k, v in row.items():  # a value replaced, none added: the iteration stands
        if type(v) in _AS_IS:
            continue
        if type(v) is float:
            if not math.isfinite(v):
                row[k] = _BY_SIGN[(v > 0) - (v < 0)]
        elif not (type(v) is dict and {*map(type, v.values())} <= _FLOAT and all(map(math.isfinite, v.values()))):
            row[k] = spelled(v)
    try:
        return "".join(LINE_CHUNKS(row, 0)) + "\n"
    except (ValueError, TypeError, RecursionError):  # rare: ``line`` writes what the encoder refuses
        return line(row)


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
            else v
            if type(v) is dict and {*map(type, v.values())} <= _FLOAT and all(map(math.isfinite, v.values()))
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


TEXTS = "rlnb_texts"
"""The ``config.json`` field that lists where a text value is spelled like a non-finite number (``annotate(note="NaN")``
writes ``"rlnb_texts": [["note"]]``): read back as text there, and only there (``config_values``). A file without it
(none is written where no text is spelled so; an older rlnb's) reads every such text as the float."""


def config_text(config: dict[str, Any]) -> str:
    """A run's ``config.json``: standard JSON (``spelled``); what JSON has no type for as its ``str()``, and what the
    encoder refuses as ``writable`` makes it (as ``line``); ``TEXTS`` where a text value is spelled like a number."""
    try:  # a value holding itself: _texts' RecursionError too raised into the writer
        texts = [list(at) for at in _texts(config) if at[0] not in NAMES]
        return json.dumps(spelled({**config, TEXTS: texts} if texts else config), indent=2, default=str,
                          allow_nan=False)  # fmt: skip
    except (ValueError, TypeError, RecursionError):
        return json.dumps({_key(k): writable(v) for k, v in config.items()}, indent=2, default=str)


def _texts(value: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """The path (keys as JSON writes them, ``_key``; list indices) of each text in ``value`` spelled like a non-finite
    number (``NON_FINITE``)."""
    if isinstance(value, str):
        if value in NON_FINITE:
            yield at
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _texts(v, (*at, _key(k)))
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield from _texts(v, (*at, i))


NAMES = frozenset({"run_id", "label"})
"""The config fields that name a run (its folder, its line in ``compare``): text, whatever they spell."""


def config_values(config: dict[str, Any]) -> dict[str, Any]:
    """A ``config.json`` as read, its ``NON_FINITE`` strings as floats (``numbers``) but where ``TEXTS`` lists them
    (text a user wrote), ``NAMES`` as written."""
    values = {k: v if k in NAMES else numbers(v) for k, v in config.items() if k != TEXTS}
    texts = config.get(TEXTS)
    for at in texts if isinstance(texts, list) else []:
        if isinstance(at, list) and at:
            _as_text(values, config, at)
    return values


def _as_text(values: Any, written: Any, at: list[Any]) -> None:
    """The text at path ``at`` in ``written`` put back in ``values`` (which ``numbers`` made a float of); a path that
    leads nowhere, or to anything but such a text (a hand edit), changes nothing."""
    *above, last = at
    for key in above:
        if not _holds(written, key):
            return
        values, written = values[key], written[key]
    if _holds(written, last) and isinstance(written[last], str) and written[last] in NON_FINITE:
        values[last] = written[last]


def _holds(value: Any, key: Any) -> bool:
    """Whether ``value[key]`` is there: a dict's key, or a list's index."""
    if isinstance(value, dict):
        return isinstance(key, str) and key in value
    return isinstance(value, list) and type(key) is int and 0 <= key < len(value)

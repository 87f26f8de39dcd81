"""How `rlnb serve` reads a JSON body (``read_json``): an integer too long to read, a key given twice in one object, or
a key holding a lone surrogate, is a 400 naming where it is, found in time and memory linear in the body."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from rlnb.server.errors import ServerError, named
from rlnb.text.prompts import escaped, surrogate


class _Huge:
    """An integer literal longer than Python reads (``sys.get_int_max_str_digits()``: a guard against slow
    conversions), kept as its digit count so that the error can say where it was."""

    def __init__(self, literal: str):
        self.digits = len(literal.lstrip("-"))


def _int(literal: str) -> int | _Huge:
    try:
        return int(literal)
    except ValueError:
        return _Huge(literal)


_Path = tuple[str, "_Path"] | None
"""A decoded JSON item's path, innermost key first: its key and its parent's path (None at the top)."""


def _first(value: Any, hit: Callable[[Any], bool]) -> tuple[str, Any] | None:
    """The path and the item of the first ``hit`` in decoded JSON (a loop, not recursion: the JSON may nest as deep
    as the decoder allows). Each item's path is its key and its parent's path, joined only for the hit: a copy per
    item would make a 2 MB body (200,000 keys 900 levels down, the repeated key after them) take 1.7 GB."""
    stack: list[tuple[_Path, Any]] = [(None, value)]
    while stack:
        path, item = stack.pop()
        if hit(item):
            keys: list[str] = []
            while path is not None:
                key, path = path
                keys.append(key)
            return ".".join(reversed(keys)), item
        members = item.items() if isinstance(item, dict) else enumerate(item) if isinstance(item, list) else ()
        stack.extend(reversed([((str(key), path), member) for key, member in members]))
    return None


class _Twice(dict[str, Any]):
    """A JSON object that gives ``key`` ``times`` times: ``json.loads`` kept the last value without a word."""

    key, times = "", 0


def _repeated(keys: list[str]) -> str:
    """The first key given again, in one pass: searching each key's earlier keys would take minutes for a body of
    10^5 keys with one given twice at its end (and block the server's event loop meanwhile)."""
    seen: set[str] = set()
    for key in keys:
        if key in seen:
            return key
        seen.add(key)
    raise ValueError("no key is repeated")


def read_json(data: bytes | bytearray | str, prefix: str = "") -> Any:
    """``json.loads``, but an integer too long to read is a 400 naming its field (``prefix`` + its path) and the
    range, not Python's advice to call ``sys.set_int_max_str_digits()`` (or "error parsing the body"). Only a
    failed decode is decoded again to find it: the common case keeps ``json.loads``'s speed. A key given twice in one
    object is a 400 naming it, as protobuf JSON refuses a duplicate field (``json.loads`` kept the last)."""
    twice: list[_Twice] = []
    broken: list[tuple[dict[str, Any], str]] = []  # an object, and its first key that holds a lone surrogate

    def members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        made = dict(pairs)
        if not broken and not all(map(str.isascii, made)):  # C: only a key past ASCII is encoded
            bad = next((key for key in made if surrogate(key) is not None), None)
            if bad is not None:
                broken.append((made, bad))
        if len(made) == len(pairs):
            return made
        keys = [key for key, _ in pairs]
        found = _Twice(made)
        found.key = _repeated(keys)
        found.times = keys.count(found.key)
        twice.append(found)
        return found

    try:
        value = json.loads(data, object_pairs_hook=members)
    except json.JSONDecodeError:
        raise
    except ValueError:  # an integer too long to read, or bytes that are not UTF-8/16/32 (raised again below)
        huge = _first(json.loads(data, parse_int=_int), lambda item: isinstance(item, _Huge))
        if huge is None:
            raise
        joined = ".".join(filter(None, (prefix, huge[0])))
        param = named(joined) if joined else None  # cut as every echoed path: a 100 KB key came back twice
        raise ServerError(
            400,
            f"{param or 'the body'}: an integer of {huge[1].digits} digits is out of range for every field "
            "(an int64 has at most 19 digits, a float64 at most 309)",
            param=param,
        ) from None
    if broken:  # pydantic cannot read such a key: its error named the object that held it, or "the body"
        where = _first(value, lambda item: item is broken[0][0])
        param = named(".".join(filter(None, (prefix, where[0] if where else "", escaped(broken[0][1])))))
        said = "this key holds a lone surrogate (half of a UTF-16 pair): it is not valid Unicode text"
        raise ServerError(400, f"{param}: {said}", param=param)
    if twice:
        where = _first(value, lambda item: item is twice[0])
        param = named(".".join(filter(None, (prefix, where[0] if where else "", twice[0].key))))
        raise ServerError(400, f"{param} is given {twice[0].times} times in one object: give it once", param=param)
    return value

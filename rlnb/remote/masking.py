"""What an error that escapes the send path shows: no API key in its text or attributes, no httpcore locals in its
frames.

A transport of the user's own (a proxy library, a custom one) may raise an error of its own that lists the request's
headers, or keeps the request (``httpx.HTTPStatusError``'s ``.request``). rlnb raises it as it is, so that the poller
and sender judge it by its type as before, but with every key masked where a traceback, a log line or ``str`` reads
its text, and in the headers of every request or response it holds (``mask``); the frames it passed through lose
their locals, which held the headers (``forget_locals``). ``reachable`` says whether a key can still be read from it.
"""

from __future__ import annotations

import contextlib
import traceback
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import httpx
from pydantic import SecretStr

from rlnb.secrets import redaction

REACH_LIMIT = 10_000
"""The most objects ``reachable`` visits from an error: past them, the error counts as one that holds a key."""
OPAQUE = (int, float, complex, type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
          types.MethodType, types.CodeType, types.FrameType, types.TracebackType, SecretStr)  # fmt: skip
"""What the search does not look into: numbers, code, and the ``SecretStr`` that keeps a key hidden on purpose."""


def chain(error: BaseException | None) -> list[BaseException]:
    """``error`` and the errors it chains to (``__cause__``, else ``__context__``), each once."""
    found: list[BaseException] = []
    while error is not None and error not in found:
        found.append(error)
        error = error.__cause__ or error.__context__
    return found


def forget_locals(error: BaseException | None) -> None:
    """The frames ``error`` and its chain passed through keep their lines but lose their locals
    (``traceback.clear_frames``; a frame still running keeps its own): httpcore's hold the request's headers."""
    for each in chain(error):
        traceback.clear_frames(each.__traceback__)


def family(error: BaseException) -> list[BaseException]:
    """``error``, the errors it chains to, and those an exception group holds (theirs too), each once."""
    found: list[BaseException] = []
    todo = [error]
    while todo:
        for each in chain(todo.pop()):
            if each not in found:
                found.append(each)
                todo.extend(each.exceptions if isinstance(each, BaseExceptionGroup) else ())
    return found


def said(error: BaseException, how: Callable[[object], str] = str) -> str:
    """``how(error)`` (its ``str``: what a traceback prints; or ``repr``), "" for an error whose text raises."""
    try:
        return how(error)
    except Exception:  # noqa: BLE001 - a traceback prints "<exception str() failed>" then: no key
        return ""


def mask(error: BaseException, keys: list[str]) -> bool:
    """Each of ``keys`` masked, in place, in the text of ``error`` and of each error it chains to or groups (their
    args, ``OSError``'s ``strerror`` and file names, ``__notes__``), their types kept, and in the headers of every
    request and response reachable from them. False when a text still quotes one (a class whose ``__str__`` reads
    attributes of its own, an exception group's message, which its args do not make) or one is still ``reachable``
    (an attribute holding a copy of the headers)."""
    every = family(error)
    for each in every:
        try:  # a class whose args or attributes are read-only properties: the check below then says so
            if not isinstance(each, BaseExceptionGroup):  # a group prints its own message; its members are masked
                each.args = tuple(_masked(arg, keys) for arg in each.args)
            for name in ("strerror", "filename", "filename2"):  # OSError's text is made of these, not of its args
                if isinstance(text := getattr(each, name, None), str):
                    setattr(each, name, redaction.redact_keys(text, keys))
            if isinstance(notes := getattr(each, "__notes__", None), list):
                each.__notes__ = [redaction.redact_keys(str(note), keys) for note in notes]
        except (AttributeError, TypeError):
            continue
    held = [each.headers for each in _objects(error) if isinstance(each, httpx.Request | httpx.Response)]
    for headers in held:  # exc.request's, .response's: sent already (a live client's own defaults are left as they are)
        for name in {name for name, value in headers.multi_items() if redaction.holds(value, keys)}:
            headers[name] = redaction.redact_keys(", ".join(headers.get_list(name)), keys)
    shown = any(redaction.holds(said(each) + said(each, repr), keys) for each in every)  # a group's repr: its members
    return not shown and not reachable(error, keys)


def reachable(error: BaseException | None, keys: list[str]) -> bool:
    """Whether one of ``keys`` is in a text (or bytes) that can be read from ``error``: its args, notes, chained
    errors, attributes and theirs, down to each request's headers (``exc.request.headers``); not through its frames
    (``forget_locals``) nor into a ``SecretStr``. True past ``REACH_LIMIT`` objects (too many to say it holds none)."""
    for each in _objects(error):
        if each is _TOO_MANY:
            return True
        if isinstance(each, bytes | bytearray):
            each = bytes(each).decode("latin-1")  # a header's raw value
        if isinstance(each, str) and redaction.holds(each, keys):
            return True
    return False


_TOO_MANY = object()


def _objects(root: object) -> Iterator[object]:
    """Every object reachable from ``root`` as ``reachable`` walks it, each once; ``_TOO_MANY`` last when there are
    more than ``REACH_LIMIT``."""
    kept: dict[int, object] = {}  # kept alive: an id is not reused by an object made during the walk
    todo = [root]
    while todo:
        each = todo.pop()
        if each is None or isinstance(each, OPAQUE) or id(each) in kept:
            continue
        if len(kept) >= REACH_LIMIT:
            yield _TOO_MANY
            return
        kept[id(each)] = each
        yield each
        todo.extend(_parts(each))


def _parts(each: object) -> list[object]:
    """What ``each`` holds: a mapping's keys and values, a collection's items, an error's args, notes, chained errors
    and group members, and any object's attributes."""
    if isinstance(each, str | bytes | bytearray):
        return []
    if isinstance(each, Mapping):
        return [*each.keys(), *each.values()]
    if isinstance(each, list | tuple | set | frozenset):
        return list(each)
    found: list[object] = []
    if isinstance(each, BaseException):
        found += [each.__cause__, each.__context__, getattr(each, "__notes__", None)]
        found += list(each.exceptions) if isinstance(each, BaseExceptionGroup) else []
        with contextlib.suppress(Exception):  # an args property that raises: nothing to read there
            found += list(each.args)
    with contextlib.suppress(TypeError):  # no __dict__ (slots, a builtin)
        found += list(vars(each).values())
    return found


def _masked(arg: Any, keys: list[str]) -> Any:
    """An exception's argument, as it is unless its text quotes a key: then that text, masked."""
    if isinstance(arg, str):
        return redaction.redact_keys(arg, keys)
    try:
        text = repr(arg)
    except Exception:  # noqa: BLE001 - an argument whose repr raises is printed by nobody
        return arg
    return redaction.redact_keys(str(arg), keys) if redaction.holds(text, keys) else arg

"""What an error that escapes the send path shows: no API key in its text, no httpcore locals in its frames.

A transport of the user's own (a proxy library, a custom one) may raise an error of its own that lists the request's
headers. rlnb raises it as it is, so that the poller and sender judge it by its type as before, but with every key
masked where a traceback, a log line or ``str`` reads its text (``mask``); and the frames it passed through lose
their locals, which held the headers (``forget_locals``).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

from rlnb import _secrets


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
    args, ``OSError``'s ``strerror`` and file names, ``__notes__``), their types kept. False when a text still quotes
    one (a class whose ``__str__`` reads attributes of its own, an exception group's message, which its args do not
    make)."""
    every = family(error)
    for each in every:
        try:  # a class whose args or attributes are read-only properties: the check below then says so
            if not isinstance(each, BaseExceptionGroup):  # a group prints its own message; its members are masked
                each.args = tuple(_masked(arg, keys) for arg in each.args)
            for name in ("strerror", "filename", "filename2"):  # OSError's text is made of these, not of its args
                if isinstance(text := getattr(each, name, None), str):
                    setattr(each, name, _secrets.redact_keys(text, keys))
            if isinstance(notes := getattr(each, "__notes__", None), list):
                each.__notes__ = [_secrets.redact_keys(str(note), keys) for note in notes]
        except (AttributeError, TypeError):
            continue
    return not any(_secrets.holds(said(each) + said(each, repr), keys) for each in every)  # a group's repr: its members


def _masked(arg: Any, keys: list[str]) -> Any:
    """An exception's argument, as it is unless its text quotes a key: then that text, masked."""
    if isinstance(arg, str):
        return _secrets.redact_keys(arg, keys)
    try:
        text = repr(arg)
    except Exception:  # noqa: BLE001 - an argument whose repr raises is printed by nobody
        return arg
    return _secrets.redact_keys(str(arg), keys) if _secrets.holds(text, keys) else arg

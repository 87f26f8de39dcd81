"""The checks of a single value a user gives an entry point, each a clear error naming the option and what it takes
before anything starts: an integer in a range, a flag, an event, a callable of n arguments, a path or folder a user
named, seconds and a wait's timeout. (Option groups, which sort keywords into dataclasses, are ``options``.)
"""

from __future__ import annotations

import inspect
import math
import numbers
import os
import re
import stat
import threading
from pathlib import Path
from typing import Any, Literal, overload

from rlnb._input.scalars import scalar
from rlnb._input.shown import shown

_NUMBER = re.compile(r"[+-]?(([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|inf|infinity|nan)", re.IGNORECASE)


def is_integer(value: Any) -> bool:
    """Whether ``value`` is an integer: a Python int but not a bool (one in Python), or a numpy integer."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


@overload
def check_int(
    name: str, value: Any, low: int, high: int | None = None, *, optional: Literal[False] = False, why: str = ""
) -> int: ...
@overload
def check_int(
    name: str, value: Any, low: int, high: int | None = None, *, optional: bool, why: str = ""
) -> int | None: ...
def check_int(
    name: str, value: Any, low: int, high: int | None = None, *, optional: bool = False, why: str = ""
) -> int | None:
    """``value`` as a Python int, or a ``ValueError`` naming ``name`` and its range unless it is an integer (not a
    bool, which is one in Python) in [``low``, ``high``], or None when ``optional``: a float such as 2.5 or NaN
    passes every ``<`` check and fails later. A numpy integer (``np.arange`` makes them) is one: what is returned is
    a plain int, which JSON and pydantic take. ``why``: the reason for the range, said after it."""
    if optional and value is None:
        return None
    if not is_integer(value) or value < low or (high is not None and value > high):
        allowed = f">= {low}" if high is None else f"in [{low}, {high}]"
        because = f" ({why})" if why else ""
        raise ValueError(
            f"{name} must be {'None or ' if optional else ''}an integer {allowed}{because}, got {shown(value)}"
        )
    return int(value)


def set_int(
    group: Any, field: str, low: int, high: int | None = None, *, optional: bool = False, name: str = ""
) -> None:
    """``check_int`` on a frozen option group's ``field``, kept as a plain int (in ``__post_init__``)."""
    value = check_int(name or field, getattr(group, field), low, high, optional=optional)
    object.__setattr__(group, field, value)


@overload
def check_bool(name: str, value: Any, *, optional: Literal[False] = False) -> bool: ...
@overload
def check_bool(name: str, value: Any, *, optional: bool) -> bool | None: ...
def check_bool(name: str, value: Any, *, optional: bool = False) -> bool | None:
    """``value`` as a Python bool, or a ``ValueError`` naming ``name`` unless it is True or False (or None when
    ``optional``): a string such as ``"no"`` is truthy and would silently mean yes. numpy's ``np.True_`` and a 0-d
    torch bool are booleans to a user (a flag read off an array): the bool they hold, which JSON and pydantic take.
    (Numbers still refuse bools: ``is_integer``.)"""
    if optional and value is None:
        return None
    held = scalar(value)
    if not isinstance(held, bool):
        raise ValueError(f"{name} must be {'None, ' if optional else ''}True or False, got {shown(value)}")
    return held


def check_event(value: Any, stops: str, name: str = "stop") -> None:
    """``TypeError`` naming ``name`` unless ``value`` is None or an Event (``set`` and ``is_set``; ``stops`` says what
    setting it stops): ``stop=True`` or ``"yes"`` was an ``AttributeError`` naming nothing, after a folder was made;
    ``stop=threading.Event``, the class (its methods are callable), failed at a sweep's first check, its folder left."""
    duck = callable(getattr(value, "set", None)) and callable(getattr(value, "is_set", None))
    if value is not None and (isinstance(value, type) or not duck):
        raise TypeError(f"{name} must be None or a threading.Event (set it to stop {stops}), got {shown(value)}")


def takes(fn: Any, n: int) -> bool:
    """Whether ``fn`` can be called with ``n`` positional arguments (one whose signature cannot be read is trusted):
    a function of the wrong ones would fail at its first call, a session or folder already made, naming no option."""
    if not callable(fn):
        return False
    try:
        inspect.signature(fn).bind(*range(n))
    except TypeError:
        return False
    except ValueError:  # no signature to read (some builtins)
        return True
    return True


def user_path(name: str, value: object) -> Path:
    """A folder or file a user named, ``~`` expanded as a shell would (``Path("~/runs")`` is a folder called
    ``~``); a ``TypeError`` naming ``name`` unless ``value`` is a ``str`` or ``os.PathLike``."""
    if not isinstance(value, str | os.PathLike):
        raise TypeError(f"{name} must be a path (str or os.PathLike), got {type(value).__name__}: {shown(value)}")
    if "\0" in os.fsdecode(value):  # no file can be named so: os's bare "embedded null byte" names no option
        raise ValueError(f"{name} holds a NUL character, which no path can: {value!r}"[:300])
    return Path(value).expanduser()


def refuse_dangling_link(name: str, path: Path, after: str = "") -> None:
    """A ``ValueError`` naming ``name``, the link and its target where ``path`` or a folder above it is a symbolic
    link to nothing (its target removed or not mounted yet, or links that loop): ``mkdir(exist_ok=True)`` there failed
    with a bare "[Errno 17] File exists", naming neither the option nor the link. ``after`` ends the message."""
    for folder in (path, *path.parents):
        try:
            exists = folder.exists()  # False for a loop too (ELOOP)
            dangling = not exists and folder.is_symlink()
        except OSError:  # a folder above it that cannot be searched (Python 3.11 raises): mkdir will say so
            return
        if dangling:
            raise ValueError(
                f"{name} {str(path)!r}: {folder} is a link to {os.readlink(folder)!r}, which does not exist (or the "
                f"links loop): mount or make its target, or give another folder{after}"
            )
        if exists:  # no folder above one that exists can be a link to nothing
            return


def not_folder(mode: int) -> str:
    """What a path of ``os.stat`` mode ``mode`` that is no folder is, in the words every refusal of it uses."""
    return ("a named pipe" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a file")  # fmt: skip


def refuse_not_folder(name: str, path: Path, goes: str) -> None:
    """A ``ValueError`` naming ``name`` where ``path``, or what exists above it, is a file, a named pipe, a device or
    a socket: ``mkdir(exist_ok=True)`` there said "[Errno 17] File exists". ``goes``: what goes into the folder."""
    try:
        above = next((p for p in (path, *path.parents) if p.exists()), None)
        mode = above.stat().st_mode if above is not None else None
    except OSError:  # a name too long, a folder that cannot be searched: the mkdir that follows says so
        return
    if above is None or mode is None or stat.S_ISDIR(mode):
        return
    kind = not_folder(mode)
    where = f"is {kind}" if above == path else f"is under {str(above)!r}, {kind}"
    raise ValueError(f"{name} {str(path)!r} {where}: {goes} into a folder")


A_DAY = 86400.0
"""The longest wait a seconds option takes: ``op_delay`` past ~1e10 s would fail its sleep (every operation
``INTERNAL_ERROR: OverflowError``), a live view's ``every`` its redraw timer (the view would freeze)."""


def check_seconds(name: str, value: Any, high: float = A_DAY, *, positive: bool = False) -> float:
    """``value`` as a float (a numpy scalar too), or a ``ValueError`` naming ``name`` and its range, [0, ``high``]
    or (0, ``high``] when ``positive``: NaN, infinity and negatives pass a plain ``< 0`` and then every sleep or timer
    failed; so did a string, after a model had loaded. Past ``high`` a socket's or a timer's own ``OverflowError``
    named nothing, and so did ``float(10**400)``'s here."""
    seconds = math.nan
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        try:
            seconds = float(value)
        except OverflowError:  # an int past a float's range: out of range as infinity is
            seconds = math.inf
    if not (math.isfinite(seconds) and (seconds > 0 if positive else seconds >= 0) and seconds <= high):
        low = "(0" if positive else "[0"
        raise ValueError(f"{name} must be a finite number of seconds in {low}, {high:g}], got {shown(value)}")
    return seconds


def check_timeout(name: str, value: Any) -> float | None:
    """A wait's ``timeout`` in seconds, or None for no limit: a real number >= 0 (infinity, or one past what a lock
    can wait, is no limit). NaN, a negative number, a bool or a string is a ``ValueError`` naming ``name``: NaN
    would wait not at all, infinity raise ``OverflowError`` from inside ``threading``."""
    if value is None:
        return None
    seconds = math.nan
    if is_integer(value):
        seconds = float(min(max(int(value), -1), threading.TIMEOUT_MAX))  # 10**400 is past a float's range
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        seconds = float(value)
    if math.isnan(seconds) or seconds < 0:
        raise ValueError(f"{name} must be None (no limit) or a number of seconds >= 0, got {shown(value)}")
    return None if seconds >= threading.TIMEOUT_MAX else seconds


def ascii_number(text: str) -> float:
    """``text`` as a float, in ASCII digits, a point, an exponent and a sign only (``ValueError`` otherwise):
    ``float`` reads other scripts' digits too ('１.５' was 1.5), and "_" between digits and spaces around, as ``int``
    does (``--lr 1_0e-3`` trained at 0.01). ``inf`` and ``nan`` are taken: each option's range check refuses them."""
    if not _NUMBER.fullmatch(text):
        raise ValueError(f"not a number in ASCII digits 0-9: {shown(text)}")
    return float(text)

"""What a sweep's task computes, as ``sweep.json`` records it for a resume to compare (``task_detail``): the reward
function by its name and a digest of its code, the prompts by theirs. Apart from the folder, which records it beside
the other settings, because telling two functions apart is its own concern (source, bytecode, closures, partials,
objects).

The code is digested by its source text where Python has it (a function in a file or a notebook cell): the same on
every Python, so a sweep folder copied to a machine with another Python resumes. A lambda, or a function without
source (``python -c``), is digested by its bytecode, which each Python minor version compiles differently: the
detail names that version, and a resume on another one is warned about, not refused (nothing there can tell): so
is an older rlnb's folder (its bytecode digest unlabelled) whose runs say another Python made it, and a reward
recorded by its source that has none where the sweep resumes (``python -c``, a REPL)."""

from __future__ import annotations

import functools
import hashlib
import inspect
import io
import json
import re
import sys
import textwrap
import tokenize
import types
import warnings
from collections.abc import Callable, Collection
from typing import Any

from rlnb.errors import user_stacklevel
from rlnb.tasks import Task

PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
BYTECODE = f"bytecode, Python {PYTHON}"
DETAIL = re.compile(
    r"reward (?P<name>\S+) \((?:(?P<how>source|bytecode, Python \S+), )?(?P<digest>\w+)\), (?P<rest>.*)"
)
"""A recorded ``task_detail``: an older rlnb's has no ``how`` (a bytecode digest, the Python unnamed)."""


class _NoSource(Exception):
    """A code object whose source Python cannot give (or a lambda's: its source is the whole call)."""


def task_detail(task: Task) -> str:
    """What a resume compares of the task beside its name: the reward function (its qualified name, how its code
    was digested and the digest), the prompts' digest and the lengths. Every reward passed as a function is named
    "custom": another one on resume would run the rest of the sweep with it, its rows beside the first's in one
    table."""
    try:
        return _detail(task, "source", _source)
    except _NoSource:
        return _detail(task, BYTECODE, _bytecode)


def same_task(task: Task, stored: Any, made_on: Callable[[], Collection[str]]) -> bool:
    """Whether a recorded ``task_detail`` is ``task``'s: as written now, by its bytecode on this Python (a folder
    made where the source was missing), or as an older rlnb wrote it (unlabelled, bytecode). One whose reward cannot
    be compared, its name, prompts and lengths the same, is taken with a warning naming what was not checked (refused,
    a copied folder could never resume): another Python's bytecode (an older rlnb's on a Python ``made_on`` says:
    the versions the folder's runs recorded), or a source this reward has none of here."""
    bytecode = _detail(task, BYTECODE, _bytecode)
    if stored in (task_detail(task), bytecode, _detail(task, None, _bytecode)):
        return True
    then, now = DETAIL.fullmatch(str(stored)), DETAIL.fullmatch(bytecode)
    if then is None or now is None or (then["name"], then["rest"]) != (now["name"], now["rest"]):
        return False  # another reward's name, other prompts or lengths
    if then["how"] == "source":  # a source here that differs is another reward
        missing = "source, which Python cannot give here (a function typed into python -c or a REPL)"
        where = "define it in a file or a notebook cell"
        return task_detail(task) == bytecode and _unchecked(now["name"], missing, where)
    if then["how"] is None:
        return _older(now["name"], set(made_on()))
    if then["how"] == BYTECODE:  # this Python's bytecode that differs: another reward
        return False
    python = then["how"].rpartition(" ")[2]
    return _unchecked(now["name"], f"{then['how']}, which this Python ({PYTHON}) compiles differently",
                      f"resume on Python {python}")  # fmt: skip


def _older(name: str, pythons: set[str]) -> bool:
    """An older rlnb's digest (bytecode, its Python unnamed) that differs from this Python's: taken with a warning
    when the folder's runs say another Python made it; refused when they say this one (the reward changed), or
    saying how to go on when none says."""
    if not pythons:
        raise ValueError(
            f"resume: task_detail: the reward {name} was recorded by an older rlnb by its bytecode, "
            f"without naming the Python, and no trial's run in the folder says which Python it was; this "
            f"Python ({PYTHON}) compiles it to another digest, so the reward changed or the folder was "
            "made on another Python: resume it on the Python that made it, or start a new sweep"
        )
    if PYTHON in pythons:
        return False
    made = ", ".join(sorted(pythons))
    return _unchecked(name, f"bytecode on Python {made} (by an older rlnb), which this Python ({PYTHON}) compiles "
                      "differently", f"resume on Python {made}")  # fmt: skip


def _unchecked(name: str, recorded: str, checked: str) -> bool:
    """Warn that the reward ``name``, recorded so, could not be compared; it is taken as the same."""
    warnings.warn(
        f"resume: the reward {name} was recorded by its {recorded}: it was not checked against the one "
        f"the sweep ran with, and is taken as the same; {checked} to have it checked",
        stacklevel=user_stacklevel(),
    )
    return True


def _detail(task: Task, how: str | None, text: Callable[[types.CodeType], bytes]) -> str:
    reward = task.reward
    named = reward.func if isinstance(reward, functools.partial) else reward
    name = f"{getattr(named, '__module__', '?')}.{getattr(named, '__qualname__', type(named).__qualname__)}"
    prompts = json.dumps(task.prompts, default=str, sort_keys=True)
    digest = _digest(_code_of(reward, text))
    return (f"reward {name} ({f'{how}, ' if how else ''}{digest}), {len(task.prompts)} prompts "
            f"({_digest(prompts.encode())}), max_tokens {task.max_tokens}, group_size {task.group_size}")  # fmt: skip


def _code_of(fn: Any, text: Callable[[types.CodeType], bytes]) -> bytes:
    """What a function computes, as bytes: its code's ``text`` (source, or bytecode with names and constants, nested
    functions' too), defaults and the plain values it closes over. A ``functools.partial``: its function's, and the
    plain arguments it binds (any partial was one digest, whatever its function). A callable object: its class's
    ``__call__``, and its plain attributes (``Reward(answer="7")`` was ``Reward(answer="8")``)."""
    if isinstance(fn, functools.partial):
        bound = [*fn.args, *sorted(fn.keywords.items())]
        return b"\0".join([_code_of(fn.func, text), repr(_plain_only(bound)).encode()])
    call = next((k.__dict__["__call__"] for k in type(fn).__mro__ if "__call__" in k.__dict__), None)
    code = getattr(fn, "__code__", None) or getattr(call, "__code__", None)
    if code is None:
        return repr(type(fn)).encode()
    cells = [c.cell_contents for c in getattr(fn, "__closure__", None) or () if _is_plain(c)]
    state = [] if hasattr(fn, "__code__") else _plain_only(sorted(getattr(fn, "__dict__", {}).items()))
    return b"\0".join([text(code), repr(getattr(fn, "__defaults__", None)).encode(), repr(cells).encode(),
                       *([repr(state).encode()] if state else [])])  # fmt: skip


def _source(code: types.CodeType) -> bytes:
    """The function's source as its tokens, comments, blank lines and spacing left out (an edited comment is the same
    reward, as the bytecode said); not a lambda's, which for one written in the ``sweep(...)`` call is the whole call,
    ``resume=`` included."""
    if code.co_name == "<lambda>":
        raise _NoSource
    try:
        text = textwrap.dedent(inspect.getsource(code))
        tokens = [t for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type not in _NOT_CODE]
    except (OSError, TypeError, SyntaxError, tokenize.TokenError):
        raise _NoSource from None
    return "\0".join(f"{t.type}:{t.string}" for t in tokens).encode()


_NOT_CODE = frozenset({tokenize.COMMENT, tokenize.NL})


def _plain_only(values: list[Any]) -> list[Any]:
    """The values (or (name, value) pairs) whose repr is the same in every process."""
    return [v for v in values if _is_plain_value(v[1] if isinstance(v, tuple) else v)]


def _is_plain(cell: Any) -> bool:
    """A closed-over value whose repr is the same in every process (an object's repr shows its address)."""
    try:
        value = cell.cell_contents
    except ValueError:  # an empty cell
        return False
    return _is_plain_value(value)


def _is_plain_value(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool | bytes)


def _bytecode(code: types.CodeType) -> bytes:
    consts = [_bytecode(c) if isinstance(c, types.CodeType) else repr(c).encode() for c in code.co_consts]
    return b"\0".join([code.co_code, repr(code.co_names).encode(), *consts])


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:12]

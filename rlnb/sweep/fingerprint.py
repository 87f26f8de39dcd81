"""What a sweep's task computes, as ``sweep.json`` records it for a resume to compare (``task_detail``): the reward
function by its name and a digest of its code, the prompts by theirs. Apart from the folder, which records it beside
the other settings, because telling two functions apart is its own concern (source, bytecode, closures, partials,
objects).

The code is digested by its source text where Python has it (a function in a file or a notebook cell): the same on
every Python, so a sweep folder copied to a machine with another Python resumes. A lambda, or a function without
source (``python -c``), is digested by its bytecode, which each Python minor version compiles differently: the
detail names that version, and a resume on another one is warned about, not refused (nothing there can tell)."""

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
from collections.abc import Callable
from typing import Any

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
    "custom": another one on resume ran the rest of the sweep with it, its rows beside the first's in one table."""
    try:
        return _detail(task, "source", _source)
    except _NoSource:
        return _detail(task, BYTECODE, _bytecode)


def same_task(task: Task, stored: Any) -> bool:
    """Whether a recorded ``task_detail`` is ``task``'s: as written now, by its bytecode on this Python (a folder
    made where the source was missing), or as an older rlnb wrote it (unlabelled, bytecode). One recorded by the
    bytecode of another Python whose name, prompts and lengths match is taken with a warning: its code cannot be
    compared (refused, a copied folder could never resume)."""
    bytecode = _detail(task, BYTECODE, _bytecode)
    if stored in (task_detail(task), bytecode, _detail(task, None, _bytecode)):
        return True
    then, now = DETAIL.fullmatch(str(stored)), DETAIL.fullmatch(bytecode)
    other = then is not None and (then["how"] or "").startswith("bytecode, Python ") and then["how"] != BYTECODE
    if then is None or now is None or not other:  # this Python's bytecode that differs: another reward
        return False
    if (then["name"], then["rest"]) != (now["name"], now["rest"]):
        return False
    warnings.warn(f"resume: the reward {now['name']} was recorded by its {then['how']}, which this Python ({PYTHON}) "
                  "compiles differently: it cannot be compared, and is taken as the same; resume on Python "
                  f"{then['how'].rpartition(' ')[2]} to have it checked", stacklevel=4)  # fmt: skip
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

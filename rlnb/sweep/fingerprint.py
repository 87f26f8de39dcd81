"""What a sweep's task computes, as ``sweep.json`` records it for a resume to compare (``task_detail``): the reward
function by its name and a digest of its code, the prompts by theirs. Apart from the folder, which records it beside
the other settings, because telling two functions apart is its own concern (bytecode, closures, partials, objects)."""

from __future__ import annotations

import functools
import hashlib
import json
import types
from typing import Any

from rlnb.tasks import Task


def task_detail(task: Task) -> str:
    """What a resume compares of the task beside its name: the reward function (its qualified name and a digest of
    its code), the prompts' digest and the lengths. Every reward passed as a function is named "custom": another
    one on resume ran the rest of the sweep with it, its rows beside the first's in one table."""
    reward = task.reward
    named = reward.func if isinstance(reward, functools.partial) else reward
    name = f"{getattr(named, '__module__', '?')}.{getattr(named, '__qualname__', type(named).__qualname__)}"
    prompts = json.dumps(task.prompts, default=str, sort_keys=True)
    return (f"reward {name} ({_digest(_code_of(reward))}), {len(task.prompts)} prompts ({_digest(prompts.encode())}), "
            f"max_tokens {task.max_tokens}, group_size {task.group_size}")  # fmt: skip


def _code_of(fn: Any) -> bytes:
    """What a function computes, as bytes: its bytecode, names and constants (nested functions' too), defaults and
    the plain values it closes over; not its source, which for a lambda written in the ``sweep(...)`` call is the
    whole call, ``resume=`` included. A ``functools.partial``: its function's, and the plain arguments it binds
    (any partial was one digest, whatever its function). A callable object: its class's ``__call__``, and its
    plain attributes (``Reward(answer="7")`` was ``Reward(answer="8")``)."""
    if isinstance(fn, functools.partial):
        bound = [*fn.args, *sorted(fn.keywords.items())]
        return b"\0".join([_code_of(fn.func), repr(_plain_only(bound)).encode()])
    call = next((k.__dict__["__call__"] for k in type(fn).__mro__ if "__call__" in k.__dict__), None)
    code = getattr(fn, "__code__", None) or getattr(call, "__code__", None)
    if code is None:
        return repr(type(fn)).encode()
    cells = [c.cell_contents for c in getattr(fn, "__closure__", None) or () if _is_plain(c)]
    state = [] if hasattr(fn, "__code__") else _plain_only(sorted(getattr(fn, "__dict__", {}).items()))
    return b"\0".join([_bytecode(code), repr(getattr(fn, "__defaults__", None)).encode(), repr(cells).encode(),
                       *([repr(state).encode()] if state else [])])  # fmt: skip


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

"""How ``sweep.json`` records a search space: each dimension as the text of what it means (``Float(low=0.0001,
high=0.01, log=True)``), so that a resume compares spaces, not spellings: ``(1e-4, 1e-2, "log")`` and
``Float(1e-4, 1e-2, log=True)`` are one space, ``Int(3.0, 5)`` is ``(3, 5, "int")``."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any

from .space import Categorical, Dimension, Float, Int, dimension

CLASSES: dict[str, type] = {"Float": Float, "Int": Int, "Categorical": Categorical}


def recorded_space(dims: Mapping[str, Dimension]) -> dict[str, str]:
    """The space as ``sweep.json`` records it: each dimension's ``repr``."""
    return {name: repr(dim) for name, dim in dims.items()}


def same_space(dims: Mapping[str, Dimension], stored: Any) -> bool:
    """Whether the space a ``sweep.json`` recorded means ``dims``: its own text, or a dimension an older rlnb recorded
    as typed (``"(0.0001, 0.01, 'log')"``), so a folder resumes with the space written either way; another space
    differs, and the resume is refused naming both."""
    return (
        isinstance(stored, dict)
        and stored.keys() == dims.keys()
        and all(
            text == repr(dims[n]) or (isinstance(text, str) and _typed(n, text) == dims[n])
            for n, text in stored.items()
        )
    )


def _typed(name: str, text: str) -> Dimension | None:
    """The dimension a recorded text means: a shorthand's repr (``"(0.0001, 0.01, 'log')"``, ``"[1, 2]"``) or a
    ``Float`` / ``Int`` / ``Categorical`` repr of literal values; None for any other text (it is then compared as
    text, and differs)."""
    try:
        node = ast.parse(text, mode="eval").body
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in CLASSES:
            args = [ast.literal_eval(a) for a in node.args]
            kwargs = {str(k.arg): ast.literal_eval(k.value) for k in node.keywords}
            spec = CLASSES[node.func.id](*args, **kwargs)
        else:
            spec = ast.literal_eval(node)
        return dimension(name, spec)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None

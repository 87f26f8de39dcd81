"""How ``sweep.json`` records a search space: each dimension as the text of what it means (``Float(low=0.0001,
high=0.01, log=True)``), so that a resume compares spaces, not spellings: ``(1e-4, 1e-2, "log")`` and
``Float(1e-4, 1e-2, log=True)`` are one space, ``Int(3.0, 5)`` is ``(3, 5, "int")``."""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .space import Categorical, Dimension, Float, Int, dimension

CLASSES: dict[str, type] = {"Float": Float, "Int": Int, "Categorical": Categorical}


def recorded_space(dims: Mapping[str, Dimension], settings_path: Path | None) -> dict[str, str]:
    """The space as ``sweep.json`` records it. Resuming (``settings_path``, the folder's ``sweep.json``), a
    dimension an older rlnb recorded as typed (``"(0.0001, 0.01, 'log')"``) keeps that text where it means the same
    dimension, so the folder resumes with the space written either way; where it means another, it differs and the
    resume is refused, naming both."""
    texts = {name: repr(dim) for name, dim in dims.items()}
    stored = _stored_space(settings_path) if settings_path is not None else {}
    for name, text in stored.items():
        if name in texts and isinstance(text, str) and text != texts[name] and _typed(name, text) == dims[name]:
            texts[name] = text
    return texts


def _stored_space(path: Path) -> dict[str, Any]:
    """The space a ``sweep.json`` records; nothing where it has none or cannot be read (``begin`` then refuses the
    resume, naming what is wrong with it)."""
    try:
        space = json.loads(path.read_text(encoding="utf-8")).get("space")
    except (OSError, ValueError, UnicodeDecodeError, AttributeError):
        return {}
    return space if isinstance(space, dict) else {}


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

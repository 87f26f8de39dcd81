"""The optional extras (transformers, peft, Optuna, Ray, pyarrow): one way to import one, and one wording for
the error that says which extra installs it when it is missing."""

from __future__ import annotations

import importlib
from typing import Any


def need(module: str, extra: str, purpose: str) -> Any:
    """``module``, imported; when it cannot be, ``ImportError`` naming what needed it and ``pip install
    'rlnb[extra]'``, chained to the import's own error (a broken dependency of an installed module says so)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"{purpose} needs {module}: pip install 'rlnb[{extra}]'") from exc

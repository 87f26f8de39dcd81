"""``scalar``: a numpy or torch 0-d value as the Python scalar it holds, told by type. Standard library only, below
``wire``: the command line's flag checks (``checks``) take it without importing numpy, torch or pydantic."""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["scalar"]


def scalar(value: Any) -> Any:
    """A numpy or torch scalar as the Python number or bool it holds (``np.int64(8)`` is 8, ``np.True_`` True): the
    wire's strict integers refuse numpy's, as they refuse ``8.0``. Anything else as it is. Told by type (either
    library looked up only if it is loaded: a value of it means it is), never by calling a stranger's ``item()``:
    any object with a ``shape`` of ``()`` would have it called, and what it raises would escape the field's error (a
    hang would hang the check). Other array libraries' scalars (jax, cupy) are left as they are, so the field refuses
    them by name."""
    np, torch = sys.modules.get("numpy"), sys.modules.get("torch")
    if np is not None and isinstance(value, np.generic | np.ndarray) and value.ndim == 0:
        return value.item()
    if torch is not None and isinstance(value, torch.Tensor) and value.ndim == 0:
        try:
            return value.item()
        except RuntimeError:  # a tensor with no value to read (on the meta device): the field refuses it by name
            return value
    return value

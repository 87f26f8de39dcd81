"""The dtypes a model's weights load in, torch-free: the command line offers the list the engine checks against
(``rlnb --help`` imports no torch)."""

from __future__ import annotations

WEIGHT_DTYPES = ("auto", "float32", "bfloat16", "float16")
"""``dtype=`` of a session and ``rlnb serve/demo --dtype`` ("auto": the checkpoint's own, float32 for the built-ins)."""


def check_weight_dtype(value: object, name: str = "dtype") -> None:
    """A ``ValueError`` naming ``name`` and the choices unless ``value`` is one of ``WEIGHT_DTYPES``."""
    if not isinstance(value, str) or value not in WEIGHT_DTYPES:
        raise ValueError(f"{name} must be one of {', '.join(WEIGHT_DTYPES)}, got {value!r}")

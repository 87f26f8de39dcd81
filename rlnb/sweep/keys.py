"""A config, or one of its values, as a key that is equal where the values are: how a sweep tells configs apart
(``random_search``'s distinct draws) and how ``summarize`` groups a table's config columns (``figures.keyed``). One
place, so both agree on what "the same config" is; light (no pandas or matplotlib), as ``space`` is."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def config_key(config: Mapping[str, Any]) -> frozenset[tuple[str, Any]]:
    """``config`` as a key: its items, each value a ``hashable`` one (a choice that is a list is one)."""
    return frozenset((name, hashable(value)) for name, value in config.items())


def hashable(value: Any) -> Any:
    """``value`` as a key that is equal where the values are: a list or array as a tuple (of such keys), a dict as
    its JSON text with sorted keys, any other unhashable value as its repr."""
    if isinstance(value, list | tuple):
        return tuple(hashable(v) for v in value)
    if can_hash(value):
        return value
    if isinstance(value, Mapping):
        return json.dumps(value, sort_keys=True, default=str)
    if hasattr(value, "tolist"):  # a numpy array, a tensor
        return hashable(value.tolist())
    return repr(value)


def can_hash(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True

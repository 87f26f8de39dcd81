"""Option groups: the small frozen dataclasses that keyword-rich entry points take, as httpx takes
``Timeout`` and ``Limits``.

An entry point keeps its flat keywords (``rlnb.connect(url, poll_max=5.0)``) and sorts them into its
groups with ``take``; each group checks its own fields when it is built (``__post_init__``, with ``checks``), so a
bad value is refused before anything starts, naming the field.
"""

from __future__ import annotations

import dataclasses
import re
import reprlib
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

G = TypeVar("G", bound="DataclassInstance")


def take(group: type[G], options: dict[str, Any], given: G | None = None) -> G:
    """``group`` made of the keywords in ``options`` that name its fields (removed from ``options``), over
    ``given`` (default: the group's defaults), which must be a ``group``: a dict would be "replace() should be called
    on dataclass instances" or "'dict' object has no attribute 'device'", naming neither the keyword nor the group."""
    names = {f.name for f in dataclasses.fields(group)}
    if given is not None and not isinstance(given, group):
        keyword = re.sub(r"(?<!^)(?=[A-Z])", "_", group.__name__).lower()  # ModelOptions: model_options
        fields = ", ".join(f.name for f in dataclasses.fields(group))
        raise TypeError(f"{keyword} must be a {group.__name__} or None, got {reprlib.repr(given)}; give "
                        f"{group.__name__}(...) or its fields as keywords ({fields})")  # fmt: skip
    picked = {name: options.pop(name) for name in list(options) if name in names}
    base = given if given is not None else group()
    return dataclasses.replace(base, **picked) if picked else base


def kwargs(group: DataclassInstance) -> dict[str, Any]:
    """A group's fields as keywords, values as they are (``dataclasses.asdict`` would deep-copy a client)."""
    return {f.name: getattr(group, f.name) for f in dataclasses.fields(group)}


OTHER_SPELLINGS = {
    "resume_from": "a remote session resumes a training checkpoint with resume_from_checkpoint_id=",
    "resume_from_checkpoint_id": "a local session resumes from a checkpoint folder with resume_from=",
}
"""One backend's keywords given to the other by mistake (the first a user tries), and what to give instead."""


def refuse_unknown(options: dict[str, Any], where: str, backend: bool = False) -> None:
    """``TypeError`` naming the keywords no group took, as Python names an unexpected keyword; for a ``backend``, each
    that is the other backend's spelling of an idea (``OTHER_SPELLINGS``) with the option to give instead."""
    if options:
        hints = [f" ({OTHER_SPELLINGS[name]})" for name in sorted(options) if backend and name in OTHER_SPELLINGS]
        raise TypeError(f"{where} got unexpected keyword argument(s): {', '.join(sorted(options))}{''.join(hints)}")

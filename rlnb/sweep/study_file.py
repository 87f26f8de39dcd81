"""The Optuna study of a search, opened from its sweep folder's ``study.db``: a resume whose file is gone or damaged
is refused naming it, before any trial runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def open_study(optuna: Any, path: Path, recorded: int, **create: Any) -> Any:
    """``optuna.create_study(**create)`` (loading the study in ``path`` if there is one), for a sweep that has
    ``recorded`` trials' rows already. Without the file those trials' params and the sampler's history are gone:
    the search began anew under their numbers, and their rows were dropped from the table as "not a trial of this
    sweep". A file Optuna cannot read was a bare sqlalchemy ``DatabaseError`` naming no file."""
    if recorded and not path.exists():
        raise ValueError(f"resume: {path} is missing: it holds the search's {recorded} recorded trials (their params, "
                         "what the sampler learnt), so the search cannot go on from them; restore it, or start a new "
                         "sweep")  # fmt: skip
    try:
        return optuna.create_study(**create)
    except Exception as exc:
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise ValueError(f"{'resume: ' if recorded else ''}{path} cannot be read as the search's Optuna study "
                         f"({type(exc).__name__}: {first}); restore it, or start a new sweep") from exc  # fmt: skip

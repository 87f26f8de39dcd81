"""The Optuna study of a search, opened from its sweep folder's ``study.db``: a resume whose file is gone or damaged
is refused naming it, before any trial runs."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any


def open_study(optuna: Any, path: Path, recorded: int, storage: str, **create: Any) -> tuple[Any, Any]:
    """``optuna.create_study(**create)`` (loading the study in ``path`` if there is one) and its storage, at the URL
    ``storage`` (a trial left RUNNING by a process that is gone is marked through it), for a sweep that has
    ``recorded`` trials' rows already. Without the file those trials' params and the sampler's history are gone:
    the search would begin anew under their numbers, and their rows be dropped from the table as "not a trial of this
    sweep". A file Optuna cannot read would be a bare sqlalchemy ``DatabaseError`` naming no file; one that holds no
    trial of the search (empty, another study's) would begin it anew, as a missing one would."""
    if recorded and not path.exists():
        raise ValueError(f"resume: {path} is missing: it holds the search's {recorded} recorded trials (their params, "
                         "what the sampler learnt), so the search cannot go on from them; restore it, or start a new "
                         "sweep")  # fmt: skip
    try:
        rdb = optuna.storages.RDBStorage(storage)
        study = optuna.create_study(storage=rdb, **create)
    except Exception as exc:
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise ValueError(f"{'resume: ' if recorded else ''}{path} cannot be read as the search's Optuna study "
                         f"({type(exc).__name__}: {first}); restore it, or start a new sweep") from exc  # fmt: skip
    if recorded and not study.trials:  # an empty file (a copy cut short, a sync placeholder), another study's file:
        # a study was made anew in it, and the search began again as with no file at all
        with contextlib.suppress(Exception):  # the study just made, so the file is left as it was found
            optuna.delete_study(study_name=create["study_name"], storage=rdb)
        raise ValueError(f"resume: {path} holds no trials of this search (an empty file, or another study's), but "
                         f"the search recorded {recorded} trials, whose params and what the sampler learnt it must "
                         "hold: restore it, or start a new sweep")  # fmt: skip
    return study, rdb

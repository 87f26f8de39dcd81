"""A session's recording options, checked before it starts: a wrong one fails before a model loads, a remote
session starts or a run folder is made (``rlnb.connect``, ``Session``, ``run_batched``)."""

from __future__ import annotations

import contextlib
from pathlib import Path

from rlnb._files import release
from rlnb._input.checks import check_bool
from rlnb.history.history import History
from rlnb.history.paths import run_folder, runs_root
from rlnb.history.store import LOCK_FILE, lock_run


def check_recording(history: object, runs_dir: str | Path | None, run_id: str | None, record: object) -> None:
    """A session's recording options, checked before it starts: an error naming the first one that is of the
    wrong kind (``record="no"`` is truthy), a run folder that could not be written (``run_folder``), or
    ``RunLocked`` for a run another session writes now (the run of a closed session's history given to continue it
    too). A lock that cannot be opened at all (a read-only or another user's runs folder) is left to the run's store,
    which warns once and goes on in memory, as for a new run."""
    check_bool("record", record)
    if history is not None and not isinstance(history, History):
        raise TypeError(f"history must be an rlnb.History or None, got {type(history).__name__}: {history!r}"[:300])
    if isinstance(history, History):  # a closed session's, continued: its run folder, unless it went on in memory
        store = history.store
        if store is None or not store.closed or store.failed:
            return
        path = store.path
    elif not record:
        return
    elif run_id is None:
        runs_root(runs_dir)
        return
    else:
        path = run_folder(runs_dir, run_id)
    if (path / LOCK_FILE).is_file():  # an open session holds it: RunLocked before a model loads or a session starts
        with contextlib.suppress(OSError):  # RunLocked is no OSError: it is raised
            release(lock_run(path))  # unlocked, then closed (as every rlnb lock is)

"""Trackio: one Trackio run per rlnb run in a project, in Trackio's local SQLite database.

Trackio keeps ``<project>.db`` in ``$TRACKIO_DIR`` (default ``$HF_HOME/trackio``), a folder it reads
once, when it is first imported: set the variable before creating the first ``Trackio`` sink.
The config goes to the run's config, failures to Trackio's alerts (level ERROR). Its dashboard
embedding, CPU/GPU auto-logging and Space upload stay off unless asked for through ``init``.
View with ``trackio show --project <project>``.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import os
import sqlite3
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from rlnb.errors import user_stacklevel
from rlnb.sinks.base import FLUSH_INTERVAL, Failure, Point, RunInfo, Sink, SinkWarning
from rlnb.sinks.scrubbing import scrub
from rlnb.sinks.watched import Watched, lost_from
from rlnb.wire import OperationErrorCode

LOCAL = {"embed": False, "auto_log_cpu": False, "auto_log_gpu": False}
RLNB_SETS = ("name", "group", "config")
"""``trackio.init``'s arguments that rlnb gives, not ``init``."""
RENAMED = "__"
"""What Trackio puts before a figure's name that it keeps for itself, or that starts with it (``Run.log``)."""
ROWS = "SELECT (SELECT COUNT(*) FROM metrics WHERE run_id = ?) + (SELECT COUNT(*) FROM alerts WHERE run_id = ?)"
"""A run's rows in Trackio's database: its metrics' and its alerts', by its id (indexed: by name, each count read every
run's rows in the project)."""
ELSEWHERE = ("space_id", "server_url", "dataset_id", "bucket_id")
"""``trackio.init``'s arguments that say where a project is kept, if not in the local database."""


class Trackio(Sink):
    """``Trackio(project="rlnb", **init)``; ``init`` goes to ``trackio.init`` (``space_id=``,
    ``server_url=``, ... to log elsewhere than the local database)."""

    library = "trackio"
    extra = "trackio"

    def __init__(self, project: str = "rlnb", *, interval: float = FLUSH_INTERVAL, process: bool = False, **init: Any):
        if not isinstance(project, str) or not project:
            raise ValueError(f"Trackio.project = {project!r} is invalid: must be a non-empty name")
        taken = sorted(set(init) & set(RLNB_SETS))
        if taken:
            raise ValueError(f"Trackio's {', '.join(f'{k}=' for k in taken)} is rlnb's to give: one Trackio run per "
                             "rlnb run, named by its run id, its sweep as group, its config as config (trackio.init "
                             "was given it twice at the run's first point, which dropped the sink)")  # fmt: skip
        self.project = project
        self._init = init
        super().__init__(interval=interval, process=process)
        if not process and self.error is None:
            self._warn_if_moved()

    def _warn_if_moved(self) -> None:
        """``$TRACKIO_DIR`` set since Trackio was imported: Trackio writes where it pointed then, and said nothing."""
        from trackio import utils

        now = os.environ.get("TRACKIO_DIR")
        if now and not self._remote() and Path(now) != Path(utils.TRACKIO_DIR):
            warnings.warn(f"Trackio writes project {self.project!r} in {utils.TRACKIO_DIR}, where $TRACKIO_DIR pointed "
                          f"when Trackio was first imported; it is {now} now, which Trackio never reads again. Set it "
                          "before the first import (restart the kernel), or pass process=True: the sink's child "
                          "process imports Trackio anew", SinkWarning, stacklevel=user_stacklevel())  # fmt: skip

    def spec(self) -> tuple[str, str, dict[str, Any]]:
        """How a child process makes this sink again (``process=True``)."""
        return __name__, "Trackio", {"project": self.project, "interval": self.interval, **self._init}

    def where(self) -> dict[str, Any]:
        """The project as Trackio keeps it on disk (``canonical``: ``my.model`` is ``mymodel``, one database, where two
        sinks wrote one run twice), and where a Space or server elsewhere keeps it: not the other options of ``init``
        (two sinks of one project, one with ``embed=True``, are one place), nor ``webhook_url``, a secret of its own,
        nor a ``server_url``'s ``write_token`` (``scrub``): the place is shown in a refusal, not them."""
        elsewhere = {k: scrub(str(v)) for k, v in self._init.items() if k in ELSEWHERE and v}
        return {"project": canonical(self.project), **elsewhere}

    def _load(self) -> None:
        """Import Trackio, and check the project's name as ``trackio.init`` does at the run's first point (a name
        beginning ``registry-`` or ending like a table's file: the sink would be dropped once training has started)."""
        super()._load()  # Trackio itself first: its modules imported before may be there without it (set to None)
        import trackio
        from trackio.sqlite_storage import SQLiteStorage

        unknown = sorted(set(self._init) - set(inspect.signature(trackio.init).parameters))
        if unknown:
            raise TypeError(f"Trackio got {', '.join(map(repr, unknown))}, which trackio.init does not take (it failed "
                            "at the run's first point, dropping the sink)")  # fmt: skip

        try:
            SQLiteStorage.validate_project_name(self.project)
        except ValueError as exc:
            raise ValueError(f"Trackio.project = {self.project!r} is invalid: {exc}") from None

    def folder(self) -> tuple[str, Path] | None:
        """Trackio's folder, where a run is written on this machine, checked when the sink is made: a file there, or a
        folder that cannot be written, dropped the sink at the run's first point (``[Errno 17] File exists``)."""
        if self._remote():
            return None
        if not self.process:  # Trackio read $TRACKIO_DIR when first imported (by this sink, or before it)
            from trackio import utils

            return "$TRACKIO_DIR (as Trackio read it when first imported)", Path(utils.TRACKIO_DIR)
        return "$TRACKIO_DIR", trackio_dir()

    def local_db(self) -> Path | None:
        """The project's local database, or None where the runs go to a Space or server elsewhere."""
        if self._remote():
            return None
        from trackio.sqlite_storage import SQLiteStorage

        return Path(SQLiteStorage.get_project_db_path(self.project))

    def written_to(self) -> Path | None:
        """What the run is written to on this machine, made now (Trackio makes it at its first write): the project's
        database, or where Trackio writes JSONL fragments instead (``TRACKIO_STORAGE_MODE``, on a network file
        system) the inbox folder its dashboard imports them from. None where a Space or server elsewhere gets it."""
        if self._remote():
            return None
        from trackio import utils
        from trackio.sqlite_storage import SQLiteStorage

        if getattr(utils, "get_storage_mode", lambda: "sqlite")() == "sqlite":
            return Path(SQLiteStorage.init_db(self.project))
        from trackio.fragments import local_inbox_dir

        inbox = Path(local_inbox_dir())  # the dashboard empties it, never removes it: deleted, fragments would be lost
        inbox.mkdir(parents=True, exist_ok=True)
        return inbox

    def _remote(self) -> bool:
        """Whether the runs go to a Space or a server (``space_id``, ``server_url``), not to this machine."""
        return any(self._init.get(k) or os.environ.get(f"TRACKIO_{k.upper()}") for k in ("space_id", "server_url"))

    def holds(self, run: RunInfo) -> str | None:
        """A run of that name in the project's local database (a Space or server elsewhere is not asked)."""
        from trackio.sqlite_storage import SQLiteStorage

        db = self.local_db()
        if db is None or not db.exists() or run.name not in SQLiteStorage.get_runs(self.project):
            return None
        return f"in Trackio project {self.project!r} ({db}): delete that run to export it again, or use another project"

    def open(self, run: RunInfo) -> _Writer:
        """Start the library's run for ``run``; called on the sink's own thread, as it may be slow."""
        import trackio

        # trackio.init finishes the "current run" of the calling context and makes the new one
        # current there: in an empty context of its own, it touches neither your own Trackio run
        # (rlnb.export runs on your thread) nor a sweep's other trials, nor Trackio's atexit.
        init = LOCAL | self._init
        kwargs = dict(project=self.project, name=run.name, group=run.group, config=run.params, **init)
        where = self.written_to()
        db = where if where is not None and where.is_file() else None  # not the inbox of JSONL fragments
        writer = _Writer(contextvars.Context().run(trackio.init, **kwargs), where, Renamed(self.note, run.name))
        writer.count_in(db)
        return writer


class Renamed:
    """Says once per name, through the sink's ``note``, that Trackio stores a figure under another name: one it keeps
    for its own columns (``trackio.utils.RESERVED_KEYS``: ``project``, ``run``, ``timestamp``, ``step``, ``time``,
    ``metrics``) or one that starts with ``__``, stored as ``__<name>``. Trackio's own ``UserWarning`` came on the
    sink's thread, or in its child process, at each batch: in a notebook, never seen."""

    def __init__(self, note: Callable[[str], None], run: str):
        from trackio import utils

        self._note, self._run = note, run
        self._reserved = frozenset(utils.RESERVED_KEYS)
        self._said: set[str] = set()

    def __call__(self, names: Iterable[str]) -> None:
        new = [n for n in names if (n in self._reserved or n.startswith(RENAMED)) and n not in self._said]
        if new:
            self._said.update(new)
            shown = ", ".join(f"{n!r} as {RENAMED + n!r}" for n in new)
            self._note(
                f"rlnb.sinks.Trackio: run {self._run} has {shown} in Trackio, which keeps such names for itself "
                "(its columns, names that start with '__'): look for them there by that name"
            )


class _Writer:
    def __init__(self, run: Any, where: Path | None, renamed: Renamed):
        from trackio import AlertLevel

        self.run, self._error, self._warn = run, AlertLevel.ERROR, AlertLevel.WARN
        self._cancelled: list[Failure] = []  # said at the run's end as one alert: one each flooded the console
        self._where = Watched(where)  # deleted, Trackio made it anew and wrote the rest of the run there in silence
        self._renamed = renamed
        self._db: Path | None = None
        self._key, self._given = str(getattr(run, "id", "")), 0

    def count_in(self, db: Path | None) -> None:
        """Count the run's rows in the project's database ``db`` from now (``stored``; None: not on this machine, or
        JSONL fragments, or a Trackio whose run has no id)."""
        self._db = db if self._key else None
        self._given = self._count() if self._db is not None else 0  # an earlier session's (a run resumed by its id)

    def stored(self) -> tuple[int, int] | None:
        """The rows (metrics and alerts) given to Trackio and how many of them its database holds: Trackio queues them
        and writes every 0.5 s, and a process killed before lost the queue. None where the run is not in a local
        database."""
        return None if self._db is None else (self._given, self._count())

    def _count(self) -> int:
        """The run's rows in the database; 0 where it cannot be read now (the sink's ``Watched`` says a deletion)."""
        try:
            with contextlib.closing(sqlite3.connect(f"file:{self._db}?mode=ro", uri=True, timeout=5)) as con:
                return int(con.execute(ROWS, (self._key, self._key)).fetchone()[0])
        except sqlite3.Error:
            return 0

    def write(self, points: list[Point], failures: list[Failure]) -> None:
        self._where.check(lost_from(points, failures))
        for point in points:
            self._renamed(point.values)
            self.run.log(point.values, step=point.step)
            self._given += 1
        for fail in failures:
            if fail.code == OperationErrorCode.SESSION_NOT_ACTIVE:  # the session stopped: not the run's own failure
                self._cancelled.append(fail)
                continue
            title = f"{fail.kind} failed: {fail.code}"
            self.run.alert(title=title, text=fail.text(), level=self._error, step=fail.step)
            self._given += 1

    def close(self) -> None:
        self._where.check("the run's end was")
        if self._cancelled:
            first, last = min(f.step for f in self._cancelled), max(f.step for f in self._cancelled)
            steps = f"at step {first}" if first == last else f"steps {first} to {last}"
            title = f"{len(self._cancelled)} operations cancelled: {OperationErrorCode.SESSION_NOT_ACTIVE.value}"
            text = f"the session stopped before they ran ({steps}); each is in the rlnb run's history"
            self.run.alert(title=title, text=text, level=self._warn, step=last)
        self.run.finish()


def trackio_dir() -> Path:
    """The folder Trackio takes when it is imported (by a sink's child process): ``$TRACKIO_DIR``, else ``trackio`` in
    Hugging Face's folder (``$HF_HOME``, else ``$XDG_CACHE_HOME/huggingface``, else ``~/.cache/huggingface``)."""
    if folder := os.environ.get("TRACKIO_DIR"):
        return Path(folder)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return Path(os.environ.get("HF_HOME") or os.path.join(cache, "huggingface")).expanduser() / "trackio"


def canonical(project: str) -> str:
    """The name Trackio keeps a project's files under (``trackio.utils.canonical_project_name``, here without importing
    Trackio: a sink writing from its child never does): its letters, digits, ``-`` and ``_``, else ``default``."""
    return "".join(c for c in project if c.isalnum() or c in "-_").rstrip() or "default"

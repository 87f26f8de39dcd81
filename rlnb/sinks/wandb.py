"""Weights & Biases: one W&B run per rlnb run, offline (files to sync later) or online.

Rows carry their step in a ``step`` column that every chart uses as its x axis
(``define_metric("*", step_metric="step")``), so figures logged late or out of order still land
on their step. The config goes to ``run.config``; a failure is a row with a ``failed_operation``
text. W&B's console capture and system metrics are off (they would wrap the notebook's output and
cost CPU); pass ``settings=`` to choose. Offline runs land in ``<dir>/wandb/offline-run-*``:
``wandb sync <that folder>`` uploads one. Each session of an rlnb run writes into one W&B run id (``run_id``,
with ``resume="allow"`` for a later session, ``"never"`` for a new run or an export, which W&B's server then refuses if
it holds the run already); offline, that is a folder per session, which ``wandb sync`` uploads in order as one run.
A figure named like a key of W&B's own (``_step``, ``_runtime``, ``_timestamp``: W&B keeps every name that starts
with ``_``) or like the failures', or one that starts with ``logged/``, is sent as ``logged/<name>``.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Literal

from rlnb._input.checks import user_path
from rlnb.lifecycle import shutdown
from rlnb.sinks import wandb_file
from rlnb.sinks.base import FLUSH_INTERVAL, Failure, Point, RunInfo, Sink, SinkError
from rlnb.sinks.watched import Watched, lost_from

MODES = ("offline", "online")
STEP_KEY, FAILURE_KEY = "step", "failed_operation"
MAX_PROJECT, NOT_IN_PROJECT = 128, "/\\#?%:"
"""W&B's rule for a project's name (``wandb.Settings``): a name that breaks it would fail ``wandb.init`` at the run's
first point, dropping the sink once training has started."""
RESUME: dict[bool, Literal["allow", "never"]] = {True: "allow", False: "never"}
"""``wandb.init``'s ``resume`` for a run continued (a later session: the same W&B run, not one of each session's own)
or not (a new run, an export: W&B's server refuses a run it holds already, where resuming it would append every point
a second time)."""
LOGGED = "logged/"
"""The prefix of a figure whose own name W&B or rlnb's rows take (``key``)."""


def key(name: str) -> str:
    """``name`` as a key of its own in a W&B row: one that starts with ``_`` (W&B's ``_step``, ``_runtime``,
    ``_timestamp``, ...: its own value replaced the figure, or the figure W&B's, and such keys are hidden) or is
    ``step`` or ``failed_operation`` (rlnb's) is ``logged/<name>``, in a section of its own; so is one that starts
    with ``logged/``, so that no two names share a key (``logged/_step`` was the key of ``_step`` too: one figure
    overwrote the other at each step)."""
    escape = name.startswith(("_", LOGGED)) or name in (STEP_KEY, FAILURE_KEY)
    return LOGGED + name if escape else name


def run_id(run: RunInfo) -> str:
    """The W&B run id of an rlnb run, the same in each of its sessions (a continued run writes on into it, with
    ``resume="allow"``): a hash of its name and first ``created_at``, so that another run of that name (its folder
    deleted and the id used again, another machine) never resumes into it on W&B's server. W&B refuses ``/`` in an id,
    which a sweep's trial name holds."""
    made = str(run.params.get("created_at", ""))
    return "rlnb-" + hashlib.sha256(f"{run.name}\0{made}".encode("utf-8", "surrogatepass")).hexdigest()[:20]


def refused(exc: BaseException, run: str) -> bool:
    """Whether ``exc`` is W&B's refusal of ``run``'s id as a new run (``resume="never"``) because its server holds it:
    a ``UsageError`` (wandb-core's ``ErrorInfo`` code ``USAGE``) saying that the run ``(<id>)`` already exists. Any
    other error (a ``CommError`` quoting such a text, W&B's "artifact ... already exists") is no refusal."""
    from wandb.errors import UsageError

    text = str(exc)
    return type(exc) is UsageError and f"({run})" in text and "already exists" in text


class WandB(Sink):
    """``WandB(project="rlnb", mode="offline" | "online", dir=None, entity=None, settings=None)``;
    ``dir`` defaults to W&B's own (``$WANDB_DIR`` or the working directory)."""

    library = "wandb"
    extra = "wandb"

    def __init__(
        self,
        project: str = "rlnb",
        mode: str = "offline",
        *,
        dir: str | Path | None = None,
        entity: str | None = None,
        settings: Any = None,
        interval: float = FLUSH_INTERVAL,
        process: bool = False,
    ):
        if mode not in MODES:
            raise ValueError(f"WandB.mode = {mode!r} is invalid: must be one of {', '.join(MODES)}")
        named = isinstance(project, str) and 0 < len(project) <= MAX_PROJECT
        if not named or set(project) & set(NOT_IN_PROJECT):
            shown = repr(project) if len(repr(project)) <= 80 else repr(project)[:76] + "...'"
            raise ValueError(f"WandB.project = {shown} is invalid: must be a name of 1 to {MAX_PROJECT} characters "
                             f"without any of {' '.join(NOT_IN_PROJECT)} (W&B refuses it)")  # fmt: skip
        if entity is not None and (not isinstance(entity, str) or not entity):
            raise ValueError(f"WandB.entity = {entity!r} is invalid: must be a W&B user or team name, or None (the "
                             "account's default entity)"[:300])  # fmt: skip
        self.project, self.mode, self.entity = project, mode, entity
        self.dir = user_path("WandB.dir", dir) if dir is not None else None
        self._settings = settings
        self._runs = wandb_file.Index()
        super().__init__(interval=interval, process=process)

    def spec(self) -> tuple[str, str, dict[str, Any]]:
        """How a child process makes this sink again (``process=True``)."""
        where = {"dir": str(self.dir) if self.dir else None, "entity": self.entity, "settings": self._settings}
        return __name__, "WandB", {"project": self.project, "mode": self.mode, **where, "interval": self.interval}

    def where(self) -> dict[str, Any]:
        """Offline, the project in W&B's folder (``dir``, else ``$WANDB_DIR``, else the working directory: ``WandB()``
        and ``WandB(dir=".")`` are one); online, the project on the server, whatever ``dir`` keeps locally (two sinks
        of one run there would write into one W&B run id)."""
        if self.mode == "online":
            return {"project": self.project, "entity": self.entity, "mode": self.mode}
        return {"project": self.project, "mode": self.mode, "dir": os.path.realpath(self._root().parent)}

    def folder(self) -> tuple[str, Path]:
        """W&B's folder (``<dir>/wandb``; online runs keep their files there too), checked when the sink is made."""
        field = "WandB.dir" if self.dir is not None else "$WANDB_DIR" if os.environ.get("WANDB_DIR") else "WandB's dir"
        return field, self._root()

    def _root(self) -> Path:
        """The folder W&B writes its runs in: ``<dir>/wandb``."""
        return (self.dir or Path(os.environ.get("WANDB_DIR") or ".")).expanduser() / "wandb"

    def holds(self, run: RunInfo) -> str | None:
        """An offline run of that project and name under the sink's folder (W&B's server is not asked)."""
        if self.mode != "offline":
            return None
        for file, project_and_name in self._runs.look(self._root()):
            if project_and_name == (self.project, run.name):
                return (
                    f"as the offline run {file.parent}: delete that folder to export it again, or export to another dir"
                )
        return None

    def open(self, run: RunInfo) -> _Writer:
        """Start the library's run for ``run``; called on the sink's own thread, as it may be slow."""
        import wandb

        # W&B's service starts here and registers its teardown at exit: rlnb's exit hook is registered again right
        # after, so it runs first. Done only once init returned, an interpreter exiting mid-init would tear the
        # service down under the sink's last points, dropping the sink ("ConnectionResetError: Connection lost").
        wandb.setup()
        shutdown.run_first()
        if self.dir is not None:
            self.dir.mkdir(parents=True, exist_ok=True)
        settings = self._settings or wandb.Settings(console="off", x_disable_stats=True, silent=True)
        try:
            handle = wandb.init(
                project=self.project,
                entity=self.entity,
                name=run.name,
                id=run_id(run),
                resume=RESUME[run.continued],
                group=run.group,
                config=run.params,
                mode=self.mode,  # type: ignore[arg-type]
                dir=str(self.dir) if self.dir is not None else None,
                reinit="create_new",  # several runs at once: a sweep's trials
                settings=settings,
            )
        except Exception as exc:
            if run.continued or not refused(exc, run_id(run)):
                raise
            where = "/".join(p for p in (self.entity, self.project, run_id(run)) if p)
            raise SinkError(f"{self!r} holds run {run.name} already, as the W&B run {where} (streamed or exported "
                            "there before): delete that run in W&B to export it again, or export to another project; "
                            "nothing was written") from exc  # fmt: skip
        return _Writer(handle, offline=self.mode == "offline")


class _Writer:
    def __init__(self, run: Any, offline: bool = False):
        self.run = run
        self._file = Path(run.settings.sync_file) if offline else None
        # offline-run-*: the run's only copy; its .wandb file by identity, as the other sinks' files: a check that the
        # folder exists missed the file deleted alone, and the folder deleted and made anew
        self._watched = Watched(self._file, self._file.parent) if self._file is not None else None
        self._rows = wandb_file.Reader(self._file) if self._file is not None else None
        self._given = self._held = 0
        run.define_metric(STEP_KEY)
        run.define_metric("*", step_metric=STEP_KEY)

    def _check(self, lost: str) -> None:
        """An offline run's file deleted while the run is written (``rm -rf wandb``, or the file alone): W&B goes on
        writing into the deleted file, and nothing would say that every step since is lost. That drops the sink, with a
        warning naming what was deleted (``Watched.check``)."""
        if self._watched is not None:
            self._watched.check(lost)

    def write(self, points: list[Point], failures: list[Failure]) -> None:
        self._check(lost_from(points, failures))
        for point in points:
            self.run.log({STEP_KEY: point.step, **{key(k): v for k, v in point.values.items()}})
        for fail in failures:
            self.run.log({STEP_KEY: fail.step, FAILURE_KEY: fail.text()})
        self._given += len(points) + len(failures)

    def stored(self) -> tuple[int, int] | None:
        """The rows given to W&B and how many of them an offline run's ``.wandb`` file holds: wandb-core writes it in
        its own time, and a process killed before lost the rest. None online (what the server holds is not asked)."""
        if self._rows is None:
            return None
        self._held += wandb_file.rows(self._rows)
        return self._given, self._held

    def close(self) -> None:
        """Finish the run; offline, return once its last records are in its ``.wandb`` file, within ``close()``'s
        deadline (``wandb_file.wait_ended``: ``finish`` returned before wandb-core wrote them)."""
        from rlnb.sinks import stream

        before = _size(self._file)
        self.run.finish()
        self._check("the run's end was")
        if self._file is not None:  # the exit record is written after finish(): it lies past ``before``
            wandb_file.wait_ended(self._file, stream.CLOSE_TIMEOUT, start=before)


def _size(file: Path | None) -> int:
    """The size of ``file``; 0 for none, or one deleted (``_check`` says so)."""
    try:
        return file.stat().st_size if file is not None else 0
    except OSError:
        return 0

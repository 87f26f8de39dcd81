"""Trackio: one Trackio run per rlnb run in a project, in Trackio's local SQLite database.

Trackio keeps ``<project>.db`` in ``$TRACKIO_DIR`` (default ``$HF_HOME/trackio``), a folder it reads
once, when it is first imported: set the variable before creating the first ``Trackio`` sink.
The config goes to the run's config, failures to Trackio's alerts (level ERROR). Its dashboard
embedding, CPU/GPU auto-logging and Space upload stay off unless asked for through ``init``.
View with ``trackio show --project <project>``.
"""

from __future__ import annotations

from typing import Any

from rlnb.sinks.base import FLUSH_INTERVAL, Failure, Point, RunInfo, Sink

LOCAL = {"embed": False, "auto_log_cpu": False, "auto_log_gpu": False}


class Trackio(Sink):
    """``Trackio(project="rlnb", **init)``; ``init`` goes to ``trackio.init`` (``space_id=``,
    ``server_url=``, ... to log elsewhere than the local database)."""

    library = "trackio"
    extra = "trackio"

    def __init__(self, project: str = "rlnb", *, interval: float = FLUSH_INTERVAL, process: bool = False, **init: Any):
        if not isinstance(project, str) or not project:
            raise ValueError(f"Trackio.project = {project!r} is invalid: must be a non-empty name")
        self.project = project
        self._init = init
        super().__init__(interval=interval, process=process)

    def spec(self) -> tuple[str, str, dict[str, Any]]:
        return __name__, "Trackio", {"project": self.project, "interval": self.interval, **self._init}

    def open(self, run: RunInfo) -> _Writer:
        import trackio

        # A new thread starts with an empty context, so this sets the current run of this
        # sink's thread only: runs on other threads (a sweep's trials) are not finished by it.
        init = LOCAL | self._init
        handle = trackio.init(project=self.project, name=run.name, group=run.group, config=run.params, **init)
        return _Writer(handle)


class _Writer:
    def __init__(self, run: Any):
        from trackio import AlertLevel

        self.run, self._error = run, AlertLevel.ERROR

    def write(self, points: list[Point], failures: list[Failure]) -> None:
        for point in points:
            self.run.log(point.values, step=point.step)
        for fail in failures:
            title = f"{fail.kind} failed: {fail.code}"
            self.run.alert(title=title, text=fail.text(), level=self._error, step=fail.step)

    def close(self) -> None:
        self.run.finish()

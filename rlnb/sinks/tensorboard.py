"""TensorBoard: event files under ``<logdir>/<run>/``, in tensorboard's record format, with torch's summaries.

Each step is one event holding every figure (one ``Summary`` with a value per tag), which costs a
fifth of one ``add_scalar`` per figure. The run's config goes to the HParams dashboard, failures
to the Text dashboard under ``failed_operations``. View with ``tensorboard --logdir <logdir>``.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import time
from pathlib import Path
from typing import Any

from rlnb._input.checks import user_path
from rlnb.sinks.base import FLUSH_INTERVAL, Failure, Point, RunInfo, Sink
from rlnb.sinks.watched import Watched, lost_from

EVENT_FILES = "events.out.tfevents.*"
"""How TensorBoard names its event files (one per writer, under the run's folder; the sink names its own so too)."""
FAILURES_TAG = "failed_operations"
STEP_METRICS = ("loss", "grad_norm", "learning_rate")
"""Metrics the HParams dashboard lists from the start (all seen are listed when the run ends)."""
FILE_VERSION = "brain.Event:2"
"""The first event of an event file, as tensorboard's own writer makes it."""
_SERIAL = itertools.count()
"""Tells apart the event files this process makes in one second (the last part of their names, as tensorboard's)."""


class TensorBoard(Sink):
    """``TensorBoard(logdir="runs")``: one sub-folder per run (``<sweep>/<trial>`` for a sweep)."""

    library = "tensorboard"
    extra = "tensorboard"

    def __init__(self, logdir: str | Path = "runs", *, interval: float = FLUSH_INTERVAL, process: bool = False):
        if logdir == "":  # Path("") is the working folder: an unset variable would write the run folders there
            raise ValueError("TensorBoard.logdir must be a folder's path, got ''")
        self.logdir = user_path("TensorBoard.logdir", logdir)  # ~ is home; None or 5 named here
        super().__init__(interval=interval, process=process)

    def spec(self) -> tuple[str, str, dict[str, Any]]:
        """How a child process makes this sink again (``process=True``)."""
        return __name__, "TensorBoard", {"logdir": str(self.logdir), "interval": self.interval}

    def folder(self) -> tuple[str, Path]:
        """The logdir, checked when the sink is made."""
        return "TensorBoard.logdir", self.logdir

    def _load(self) -> None:
        import tensorboard  # type: ignore[import-untyped]  # noqa: F401 - torch.utils.tensorboard needs it
        from torch.utils.tensorboard.summary import hparams, text  # noqa: F401

    def holds(self, run: RunInfo) -> str | None:
        """Event files in the run's folder: a run streamed or exported there before."""
        folder = self.logdir / run.name
        if folder.is_dir() and any(folder.glob(EVENT_FILES)):
            return f"as event files in {folder}: delete that folder to export it again, or export to another logdir"
        return None

    def open(self, run: RunInfo) -> _Writer:
        """Start the library's run for ``run``; called on the sink's own thread, as it may be slow."""
        return _Writer(self.logdir / run.name, run)


class _Writer:
    """The run's event file, written on the sink's own thread with tensorboard's public ``RecordWriter``: torch's
    ``SummaryWriter`` wrote it from a thread of its own, which printed a raw traceback on a full disk (in a notebook,
    into the cell) and named its file only in a private attribute; the sink's thread is a background one already."""

    def __init__(self, path: Path, run: RunInfo):
        from tensorboard.compat.proto.event_pb2 import Event  # type: ignore[import-untyped]
        from tensorboard.compat.proto.summary_pb2 import Summary  # type: ignore[import-untyped]
        from tensorboard.summary.writer.record_writer import RecordWriter  # type: ignore[import-untyped]
        from torch.utils.tensorboard.summary import hparams, text

        self._event, self._summary, self._hparams, self._text = Event, Summary, hparams, text
        path.mkdir(parents=True, exist_ok=True)
        name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.{next(_SERIAL)}"
        self._out = open(path / name, "xb")  # noqa: SIM115 - closed by close(), or where a write fails
        self._records = RecordWriter(self._out)
        self._file: Watched = Watched(path / name, path)
        self._params: dict[str, Any] = dict(run.params)
        self._seen: set[str] = set(STEP_METRICS)
        try:
            self._add(Event(file_version=FILE_VERSION))
            self._write_hparams(end=False)
            self._out.flush()
        except OSError as exc:
            raise self._failed(exc, "the run's start (its hyperparameters) was") from None

    def _add(self, event: Any, step: int | None = None, at: float | None = None) -> None:
        event.wall_time = time.time() if at is None else at
        if step is not None:
            event.step = step
        self._records.write(event.SerializeToString())

    def _write_hparams(self, *, end: bool) -> None:
        experiment, start, finish = self._hparams(self._params, {k: 0.0 for k in sorted(self._seen)})
        self._add(self._event(summary=experiment))
        self._add(self._event(summary=finish if end else start))

    def _check(self, lost: str) -> None:
        """``Watched.check``, having closed the event file if it is gone."""
        try:
            self._file.check(lost)
        except FileNotFoundError:
            with contextlib.suppress(OSError):
                self._out.close()
            raise

    def _failed(self, exc: OSError, lost: str) -> OSError:
        """The sink's error for a write that failed (a full disk), naming the event file and what was lost; the file
        is closed (what its buffer held is lost with the batch)."""
        with contextlib.suppress(OSError):
            self._out.close()
        return OSError(exc.errno, f"{exc.strerror or exc} writing {self._file.path}: {lost} not written there "
                       "(the run's history has everything: rlnb.export writes the whole run again)")  # fmt: skip

    def write(self, points: list[Point], failures: list[Failure]) -> None:
        lost = lost_from(points, failures)
        self._check(lost)
        try:
            for point in points:
                values = [self._summary.Value(tag=k, simple_value=v) for k, v in point.values.items()]
                self._add(self._event(summary=self._summary(value=values)), point.step, point.time)
                self._seen.update(point.values)
            for fail in failures:
                self._add(self._event(summary=self._text(FAILURES_TAG, fail.text())), fail.step, fail.time)
            self._out.flush()
        except OSError as exc:
            raise self._failed(exc, lost) from None

    def close(self) -> None:
        if self._out.closed:  # a write failed, or the file went: the sink is dropped already
            return
        lost = "the run's end (its hyperparameters' final metrics) was"
        self._check(lost)
        try:
            self._write_hparams(end=True)
            self._out.close()
        except OSError as exc:
            raise self._failed(exc, lost) from None

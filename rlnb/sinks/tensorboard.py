"""TensorBoard: event files under ``<logdir>/<run>/``, through torch's ``SummaryWriter``.

Each step is one event holding every figure (one ``Summary`` with a value per tag), which costs a
fifth of one ``add_scalar`` per figure. The run's config goes to the HParams dashboard, failures
to the Text dashboard under ``failed_operations``. View with ``tensorboard --logdir <logdir>``.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from rlnb._checks import user_path
from rlnb.sinks.base import FLUSH_INTERVAL, Failure, Point, RunInfo, Sink
from rlnb.sinks.watched import Watched, lost_from

EVENT_FILES = "events.out.tfevents.*"
"""How TensorBoard names its event files (``SummaryWriter`` makes one per writer, under the run's folder)."""
FAILURES_TAG = "failed_operations"
STEP_METRICS = ("loss", "grad_norm", "learning_rate")
"""Metrics the HParams dashboard lists from the start (all seen are listed when the run ends)."""


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
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401

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
    def __init__(self, path: Path, run: RunInfo):
        from tensorboard.compat.proto.summary_pb2 import Summary  # type: ignore[import-untyped]
        from torch.utils.tensorboard import SummaryWriter

        self._summary = Summary
        before = set(path.glob(EVENT_FILES))
        self._writer = SummaryWriter(log_dir=str(path))
        self._files: Any = self._writer.file_writer
        # the event file it made, new in the folder: its name is no public attribute (tensorboard's private
        # ``_file_name`` may go, and watching the folder instead would leave a deleted event file unseen)
        made = sorted(set(path.glob(EVENT_FILES)) - before)
        if self._files is None or len(made) != 1:
            self._writer.close()
            raise RuntimeError(f"SummaryWriter({path}) made {len(made)} event files, not one: {[m.name for m in made]}")
        self._file: Watched = Watched(made[0], path)
        self._quiet: _Quiet = _Quiet.install(self._files)
        self._params: dict[str, Any] = dict(run.params)
        self._seen: set[str] = set(STEP_METRICS)
        self._write_hparams(end=False)

    def _write_hparams(self, *, end: bool) -> None:
        from torch.utils.tensorboard.summary import hparams

        experiment, start, finish = hparams(self._params, {k: 0.0 for k in sorted(self._seen)})
        self._files.add_summary(experiment)
        self._files.add_summary(finish if end else start)

    def _check(self, lost: str) -> None:
        """``Watched.check``, having stopped the library's writer if the file is gone: its thread would print a
        traceback of its own at its next flush."""
        try:
            self._file.check(lost)
        except FileNotFoundError:
            with contextlib.suppress(OSError):
                self._writer.close()
            raise

    def _failed(self, exc: OSError, lost: str) -> OSError:
        """The sink's error for a write that failed (a full disk), naming the event file and what was lost, the
        library's writer stopped: its thread would go on failing."""
        with contextlib.suppress(OSError):
            self._writer.close()
        return OSError(exc.errno, f"{exc.strerror or exc} writing {self._file.path}: {lost} not written there "
                       "(the run's history has everything: rlnb.export writes the whole run again)")  # fmt: skip

    def write(self, points: list[Point], failures: list[Failure]) -> None:
        lost = lost_from(points, failures)
        self._check(lost)
        try:
            for point in points:
                values = [self._summary.Value(tag=k, simple_value=v) for k, v in point.values.items()]
                self._files.add_summary(self._summary(value=values), point.step, point.time)
                self._seen.update(point.values)
            for fail in failures:
                self._writer.add_text(FAILURES_TAG, fail.text(), fail.step, fail.time)
            self._writer.flush()
            self._quiet.raise_kept()
        except OSError as exc:
            raise self._failed(exc, lost) from None

    def close(self) -> None:
        lost = "the run's end (its hyperparameters' final metrics) was"
        self._check(lost)
        try:
            self._write_hparams(end=True)
            self._writer.close()
            self._quiet.raise_kept()
        except OSError as exc:
            raise self._failed(exc, lost) from None


class _Quiet:
    """tensorboard's record writer as its writer thread calls it: an error there (a full disk) is kept for the
    sink's thread to raise after the batch's flush, rather than killing that thread with a raw "Exception in thread"
    traceback of its own (in a notebook, in the cell) besides the sink's warning."""

    def __init__(self, writer: Any) -> None:
        self._writer = writer
        self.error: OSError | None = None

    @classmethod
    def install(cls, files: Any) -> _Quiet:
        """Put between ``files``' (a ``FileWriter``'s) writer thread and its record writer: private attributes of
        tensorboard; one that names them otherwise keeps its thread's traceback, and the sink its warning."""
        quiet = cls(None)
        with contextlib.suppress(AttributeError):
            worker = files.event_writer._async_writer._worker
            quiet._writer = worker._record_writer
            worker._record_writer = quiet
        return quiet

    def write(self, data: bytes) -> None:
        self._call(self._writer.write, data)

    def flush(self) -> None:
        self._call(self._writer.flush)

    def _call(self, work: Any, *args: Any) -> None:
        if self.error is None:  # the file failed: nothing more goes into it
            try:
                work(*args)
            except OSError as exc:
                self.error = exc

    def raise_kept(self) -> None:
        """Raise the error the writer thread met, if any."""
        if self.error is not None:
            raise self.error

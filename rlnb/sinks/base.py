"""What a sink is, and what it is given: the run's hyperparameters, one point per step, failures.

A ``Sink`` is a destination (a TensorBoard folder, an MLflow experiment, a W&B or Trackio project).
Each run written to it gets its own ``Writer`` from ``Sink.open``; a sink can take several runs,
one after another or at once (a sweep's trials). Sinks never raise into training: the first error
of a sink (its library missing, its server down, its disk full) warns once with ``SinkWarning``
and drops the sink; later runs skip it. A run whose close misses its deadline warns once too; no close
waits for that sink again while that run's writer still runs (``Sink.stall``). The libraries are imported
when a sink is created.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import math
import sys
import threading
import warnings
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from rlnb._input.checks import check_bool, check_seconds
from rlnb.errors import RlnbError, user_stacklevel
from rlnb.history.paths import check_run_id
from rlnb.history.runconfig import EARLIER
from rlnb.lifecycle import shutdown
from rlnb.sinks.scrubbing import scrub, scrubbed
from rlnb.sinks.watched import check_folder
from rlnb.text.prompts import escaped

Scalar = bool | int | float | str
FLUSH_INTERVAL = 1.0
"""Seconds a sink's thread gathers points before writing them as one batch."""


class SinkWarning(RuntimeWarning):
    """A sink failed and was dropped; training and the run store carry on."""


class SinkError(RlnbError):
    """``rlnb.export`` could not write a run to a sink (the cause is chained)."""


@dataclass(slots=True)
class Point:
    """Figures for one optimizer step: the step's own (loss, grad norms, ...) or ``history.log``'s."""

    step: int
    values: dict[str, float]
    time: float
    """POSIX seconds: when the optim-step finished, or when ``log`` was called."""
    session: int | None = None
    """Which session of the run made it (0 for the first): a run continued from step 0 has each step number once per
    session. None for a ``history.log`` row read back from a run folder an older rlnb wrote (which kept no session for
    one): ``points.merge`` puts it on each session's point of its step, as ``History.steps`` shows it."""


@dataclass(slots=True)
class Failure:
    """An operation that ended FAILED."""

    seq: int
    step: int
    """Optimizer steps the session had submitted before this operation."""
    kind: str
    op_id: str
    code: str
    message: str
    time: float

    def text(self) -> str:
        """One line for a library's text log: kind, id, step, error code and message."""
        return f"{self.kind} {self.op_id} failed at step {self.step}: {self.code}: {self.message}"


@dataclass(slots=True)
class RunInfo:
    """Who the run is, for the library's own run record."""

    name: str
    """The rlnb run id, under its sweep's folder name for a sweep's trial (``<sweep>/<trial>``)."""
    group: str | None
    """The sweep's folder name for a sweep's trial, else None."""
    params: dict[str, Scalar]
    """The run config flattened (``versions.torch``), without empty values: the hyperparameters."""
    path: str | None = None
    """The rlnb run folder, if the run is recorded on disk."""
    tags: dict[str, str] = field(default_factory=dict)
    continued: bool = False
    """A later session of a run streamed before: a library that can (MLflow) writes on into that run's record."""

    @classmethod
    def from_config(cls, config: Mapping[str, Any], path: Path | None = None, unnamed: str = "rlnb-run") -> RunInfo:
        """The run's name, group, flattened config and tags, from a History's ``config`` (and its folder).
        ``unnamed`` names a run that neither names (a session with ``record=False``): the sinks give each such run a
        fresh one (``new_run_id``): one shared name would make one TensorBoard folder mixing them."""
        run_id = _folder_name(config.get("run_id")) or _folder_name(path.name if path else None) or unnamed
        run_id = escaped(run_id)  # a folder named in another encoding ("r\\udcff", its byte 0xff)
        group = _folder_name(config.get("sweep"))  # a hand-edited config's "../x" would lead TensorBoard out of logdir
        group = escaped(group) if group else None
        name = f"{group}/{run_id}" if group else run_id
        where = escaped(str(path)) if path else None
        tags = {"rlnb.run_id": run_id} | ({"rlnb.run_path": where} if where else {})
        params = flatten({k: v for k, v in config.items() if k != EARLIER})  # the latest session's: each library's
        return cls(name, group, params, where, tags)  # value is short


def _folder_name(value: object) -> str | None:
    """``value`` if it is one plain folder name (a run id, a sweep folder's name), else None."""
    try:
        return check_run_id(value)
    except ValueError:
        return None


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Scalar]:
    """``{"versions": {"torch": "2.13"}}`` → ``{"versions.torch": "2.13"}``; lists as JSON text;
    None and NaN left out (every library wants a value); a lone surrogate as its escape (``escaped``: no library
    takes one: TensorBoard and MLflow would be dropped at the batch holding it)."""
    flat: dict[str, Scalar] = {}
    for key, value in config.items():
        name = escaped(f"{prefix}{key}")
        if isinstance(value, Mapping):
            flat.update(flatten(value, name + "."))
        elif value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        elif isinstance(value, str):
            flat[name] = escaped(value)
        elif isinstance(value, bool | int | float):
            flat[name] = value
        else:
            flat[name] = json.dumps(value, default=str)  # a lone surrogate as its escape
    return flat


class Writer(Protocol):
    """One run in one library. Called from one thread at a time. A writer whose library keeps what it is given a while
    before storing it (W&B offline, Trackio) also has ``stored() -> (given, held) | None``: the rows it gave the
    library, and how many of them the library's store holds now (``rlnb.sinks.channel`` marks only those)."""

    def write(self, points: list[Point], failures: list[Failure]) -> None:
        """Write a batch: points sorted by step (one per step), then the failures."""

    def close(self) -> None:
        """Flush and finish the run."""


class Sink(ABC):
    """A destination for runs. Subclasses set ``library`` (import name) and ``extra`` (pip extra),
    implement ``open`` and ``spec``; ``_load`` imports what they need, when the sink is created, and the folder that
    ``folder`` names is checked then (a file in its place: a ``ValueError`` before anything is sent).

    ``interval`` is how often (seconds) the sink's thread writes what it has gathered; with
    ``process=True`` the library runs in a child process (``rlnb.sinks.process``), where its CPU
    does not compete with training for the GIL."""

    library: ClassVar[str]
    extra: ClassVar[str]

    def __init__(self, *, interval: float = FLUSH_INTERVAL, process: bool = False) -> None:
        self.interval = check_seconds(f"{type(self).__name__}.interval", interval, 60)
        self.process = check_bool(f"{type(self).__name__}.process", process)  # "no" is truthy: a child process
        self.error: BaseException | None = None
        """The error that dropped this sink, or None while it works."""
        self.dropped_in = ""  # the run it was writing then
        self._lock = threading.Lock()
        self._unsaid: list[str] = []  # its warning, until a user's thread says it (``say``)
        self.stalled: threading.Thread | None = None  # a run's writer that missed close()'s deadline (``stall``)
        try:
            if self.process and importlib.util.find_spec(self.library) is None:
                raise ImportError(f"No module named {self.library!r}")
            if not self.process:
                self._load()
        except ImportError as exc:
            hint = f"{self.library} is not installed: pip install 'rlnb[{self.extra}]'"
            self.fail(ImportError(f"{hint} ({exc})"), "")
            self.say()
            return
        place = self.folder()
        if place is not None:
            check_folder(*place)

    def __repr__(self) -> str:
        state = f" dropped: {self.error}" if self.error else ""
        return f"<rlnb.sinks.{type(self).__name__}{state}>"

    def _load(self) -> None:
        importlib.import_module(self.library)

    @abstractmethod
    def open(self, run: RunInfo) -> Writer:
        """Start a run in the library (may be slow: called on the sink's own thread)."""

    def folder(self) -> tuple[str, Path] | None:
        """What names the folder this sink writes in on this machine, and that folder (checked when the sink is made:
        ``watched.check_folder``); None where it writes to a server. The default: none."""
        return None

    def prepare(self) -> None:
        """Slow set-up shared by this sink's runs, done when a run starts (before its first point)."""
        return None

    def holds(self, run: RunInfo) -> str | None:
        """Where this sink holds ``run`` already and how to remove it (``export`` refuses to write it twice), or None;
        asked after ``prepare``. The default: never known."""
        return None

    @abstractmethod
    def spec(self) -> tuple[str, str, dict[str, Any]]:
        """``(module, class name, keyword arguments)`` that make this sink again in a child process."""

    def where(self) -> dict[str, Any]:
        """The arguments that say where this sink writes (``rlnb.sinks.process.place``): ``spec``'s but the interval.
        A sink whose place has several spellings gives one (MLflow's store: its default, a path, a URI)."""
        return {k: v for k, v in self.spec()[2].items() if k != "interval"}

    def fail(self, exc: BaseException, run: str, text: str = "") -> None:
        """Drop this sink after its first error, with one warning (``text``, or one naming the error), kept for
        ``say``: a warning raised on the sink's own thread could land in another thread's ``catch_warnings``
        (filters are the process's), never reaching the user."""
        with self._lock:
            if self.error is not None:
                return
            self.error = exc = scrubbed(exc)  # MLflow's error quoted http://user:password@host
            self.dropped_in = run
            where = f" while writing run {run}" if run else ""
            self._unsaid.append(text or f"rlnb.sinks.{type(self).__name__} dropped{where}: {type(exc).__name__}: "
                                f"{scrub(str(exc))}. Training and the rlnb run store carry on.")  # fmt: skip
            _UNSAID.add(self)

    def stall(self, writer: threading.Thread, text: str) -> None:
        """Note a run's writer that missed ``close()``'s deadline, with one warning (kept for ``say``). A slow close
        (W&B's ``finish`` of a long run) is no error: the sink stays, other runs keep writing to it, and no close
        waits for it again while that writer still runs (a hung library would hold every session's close 30 s)."""
        with self._lock:
            self.stalled = writer
        self.note(text)

    def note(self, text: str) -> None:
        """A warning that drops nothing (a run left out, a missed deadline), kept for ``say``."""
        with self._lock:
            self._unsaid.append(text)
            _UNSAID.add(self)

    def unsaid(self) -> list[str]:
        """Take the warnings not said yet, to be said elsewhere: a sink in a child process hands them to its parent's
        sink (``rlnb.sinks.process``), as nothing there says them to the user."""
        with self._lock:
            unsaid, self._unsaid = self._unsaid, []
            _UNSAID.discard(self)
        return unsaid

    def is_stalled(self) -> bool:
        """Whether a run's writer that missed a close's deadline is still writing (``stall``)."""
        writer = self.stalled
        return writer is not None and writer.is_alive()

    def say(self) -> None:
        """Warn (``SinkWarning``) of this sink's failure, once, on the calling thread: the one that logs, closes or
        reads the history's tables, never the sink's own (``say_all`` at exit at the latest); at the user's line. Under
        ``-W error`` it raises, except at exit, where it is printed to stderr instead."""
        if not self._unsaid:  # the common case, without the lock: called at every log
            return
        with self._lock:
            unsaid, self._unsaid = self._unsaid, []
            _UNSAID.discard(self)
        level = user_stacklevel()
        for i, text in enumerate(unsaid):
            try:
                warnings.warn(text, SinkWarning, stacklevel=level)
            except SinkWarning:  # ``python -W error``: the warning is raised; what follows it is said later
                if not shutdown.exiting():
                    with self._lock:
                        self._unsaid[:0] = unsaid[i + 1 :]
                        if self._unsaid:
                            _UNSAID.add(self)
                    raise
                # raised at exit, it would be logged as a failed exit step, the sinks' other warnings and flush skipped
                print(f"SinkWarning: {text}", file=sys.stderr, flush=True)


_UNSAID: set[Sink] = set()
"""The sinks whose warning no thread has said yet (held until said: a notebook may drop its last reference first)."""


def say_all() -> None:
    """Say every sink's failure not said yet, on this thread (a new run's start, interpreter exit): a failure after
    the last ``log``, in a notebook that never closes its history, was never shown."""
    for sink in list(_UNSAID):
        sink.say()

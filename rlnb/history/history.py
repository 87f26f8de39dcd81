"""The record of every operation a session runs: kept on disk as it happens, and its pandas views.

One ``Record`` per operation, updated in place as its status changes (PENDING → RUNNING →
COMPLETED / FAILED).

A ``History`` with a run folder (``rlnb.history.store``) appends to ``ops.jsonl`` one JSON line when an
operation is submitted and one when it ends, every ``log()`` call to ``metrics.jsonl`` and every RL step's
completions (``log_completions``) to ``completions.jsonl``, beside ``config.json``, each flushed at once:
a killed process loses nothing it had recorded. A run id that exists already is continued: its records
are loaded and new ones are numbered after them.
``History.load(path)`` restores a run, loading what is readable and warning about the rest.

The record format is ``rlnb.history.record``; the tables and exports are ``rlnb.history.views`` (``History``'s base),
built by ``rlnb.history.tables``; a run folder is
read back and opened again by ``rlnb.history.runs``; a session's recording options are checked by
``rlnb.history.recording``; the callbacks told of each change are ``rlnb.history.listeners``.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlnb import wire
from rlnb._input.checks import check_int
from rlnb.history.completion_log import CompletionLog, checked
from rlnb.history.figures import NO_STEP, logged_figures, stored
from rlnb.history.listeners import Listeners
from rlnb.history.record import FOLDS, Record, start_unseen
from rlnb.history.runconfig import check_annotation, session_starts
from rlnb.history.runs import RunContinuedWarning, RunFolder, continuation, open_run, read_run, warn_memory_only
from rlnb.history.steplog import StepLog
from rlnb.history.store import RunStore
from rlnb.history.tables import OpsTable
from rlnb.history.views import HistoryViews
from rlnb.text.prompts import escaped

__all__ = ["History", "RunContinuedWarning"]


class History(HistoryViews):
    """The operations of one session, in submission order, plus your own logged figures.

    Thread-safe: backends update records from their worker or poller threads. With ``store`` set
    every finished operation is on disk before anyone is told about it.
    """

    def __init__(self, store: RunStore | None = None, config: dict[str, Any] | None = None) -> None:
        self._records: list[Record] = []
        self._lock = threading.Lock()
        self._listeners: Listeners[Record] = Listeners()
        self._log_listeners: Listeners[dict[str, Any]] = Listeners()
        self._read_listeners: Listeners[None] = Listeners()  # told when its tables are read (``on_read``)
        self._logged: list[dict[str, Any]] = []
        self._logged_sessions: list[int | None] = []  # the session of the run that logged each row (``logged_rows``)
        self._completions = CompletionLog()
        self.store = store
        self.config: dict[str, Any] = dict(config or {})
        self.step_log = StepLog()
        """The steps table kept up to date as operations finish (``steps`` reads it; live views follow it)."""
        self._ops_table = OpsTable(self._lock)
        self._next_seq = 0
        self._last_finished = -math.inf  # when the latest operation was seen to end
        self.loaded_from: Path | None = None
        """The run folder ``load`` read this history from; None for one made by a session or by hand."""
        self.memory_only_said = False
        """Whether a ``RunStoreWarning`` said that this loaded history records in memory only (said once)."""
        self.ended_at: float | None = None
        """A loaded run's latest recorded time (POSIX seconds): operations it never saw finish end there in a
        timeline, not at the moment it is drawn. None for a live run."""

    @classmethod
    def create(cls, config: dict[str, Any], runs_dir: str | Path | None = None, run_id: str | None = None) -> History:
        """A History recording into ``<runs_dir>/<run_id>/`` (default ``./rlnb-runs/<new id>``).

        An existing run is continued: its records are loaded and new operations are numbered after them.
        One session at a time writes a run: a second one raises ``rlnb.RunLocked``."""
        store, config, earlier = open_run(config, runs_dir, run_id)
        history = cls(store, config)
        if earlier is not None:
            history._restore(earlier)  # the earlier session's unfinished operations never finish
            history.step_log.new_session()
        return history

    @classmethod
    def load(cls, path: str | Path) -> History:
        """Restore a run folder written by a (possibly killed) session. What cannot be read — a corrupt
        ``config.json``, a half-written line, a value of the wrong type — is left out with a warning."""
        run = read_run(path)
        history = cls(config=run.config)
        history._restore(run)  # a loaded run's unfinished operations never finish
        history.ended_at, history.loaded_from = run.ended_at, run.path
        return history

    def continue_for(self, config: dict[str, Any]) -> bool:
        """A new session set up with ``config`` continues this history (``history=``), by ``create``'s rules: the same
        optimizer (``ValueError``), a ``RunContinuedWarning`` naming what else changed, where it began in the config
        (the earlier sessions' setup kept) and a step of its own from its first operation. A closed one's run folder
        is locked again until it closes (``RunStore.reopen``): returns whether it was. One that holds nothing and no
        closed run is left as it is."""
        with self._lock:
            held, seq = bool(self._records or self._logged), self._next_seq
        store = self.store if self.store is not None and self.store.closed else None  # open: made for this session
        if not held and store is None:
            return False
        if store is not None:
            store.reopen()
        run_id = self.config.get("run_id")
        try:
            self.config = continuation(run_id if isinstance(run_id, str) else None, self.config, config, seq, held)
            if self.store is not None:
                self.store.write_config(self.config)
        except BaseException:
            if store is not None:
                store.close()  # the lock it took again is let go: nothing was sent
            raise
        self.step_log.new_session()
        return store is not None and not store.closed

    def _restore(self, run: RunFolder) -> None:
        self._records, self._logged, self._next_seq = run.records, run.logged, run.next_seq
        self._logged_sessions = run.sessions
        self._completions.add(run.completions)
        self._replay(unfinished=False)

    def _replay(self, unfinished: bool) -> None:
        """Feed every record and logged row to a fresh step log (each session that continued the run starts a step)."""
        self.step_log.reset()
        self.step_log.feed(self._records, self._logged, unfinished, session_starts(self.config))

    def steps_reached(self) -> int:
        """The highest step its completed optim-steps reached or a figure was logged at (0 for a new run)."""
        with self._lock:
            done = (
                r.step
                for r in self._records
                if r.kind == wire.OperationKind.OPTIM_STEP
                and r.status == wire.OperationStatus.COMPLETED
                and r.step is not None
            )
            return max(max(done, default=0), max((row["step"] for row in self._logged), default=0))

    def annotate(self, **fields: Any) -> None:
        """Add fields to the run's config (e.g. a sweep's label), on disk too. The run's own fields (its id and
        when it was created and continued) name its folder and order its sessions: they cannot be annotated."""
        self.config.update(check_annotation(fields))
        if self.store:
            self.store.write_config(self.config)

    @property
    def path(self) -> Path | None:
        """The run folder, if this history is recorded on disk."""
        return self.store.path if self.store else None

    def close(self) -> None:
        """Release the run folder's lock and close its files; the records stay readable in memory."""
        if self.store:
            self.store.close()

    def __len__(self) -> int:
        """The number of operations recorded."""
        return len(self._records)

    def __repr__(self) -> str:
        return f"<History {self.config.get('run_id', '')} {len(self)} operations>"

    @property
    def records(self) -> list[Record]:
        """A copy of every operation's record, in submission order (safe to read while a run goes on)."""
        with self._lock:
            return list(self._records)

    def tail(self, n: int) -> list[Record]:
        """The latest ``n`` records (cheap at any length). ``n`` is an integer >= 0: ``tail(-1)`` gave ``[]`` in
        silence, ``tail(2.5)`` a bare slicing TypeError."""
        n = check_int("history.tail: n", n, 0)
        with self._lock:
            return self._records[-n:] if n > 0 else []

    def on_record(self, callback: Callable[[Record], None]) -> Callable[[], None]:
        """Call ``callback(record)`` after every change (on the backend's thread); returns a function
        that unsubscribes."""
        return self._listeners.add(callback)

    def new(self, kind: str, step: int | None, params: dict[str, Any] | None, at: float) -> Record:
        """Start the record of a just-submitted operation."""
        with self._lock:
            rec = Record(seq=self._next_seq, kind=str(kind), step=step, params=params or {}, submitted_at=at)
            self._next_seq += 1
            # What was asked for; the local backend's output later replaces it with what was used.
            rec.learning_rate = float(rec.params.get("learning_rate", math.nan))
            rec.grad_clip_norm = float(rec.params.get("grad_clip_norm", math.nan))
            self._records.append(rec)
            self.step_log.submitted(rec)
        if self.store:
            self.store.write_record(rec)
        return rec

    def update(self, rec: Record, env: wire.Operation[Any], at: float) -> None:
        """Fold an operation envelope, seen at ``at``, into its record (its id, status, times, error and output),
        write it down, then tell the listeners."""
        with self._lock:
            was_done = rec.status in wire.TERMINAL_STATUSES
            if was_done:  # a finished record changed again: a cached frame may hold its old state
                self._ops_table.refinished()
            # the envelope folded into the record here: a function of its own would be 6 Python calls a step
            rec.op_id = env.id if env.id.isascii() else escaped(env.id)  # a lone surrogate as its escape
            rec.status = str(env.status)
            if env.status == wire.OperationStatus.RUNNING and math.isnan(rec.started_at):
                rec.started_at = at
            if env.status in wire.TERMINAL_STATUSES:
                rec.finished_at = at
                if math.isnan(rec.started_at):  # never seen RUNNING: between two polls of a remote session
                    rec.started_at = start_unseen(rec, at, self._last_finished)
                self._last_finished = max(self._last_finished, at)
            if env.error is not None:
                code, message = env.error.code, env.error.message
                rec.error_code, rec.error_message = (
                    None if code is None else str(code),
                    message and (message if message.isascii() else escaped(message)),
                )
            if env.output is not None:  # its figures, by its kind's ``FOLDS`` (keyed by members, found by the string)
                fold = FOLDS.get(rec.kind)
                if fold is not None:
                    fold(rec, env.output)
            if not was_done and rec.status in wire.TERMINAL_STATUSES:
                self.step_log.finished(rec)
            elif was_done:  # finished twice (rare): the step log starts over from the records
                self._replay(unfinished=True)
        if self.store and env.status in wire.TERMINAL_STATUSES:
            self.store.write_record(rec)  # RUNNING is not written: the final line carries started_at too
        if self._listeners.callbacks:  # none (most runs): no call at all; told outside the lock, as before
            self._listeners.tell(rec)

    def uncount_step(self, failed: Record) -> None:
        """What was submitted behind the FAILED optim-step ``failed`` counted a step: ``OpsTable.uncount``."""
        self._ops_table.uncount(self._records, failed, self.store)

    def log(self, step: int = NO_STEP, /, **metrics: float) -> None:
        """Record your own per-step figures (e.g. ``reward=0.4``) next to the operations. Refused with a
        ``ValueError``, before anything is recorded: a step that is not an integer >= 0, a figure that is not a
        real number, or one named like a column of the steps table (``loss`` is the forward-backwards' own)."""
        row = logged_figures(step, metrics)
        session = len(session_starts(self.config))  # as ``rlnb.sinks.points.Steps`` numbers the run's sessions
        with self._lock:
            self._logged.append(row)
            self._logged_sessions.append(session)
            self.step_log.logged(row)
        if self.store:
            self.store.write_metrics(stored(row, session))
        else:
            self._said_memory_only()
        if self._log_listeners.callbacks:
            self._log_listeners.tell_logging(row, "history.on_log")

    def _said_memory_only(self) -> None:
        if self.loaded_from is not None and not self.memory_only_said:
            self.memory_only_said = True
            warn_memory_only(self.loaded_from)

    def log_completions(self, step: int, rows: list[dict[str, Any]]) -> None:
        """Keep an RL step's completions (``prompt``, ``completion``, ``reward``, ``advantage``, ...; see
        ``rlnb.history.completion_log.COLUMNS``); call it before ``log`` so a live view sees both at once. A row
        the table cannot hold (a column missing, unknown or of another type, a negative ``length``) is a
        ``ValueError`` naming the row and the column, before anything is kept."""
        batch = checked(step, rows)
        self._completions.add(batch)
        if self.store:
            self.store.write_completions(batch)
        else:
            self._said_memory_only()

    def latest_completions(self) -> list[dict[str, Any]]:
        """The rows of the step whose completions were kept last (the same list until the next step's)."""
        return self._completions.latest()

    def on_log(self, callback: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
        """Call ``callback(row)`` after every ``log()`` (one that raises is logged, as ``on_record``'s); returns a
        function that unsubscribes."""
        return self._log_listeners.add(callback)

    def on_read(self, callback: Callable[[None], None]) -> Callable[[], None]:
        """Call ``callback(None)`` when ``steps``, ``df`` or ``logged`` is read (a plot, a table); returns a function
        that unsubscribes. The sinks say there a failure not said yet."""
        return self._read_listeners.add(callback)

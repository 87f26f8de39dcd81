"""Dispatching one sweep's trials: the plan of a list of configs, and the loop that keeps up to ``limit`` trials
running on their executors, stores each row as it comes, and stops (Stop, Ctrl-C) without losing one.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlnb.lifecycle import shutdown
from rlnb.lifecycle.ctrl_c import held
from rlnb.wire import TrialStatus

from .batched_executor import MAX_MEMBERS, BatchedExecutor
from .executors import ABANDONED, RAY_CANCELLED, Executor, RunStop, ThreadExecutor, route
from .options import ExecutorOptions, SearchOptions
from .rows import append_row
from .trial import TrialSpec, base_row, identity

Groups = list[tuple[list[dict[str, Any]], str]]
"""Rows by the executor they come from."""
Progress = Callable[[int, int, dict[str, Any]], None]
"""``progress(done, total, row)`` after each finished trial."""
POLL_S = 0.2
"""How long the driver waits for a finished trial before checking Stop again."""
STOP_WAIT_S = 60.0
"""How long a stopped sweep (``stop=``, a first Ctrl-C, an error) waits for a trial on this process's threads still
in its step — a reward that never returns — before it stops waiting, as a second Ctrl-C does: a Stop button has no
second press, and such a sweep waited for ever. Ray force-cancels its own trials (``ray_executor.STOP_GRACE``)."""
GAVE_UP = ABANDONED.replace("by a second interrupt", f"{STOP_WAIT_S:g} s after the stop")
ENDING = ("by a second interrupt", "as the process was told to end (a SIGTERM, or a Ctrl-C in its exit)")
HURRIED = ABANDONED.replace(*ENDING)
"""A trial's reason when the exit is hurried (``shutdown.hurried``): a kernel's Shut Down kills it 5 s after asking."""


class Plan:
    """A fixed list of trials (``configs`` × ``seeds``); on resume, those already finished are skipped."""

    def __init__(self, specs: list[TrialSpec], finished: set[int]):
        self.total = len(specs)
        self._specs = {s.trial: s for s in specs}
        self.done_before = sum(s.trial in finished for s in specs)  # a row of another trial is none of the plan's
        self._todo = collections.deque(s for s in specs if s.trial not in finished)

    def next_spec(self) -> TrialSpec | None:
        return self._todo.popleft() if self._todo else None

    def leftovers(self) -> list[TrialSpec]:
        left, self._todo = list(self._todo), collections.deque()
        return left

    def finish(self, row: dict[str, Any]) -> None:
        """Nothing to tell: a plan does not learn from results."""

    def expected(self, trial: int) -> dict[str, Any] | None:
        """The identifying columns of ``trial``'s row as the plan has them, or None for a trial it does not have."""
        spec = self._specs.get(trial)
        return identity(spec) if spec is not None else None

    def superseded(self) -> set[int]:
        """None: a plan runs a stopped trial again under its own number, whose new row replaces the old."""
        return set()


def start(
    folder: Path,
    source: Any,
    reporter: Any,
    where: ExecutorOptions,
    study: SearchOptions,
    stop: threading.Event,
    progress: Progress | bool,
) -> Run:
    """The run of one sweep with its executors (the thread pool is made when a trial first needs it), stopped by an
    Event of its own (``RunStop``) that reads the caller's ``stop``. A SIGTERM or SIGHUP from now on ends the process
    through the exit's steps (``shutdown.end_on_termination``), each trial's row recorded: the trials open their
    sessions on threads, where a session cannot take the signal, and the signal killed the process with their rows
    unwritten."""
    shutdown.end_on_termination()
    own = RunStop(stop)
    executors: dict[str, Executor] = {}
    if where.executor == "ray":
        from .ray_executor import RayExecutor

        executors["ray"] = RayExecutor(folder, reporter, address=where.address,
                                       resources_per_trial=where.resources_per_trial)  # fmt: skip
    one_at_a_time = where.executor == "auto" and study.search == "optuna"  # Optuna asks its trials one at a time
    wanted = "threads" if one_at_a_time else where.executor
    if wanted in ("auto", "batched"):
        executors["batched"] = BatchedExecutor(folder, own, reporter, max_members=where.max_concurrent or MAX_MEMBERS)
    capacity = {"ray": "ray", "auto": "batched", "batched": "batched"}.get(wanted)
    limit = where.max_concurrent or (executors[capacity].capacity() if capacity else 1)
    run = Run(folder, source, wanted, own, _progress(progress, source.total), limit, executors)
    run.make_threads = lambda: ThreadExecutor(where.max_concurrent or 1, folder, own, reporter)
    run.why_not = (
        "search='optuna' asks its trials one at a time" if one_at_a_time else f"executor={wanted!r} was asked for"
    )
    return run


class Run:
    """One call of ``sweep``: keeps ``limit`` trials running on their executors, records every row."""

    make_threads: Callable[[], Executor]
    """Builds the thread pool when a trial is first routed to it."""
    why_not: str
    """Every row's ``not_batched`` where batching was not wanted: ``executor=`` asked for another, or Optuna's trials
    under ``"auto"``, asked one at a time (not the user's ``executor='threads'``)."""

    def __init__(
        self,
        folder: Path,
        source: Any,
        wanted: str,
        stop: threading.Event,
        report: Progress,
        limit: int,
        executors: dict[str, Executor],
    ):
        self.folder, self.source, self.wanted, self.stop, self.report = folder, source, wanted, stop, report
        self.limit, self.executors = limit, executors
        self.rows: list[dict[str, Any]] = []
        self.waiting: list[tuple[TrialSpec, str]] = []
        """Trials taken from the source whose executor is full (``fill``), with that executor."""
        self.not_batched: dict[int, str] = {}
        """Trial → why it runs on a thread although batching was asked for."""
        self.interrupted = False
        """Whether a Ctrl-C stopped it (the table's ``attrs["interrupted"]``)."""

    def executor_for(self, name: str) -> Executor:
        if name not in self.executors:  # only "threads" is made on demand, when a trial is first routed there
            self.executors[name] = self.make_threads()
        return self.executors[name]

    def store(self, rows: list[dict[str, Any]], where: str) -> None:
        """Keep the rows (on disk at once) and tell the source; no user code runs here."""
        for row in rows:
            row["executor"] = where
            if self.wanted in ("auto", "batched"):
                row["not_batched"] = self.not_batched.get(row["trial"])
            else:  # the column is always there: the table's shape does not depend on the executor
                row["not_batched"] = self.why_not
            self.rows.append(row)
            append_row(self.folder, row)
            self.source.finish(row)

    def record(self, take: Callable[[], Groups]) -> None:
        """Take rows (a poll, a stop's trials) and store them all with a Ctrl-C held meanwhile (no user code runs
        there; a poll's wait holds it up to ``POLL_S``), then call the progress callback (which may raise) for each:
        a Ctrl-C in the callback, or between taking and storing, would drop every row not yet stored."""
        with held():
            groups = take()
            for rows, where in groups:
                self.store(rows, where)
        fresh = [row for rows, _ in groups for row in rows]
        done = self.source.done_before + len(self.rows) - len(fresh)
        for i, row in enumerate(fresh, 1):
            self.report(done + i, self.source.total, row)

    def stop_all(self, kill: bool = False) -> Groups:
        """Cancel what has not started (and with ``kill``, what runs); return those rows by executor."""
        out = [(ex.kill() if kill else ex.stop(), ex.name) for ex in list(self.executors.values())]
        waiting, self.waiting = self.waiting, []
        left = self.source.leftovers() if isinstance(self.source, Plan) else []
        for spec, where in waiting + [(spec, route(spec, self.wanted)[0]) for spec in left]:
            out.append(([base_row(spec, TrialStatus.STOPPED, "stopped before it started")], where))
        return out

    def drive(self) -> None:
        """Run until the source is used up or Stop; an interrupt stops, a second one kills."""
        stopped = exhausted = False
        interrupts, since = 0, 0.0
        while True:
            try:
                if self.stop.is_set() and not stopped:
                    stopped, since = True, time.monotonic()
                    self.record(self.stop_all)
                if shutdown.hurried() and not stopped:  # the process is ending: no trial waited for, none started
                    self.stop.set()
                    continue
                if stopped and (shutdown.hurried() or time.monotonic() - since > STOP_WAIT_S):
                    self.record(self.give_up)
                if not stopped:
                    exhausted = self.fill(exhausted)
                busy = [ex for ex in self.executors.values() if ex.running()]
                if not busy and (stopped or exhausted and not self.waiting):
                    return
                for ex in busy:
                    self.record(_poll(ex, POLL_S / len(busy)))
            except KeyboardInterrupt:
                interrupts += 1
                self.interrupted = True
                self.stop.set()
                if interrupts > 1:
                    self.record(lambda: self.stop_all(kill=True))

    def fill(self, exhausted: bool) -> bool:
        """Submit trials while fewer than ``limit`` are in flight (waiting ones too), each to its executor, the thread
        pool only while it has room: ``limit`` is the wanted executor's (32 for an ensemble), and trials that cannot be
        batched would run up to 32 at once beside it, where a pool runs ``max_concurrent`` or 1. A trial whose pool is
        full waits its turn (``waiting``) while later ones go on to theirs. Whether the source has no more."""
        for spec, where in list(self.waiting):
            if self.has_room(where):
                self.waiting.remove((spec, where))
                self.executor_for(where).submit(spec)
        while not exhausted and self.running() + len(self.waiting) < self.limit:
            spec = self.source.next_spec()
            if spec is None:
                return True
            where, why = route(spec, self.wanted)
            if why is not None:
                self.not_batched[spec.trial] = why
            if self.has_room(where):
                self.executor_for(where).submit(spec)
            else:
                self.waiting.append((spec, where))
        return exhausted

    def has_room(self, where: str) -> bool:
        """The wanted executor has ``limit``; the thread pool beside it (``route``'s other choice), its capacity."""
        ex = self.executor_for(where)
        return where != "threads" or ex.running() < ex.capacity()

    def running(self) -> int:
        return sum(ex.running() for ex in self.executors.values())

    def give_up(self) -> Groups:
        """``STOP_WAIT_S`` after a stop, or at once when the exit is hurried: each trial on this process's threads
        still in its step is a STOPPED row (``GAVE_UP``, ``HURRIED``), as a second Ctrl-C makes it (hurried, Ray's too:
        force-cancelled); a trial that already ended keeps its own row."""
        hurried = shutdown.hurried()
        said = {ABANDONED: HURRIED if hurried else GAVE_UP, RAY_CANCELLED: RAY_CANCELLED.replace(*ENDING)}
        return [
            ([{**r, "reason": said[r["reason"]]} if r.get("reason") in said else r for r in ex.kill()], ex.name)
            for ex in [ex for ex in self.executors.values() if (hurried or ex.name != "ray") and ex.running()]
        ]

    def drain(self) -> None:
        """After an error: stop, and store what comes back (running trials end at their next step). An
        interrupt stops waiting, as a second one does in ``drive``, and so does a hurried exit (a SIGTERM): a trial
        stuck in its step held the error, and the kernel, for ever. Each take and its storing hold a Ctrl-C, as in
        ``record``."""
        self.stop.set()
        since = time.monotonic()
        try:
            self.keep(self.stop_all)
            while self.running():
                if shutdown.hurried() or time.monotonic() - since > STOP_WAIT_S:
                    self.keep(self.give_up)
                for ex in [ex for ex in self.executors.values() if ex.running()]:
                    self.keep(_poll(ex, POLL_S))
        except KeyboardInterrupt:
            self.keep(lambda: self.stop_all(kill=True))

    def keep(self, take: Callable[[], Groups]) -> None:
        """``record`` without the progress callback: an error is on its way out."""
        with held():
            for rows, where in take():
                self.store(rows, where)


def _poll(ex: Executor, timeout: float) -> Callable[[], Groups]:
    """Taking the rows ``ex`` has finished (waiting up to ``timeout`` s), for ``record`` / ``keep``."""
    return lambda: [(ex.poll(timeout), ex.name)]


def _progress(progress: Progress | bool, total: int) -> Progress:
    if callable(progress):
        return progress
    if not progress:
        return lambda done, total, row: None
    from tqdm.auto import tqdm

    bar = tqdm(total=total, desc="sweep", unit="trial")

    def update(done: int, total: int, row: dict[str, Any]) -> None:
        bar.update(1)
        bar.set_postfix_str(f"{row['label']} seed {row['seed']}: {row['status'].lower()}")
        if done >= total:
            bar.close()

    return update

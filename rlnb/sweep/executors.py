"""Where trials run. An executor takes trials one at a time and hands back finished rows.

``route`` is the one place that decides, per trial, which executor runs it; the row's ``executor``
column records the decision: ``"batched"`` (compatible local trials as stacked ensembles in this
process, ``batched_executor.py``), ``"threads"`` (a thread pool in this process) or ``"ray"`` (Ray tasks,
``ray_executor.py``). A trial on a remote target always runs on a thread, since its compute is the
provider's; a local trial that cannot be batched (``rlnb.batched.why_not_batched``) runs on a thread
instead of in an ensemble.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from pathlib import Path
from typing import Any, Protocol

from rlnb.errors import describe
from rlnb.history.runconfig import LOCAL
from rlnb.lifecycle import shutdown
from rlnb.lifecycle.threads import Thread
from rlnb.wire import TrialStatus

from .trial import TrialSpec, base_row, run_trial

log = logging.getLogger("rlnb")
Reporter = Callable[[TrialSpec, int, float], "str | None"]
"""``reporter(spec, step, value)``: the search's verdict on a trial's progress (a prune reason or None)."""
ABANDONED = (
    "abandoned by a second interrupt: it was still in a step (a thread cannot be killed; it may go on writing its "
    "run folder, and what it returns is not recorded)"
)
"""The reason of a trial on this process's threads that a second interrupt stopped waiting for."""
RAY_CANCELLED = "cancelled by a second interrupt"
"""A Ray trial's reason when a second interrupt force-cancels it (``RayExecutor.kill``)."""
CLOSE_DEADLINE = 120.0
"""Seconds a sweep's end waits for its trials' threads (each closing its session) before it leaves them running."""


class Executor(Protocol):
    name: str

    def capacity(self) -> int:
        """How many trials it runs at once."""

    def submit(self, spec: TrialSpec) -> None: ...

    def poll(self, timeout: float) -> list[dict[str, Any]]:
        """Rows of trials that finished (waiting up to ``timeout`` s for the first)."""

    def running(self) -> int: ...

    def stop(self) -> list[dict[str, Any]]:
        """The sweep is stopping: cancel what has not started (their STOPPED rows are returned now);
        running trials end STOPPED at their next step and come back through ``poll``."""

    def kill(self) -> list[dict[str, Any]]:
        """A second interrupt: end running trials now if the executor can (their STOPPED rows)."""

    def close(self) -> None: ...


class RunStop(threading.Event):
    """A sweep's stop: set by the sweep (an interrupt, an error) and set whenever the caller's ``stop=`` is, which it
    reads and never sets (a Stop button's Event, reused, would stop every later sweep before it ran a trial)."""

    def __init__(self, caller: threading.Event):
        super().__init__()
        self._caller = caller

    def is_set(self) -> bool:
        return super().is_set() or self._caller.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Up to ``timeout`` s, in slices of ``WAIT_SLICE_S``: the caller's Event sets no condition of this one."""
        end = None if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            left = WAIT_SLICE_S if end is None else min(WAIT_SLICE_S, end - time.monotonic())
            if left <= 0:
                return False
            super().wait(left)
        return True


WAIT_SLICE_S = 0.1
"""How soon a wait on a ``RunStop`` sees the caller's Event set."""


class _ThreadControl:
    def __init__(self, stop: threading.Event, spec: TrialSpec, reporter: Reporter | None):
        self._stop, self._spec, self._reporter = stop, spec, reporter

    def stopping(self) -> bool:
        return self._stop.is_set()

    def wait(self, seconds: float) -> bool:
        return self._stop.wait(seconds)

    def report(self, step: int, value: float) -> str | None:
        return self._reporter(self._spec, step, value) if self._reporter is not None else None


class ThreadExecutor:
    """Trials on threads of this process (torch releases the GIL in its kernels), one per running trial: daemon
    threads, so that a trial abandoned in user code (a reward that never returns) does not hold the process's exit,
    as a ``ThreadPoolExecutor``'s workers would (they are joined at exit)."""

    name = "threads"

    def __init__(self, max_concurrent: int, runs_dir: Path, stop: threading.Event, reporter: Reporter | None):
        self._max = max(1, max_concurrent)
        self._runs_dir, self._stop, self._reporter = runs_dir, stop, reporter
        self._futures: dict[Future[dict[str, Any]], TrialSpec] = {}
        self._threads: list[Thread] = []
        self._abandoned = False

    def capacity(self) -> int:
        return self._max

    def running(self) -> int:
        return len(self._futures)

    def submit(self, spec: TrialSpec) -> None:
        control = _ThreadControl(self._stop, spec, self._reporter)
        fut: Future[dict[str, Any]] = Future()

        def run() -> None:
            if fut.set_running_or_notify_cancel():  # False: stopped before it started
                try:
                    fut.set_result(run_trial(spec, self._runs_dir, control))
                except BaseException as exc:  # noqa: BLE001 - run_trial makes every failure a row; a bug still is one
                    fut.set_result(base_row(spec, TrialStatus.FAILED, f"the trial's thread: {describe(exc)}"))

        thread = Thread(target=run, name=f"rlnb-sweep-{spec.trial}")
        self._futures[fut] = spec
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def poll(self, timeout: float) -> list[dict[str, Any]]:
        if not self._futures:
            return []
        done, _ = wait(self._futures, timeout=timeout, return_when=FIRST_COMPLETED)
        rows = []
        for fut in done:
            self._futures.pop(fut)
            rows.append(fut.result())  # always a row: a failure escaping run_trial is one too (else every row is lost)
        return rows

    def stop(self) -> list[dict[str, Any]]:
        rows = []
        for fut, spec in list(self._futures.items()):
            if fut.cancel():  # never started
                self._futures.pop(fut)
                rows.append(base_row(spec, TrialStatus.STOPPED, "stopped before it started"))
        return rows

    def kill(self) -> list[dict[str, Any]]:
        """Stop waiting for the running trials: a thread cannot be killed, and one stuck in user code (a reward
        that never returns) held the sweep, and every further Ctrl-C, for ever. Each is a STOPPED row now
        (a trial that already ended keeps its own row); what its thread returns later is dropped."""
        futures = self._futures.items()
        rows = [fut.result() if fut.done() else base_row(spec, TrialStatus.STOPPED, ABANDONED) for fut, spec in futures]
        self._abandoned |= not all(fut.done() for fut in self._futures)
        self._futures.clear()
        return rows

    def close(self) -> None:
        """Wait for the trials' threads to end, unless one was abandoned (it may never end)."""
        for fut in self._futures:
            fut.cancel()
        if not self._abandoned:
            join_trials(self._threads)


def join_trials(threads: list[Thread]) -> None:
    """Wait up to ``CLOSE_DEADLINE`` for a sweep's trial threads (each closing its session), no longer once the exit
    is hurried (a SIGTERM: a kernel's Shut Down kills the process 5 s after asking), and say those left running: a
    step stuck in user code."""
    end = time.monotonic() + CLOSE_DEADLINE
    for thread in threads:
        shutdown.join(thread, max(0.0, end - time.monotonic()))
    left = [thread for thread in threads if thread.is_alive()]
    if left:
        names = ", ".join(thread.name for thread in left)
        when = "as the process ends" if shutdown.hurried() else f"{CLOSE_DEADLINE:.0f} s after the sweep ended"
        log.warning("rlnb: sweep: %s still running %s; left running", names, when)


def route(spec: TrialSpec, wanted: str) -> tuple[str, str | None]:
    """The executor for one trial and, when it is not the one wanted, why: ``wanted`` (``sweep(executor=...)``,
    ``"batched"`` for ``"auto"``), except that a trial on a remote target runs on a thread — its compute is
    the provider's — and one that cannot be batched runs on a thread."""
    if wanted not in EXECUTORS:
        raise ValueError(f"executor must be one of {', '.join(EXECUTORS)}, got {wanted!r}")
    if spec.target != LOCAL:
        return "threads", None if wanted == "threads" else f"target {spec.target!r} runs its own compute"
    if wanted in ("auto", "batched"):
        from rlnb.batched import why_not_batched

        why = why_not_batched(spec.target, spec.session_options)
        return ("batched", None) if why is None else ("threads", why)
    return wanted, None


EXECUTORS = ("auto", "batched", "threads", "ray")

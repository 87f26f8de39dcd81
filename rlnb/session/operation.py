"""``Operation``: a handle on one submitted operation.

Submitting never waits: a Session returns an Operation at once, and the backend reports each status
change (``wire.OperationStatus``: pending, running, then completed or failed) through ``_update``.
``result()`` blocks until the end, ``await op`` does the same without blocking an event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from _thread import RLock, allocate_lock  # threading.RLock is a Python function that returns an RLock: a call
from collections.abc import Callable, Generator
from typing import Any, Generic, TypeVar

from rlnb import wire
from rlnb._input.checks import check_timeout
from rlnb.errors import OperationFailed, OperationTimeout

T = TypeVar("T")
log = logging.getLogger("rlnb")
BATON = 0.5
"""Seconds a waiter waits for ``_done`` before it looks at ``_ended`` again (``Operation._wait``)."""


class Operation(Generic[T]):
    """One operation of a session. ``result()`` returns the kind's wire output model
    (e.g. ``wire.ForwardBackwardResult``) or raises ``OperationFailed``."""

    def __init__(
        self,
        kind: wire.OperationKind,
        on_update: Callable[[wire.Operation[Any], float], None] | None = None,
        transform: Callable[[Any], T] | None = None,
        *,
        held: bool = False,
    ):
        self.kind = kind
        self._transform = transform
        self.id = ""
        self.submitted_at = time.time()
        self._env: wire.Operation[Any] | None = None
        """The latest report; None before the first (``envelope`` then makes a PENDING one: no envelope built per
        operation that its first report replaces before anyone reads it)."""
        self._ended = False
        """Whether the operation has ended: set once, under ``_lock``, once its outcome (``_output`` or ``_failure``) is
        set and before ``_done`` is released."""
        self._output: Any = None
        self._failure: Exception | None = None
        # Its end, where a ``concurrent.futures.Future`` (a Condition, in Python) cost 26 Python calls a step to make,
        # end and wait for: a plain lock, held until the end (C calls only).
        self._done = allocate_lock()
        self._done.acquire()
        self._awaited: list[concurrent.futures.Future[T]] | None = None  # ``await``'s futures, ended with it
        self._lock = RLock()  # ``_release`` replays held reports through ``_update``, holding it
        self._on_update = on_update
        self._held: list[tuple[wire.Operation[Any], float]] | None = [] if held else None
        """Reports kept back until ``_release`` (``held``)."""
        self._on_failed: Callable[[], None] | None = None
        """Called once its FAILED report is recorded (a session's optim-step: it made no step)."""
        self._reporter: Callable[[], bool] | None = None
        """Whether the caller is the thread that reports this operation (a session's worker or poller)."""
        self._owner: object = None
        """What the operation keeps alive while it is queued or runs (its session: the interpreter's exit still closes
        a session whose handle was let go)."""

    def __repr__(self) -> str:
        return f"<Operation {self.kind} {self.id} {wire.short_name(self.status)}>"

    @property
    def status(self) -> wire.OperationStatus:
        """The status last reported (``wire.OperationStatus``)."""
        env = self._env
        return wire.OperationStatus.PENDING if env is None else env.status

    @property
    def envelope(self) -> wire.Operation[Any]:
        """The latest operation envelope, as the API returns it (PENDING, with no id, before the backend's first
        report)."""
        env = self._env
        return wire.Operation(id="", status=wire.OperationStatus.PENDING) if env is None else env

    @property
    def error(self) -> wire.OperationError | None:
        """The API's error object (``code``, ``message``) once the operation has failed; None otherwise."""
        env = self._env
        return None if env is None else env.error

    def done(self) -> bool:
        """Whether the operation has ended (completed or failed); never blocks."""
        return self._ended

    def result(self, timeout: float | None = None) -> T:
        """Wait for the end; return the output, or raise ``OperationFailed`` / ``OperationTimeout``. ``timeout``:
        seconds >= 0, or None (or infinity) for no limit; anything else is a ``ValueError`` naming it."""
        limit = None if timeout is None else check_timeout("timeout", timeout)  # None: no call
        if limit is None and not self._ended and self._reporter is not None and self._reporter():
            raise RuntimeError(
                f"{self.kind} {self.id}: result() without a timeout on the thread that runs and reports the session's "
                "operations (in a history callback) would wait for ever, and hang the session: submit from the "
                "callback without waiting, and wait on another thread"
            )
        if not self._ended and not self._wait(limit):  # ``_ended`` is set after the outcome, on the ending thread
            raise OperationTimeout(f"{self.kind} {self.id} still {self.status} after {timeout} s")
        failure = self._failure
        if failure is None:
            return self._output
        try:
            raise failure
        finally:
            del self, failure  # as ``Future.result``: the traceback's frame keeps no cycle through the failure

    def _wait(self, limit: float | None) -> bool:
        """Whether the operation ended within ``limit`` seconds (None: no limit). ``_done`` is passed from waiter to
        waiter; one that a Ctrl-C stops between taking it and passing it on (or an end stopped between ``_ended`` and
        its release, on the thread that replays held reports) leaves it taken: the other waiters wait in chunks of
        ``BATON`` seconds and see ``_ended`` after one, instead of waiting for ever."""
        deadline = None if limit is None else time.monotonic() + limit
        while True:
            chunk = BATON if deadline is None else min(BATON, max(0.0, deadline - time.monotonic()))
            if self._done.acquire(True, chunk):
                self._done.release()  # for the next one waiting
                return True
            if self._ended:
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False

    def __await__(self) -> Generator[Any, None, T]:
        """``await op`` in asyncio code: the output, or ``OperationFailed``, without blocking the event loop.
        Cancelling the awaiting task (``asyncio.wait_for``'s timeout) stops the wait, not the operation: it goes
        on, and is recorded, as ``result()``'s timeout leaves it."""
        return asyncio.shield(asyncio.wrap_future(self._future())).__await__()

    def _future(self) -> concurrent.futures.Future[T]:
        """A future that ends with the operation (asyncio wraps only those): made for each ``await``, not for every
        operation."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._lock:
            if not self._ended:
                if self._awaited is None:
                    self._awaited = []
                self._awaited.append(future)
                return future
        _end(future, self._output, self._failure)
        return future

    def _release(self) -> None:
        """Take the reports held since the operation was made (``held=True``: a session holds them while it submits,
        under its lock, where a listener that submits in turn, on the PENDING report the submitting thread gets, waited
        for that lock for ever), in the order they came, and those after as they come."""
        with self._lock:
            held, self._held = self._held or [], None
            try:
                while held:
                    self._update(*held.pop(0))
            finally:  # a Ctrl-C in a listener on this thread: the reports after it still count (the result too)
                for env, at in held:
                    self._update(env, at)

    def _update(self, env: wire.Operation[Any], at: float | None = None) -> None:
        """Take a status report from the backend (any thread), seen at ``at`` (None: now; ``_release`` gives a held
        report's own); ignores reports after the end. One call a report: it records the report (``on_update``) and
        ends the operation itself."""
        with self._lock:
            if at is None:
                at = time.time()
            if self._held is not None:
                self._held.append((env, at))
                return
            if self._ended:
                return
            self._env = env
            self.id = env.id
            if self._on_update is not None:
                try:
                    self._on_update(env, at)
                except Exception:  # recording failed (a listener's bug): the result must still arrive
                    log.exception("recording %s %s, or telling its listeners, failed", self.kind, env.id)
                except BaseException:  # a listener's ``sys.exit()``: raised to the submitting thread's caller;
                    if self._reporter is None or not self._reporter():  # on the session's own thread, it would end
                        raise  # that thread, and every operation of the session would wait for ever
                    log.exception("recording %s %s, or telling its listeners, failed (on the thread that runs the "
                                  "session's operations)", self.kind, env.id)  # fmt: skip
            status = env.status
            if status != wire.OperationStatus.COMPLETED and status != wire.OperationStatus.FAILED:
                return
            failure: Exception | None = None
            output: Any = env.output
            if status == wire.OperationStatus.FAILED:
                err = env.error or wire.OperationError()
                failure = OperationFailed(err.code, err.message, operation_id=env.id, kind=self.kind)
                if self._on_failed is not None:
                    try:
                        self._on_failed()
                    except Exception:  # as ``on_update``'s
                        log.exception("recording %s %s, or telling its listeners, failed", self.kind, env.id)
            elif self._transform is not None and output is not None:
                try:
                    output = self._transform(output)
                except Exception as exc:  # noqa: BLE001 - reaches the caller of result(), not the backend
                    failure = exc
            self._output, self._failure = output, failure
            self._ended = True  # the one place: after the outcome, before ``_done`` lets ``result()`` read it
            self._done.release()
            for future in self._awaited or ():
                _end(future, output, failure)


def _end(future: concurrent.futures.Future[Any], output: Any, failure: Exception | None) -> None:
    """End an ``await``'s future with the operation's outcome (shielded: nothing cancels it)."""
    if failure is not None:
        future.set_exception(failure)
    else:
        future.set_result(output)

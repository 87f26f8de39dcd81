"""The worker: one thread per local session, running its operations strictly in submission order.

It owns the operation status machine (PENDING → RUNNING → COMPLETED / FAILED) and the rules that make
a session safe to use from a notebook:

* The thread never dies. Whatever an operation raises (a ``SystemExit`` from a model's forward too) ends *that*
  operation FAILED with a code: an
  ``OperationError``'s own, what ``classify`` makes of the exception (the engine's: ``INVALID_INPUT``,
  ``NON_FINITE_LOSS``, ``RESOURCE_EXHAUSTED`` for out-of-memory), else ``INTERNAL_ERROR`` with the
  exception's type and message; a listener that raises (say, a full disk under the run store) is logged
  and the operation goes on.
* The operations of one step (submitted inside ``rlnb._one_step.one_step``) after one of them FAILED fail unrun,
  with its code: an optim-step behind a failed forward-backward would apply part of the batch's gradients.
* ``close()`` stops accepting work, asks a running sample to stop between tokens, lets any other
  running operation finish, and fails everything still queued with ``SESSION_NOT_ACTIVE``.
* At interpreter exit every live worker is closed that way before Python tears down (a torch op still
  running on a daemon thread during finalisation aborts the process: "terminate called without an
  active exception"). So a script may exit with operations in flight and still exit 0, with every
  operation recorded as finished or failed.

Torch-free: what runs the operations is given (``run``), so ``rlnb.testing.FakeBackend`` is this worker
with fake operations.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any

from rlnb import wire
from rlnb._one_step import STEP, rest_failed
from rlnb.errors import NOT_RUN, Cancelled, OperationError
from rlnb.lifecycle import shutdown, threads
from rlnb.wire import Listener
from rlnb.wire import OperationErrorCode as Code
from rlnb.wire import OperationStatus as Status

log = logging.getLogger("rlnb")
EXIT_DEADLINE = 60.0
"""Seconds interpreter exit waits for each session's running operation."""


Run = Callable[[wire.OperationKind, Any, threading.Event], Any]
"""``run(kind, body, cancelled) -> output``: does one operation; may watch ``cancelled`` between steps."""
Classify = Callable[[BaseException], OperationError | None]
"""``classify(exc)``: the ``OperationError`` (code and message) an exception stands for; None for a bug."""


def _unknown(exc: BaseException) -> OperationError | None:
    return None


def failure(exc: BaseException, classify: Classify = _unknown) -> tuple[Code, str]:
    """The code and message an operation fails with when its work raised ``exc``."""
    known = exc if isinstance(exc, OperationError) else classify(exc)
    if known is not None:
        return known.code, str(known)
    return Code.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}"


_OPERATION = wire.Operation
_NEW, _SET = object.__new__, object.__setattr__
_WITH_OUTPUT, _WITHOUT_OUTPUT = frozenset({"id", "status", "output"}), frozenset({"id", "status"})


def _envelope(
    op_id: str, status: Status, output: Any = None, fields_set: frozenset[str] = _WITHOUT_OUTPUT
) -> wire.Operation[Any]:
    """``wire.Operation(id=op_id, status=status[, output=output])``, of values the worker made itself (a uuid, a
    member, what the operation returned: an ``Output`` field is ``Any``), built as pydantic's ``model_construct`` builds
    it, in one Python call: validating it ran ``Newer``'s validator too, and ``model_construct`` makes a dozen calls.
    ``fields_set``: the fields given (``to_json_dict`` writes those)."""
    env: wire.Operation[Any] = _NEW(_OPERATION)
    _SET(env, "__dict__", {"id": op_id, "status": status, "output": output, "error": None})
    _SET(env, "__pydantic_fields_set__", set(fields_set))
    _SET(env, "__pydantic_extra__", {})
    _SET(env, "__pydantic_private__", None)
    return env


_Job = tuple[wire.OperationKind, Any, str, Listener, object | None]
"""A queued operation: its kind, body, id, listener and step marker (``rlnb._one_step``; None outside a step) (a
tuple: a dataclass's ``__init__`` would be a Python call)."""


_VARIANT = "89ab"
"""The UUID variant's hex digit (RFC 4122: the top bits 10) for the 2 random bits left in it."""


class Worker:
    def __init__(self, run: Run, name: str, classify: Classify = _unknown):
        self._run_op, self._classify = run, classify
        self._queue: queue.SimpleQueue[_Job | threading.Event | None] = queue.SimpleQueue()  # C: cheap per op
        self._lock = threading.Lock()
        self.cancelled = threading.Event()
        self.closed = False
        self._broken: tuple[object, Code, str] | None = None  # a step whose operation FAILED: the rest fail unrun
        self._running: tuple[wire.OperationKind, str, Listener] | None = None  # None too once ``_abandon`` told it
        self._thread = threads.Thread(target=self._loop, name=name)
        self._thread.start()
        self._ident = self._thread.ident  # ``runs_here``: ``current_thread()`` and ``Thread.ident`` are Python calls
        _LIVE.add(self)

    def submit(self, kind: wire.OperationKind, body: Any, listener: Listener) -> None:
        """Queue one operation and report it PENDING (or FAILED at once if the worker is closed). Its id: a version-4
        UUID's string, from ``os.urandom`` as ``uuid.uuid4`` makes it, here (``uuid4``, ``UUID.__init__`` and
        ``UUID.__str__`` were three Python calls an operation, a function of its own one)."""
        h = os.urandom(16).hex()
        op_id = f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[int(h[16], 16) & 3]}{h[17:20]}-{h[20:]}"
        env = _envelope(op_id, Status.PENDING)
        with self._lock:
            try:  # each report's listener called here, not through a helper: a Python call less a report
                listener(env)
            except Exception:  # noqa: BLE001 - a listener's failure (e.g. disk full) must not stop the session
                _listener_failed(kind, env)
            if self.closed:
                _fail(kind, op_id, listener, Code.SESSION_NOT_ACTIVE, "the session is stopped")
                return
            self._queue.put((kind, body, op_id, listener, STEP.get()))

    def runs_here(self) -> bool:
        """Whether the caller is this worker's thread (a listener it is telling): waiting there for an operation
        would wait for ever."""
        return threading.get_ident() == self._ident

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until everything queued so far has finished; False if ``timeout`` passed first."""
        if self.closed:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        done = threading.Event()
        self._queue.put(done)  # set by the thread once everything queued before it has finished
        return done.wait(timeout)

    def close(self, timeout: float | None = None) -> bool:
        """Stop: refuse new work, interrupt a running sample, fail the queue. False if the running
        operation was still going after ``timeout``. At interpreter exit (a session's close among the exit's
        steps) no limit is ``EXIT_DEADLINE``: an operation, or a listener, that never returns would hang the exit."""
        ending = shutdown.exiting() or shutdown.hurried()  # hurried: a SIGTERM, the close of a ``with`` block it ended
        if timeout is None and ending:
            timeout = EXIT_DEADLINE
        with self._lock:
            if not self.closed:
                self.closed = True
                self.cancelled.set()
                self._queue.put(None)
        if threading.current_thread() is self._thread:  # closed from a listener on the worker itself
            return True
        if timeout is not None and ending:  # a SIGTERM (a kernel's Shut Down) ends the wait, failing the rest
            running = self._running  # said if it does not end at once: a silent minute reads as a hang
            what = _waited_for(running[0], self._thread.name) if running is not None else ""
            if not shutdown.join(self._thread, timeout, what) and shutdown.hurried():
                self._abandon()
            return not self._thread.is_alive()
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _abandon(self) -> None:
        """A hurried exit: the running operation and those queued behind it FAILED now, recorded before the process
        ends, not left PENDING for good (the thread, if it ever returns, reports nothing more)."""
        with self._lock:
            running, self._running = self._running, None
        if running is not None:
            _fail(*running, Code.SESSION_NOT_ACTIVE, str(Cancelled()))
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if isinstance(job, tuple):
                _fail(job[0], job[2], job[3], Code.SESSION_NOT_ACTIVE, NOT_RUN)
            elif job is not None:
                job.set()
        self._queue.put(None)

    # -- the thread --------------------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                break
            if isinstance(job, threading.Event):
                job.set()
                continue
            kind, body, op_id, listener, step = job
            if self.closed:  # stopped while this waited in the queue: it never runs
                _fail(kind, op_id, listener, Code.SESSION_NOT_ACTIVE, NOT_RUN)
                continue
            if step is not None and self._broken is not None and self._broken[0] is step:
                _fail(kind, op_id, listener, self._broken[1], self._broken[2])  # an optim-step on part of the batch
                continue
            self._running = (kind, op_id, listener)
            env = _envelope(op_id, Status.RUNNING)  # a new one per change: a listener may keep the last
            try:
                listener(env)
            except Exception:  # noqa: BLE001 - as in ``submit``
                _listener_failed(kind, env)
            try:
                output = self._run_op(kind, body, self.cancelled)
            except BaseException as exc:  # noqa: BLE001 - any failure is the operation's, never the worker's (a
                code, said = failure(exc, self._classify)  # SystemExit ended it in silence)
                env = wire.Operation.failed(op_id, code, said)
                if step is not None:
                    self._broken = (step, code, rest_failed(kind, said, sent=True))
            else:
                env = _envelope(op_id, Status.COMPLETED, output, _WITH_OUTPUT)
            with self._lock:
                told, self._running = self._running is None, None
            if told:  # abandoned at a hurried exit: FAILED already
                continue
            try:
                listener(env)
            except Exception:  # noqa: BLE001 - as in ``submit``
                _listener_failed(kind, env)
        _LIVE.discard(self)


def _waited_for(kind: wire.OperationKind, name: str) -> str:
    """What an exit's close waits for, in words: a sample is stopped (``cancelled``: it ends at its next token), any
    other operation runs to its end."""
    if kind == wire.OperationKind.SAMPLE:
        return f"stopping the running sample ({name}; it ends at its next token)"
    return f"finishing the running {kind} ({name})"


def _fail(kind: wire.OperationKind, op_id: str, listener: Listener, code: Code, message: str) -> None:
    """Report an operation FAILED without running it (the worker is closed, or its step's earlier one failed)."""
    env = wire.Operation.failed(op_id, code, message)
    try:
        listener(env)
    except Exception:  # noqa: BLE001 - as in ``submit``
        _listener_failed(kind, env)


def _listener_failed(kind: wire.OperationKind, env: wire.Operation[Any]) -> None:
    """Log the error a listener raised on an operation's report ``env``; the operation goes on."""
    log.exception("rlnb: a listener failed on %s %s; the operation goes on", kind, env.status)


_LIVE: weakref.WeakSet[Worker] = weakref.WeakSet()


def _close_all() -> None:
    """Interpreter exit: close every live worker (see the module docstring)."""
    for worker in list(_LIVE):
        if not worker.close(EXIT_DEADLINE) and not shutdown.hurried():  # hurried: it is recorded FAILED, and said so
            log.warning("rlnb: an operation was still running %.0f s after exit began", EXIT_DEADLINE)


shutdown.on_exit("workers", _close_all)

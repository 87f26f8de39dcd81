"""The order of one session's operations: each is submitted under one lock, so that its step number, its record in
the history and its place in the backend's queue agree; an optim-step that FAILED reached no step, so the records
after it are counted down (``History.uncount_step``); and ``wait`` waits for every one of them within one deadline.
"""

from __future__ import annotations

import functools
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from rlnb import wire
from rlnb._input.checks import check_timeout
from rlnb.errors import OperationFailed, OperationTimeout
from rlnb.history import History
from rlnb.lifecycle import ctrl_c
from rlnb.session.backend import Backend
from rlnb.session.operation import Operation
from rlnb.wire import OperationKind as Kind


class Submissions:
    """The operations a ``Session`` submitted, in order. ``steps_submitted``: its optim-steps so far, from the step the
    session started at; ``steps_failed``: those of them that FAILED."""

    def __init__(self, backend: Backend, history: History, session_id: str, steps: int):
        self.backend, self.history, self.session_id = backend, history, session_id
        self.steps_submitted = steps
        self.steps_failed, self._failed_lock = 0, threading.Lock()  # optim-steps that FAILED: no step counted
        self._lock = threading.Lock()
        self._pending: deque[Operation[Any]] = deque()

    def submit(self, kind: Kind, body: wire._Model | None, owner: object, params: dict[str, Any] | None = None,
               transform: Any = None, mismatch: Callable[[Any], str | None] | None = None,
               ) -> Operation[Any]:  # fmt: skip
        """``owner``: what the operation keeps alive until it ends (its ``Session``); ``mismatch(output)``: why a
        COMPLETED output does not answer the request; it then ends FAILED, saying so."""
        op: Operation[Any] = Operation(kind, transform=transform, held=True)  # its listeners hear of it once the lock
        op._reporter = getattr(self.backend, "runs_here", None)  # is released: they may submit too
        op._owner = owner
        pressed = ctrl_c.hold()
        try:
            with self._lock:  # one order for the step counter, the history and the backend queue
                with self._failed_lock:  # a failure counted and its records lowered (``step_failed``) at once
                    rec = self.history.new(kind, self.steps_submitted - self.steps_failed, params, at=op.submitted_at)
                # Each report goes to the history at once (C: a partial, where a lambda was a Python call a report)
                op._on_update = functools.partial(self.history.update, rec)
                if kind == Kind.OPTIM_STEP:
                    op._on_failed = functools.partial(self.step_failed, rec)
                # returns at once (a remote backend POSTs from its own thread); input it cannot even encode
                # raises here, recorded FAILED
                self.backend.submit(kind, body, op._update if mismatch is None else _checked(op, mismatch))
                if kind == Kind.OPTIM_STEP:
                    self.steps_submitted += 1
                # operations end in order: O(1) amortised; ``_ended``, not ``done()`` (4 Python calls, the future's
                # lock): one that ended a moment ago stays until the next submission, and ``wait`` finds it done
                while self._pending and self._pending[0]._ended:
                    self._pending.popleft()
                self._pending.append(op)
        finally:
            if pressed is not None:  # ``ctrl_c.restore`` inline (a submission's calls are counted), before the
                ctrl_c.unhold()  # listeners: one that raises (a Ctrl-C in a redraw) must not leave the hold for good
            try:
                op._release()
            finally:
                if pressed:  # held while the operation was recorded and handed over: raised now that it is whole,
                    raise KeyboardInterrupt  # the error in flight, if any, as its context (never lost to it)
        return op

    def step_failed(self, rec: Any) -> None:
        """The optim-step ``rec`` FAILED (its report recorded, or that failed): it reached no step, so what follows it
        feeds the step it failed to make, what is submitted from now on and what was submitted behind it alike
        (``History.uncount_step``)."""
        with self._failed_lock:  # its report may come on the worker's thread or the submitting one
            self.steps_failed += 1
            self.history.uncount_step(rec)

    def wait(self, timeout: float | None = None) -> None:
        """``Session.wait``: every operation submitted so far finished, or ``OperationTimeout`` after ``timeout`` s."""
        limit = check_timeout("timeout", timeout)
        with self._lock:
            pending = list(self._pending)
        deadline = None if limit is None else time.monotonic() + limit
        # The newest first: operations end in submission order, so the rest have ended by then and this
        # thread wakes once, not once per operation (each wake-up takes the GIL from the worker mid-step).
        for op in pending[-1:] + pending[:-1]:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                op.result(left)
            except OperationFailed:
                continue
            except OperationTimeout:
                unfinished = sum(not o.done() for o in pending)
                raise OperationTimeout(
                    f"session {self.session_id}: {unfinished} of {len(pending)} operations still unfinished after "
                    f"{timeout} s"
                ) from None


def _checked(op: Operation[Any], mismatch: Callable[[Any], str | None]) -> wire.Listener:
    """``op``'s listener, for which a COMPLETED output that ``mismatch`` refuses is FAILED (recorded so too)."""

    def listener(env: wire.Operation[Any]) -> None:
        try:
            done = env.status == wire.OperationStatus.COMPLETED and env.output is not None
            why = mismatch(env.output) if done else None
        except Exception as exc:  # noqa: BLE001 - a check that raises must not leave the operation waiting
            why = f"its output could not be checked: {type(exc).__name__}: {exc}"
        op._update(env if why is None else wire.Operation.failed(env.id, None, why))

    return listener

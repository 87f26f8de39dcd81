"""Sending a remote session's operations from one thread, so that a submission returns at once.

A POST may take up to the client's deadline (retries included), so it must not run on the notebook's thread, nor under
the session's lock. ``RemoteBackend.submit`` encodes the operation (bad input raises there, before anything is queued)
and hands it to the ``Sender``, whose thread POSTs operations one at a time in submission order — the server sees them
in that order — reports each envelope and gives it to the ``Poller``. A POST that finally fails fails its own operation,
with the API error's code and message (scrubbed of keys); one that got no answer at all also fails the operations queued
behind it, unsent: the server cannot be reached, and each would wait a whole deadline in turn. An optim-step refused
with a 4xx says that the gradients accumulated for it stay for the next one (``GRADIENTS_KEPT``, the engine's words),
unless an earlier try of its POST, retried, may have been taken (``MAYBE_TAKEN``), as may one with no answer, a 5xx
or an unreadable 2xx (``MAYBE_RAN``, ``errors.may_have_acted``); a forward-backward whose POST may have run says that
its gradients may wait for the next one (``MAYBE_ACCUMULATED``). One refused, or not sent, of a step submitted whole
(``rlnb._one_step``) fails the rest of that step unsent, with its code, as does one answered with an earlier
operation's id: the optim-step behind such a forward-backward would count a step that applied none of its gradients.

Nothing bounds the queue (a submission returns at once, whatever the server does), so a loop that submits faster than
the server takes its POSTs holds every encoded body until it is sent: past ``QUEUE_WARN_BYTES`` queued, a session warns
once, saying how to let the server catch up.
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections import deque
from dataclasses import dataclass
from typing import Any

from rlnb import _one_step, wire
from rlnb.errors import (
    GRADIENTS_KEPT,
    SUBMIT_AGAIN,
    APIConnectionError,
    APIError,
    APIStatusError,
    APITimeoutError,
    may_have_acted,
    user_stacklevel,
)
from rlnb.lifecycle import shutdown, threads
from rlnb.remote.client import APIClient, PreparedOperation
from rlnb.remote.poller import Poller
from rlnb.wire import Listener

log = logging.getLogger("rlnb")

QUEUE_WARN_BYTES = 256 * 2**20
"""Bytes of encoded bodies queued and not sent yet past which a session warns (once): 500 queued batches of 0.5 MB
held 250 MB, silently."""

Code = wire.OperationErrorCode
_STATUS_CODES = {
    400: Code.INVALID_INPUT,
    413: Code.INVALID_INPUT,
    422: Code.INVALID_INPUT,
    404: Code.SESSION_NOT_ACTIVE,
    429: Code.RESOURCE_EXHAUSTED,
}
"""The operation error code of a POST refused with this status (>= 500: ``INTERNAL_ERROR``)."""


def refusal_code(exc: APIError) -> wire.OperationErrorCode | None:
    """The operation error code for a POST that failed with ``exc``: the server's own code when it is an
    operation error code, else one that fits the status (None when none does, e.g. a 401)."""
    if isinstance(exc, APIStatusError):
        if exc.code:
            try:
                return wire.error_code(exc.code)
            except ValueError:
                pass
        return Code.INTERNAL_ERROR if exc.status_code >= 500 else _STATUS_CODES.get(exc.status_code)
    return Code.TIMEOUT if isinstance(exc, APITimeoutError) else None


@dataclass
class Queued:
    op: PreparedOperation
    listener: Listener
    step: object | None = None
    """The step it was submitted in (``_one_step.STEP.get()``), or None."""


def tell(item: Queued, env: wire.Operation[Any]) -> None:
    try:
        item.listener(env)
    except Exception:  # a listener's bug must not stop the sender for every other operation
        log.exception("listener of %s raised", item.op.kind)


class Sender:
    """The send thread of one session. ``put`` queues an operation; ``close`` stops taking new ones and
    returns those never sent; ``join`` waits for the POST in flight and returns it if it is still going."""

    def __init__(self, client: APIClient, session_id: str, poller: Poller):
        self.client, self.session_id, self._poller = client, session_id, poller
        self._queue: deque[Queued] = deque()
        self._queued_bytes = 0
        self._warned = False
        self._current: Queued | None = None
        self._ids: set[str] = set()
        """The ids the server gave this session's operations (smaller than the history's record of each)."""
        self._broken: tuple[object, wire.OperationErrorCode, str] | None = None
        """The last step one of whose operations was not sent, and why: the rest of it fails unsent."""
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = threads.Thread(target=self._loop, name=f"rlnb-send-{session_id}")
        self._thread.start()

    def runs_here(self) -> bool:
        """Whether the caller is this object's own thread (a listener it is telling), which it cannot join."""
        return threading.current_thread() is self._thread

    def put(self, op: PreparedOperation, listener: Listener, step: object | None = None) -> bool:
        """Queue ``op`` (of ``step``, if one: ``_one_step.STEP.get()``); False when the sender is closed. Warns, once,
        when more than ``QUEUE_WARN_BYTES`` wait."""
        with self._cond:
            if self._stopping:
                return False
            self._queue.append(Queued(op, listener, step))
            self._queued_bytes += _size(op)
            warn = not self._warned and self._queued_bytes > QUEUE_WARN_BYTES
            self._warned |= warn
            count, held = len(self._queue), self._queued_bytes
            self._cond.notify()
        if warn:
            warnings.warn(
                f"rlnb: session {self.session_id} has {count} operations ({held / 2**20:.0f} MiB of bodies) queued and "
                "not sent yet: the server takes them slower than they are submitted, and each is held in memory until "
                "it is sent. Call session.wait() now and then to let it catch up (warned once per session, past "
                f"rlnb.remote.sender.QUEUE_WARN_BYTES, {QUEUE_WARN_BYTES / 2**20:.0f} MiB)",
                RuntimeWarning,
                stacklevel=user_stacklevel(),
            )
        return True

    def close(self) -> list[Queued]:
        """Take no more operations; the ones queued and not sent yet (the caller settles them)."""
        with self._cond:
            self._stopping = True
            unsent, self._queue, self._queued_bytes = list(self._queue), deque(), 0
            self._cond.notify_all()
        return unsent

    def join(self, timeout: float) -> Queued | None:
        """Wait up to ``timeout`` seconds for the POST in flight, less once a SIGTERM hurried the exit; the operation
        still being sent, or None."""
        shutdown.join(self._thread, timeout)
        with self._cond:
            return self._current

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopping:
                    self._cond.wait()
                if not self._queue:
                    return
                item = self._current = self._queue.popleft()
                self._queued_bytes -= _size(item.op)
            broken = self._broken
            if item.step is not None and broken is not None and broken[0] is item.step:
                tell(item, wire.Operation.failed("", broken[1], broken[2]))
            else:
                self._send(item)
            with self._cond:
                self._current = None

    def _send(self, item: Queued) -> None:
        try:
            env = self.client.send_operation(self.session_id, item.op, self._ids)
        except APIError as exc:
            self._refused(item, exc)
        except BaseException as exc:  # noqa: BLE001 - e.g. the client was closed under a POST close() gave up on, a
            # hook's SystemExit (it ended this thread in silence, and every later operation stayed PENDING)
            # scrubbed: a transport's own error may quote the request's headers (the history keeps this text)
            why = self.client.redact(f"the operation could not be sent: {type(exc).__name__}: {exc}")
            tell(item, wire.Operation.failed("", None, why))
            self._break(item, None, why)
        else:
            self._sent(item, env)

    def _break(self, item: Queued, code: wire.OperationErrorCode | None, why: str, sent: bool = False) -> None:
        """``item`` failed at its POST (``sent``: answered, but not as itself): the rest of its step, if it is one's,
        fails unsent with ``code`` (else ``UNSPECIFIED``), saying why."""
        if item.step is not None:
            said = _one_step.rest_failed(item.op.kind, why, sent=sent)
            self._broken = (item.step, code or Code.UNSPECIFIED, said)

    def _sent(self, item: Queued, env: wire.Operation[Any]) -> None:
        if env.id in self._ids:  # polled, it would get the earlier one's status and result as its own
            why = (
                f"the server answered this {item.op.kind} with the id of an earlier operation, {env.id}, also when "
                f"asked again under its Idempotency-Key ({self.client.max_retries} times): it may not have run it (a "
                "body-keyed cache or deduplication), and that operation's result is not this one's"
            )
            tell(item, wire.Operation.failed("", None, why))
            self._break(item, None, why, sent=True)  # an optim-step behind it would step on gradients not its own
            return
        self._ids.add(env.id)
        tell(item, env)
        if env.status not in wire.TERMINAL_STATUSES and not self._poller.add(item.op.kind, item.listener, env):
            # close() ran meanwhile and no longer polls: settle it here
            why = "the session was closed before this finished"
            tell(item, wire.Operation.failed(env.id, Code.SESSION_NOT_ACTIVE, why))

    def _refused(self, item: Queued, exc: APIError) -> None:
        message = self.client.redact(str(exc))
        ran = may_have_acted(exc)
        if item.op.kind == wire.OperationKind.OPTIM_STEP:
            message += _after_refusal(exc)
        elif ran and item.op.accumulates:  # its gradients would stay for the next optim-step
            message += MAYBE_ACCUMULATED
        tell(item, wire.Operation.failed("", refusal_code(exc), message))
        self._break(item, refusal_code(exc), message, sent=ran)
        if isinstance(exc, APIConnectionError):
            with self._cond:
                behind, self._queue, self._queued_bytes = list(self._queue), deque(), 0
            for other in behind:
                why = f"not sent: the POST of an earlier operation got no answer ({message})"
                tell(other, wire.Operation.failed("", None, why))


MAYBE_TAKEN = (
    "; an earlier try of this POST got no answer, or a 5xx, and was retried: this step may have been taken (its "
    "gradients applied): check session.step before you submit an optim-step again"
)
"""The end of an optim-step's message refused after such a retry: a step taken twice applies other gradients."""

MAYBE_RAN = (
    "; a try of its POST was sent and got no answer, a 5xx or an answer rlnb could not read: this step may have been "
    "taken (its gradients applied): check session.step before you submit an optim-step again"
)
"""The end of an optim-step's message whose last try may have been taken: submitted again, it stepped twice."""

MAYBE_ACCUMULATED = (
    "; a try of its POST was sent and got no answer, a 5xx or an answer rlnb could not read, so the server may have "
    "run it: its gradients would then be accumulated there, and the next optim-step would apply them with its own "
    "(this batch sent again would count twice; the API has no call that drops them)"
)
"""The end of a forward-backward's message (``wire.ACCUMULATING``) whose POST may have been run: the next optim-step
applies its gradients with its own, and a user who sends the batch again counts it twice, unless told."""


def _after_refusal(exc: APIError) -> str:
    """What an optim-step refused with ``exc`` says of its step: that nothing changed and its gradients wait on the
    server (the forward-backwards before it were taken), or that it, or an earlier try, may have taken it."""
    if not _took_nothing(exc):
        return MAYBE_RAN if may_have_acted(exc) else ""
    if exc.earlier_may_have_acted:
        return MAYBE_TAKEN
    return GRADIENTS_KEPT + SUBMIT_AGAIN


def _took_nothing(exc: APIError) -> bool:
    """Whether the try of a POST answered with ``exc`` surely took nothing on a session that lives on: a 4xx, but a 404
    (no such session: nothing to apply its gradients) and a 409 (its Idempotency-Key already used: a retry whose first
    try the server may have taken). No answer, or a 5xx, may have acted."""
    return isinstance(exc, APIStatusError) and 400 <= exc.status_code < 500 and exc.status_code not in (404, 409)


def _size(op: PreparedOperation) -> int:
    """The bytes a queued operation holds: its body, and its upload when it has one."""
    return len(op.content) + len(op.upload or b"")

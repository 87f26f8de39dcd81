"""Following a remote session's operations until each ends: one thread, few requests, quick news.

Three strategies, chosen from what the server offers (``APIClient.features``):

* **Adaptive polling** (any server, e.g. Together): every operation in flight is polled on its own
  schedule, ``poll_interval`` after its last status change — 10 ms at first, then 10 % of the time
  already waited, at most ``poll_max``.
* **Oldest first** (a server that runs a session's operations in order): only the oldest unfinished
  operation is polled; the next one cannot finish before it, and starts as it ends.
* **Long-poll** (rlnb serve): the oldest unfinished operation's GET waits on the server until its
  status changes, so each change is known within a round trip, with one GET per change. One that comes back
  unchanged before half its wait was not held (a proxy's, or a server's that does not long-poll): the next
  waits ``poll_interval``, as a plain poll.

A poll that gets no answer (or a 5xx / 429 after the client's retries) is tried again; once every poll of
the session has failed for ``poll_failure_window`` seconds, counted from the first failing poll's start
(the server died, or answers 502 to everything), every operation in flight fails ``TIMEOUT`` at once, when
the window ends (a poll's retries end with it),
saying so: polls go one at a time, and one per operation against a server that never answers would
take a whole deadline each. A 404 — the server no longer knows the
operation, e.g. it restarted without its state — fails it at once (``SESSION_NOT_ACTIVE``). An answer that cannot be
read (not JSON, not an envelope of this operation) is polled again, up to the client's ``max_retries`` in a row.

How long it waits (``PollOptions``, ``poll_interval``) is ``rlnb.remote.waiting``'s.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Any

from rlnb import wire
from rlnb.errors import APIConnectionError, APIError, APIStatusError
from rlnb.lifecycle import shutdown, threads
from rlnb.remote.client import APIClient
from rlnb.remote.payload_calls import PayloadGone
from rlnb.remote.waiting import LONG_POLL_WAIT, PollOptions, poll_interval
from rlnb.wire import Listener

log = logging.getLogger("rlnb")


@dataclass
class InFlight:
    kind: wire.OperationKind
    listener: Listener
    env: wire.Operation[Any]
    deadline: float
    """time.monotonic() past which the poller gives up."""
    changed: float
    """time.monotonic() of the last status change (or the submission)."""
    due: float
    """time.monotonic() of the next poll."""
    ended: bool = False
    """Reported FAILED with the whole session (``Poller._fail_all``): no longer polled."""
    unread: int = 0
    """Polls in a row whose answer could not be read (``Poller._poll``)."""


class Poller:
    """The poll thread of one session. ``add`` an operation after its POST; ``stop`` ends the thread and
    returns what was still in flight (for the caller to settle)."""

    def __init__(self, client: APIClient, session_id: str, options: PollOptions):
        self.client, self.session_id = client, session_id
        self.poll_min, self.poll_max = options.poll_min, options.poll_max
        self.operation_timeout, self.failure_window = options.operation_timeout, options.poll_failure_window
        self._failing_since: float | None = None  # monotonic time of the first of the polls failing in a row
        self._last_failure: APIError | None = None  # what the latest of them said (a poll cut short says less)
        self._inflight: list[InFlight] = []  # submission order
        self._cond = threading.Condition()
        self._stopping = False
        self._said: set[str] = set()  # the statuses newer than rlnb's list warned of (``_newer``)
        self._head_only = False  # polling the oldest operation alone, long-polled (set and read by the poll thread)
        self._thread = threads.Thread(target=self._loop, name=f"rlnb-poll-{session_id}")
        self._thread.start()

    def runs_here(self) -> bool:
        """Whether the caller is this object's own thread (a listener it is telling), which it cannot join."""
        return threading.current_thread() is self._thread

    @property
    def in_order(self) -> bool:
        return self.client.features.in_order

    def add(self, kind: wire.OperationKind, listener: Listener, env: wire.Operation[Any]) -> bool:
        """Follow ``env`` until it ends; False when the poller has already stopped."""
        now = time.monotonic()
        op = InFlight(kind, listener, env, now + self.operation_timeout, now, now + self.poll_min)
        self._newer(op, env.status)
        with self._cond:
            if self._stopping:
                return False
            self._inflight.append(op)
            self._cond.notify()
        return True

    def stop(self, wait: bool = True) -> list[InFlight]:
        """Stop polling; what was in flight, no longer reported by this poller. ``wait=False`` does not wait
        for a poll in flight (the server cannot be reached: it may hang until its deadline), nor does a wait once a
        SIGTERM hurried the exit (a kernel's SIGKILL comes 2.5 s later)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if wait:  # the poll in flight ends by its call's deadline
            shutdown.join(self._thread, math.inf)
        with self._cond:
            left, self._inflight = self._inflight, []
            for op in left:
                op.ended = True
        return left

    def _loop(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._stopping:
                        return
                    now = time.monotonic()
                    # A head in a status newer than rlnb's list may have ended: every operation, in plain polls
                    # (polling only the head, a session would stall behind it until its operation_timeout).
                    self._head_only = self.in_order and _known(self._inflight[:1])
                    targets = self._inflight[:1] if self._head_only else self._inflight
                    due = [op for op in targets if op.due <= now]
                    if due:
                        break
                    self._cond.wait(min(op.due for op in targets) - now if targets else None)
            for op in due:
                if self._stopping:
                    return
                if not op.ended:
                    try:
                        self._poll(op)
                    except BaseException as exc:  # noqa: BLE001 - the thread must live: it polls every other operation
                        if self._stopping:
                            return  # a poll ``stop(wait=False)`` gave up on: its client may be closed under it
                        self._give_up(op, exc)

    def _poll(self, op: InFlight) -> None:
        max_wait = self.client.features.long_poll_max_wait
        wait = None
        if max_wait and self._head_only:
            wait = max(0.0, min(max_wait, LONG_POLL_WAIT, op.deadline - time.monotonic()))
        transient = False
        started = time.monotonic()
        # Retries end with the failure window: by its end when polls are failing already, else a window
        # (and the long-poll's wait) after this poll starts, which a server that answers never reaches.
        failing = self._failing_since
        until = failing + self.failure_window if failing is not None else started + self.failure_window + (wait or 0)
        try:
            env = self.client.get_operation(
                self.session_id, op.kind, op.env.id, wait=wait, seen=op.env.status, until=until
            )
        except (APIConnectionError, APIStatusError) as exc:
            if isinstance(exc, APIStatusError) and exc.status_code == 404:
                env = wire.Operation.failed(
                    op.env.id,
                    wire.OperationErrorCode.SESSION_NOT_ACTIVE,
                    f"the server no longer knows this operation ({exc}); it may have restarted without its "
                    "state, and the operation's outcome is unknown",
                )
            elif isinstance(exc, APIStatusError) and not self.client.retry.retryable(exc.status_code):
                env = wire.Operation.failed(op.env.id, None, f"polling failed: {exc}")
            else:
                if self._failing_since is None:
                    self._failing_since = started
                if time.monotonic() < until or self._last_failure is None:  # not a poll cut short by the window
                    self._last_failure = exc
                if time.monotonic() - self._failing_since >= self.failure_window:
                    self._fail_all(self._last_failure)
                    return
                log.warning("polling %s %s failed, will try again: %s", op.kind, op.env.id, exc)
                env, transient = op.env, True
        except APIError as exc:  # an unreadable answer (a proxy's page, a garbled body): polled again a few times
            op.unread += 1  # (failing at once would fail an operation the server goes on running), then it fails
            if op.unread <= self.client.max_retries:
                log.warning("polling %s %s: %s; polling again (%d of %d)", op.kind, op.env.id, exc, op.unread,
                            self.client.max_retries)  # fmt: skip
                env, transient = op.env, True
            else:
                env = wire.Operation.failed(op.env.id, None, f"polling failed: {exc} ({_unread(exc, op.unread)})")
        else:
            op.unread = 0
            self._failing_since, self._last_failure = None, None
            self._newer(op, env.status)
        now = time.monotonic()
        if env.status not in wire.TERMINAL_STATUSES and now >= op.deadline:
            env = wire.Operation.failed(
                op.env.id,
                wire.OperationErrorCode.TIMEOUT,
                f"rlnb stopped waiting after {self.operation_timeout:g} s (operation_timeout); the operation "
                f"was last {_said(env.status)} and the server may still finish it",
            )
        if op.ended:  # settled meanwhile by the one who stopped this poller
            return
        changed = env.status != op.env.status
        if changed:
            op.env, op.changed = env, now
            report(op, env)
        if env.status in wire.TERMINAL_STATUSES:
            self._ended(op, now)
        else:
            # A long-poll that answered: ask again right away, unless it came back unchanged before half its wait (a
            # server or proxy that does not hold it would be asked in a loop, thousands of GETs a second).
            at_once = wait and not transient and (changed or now - started >= wait / 2)
            op.due = (
                now
                if at_once
                else min(now + poll_interval(now - op.changed, self.poll_min, self.poll_max), op.deadline)
            )

    @property
    def following(self) -> bool:
        """Whether operations are in flight (polled)."""
        return bool(self._inflight)

    def give_up(self, why: str) -> int:
        """Fail every operation in flight now (``TIMEOUT``, ``why`` and its last status said; the server may still run
        it), as the failure window's end does; a Stop while the server does not answer. How many it failed."""
        with self._cond:
            ops, self._inflight = self._inflight, []
            for op in ops:
                op.ended = True
        for op in ops:
            message = f"{why}; the operation was last {_said(op.env.status)} and its outcome is unknown"
            report(op, wire.Operation.failed(op.env.id, wire.OperationErrorCode.TIMEOUT, message))
        return len(ops)

    def _newer(self, op: InFlight, status: str) -> None:
        """A status newer than rlnb's list (``wire.Newer``) may or may not end the operation: it is polled on under its
        deadline, and each such status is said once (failing the operation at once would fail one that may succeed)."""
        if not isinstance(status, wire.OperationStatus) and status not in self._said:
            self._said.add(status)
            log.warning(
                "rlnb: %s %s is %s, a status rlnb does not know (a newer API revision?): polling on until a known end, "
                "or operation_timeout (%g s)", op.kind, op.env.id, status, self.operation_timeout,
            )  # fmt: skip

    def _give_up(self, op: InFlight, exc: BaseException) -> None:
        """A poll raised what no API error is (an injected transport's own error, a hook's SystemExit): ``op`` fails
        with it. Raised, it ended this thread, and every operation of the session waited for ever, past
        ``operation_timeout``."""
        log.error("polling %s %s raised", op.kind, op.env.id, exc_info=exc)
        if not self._ended(op, time.monotonic()):
            return
        op.ended = True
        why = f"polling failed: {type(exc).__name__}: {self.client.redact(str(exc))}"
        report(op, wire.Operation.failed(op.env.id, None, why))

    def _ended(self, op: InFlight, now: float) -> bool:
        """Take ``op`` out of the polls (False if it was out already); in order, the next one starts as this one
        ends, so it is looked at now and its backoff counts from now."""
        with self._cond:
            if op not in self._inflight:
                return False
            was_head = self._inflight[0] is op  # another ends first only behind a head in a newer status
            self._inflight.remove(op)
            if self.in_order and was_head and self._inflight:
                head = self._inflight[0]
                head.changed, head.due = now, now
            return True

    def _fail_all(self, exc: APIError) -> None:
        """Every poll of the session has failed for ``failure_window`` seconds: the server is gone, so every
        operation in flight fails now, not one poll (one deadline) apart."""
        assert self._failing_since is not None
        failing = time.monotonic() - self._failing_since
        # The window is spent: a later operation's polls get one of their own (kept, its start was past, and every
        # later poll's retries ended before they began, failing each operation at once with this error).
        self._failing_since, self._last_failure = None, None
        window = f"poll_failure_window {self.failure_window:g} s"
        self.give_up(f"every poll failed for {failing:.0f} s ({window}), last: {exc}")


def report(op: InFlight, env: wire.Operation[Any]) -> None:
    try:
        op.listener(env)
    except Exception:  # a listener's bug must not stop the poller for every other operation
        log.exception("listener of %s %s raised", op.kind, op.env.id)


def _said(status: str) -> str:
    """A status as a message shows it: one newer than rlnb's list says so."""
    return status if isinstance(status, wire.OperationStatus) else f"{status} (a status rlnb does not know)"


def _known(ops: list[InFlight]) -> bool:
    """Whether each of ``ops`` is in a status rlnb knows (``wire.Newer`` keeps a newer one as a plain string)."""
    return all(isinstance(op.env.status, wire.OperationStatus) for op in ops)


def _unread(exc: APIError, times: int) -> str:
    """What ``times`` unread answers in a row, the last ``exc``, tell of the operation: one whose result alone could
    not be fetched is in the status its envelope gives (a COMPLETED one has run to its end on the server)."""
    if isinstance(exc, PayloadGone):
        ran = "it ran on the server; " if exc.status == wire.OperationStatus.COMPLETED else ""
        return f"{ran}its result could not be fetched, {times} times in a row"
    return f"{times} answers in a row could not be read; the server may run it"

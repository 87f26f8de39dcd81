"""How a remote session waits: ``PollOptions`` (``rlnb.connect(url, poll=...)`` or its flat keywords), their
defaults, ``poll_interval``, the gap between two polls, and ``wait_until``, the wait of a start for a resource, then
a session, to be up. Split from ``poller`` (the poll thread) and read by ``start`` too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TypeVar

import numpy as np

from rlnb import wire
from rlnb._input.checks import check_seconds
from rlnb._input.shown import shown
from rlnb.errors import OperationTimeout, ResourceEnded, RlnbError, SessionClosed
from rlnb.wire import OPERATION_TIMEOUT

log = logging.getLogger("rlnb")

POLL_MIN = 0.01
"""Seconds between the first polls of an operation (or of a resource / session being started)."""
POLL_MAX = 2.0
"""The longest gap between two polls."""
POLL_FRACTION = 0.1
"""Poll again after this fraction of the time already spent in the current status (see poll_interval)."""
LONG_POLL_WAIT = 10.0
"""Longest wait asked of a long-polling server per GET (bounded by what it advertises)."""
POLL_FAILURE_WINDOW = 120.0
"""Seconds of nothing but failed polls after which an operation fails (``TIMEOUT``): the server is gone."""
READY_TIMEOUT = 1800.0
"""Seconds ``RemoteBackend.connect`` waits for the model resource, then the session, to be up."""


@dataclass(frozen=True)
class PollOptions:
    """How a remote session waits (``rlnb.connect(url, poll_max=5.0, ...)`` sets these by name).

    Polls come ``poll_interval`` apart, from ``poll_min`` up to ``poll_max`` seconds. Starting waits up to
    ``ready_timeout`` seconds each for the model resource and the session; an operation fails ``TIMEOUT``
    ``operation_timeout`` seconds after submission, or once every poll has failed for
    ``poll_failure_window`` seconds (the server is gone). ``pause`` waits between the polls of a start (the
    concept of ``RetryPolicy.pause``): called with the seconds to wait, its True calls the start off (a sweep's
    trial: its sweep's stop, heard at once, not after ``ready_timeout``), False or None goes on (``called_off``).
    None: ``time.sleep``. The poll thread of a running session never asks it: its gaps are a wait that a new
    operation and ``close()`` must wake at once, and ``operation_timeout`` and ``close()`` bound them."""

    poll_min: float = POLL_MIN
    poll_max: float = POLL_MAX
    ready_timeout: float = READY_TIMEOUT
    operation_timeout: float = OPERATION_TIMEOUT
    poll_failure_window: float = POLL_FAILURE_WINDOW
    pause: Callable[[float], bool] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        for name in ("poll_min", "poll_max", "ready_timeout", "operation_timeout", "poll_failure_window"):
            # "30" was a bare TypeError naming no field, True 1 s, infinity a wait with no end
            object.__setattr__(self, name, check_seconds(name, getattr(self, name), positive=True))
        if not self.poll_min <= self.poll_max:
            raise ValueError(f"need 0 < poll_min <= poll_max, got {self.poll_min}, {self.poll_max}")
        check_pause(self.pause)


def check_pause(pause: object) -> None:
    """A ``pause`` (``PollOptions``', ``RetryPolicy``'s) that is no function failed only at its first wait, in a poll's
    thread, after the model resource was made ("'int' object is not callable"): a ``TypeError`` naming it now."""
    if pause is not None and not callable(pause):
        raise TypeError(f"pause must be None or a function of the seconds to wait, got {pause!r}"[:200])


def called_off(pause: Callable[[float], object], seconds: float) -> bool:
    """Ask ``pause`` to wait ``seconds``: whether it called the wait's retry (or start) off. It answers True (call it
    off), or False or None (go on: a function that only sleeps returns None); a numpy bool counts as a bool. Any other
    answer is a ``TypeError`` naming ``pause``: read by its truth value, a 0 would go on and a "no" call it off."""
    answer = pause(seconds)
    if answer is None or isinstance(answer, bool | np.bool_):
        return bool(answer)
    raise TypeError(f"pause must return True (call it off), False or None (go on), got {shown(answer)}")


def poll_interval(elapsed: float, poll_min: float = POLL_MIN, poll_max: float = POLL_MAX) -> float:
    """Seconds until the next poll, after ``elapsed`` seconds in the current status.

    A fixed fraction of the time already waited, clamped to [poll_min, poll_max]: a quick operation is
    seen within ``poll_min``, a long one costs a logarithmic number of requests, and the report lags
    the real finish by at most ~``POLL_FRACTION`` of the time spent (or ``poll_max``).
    """
    return min(max(POLL_FRACTION * elapsed, poll_min), poll_max)


M = TypeVar("M", wire.ModelResources, wire.Session)


def wait_until(fetch: Callable[[], M], ready: str, dead: frozenset[str], poll: PollOptions) -> M:
    """Poll ``fetch()`` until its status is ``ready``, with ``poll_interval`` backoff (not a fixed 10 s).

    Raises ``SessionClosed`` (a session) or ``ResourceEnded`` (a model resource) on a dead status, or on any other
    status that comes with an error (the API sets ``error`` only on one "in an error state": a CREATING session
    with one has failed: waiting on to ``timeout`` would wait for nothing), and ``OperationTimeout`` after
    ``timeout`` seconds, naming the newer statuses seen: the wait goes on through them (warned once each), and a
    bare "still" would not say that rlnb could not read them. ``poll.pause`` waits between polls; its True
    ends the wait with ``RlnbError`` (then ``connect`` stops what it created, as on any failed start).
    """
    timeout = poll.ready_timeout
    start = time.monotonic()
    newer: list[str] = []  # the statuses newer than the list seen, each warned once
    while True:
        obj = fetch()
        if obj.status == ready:
            return obj
        what = f"{type(obj).__name__} {obj.id}"
        cls = SessionClosed if isinstance(obj, wire.Session) else ResourceEnded
        detail = f": {obj.error.code}: {obj.error.message}" if obj.error is not None else ""
        if obj.status in dead:
            raise cls(f"{what} is {obj.status}{detail}")
        known = isinstance(obj.status, StrEnum)  # else ``wire.Newer`` kept a status newer than the list
        if obj.error is not None:  # set on a failed one only: waiting on would wait the whole timeout for nothing
            newer_said = "" if known else ", a status rlnb does not know,"
            raise cls(f"{what} is {obj.status}{newer_said} with an error{detail}; rlnb stopped waiting for {ready}")
        if not known and obj.status not in newer:
            newer.append(obj.status)
            log.warning("rlnb: %s is %s, a status rlnb does not know: waiting on for %s", what, obj.status, ready)
        elapsed = time.monotonic() - start
        if elapsed >= timeout:
            seen = f" (statuses rlnb does not know seen: {', '.join(newer)})" if newer else ""
            raise OperationTimeout(f"{what} still {obj.status} after {timeout:g} s, not {ready}{seen}")
        seconds = min(poll_interval(elapsed, poll.poll_min, poll.poll_max), timeout - elapsed)
        if poll.pause is None:
            time.sleep(seconds)
        elif called_off(poll.pause, seconds):
            raise RlnbError(f"{what} still {obj.status}: the wait for {ready} was called off (PollOptions.pause)")

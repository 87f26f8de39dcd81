"""``Silence``: how long a client's server has not answered any attempt (a poll, a POST, a session's GET), from the
first failed one, and a Stop's call to end the retries meanwhile. A RunPanel's line says it (``RemoteBackend.outage``):
the operations in flight fail only at ``poll_failure_window``'s end (120 s), a call only once its retries end
(~15 s), and until then a run on a server that had died looked healthy, its Stop waiting for the whole window."""

from __future__ import annotations

import threading
import time
from typing import NamedTuple

CALLED_OFF = "; its retry was called off: a Stop while the server did not answer"
"""The end of the error of a call whose retry a ``Silence.call_off`` ended."""


class Outage(NamedTuple):
    """The server not answering (``RemoteBackend.outage``)."""

    seconds: float
    """Since the first failed attempt of those failing in a row."""
    window: float | None
    """``poll_failure_window`` while operations are polled (they fail ``TIMEOUT`` at its end); None: a call, which
    fails when its retries end."""
    last: str
    """What the latest failed attempt said."""


class Silence:
    """The attempts failing in a row on one client. ``failed`` at each failed attempt that is to be retried,
    ``answered`` at any answer (an error status too: the server is there); ``call_off`` ends the retries' waits until
    the next answer."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since: float | None = None
        self._last = ""
        self._off = threading.Event()

    def failed(self, what: str) -> None:
        with self._lock:
            self._since = time.monotonic() if self._since is None else self._since
            self._last = what

    def answered(self) -> None:
        with self._lock:
            self._since, self._last = None, ""
            self._off.clear()

    def now(self) -> tuple[float, str] | None:
        """Seconds since the first failed attempt of those failing in a row, and what the latest said; None while the
        server answers."""
        with self._lock:
            return None if self._since is None else (time.monotonic() - self._since, self._last)

    def call_off(self) -> None:
        """End the wait before each retry now and until the next answer: the call raises its last error at once."""
        self._off.set()

    def wait(self, seconds: float) -> bool:
        """Wait ``seconds`` before a retry: whether ``call_off`` ended it (the retry is not made)."""
        return self._off.wait(seconds)

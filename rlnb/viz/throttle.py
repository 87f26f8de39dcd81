"""``Throttle``: redraw at most once per ``every`` seconds however often the data changes, and never lose the
last change.

Changes come from backend threads (a record) and the notebook's (a ``log``); drawing there would hold up the
step that reported it, so a change only schedules a draw on a timer thread. A change while one is due is read
by it; a change after it fired schedules the next: the last change always shows.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable


class Throttle:
    """Calls ``draw`` on a timer thread, at most once per ``every`` seconds, after each ``poke``. ``now()`` draws
    on the caller's thread; ``close(wait)`` stops, once a draw in progress has ended. A draw that raises on the
    timer thread is dropped here: ``draw`` shows its own failures (nobody is there to raise to)."""

    def __init__(self, draw: Callable[[], None], every: float):
        self._draw, self.every = draw, every
        self._lock = threading.Lock()  # guards the schedule
        self._drawing = threading.RLock()  # one draw at a time (re-entered by a close from a draw)
        self._timer: threading.Timer | None = None
        self._last = -math.inf  # time.monotonic() of the last draw begun
        self._closed = False

    def poke(self) -> None:
        """Something changed: schedule a draw (never draws here)."""
        with self._lock:
            if self._closed or self._timer is not None:
                return  # a draw is already due, and it will read this change
            wait = max(0.0, self._last + self.every - time.monotonic())
            self._timer = threading.Timer(wait, self._fire)
            self._timer.daemon = True
            self._timer.start()

    def now(self) -> None:
        """Draw now, on this thread (a failure is raised)."""
        with self._lock:
            self._last = time.monotonic()
        with self._drawing:
            self._draw()

    def close(self, wait: float) -> None:
        """Draw no more, once a draw in progress has ended (at most ``wait`` seconds): a timer thread still
        drawing when the interpreter exits can crash it (matplotlib at shutdown)."""
        with self._lock:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        if self._drawing.acquire(timeout=wait):
            self._drawing.release()

    def _fire(self) -> None:
        with self._lock:
            self._timer = None
            if self._closed:
                return
            # From here a new change schedules the next draw, which then reads it: none is lost.
            self._last = time.monotonic()
        with self._drawing:
            if not self._closed:  # a close() that came in between waited for no draw: this one is not drawn
                with contextlib.suppress(Exception):
                    self._draw()

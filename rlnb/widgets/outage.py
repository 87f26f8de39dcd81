"""A RunPanel's run on a remote session whose server stopped answering: said on the run's line from the first failed
attempt (how long, when the run fails, that Stop ends the wait; ``RemoteBackend.outage``), and a Stop meanwhile fails
the operations in flight at once, each recorded as failed (``RemoteBackend.give_up_waiting``). The operations fail by
themselves only at ``poll_failure_window``'s end (120 s), with nothing on the line but a healthy run's progress, the
poller's warning in whichever cell's output stderr goes to.

Only a Stop pressed during the outage ends the wait, once the outage has lasted two ticks: a Stop before it asks for
the step in progress to finish, and one poll unanswered whose retry is answered (a blip) would otherwise record as
failed a step the server completes.

Find LR's range test on a remote session's copy says it the same way after its own line (``watch_find``), and a Stop
(the RunPanel's or its own) ends its wait alike: the step in flight fails and the test ends with the steps measured."""

from __future__ import annotations

import html
import threading
import time
from collections.abc import Callable
from typing import Any

from rlnb.widgets.status_line import RED

TICK = 0.5
"""Seconds between looks at the backend: the line says an outage, and a Stop ends its wait, within this."""


def watch(panel: Any) -> None:
    """Follow ``panel``'s run on a daemon thread until it ends (a backend with no ``outage``, a local one: none)."""
    backend = panel.session.backend
    if callable(getattr(backend, "outage", None)):
        threading.Thread(target=_follow, args=(panel, backend), name="rlnb-run-outage", daemon=True).start()


def stop(panel: Any) -> None:
    """Set ``panel``'s Stop, noting when (``_ends_wait``)."""
    panel.stop_at = time.monotonic()
    panel._stop.set()


def stop_test(finder: Any) -> None:
    """Set Find LR's Stop (its ``_halt``), noting when (``_ends_wait``)."""
    finder.stop_at = time.monotonic()
    finder._halt.set()


def _follow(panel: Any, backend: Any) -> None:
    while not panel._ended.wait(TICK):
        outage = backend.outage()
        if outage is not None and _ends_wait(panel._stop, panel.stop_at, outage):
            _give_up(backend, outage)
        said = "" if outage is None else said_of(outage)
        with panel._ending:  # not over the line of the run's end, which clears it
            if panel.running and said != panel.line.outage:
                panel.line.outage = said
                panel.line.show_run()


def _ends_wait(stop: threading.Event, stop_at: float, outage: Any) -> bool:
    """Whether a Stop (``stop``, set at ``stop_at``) came during ``outage`` and the outage has lasted two ticks (the
    module's docstring)."""
    began = time.monotonic() - outage.seconds
    return stop.is_set() and outage.seconds >= 2 * TICK and stop_at >= began


def _give_up(backend: Any, outage: Any) -> None:
    silent = f"the server had not answered for {outage.seconds:.0f} s ({outage.last})"
    backend.give_up_waiting(f"rlnb stopped waiting at a Stop: {silent}")


def said_of(outage: Any) -> str:
    """The words after the run's line."""
    ends = "once its retries end" if outage.window is None else f"at {outage.window:g} s"
    return f"server not answering for {outage.seconds:.0f} s (the run fails {ends}; Stop ends the wait)"


class TestLine:
    """Find LR's line while a range test runs (``begin`` to ``end``): the test's words, then the outage of the server
    its session's copy runs on, if any (``watch_find``). Outside a test only a line given is said, no outage."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self._say, self._lock, self.done = say, threading.Lock(), threading.Event()
        self.line = self.outage = ""
        self.done.set()

    def begin(self, line: str) -> None:
        with self._lock:
            self.done.clear()
            self.outage = ""
        self.show(line)

    def show(self, line: str | None = None, outage: str | None = None) -> None:
        """``line`` (HTML, escaped by the caller), else the last one; after it ``outage`` (text), else the last."""
        with self._lock:
            if self.done.is_set():  # the test's words only: how it ended is the finder's line
                if line is not None:
                    self._say(line)
                return
            self.line = self.line if line is None else line
            self.outage = self.outage if outage is None else outage
            said = (
                f" · <span style='color:{RED}'>⚠ {html.escape(self.outage, quote=False)}</span>" if self.outage else ""
            )
            self._say(self.line + said)

    def end(self) -> None:
        with self._lock:
            self.done.set()


def watch_find(finder: Any, trial: Any) -> None:
    """Follow ``finder``'s range test on ``trial`` (``lr_find``'s ``opened``) on a daemon thread until it ends (a
    local copy: nothing to follow)."""
    backend = trial.backend
    if callable(getattr(backend, "outage", None)):
        args = (finder, backend)
        threading.Thread(target=_follow_find, args=args, name="rlnb-lr-find-outage", daemon=True).start()


def _follow_find(finder: Any, backend: Any) -> None:
    line = finder.test_line
    while not line.done.wait(TICK):
        outage = backend.outage()
        if outage is not None and _ends_wait(finder._halt, finder.stop_at, outage):
            _give_up(backend, outage)
        line.show(outage="" if outage is None else said_of(outage))

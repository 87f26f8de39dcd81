"""A RunPanel's run on a remote session whose server stopped answering: said on the run's line from the first failed
attempt (how long, when the run fails, that Stop ends the wait; ``RemoteBackend.outage``), and a Stop meanwhile fails
the operations in flight at once, each recorded as failed (``RemoteBackend.give_up_waiting``). The operations fail by
themselves only at ``poll_failure_window``'s end (120 s), with nothing on the line but a healthy run's progress, the
poller's warning in whichever cell's output stderr goes to.

Only a Stop pressed during the outage ends the wait, once the outage has lasted two ticks: a Stop before it asks for
the step in progress to finish, and one poll unanswered whose retry is answered (a blip) would otherwise record as
failed a step the server completes."""

from __future__ import annotations

import threading
import time
from typing import Any

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


def _follow(panel: Any, backend: Any) -> None:
    while not panel._ended.wait(TICK):
        outage = backend.outage()
        if outage is not None and _ends_wait(panel, outage):
            silent = f"the server had not answered for {outage.seconds:.0f} s ({outage.last})"
            backend.give_up_waiting(f"rlnb stopped waiting at a Stop: {silent}")
        said = "" if outage is None else said_of(outage)
        with panel._ending:  # not over the line of the run's end, which clears it
            if panel.running and said != panel.line.outage:
                panel.line.outage = said
                panel.line.show_run()


def _ends_wait(panel: Any, outage: Any) -> bool:
    """Whether ``panel``'s Stop came during ``outage`` and the outage has lasted two ticks (the module's docstring)."""
    began = time.monotonic() - outage.seconds
    return panel._stop.is_set() and outage.seconds >= 2 * TICK and panel.stop_at >= began


def said_of(outage: Any) -> str:
    """The words after the run's line."""
    ends = "once its retries end" if outage.window is None else f"at {outage.window:g} s"
    return f"server not answering for {outage.seconds:.0f} s (the run fails {ends}; Stop ends the wait)"

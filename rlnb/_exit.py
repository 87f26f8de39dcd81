"""One ordered interpreter-exit hook, so that a script may exit mid-run and keep every record.

rlnb's pieces are imported lazily and ``atexit`` runs hooks last-registered first, so separate hooks
would run in whatever order the imports happened (a session's worker could close under a RunPanel's
step). Instead each piece adds its step to a phase, and the phases run in this order: running panels
stop after their step, sessions close (failing what is still queued ``SESSION_NOT_ACTIVE``, recorded),
workers stop, then sinks flush everything, those last records included.
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections.abc import Callable
from typing import Literal

Phase = Literal["panels", "sessions", "workers", "sinks"]
PHASES: tuple[Phase, ...] = ("panels", "sessions", "workers", "sinks")

log = logging.getLogger("rlnb")
_STEPS: dict[Phase, list[Callable[[], None]]] = {phase: [] for phase in PHASES}
_EXITING = threading.Event()


def on_exit(phase: Phase, step: Callable[[], None]) -> None:
    """Run ``step`` at interpreter exit, in ``phase``'s turn."""
    _STEPS[phase].append(step)


def exiting() -> bool:
    """Whether interpreter exit has begun running these steps (a wait without a limit then gets one)."""
    return _EXITING.is_set()


def _run() -> None:
    _EXITING.set()
    for phase in PHASES:
        for step in _STEPS[phase]:
            try:
                step()
            except Exception:  # noqa: BLE001 - exit goes on: one step's failure must not skip the others
                log.exception("rlnb: an exit step (%s) failed", phase)


def run_first() -> None:
    """Register the hook again, after a library registered its own (W&B tears its service down at
    exit), so that rlnb closes its runs and flushes into that library before it goes."""
    atexit.unregister(_run)
    atexit.register(_run)


atexit.register(_run)

"""One panel at a time steps a session: the open panels, which of them holds a session now, and stopping
their runs at interpreter exit.

Running a notebook cell again makes a new panel while the old one, out of sight, may still be running: two
runs' operations would interleave on the session, each step mixing the other's samples, gradients and rates.
"""

from __future__ import annotations

import time
import weakref
from typing import Any, Protocol, TypeVar

from rlnb import _exit


class RunPanel(Protocol):
    """What this module needs of a panel (``rlnb.widgets.panel.RunPanel``)."""

    session: Any
    builder: Any

    @property
    def running(self) -> bool: ...
    def stop(self) -> None: ...
    def join(self, timeout: float | None = None) -> bool: ...


P = TypeVar("P", bound=RunPanel)


EXIT_DEADLINE = 30.0
"""Seconds an interpreter exit waits, in all, for the panels' steps in progress before their sessions are closed
under them (it waited that long for each panel and each Find LR in turn: 62 s for two hung panels)."""

_OPEN: weakref.WeakSet[Any] = weakref.WeakSet()  # RunPanels


def opened(panel: RunPanel) -> None:
    _OPEN.add(panel)


def closed(panel: RunPanel) -> None:
    _OPEN.discard(panel)


def others(panel: P) -> list[P]:
    """The other open panels on ``panel``'s session."""
    return [p for p in list(_OPEN) if p is not panel and p.session is panel.session]


def taken(panel: RunPanel) -> str | None:
    """Why another panel holds ``panel``'s session (its run or its Find LR goes), or None."""
    for other in others(panel):
        if other.running:
            return "a run of another RunPanel is going on this session (was its cell run again?); Stop ends it"
        if other.builder.lr_finder.running:
            return "another RunPanel's Find LR is running on this session; wait for it"
    return None


def _stop_running_panels() -> None:
    """Interpreter exit mid-run: stop each panel after its step in progress, so that no step is still
    submitting (or running torch) while its session closes and the interpreter tears down."""
    for panel in list(_OPEN):
        panel.stop()
    end = time.monotonic() + EXIT_DEADLINE
    for panel in list(_OPEN):
        panel.join(max(0.0, end - time.monotonic()))
        panel.builder.lr_finder.join(max(0.0, end - time.monotonic()))


_exit.on_exit("panels", _stop_running_panels)

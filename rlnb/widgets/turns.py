"""One panel at a time steps a session: the open panels, which of them holds a session now, and stopping
their runs at interpreter exit.

Running a notebook cell again makes a new panel while the old one, out of sight, may still be running: two
runs' operations would interleave on the session, each step mixing the other's samples, gradients and rates.
"""

from __future__ import annotations

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
"""Seconds an interpreter exit waits for a panel's step in progress before its session is closed under it."""

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
    for panel in list(_OPEN):
        panel.join(EXIT_DEADLINE)
        panel.builder.lr_finder.join(EXIT_DEADLINE)


_exit.on_exit("panels", _stop_running_panels)

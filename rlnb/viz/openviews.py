"""The live views still following their History, and which of them a new one replaces: a view whose notebook cell
ran again (``rlnb.viz.cells``), or, where no cell id comes, a view of the same History shown by an earlier run
(``rlnb.viz.outputs``). Every one left open is closed at interpreter exit.
"""

from __future__ import annotations

import weakref
from typing import Protocol

from rlnb.history import History
from rlnb.lifecycle import shutdown
from rlnb.viz.cells import cell_run, execute_run, same_cell_before
from rlnb.viz.outputs import Outputs

CLOSE_WAIT = 30.0
"""Seconds ``close`` waits for a redraw in progress: a timer thread still drawing when the interpreter exits can
crash it (matplotlib at shutdown), so a view is closed only once its redraw has ended."""


class View(Protocol):
    """What this module knows of a ``LiveView``."""

    history: History
    cell: tuple[str, str] | None
    outputs: Outputs

    def close(self) -> None: ...


OPEN: weakref.WeakSet[View] = weakref.WeakSet()
"""Views not closed yet: closed at interpreter exit, each once its redraw in progress has ended."""


def _close_open_views() -> None:
    """A view left open (its cell run again, the notebook shut down) kept redrawing on its timer thread while the
    interpreter exited: the process aborted ("terminate called without an active exception") now and then."""
    for view in list(OPEN):
        view.close()


shutdown.on_exit("panels", _close_open_views)


def opened(view: View) -> None:
    """``view``, just made, is open; the views of its History made by an earlier run of its cell are closed (that
    run's output was cleared, its view left following)."""
    view.cell = cell_run()
    for old in list(OPEN):
        if old.history is view.history and same_cell_before(old.cell, view.cell):
            old.close()
    OPEN.add(view)


def shown(view: View) -> None:
    """Where the front end sends no cell id, the views of ``view``'s History shown only by earlier runs are replaced
    by it: their outputs say so and they are closed (with a cell id, ``opened`` already did)."""
    run = execute_run()
    if run is not None and cell_run() is None:
        for old in list(OPEN):
            if old is not view and old.history is view.history and old.outputs.before(run):
                old.outputs.replaced()
                old.close()

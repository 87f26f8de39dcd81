"""Where a ``LiveView`` is shown: its notebook outputs, each with a display id, so that the view can update them in
place rather than add more.

A view relied on the front end's cell id to replace an earlier view of its History (``rlnb.viz.cells``). Where none
comes (classic Notebook 6, some VS Code versions, a plain ``IPython.display``), ``display(view)`` at every step
piled up one output per call, and a view made again kept following its history in an output the front end still
drew. Its outputs' display ids let it update them: in place when shown again by the same run, and with a line
saying it was replaced when a newer view of its History is shown by a later run.
"""

from __future__ import annotations

import html

from IPython.display import DisplayHandle, display

from rlnb.viz.cells import execute_run

REPLACED = "(this live view was replaced by a newer LiveView of the same History, and stopped following it)"
"""What an output of a replaced view says in place of its widget."""


class Outputs:
    """The outputs a view was shown in, each with the run (``cells.execute_run``) that showed it."""

    def __init__(self) -> None:
        self.shown: list[tuple[DisplayHandle, str | None]] = []

    def show(self, widget: object) -> None:
        """``widget`` shown: in place of its output of this run, if it has one, else in a new output."""
        run = execute_run()
        for handle, at in self.shown:
            if run is not None and at == run:
                handle.update(widget)
                return
        handle = display(widget, display_id=True)
        if handle is not None:
            self.shown.append((handle, run))

    def before(self, run: str) -> bool:
        """Shown, and only by runs before ``run``."""
        return bool(self.shown) and all(at != run for _, at in self.shown)

    def replaced(self) -> None:
        """Every output says it was replaced: its widget would be a second copy of a view nobody updates."""
        bundle = {"text/plain": REPLACED, "text/html": f"<i>{html.escape(REPLACED)}</i>"}
        for handle, _ in self.shown:
            handle.update(bundle, raw=True)

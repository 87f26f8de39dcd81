"""A RunPanel's status line: ready, a run's progress (and why an edit of the form is not what the run sends), a
failure, or why the session is another panel's turn now, which it keeps saying anew whenever that reason changes."""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as W

from rlnb.widgets.controls import TEXT
from rlnb.widgets.describe import ORANGE

RED = "#b00020"
FINDING = "Find LR is running (Stop ends it)"
"""The line while the panel's own Find LR runs."""


class StatusLine:
    """``widget`` (the panel's ``status``) and what it says. ``waits`` is the reason the line gives for the session
    being another's turn (the "waits" line, or a start refused for it), None when it gives none: the panel redraws
    the line when the current reason is another (not only the first reason said: the other run may end and a Find LR
    begin, and the line would still name the run)."""

    def __init__(self) -> None:
        self.widget = W.HTML()
        self.widget.add_class(TEXT)  # a 200-character path in an error would be cut at the panel's edge
        self.run = ""  # the run's own line, without ``held``
        self.held = ""  # why the form's edit is not what the run sends, said after the run's line
        self.n_problem = ""  # why Run N is off (the N field), said after a run's line and how it ended: in its place
        # it would hide the run's progress until the next step, and Run would stay off after the run with no reason
        self.waits: str | None = None
        self.outage = ""  # a remote server not answering the run's polls (``outage``), said after the run's line

    def show(self, text: str, error: bool = False) -> None:
        """``text`` (HTML, escaped by the caller), red when ``error``."""
        color = RED if error else "inherit"
        self.widget.value = f"<span class='rlnb-status' style='color:{color}'>{text}</span>"

    def show_run(self, line: str | None = None) -> None:
        """The run's line (``line``, else the last one), and after it ``held`` and ``outage`` if any."""
        self.run = self.run if line is None else line
        held = "".join(
            f" · <span style='color:{color}'>⚠ {html.escape(said, quote=False)}</span>"
            for said, color in ((self.held, ORANGE), (self.outage, RED))
            if said
        )
        self.show(self.run + held + self.n_said())

    def n_said(self) -> str:
        """``n_problem`` as said after a run's line (HTML), or ""."""
        return (
            f" · <span style='color:{RED}'>{html.escape(self.n_problem, quote=False)}</span>" if self.n_problem else ""
        )

    def refused(self, problem: BaseException, waits: str | None) -> None:
        """A start refused for ``problem``; ``waits``: the turn it waits for (another panel's run or Find LR, or its
        own Find LR), said until that ends."""
        self.waits = waits
        self.show(f"not started: {html.escape(str(problem), quote=False)}", error=True)

    def ready(
        self, session: Any, step: int, waits: str | None, shut: str | None = None, finding: bool = False,
        invalid: str | None = None,
    ) -> None:  # fmt: skip
        """``step N · ready``; that ``session`` is closed (never ``ready``, buttons enabled, on a closed session), or
        ``shut``: why the panel cannot train at all (its builder closed); or ``step N · waits: …`` (``waits``: another
        panel's run or Find LR goes on it, or another panel holds its builder); or, ``finding``, that the panel's own
        Find LR runs (``FINDING``: folded, or started from code, nothing else said why Step is off); or ``invalid``: why
        the form cannot be sent (Step and Run off, and only the folded summary said so)."""
        self.waits = waits if shut is None else shut
        if self.waits is None and finding:
            self.waits = FINDING
        if self.waits is None:
            self.waits = invalid
        if session.closed:
            said = html.escape(f"session {session.id} is closed", quote=False)  # the id is its server's word
            self.show(f"{said}: connect a new one to train", error=True)
        elif shut is not None:
            self.show(html.escape(shut, quote=False), error=True)
        elif waits is not None:
            self.show(f"step {step} · waits: {html.escape(waits, quote=False)}")
        elif finding:
            self.show(f"step {step} · {FINDING}")
        elif invalid is not None:
            self.show(f"step {step} · {html.escape(invalid, quote=False)}", error=True)
        else:
            self.show(f"step {step} · ready")

    def stale(self, waits: str | None, busy: bool) -> bool:
        """Whether the line must be drawn again (``ready``): the current reason to wait, ``waits``, is not the one it
        says; ``busy``: a run or Find LR of this panel goes, which says its own line meanwhile."""
        return waits != self.waits and not (waits is None and busy)

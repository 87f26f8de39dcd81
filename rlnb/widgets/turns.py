"""One panel at a time steps a session: the open panels, which of them holds a session now, which holds a builder
given to several (its Find LR's session, task and turns), and stopping their runs at interpreter exit.

Running a notebook cell again makes a new panel while the old one, out of sight, may still be running: two
runs' operations would interleave on the session, each step mixing the other's samples, gradients and rates.
"""

from __future__ import annotations

import itertools
import time
import weakref
from typing import Any, Protocol, TypeVar

from rlnb import wire
from rlnb.errors import SessionClosed
from rlnb.lifecycle import shutdown
from rlnb.tasks.task import session_prompt_ids
from rlnb.widgets import outage
from rlnb.widgets.finder import MADE
from rlnb.widgets.muon_units import session_units
from rlnb.widgets.steps import n_problem


class RunPanel(Protocol):
    """What this module needs of a panel (``rlnb.widgets.panel.RunPanel``)."""

    session: Any
    builder: Any
    task: Any
    _step: int
    _stop: Any
    own_step_fn: Any
    stopped_by: Any

    @property
    def running(self) -> bool: ...
    def stop(self) -> None: ...
    def join(self, timeout: float = ...) -> bool: ...
    def _sync_buttons(self) -> None: ...


P = TypeVar("P", bound=RunPanel)


EXIT_DEADLINE = 30.0
"""Seconds an interpreter exit waits, in all, for the panels' steps in progress before their sessions are closed
under them (not that long for each panel and each Find LR in turn: two hung panels would take 62 s)."""

_OPEN: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()  # RunPanels, oldest first
_COUNT = itertools.count()


def opened(panel: RunPanel) -> None:
    _OPEN[next(_COUNT)] = panel


def closed(panel: RunPanel) -> None:
    for key, p in list(_OPEN.items()):
        if p is panel:
            del _OPEN[key]


def others(panel: P) -> list[P]:
    """The other open panels on ``panel``'s session."""
    return [p for p in list(_OPEN.values()) if p is not panel and p.session is panel.session]


def stop_others(panel: RunPanel, clicked: bool = False) -> bool:
    """Ask the runs and Find LRs of the other panels on ``panel``'s session to stop; True if a run was going.
    ``clicked``: by a click on ``panel``'s Stop, each ended gives ``panel`` the focus (``focus_back.to_stopper``)."""
    running = False
    for other in others(panel):
        finder = other.builder.lr_finder
        if clicked and finder.running:
            finder.stopped_by = panel
        finder.stop()
        if other.running:
            other.stopped_by = panel if clicked else None
            outage.stop(other)
            running = True
    return running


def sharing(panel: P) -> list[P]:
    """The open panels given ``panel``'s builder, ``panel`` among them, oldest first."""
    return [p for p in list(_OPEN.values()) if p is panel or p.builder is panel.builder]


def take(panel: RunPanel) -> None:
    """``panel`` holds its builder now: Find LR copies its session, probes its task (unless the options name one of
    the person's: ``find_probe.step_options``) and waits for the runs of every open panel given that builder. The
    hooks were the last panel's: closing an older one cleared them while a newer one ran, and Find LR trained beside
    that run."""
    builder, finder = panel.builder, panel.builder.lr_finder
    builder.panel = panel
    finder.session = panel.session  # its units first: the summary that ``lock`` redraws names them
    builder.lock(panel.session.optimizer)
    finder.busy = lambda: _finder_waits(panel)
    finder.on_change = lambda: follow(panel)  # a range test starts or ends
    for p in sharing(panel):  # the open ones: each says whether the form is still one for its session
        p._sync_buttons()


def follow(panel: RunPanel) -> None:
    """A run or a range test of ``panel`` started or ended: every open panel on its session or given its builder
    redraws its buttons and line (waits, or ready again), those on the session at the step last read by either. A
    panel made while another's run went said "ready", its Step enabled, and stayed so."""
    for p in {id(p): p for p in (panel, *others(panel), *sharing(panel))}.values():
        if p.session is panel.session:
            p._step = max(p._step, panel._step)  # the later read: a session's step only grows
        p._sync_buttons()


def release(panel: RunPanel) -> None:
    """``panel`` closes: its builder goes to the newest other open panel given it, else it is free (unlocked, no
    session: Find LR then runs on a fresh local session, as a builder on its own)."""
    builder, finder = panel.builder, panel.builder.lr_finder
    if getattr(builder, "panel", None) is not panel:
        return  # another panel holds it now: its hooks stay
    rest = [p for p in sharing(panel) if p is not panel]
    if rest:
        take(rest[-1])
        return
    builder.panel = None
    finder.busy, finder.on_change = (lambda: None), (lambda: None)
    finder.session = None
    builder.lock(None)


def _finder_waits(holder: RunPanel) -> str | None:
    """Why Find LR of ``holder``'s builder must wait: a run of a panel given it, or another panel's turn on the
    session; a closed session (nothing to copy)."""
    if holder.session.closed:
        return f"session {holder.session.id} is closed: connect a new one"
    for p in sharing(holder):
        if p.running:
            on = "this session" if p.session is holder.session else "another session, with this builder"
            return f"a run is going on {on}"
    return taken(holder)


def taken(panel: RunPanel) -> str | None:
    """Why another panel holds ``panel``'s session (its run, or its Find LR on a copy of this session), or None. A
    Find LR of a builder given to a panel on another session copies that one: it held this session too, the panel
    saying "ready" (``follow`` redraws the panels on the session it copies) while it refused a start, and after the
    test it still said "not started: another RunPanel's Find LR is running"."""
    for other in others(panel):
        if other.running:
            return "a run of another RunPanel is going on this session (was its cell run again?); Stop ends it"
        finder = other.builder.lr_finder
        if finder.running and finder.session is panel.session:
            return "another RunPanel's Find LR is running on this session; wait for it"
    return None


def form_closed(panel: RunPanel) -> str | None:
    """Why ``panel`` cannot train: its builder is closed (``builder.close()``), the form off the page; or None."""
    if panel.builder.closed:
        return "its OptimizerBuilder is closed: make a new RunPanel (with a new OptimizerBuilder) to train"
    return None


def elsewhere(panel: RunPanel) -> str | None:
    """Why ``panel`` cannot train with its builder now, or None: another open panel given it holds it (the last given
    it), on a session of another optimizer or other Muon lr units, and the form is that session's (its config would be
    refused here, or sent in the other units: another step size)."""
    holder = getattr(panel.builder, "panel", None)
    if holder is None or holder is panel or _form(holder.session) == _form(panel.session):
        return None
    return (
        f"its builder belongs to the RunPanel on session {holder.session.id} ({_form(holder.session)}): close that "
        "panel to have it back, or make this one with its own OptimizerBuilder"
    )


def _form(session: Any) -> str:
    """What a form must be to train ``session``: its optimizer, and a Muon session's lr units."""
    return (
        f"{session.optimizer}, {session_units(session)} units" if session.optimizer == wire.MUON else session.optimizer
    )


def closed_session(session: Any) -> SessionClosed:
    """The error of a start, or of a run's next step, on ``session`` closed."""
    return SessionClosed(f"session {session.id} is closed: connect a new one to train")


def refusal(panel: Any, n: Any) -> Exception | None:
    """Why ``panel`` cannot start a run of ``n`` steps now, or None."""
    if panel.running:
        return RuntimeError("a run is going; Stop it first")
    if panel.session.closed:  # else accepted, and failed at its first step
        return closed_session(panel.session)
    if (closed := form_closed(panel)) is not None:
        return ValueError(closed)
    why = taken(panel) or elsewhere(panel)
    if why is not None:
        return RuntimeError(why)
    if (finder := panel.builder.lr_finder).running:  # a builder's own test, given to the panel mid-test: a fresh one
        where = "on this session" if finder.copies is panel.session else "on a fresh session (it shares the CPU)"
        return RuntimeError(f"this panel's Find LR is running {where}; wait for it")
    if (bad := n_problem(n)) is not None:
        return bad
    if not panel.builder.valid:
        return ValueError("; ".join(panel.builder.errors))
    try:
        panel.session.check_params(panel.builder.params)
        if panel.own_step_fn is None:  # the task's prompts, as its first step reads them (after the start, before)
            session_prompt_ids(panel.task, panel.session)
    except (TypeError, ValueError) as exc:
        return exc
    return None


def _stop_running_panels() -> None:
    """Interpreter exit mid-run: stop each panel and Find LR after its step in progress, so that no step is still
    submitting (or running torch) while its session closes and the interpreter tears down; unless a SIGTERM hurries
    the exit, the sessions then closed under the steps."""
    finders = [finder for finder in list(MADE) if finder.running]  # a builder's own too, given to no panel
    for panel in list(_OPEN.values()):
        panel.stop()
    for finder in finders:
        finder.stop()
    end = time.monotonic() + EXIT_DEADLINE
    busy = [p for p in list(_OPEN.values()) if not p.join(shutdown.CHUNK)] + [f for f in finders if not f.join(0.0)]
    if busy:  # said: the wait may take as long as a step, with nothing printed
        shutdown.say_waiting(f"finishing the step in progress of {len(busy)} RunPanel(s) or Find LR", EXIT_DEADLINE)
    for panel in list(_OPEN.values()):  # a SIGTERM (a kernel's Shut Down) ends these waits: ``shutdown.hurried``
        shutdown.wait(panel.join, max(0.0, end - time.monotonic()))
    for finder in finders:
        shutdown.wait(finder.join, max(0.0, end - time.monotonic()))


shutdown.on_exit("panels", _stop_running_panels)

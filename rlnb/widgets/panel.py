"""``RunPanel``: Step / Run N / Stop over a session, with an ``OptimizerBuilder`` (``rlnb.widgets.builder``) and a
live view, laid out for a laptop screen (1366×768): buttons, status and the reward plot on screen together."""

from __future__ import annotations

import html
import math
import threading
import time
from typing import Any

import ipywidgets as W

from rlnb._input.checks import check_seconds, check_timeout
from rlnb.params import OptimizerParams
from rlnb.params.schedule import Schedule
from rlnb.session import Session
from rlnb.session.step_turn import STEP_WAIT
from rlnb.tasks import Task, check_steps, first_letter_task
from rlnb.viz.live import LiveView
from rlnb.widgets import fit, outage, run_thread, turns
from rlnb.widgets.builder import LESSONS, PRESETS, OptimizerBuilder, check_builder
from rlnb.widgets.controls import INVALID, CountBox, close_tree, whole
from rlnb.widgets.describe import ScheduleNote
from rlnb.widgets.focus_back import FocusBack
from rlnb.widgets.status_line import FINDING, StatusLine
from rlnb.widgets.steps import StepFn, check_given, n_problem, rl_figures, sent_schedule, taken_mid_run

__all__ = ["LESSONS", "PRESETS", "OptimizerBuilder", "RunPanel"]

JOIN_DEADLINE = 600.0
"""Seconds ``RunPanel.join()`` waits by default (so that a ``panel.join()`` under a hung step does not hang the
kernel)."""


class RunPanel:
    """Step a session from the notebook: Step / Run N / Stop and a progress bar at the top, the status
    line with where the session is on the schedule, then the builder (locked to the session's optimizer,
    folded to its summary), then a live view of the run.

    Each step sends the builder's config with its schedule applied (``builder.params_at(step)``), checked against
    the session before anything is submitted; mid-run, an edit that leaves the form invalid (a half-typed value, a
    click on the locked tab) is not taken: the run goes on with the last valid config, and the status line says
    so. Once the session passes the end of a decaying schedule (every step then gets its floor rate) the panel
    says so, once, in an orange line (``warnings``: the warning shown now, if any).
    By default a step is one RL step of ``task`` (the first-letter task, which the presets' lessons are
    measured on) and logs its mean reward (and, every 10 steps of a verifiable task, its held-out accuracy), and
    the live view draws the reward (the held-out accuracy on its axes) and gradient norm (not the GRPO loss, ≈0
    by construction; the learning rate is in the schedule line and the steps table); pass
    ``step_fn`` for your own loop (the view then shows the loss, the learning rate and every figure you
    return). Runs go on a background thread, so the kernel stays free and Stop works mid-run (between
    steps). Any exception in a step stops the run and shows in the status line and in ``error``: a
    failed operation by its error code and message.
    """

    def __init__(
        self,
        session: Session,
        builder: OptimizerBuilder | None = None,
        *,
        step_fn: StepFn | None = None,
        task: Task | None = None,
        n_steps: int = 20,
        every: float = 0.5,
        step_timeout: float | None = STEP_WAIT,
    ):
        # before the builder given is locked to the session: else n_steps=2.5 is taken as 2, 0 a form with no Run
        n_steps, every = check_steps(n_steps, name="n_steps"), check_seconds("every", every)
        self.step_timeout = step_timeout
        check_given(session, task, step_fn)
        check_builder(builder)
        self.session = session
        self.builder = builder or OptimizerBuilder(session.optimizer, total_steps=n_steps)
        self._own_builder = builder is None  # a builder passed in outlives the panel (see ``close``)
        self.task = task or first_letter_task()
        self._busy = threading.Event()
        self._ending = threading.RLock()
        """Held by a start and by a run's end (``run_thread``): a click as the buttons come back waits for the ended
        run's last line, which overwrote the new run's "running" line."""
        # The last valid config of the form (params, schedule), taken at a start and at each valid edit: what a run
        # sends. A run read the form at each step, and a half-typed value, or a look at the locked tab, ended it.
        self._config: tuple[OptimizerParams, Schedule]
        self.own_step_fn = step_fn  # before ``take``, whose redraw marks the lesson not measured for it (``elsewhere``)
        # Find LR copies this session and probes this task, one at a time with the runs (a range test checkpoints
        # the session, and two trainings would share the cores): the hooks are the last panel's given the builder.
        turns.take(self)
        self.step_fn = step_fn or self._rl_step
        # Find LR probes ``own_step_fn`` (``own_probe``) by what its last step returned, these names:
        self.returned: tuple[str, ...] | None = None
        self._logs = step_fn is not None  # the default step logs its own figures (rl_step logs the RL metrics)
        self.step_button = W.Button(description="Step", icon="step-forward", button_style="primary")
        self.run_button = W.Button(description="Run N", icon="play")
        self.n = CountBox(
            value=n_steps, description="N", style={"description_width": "16px"}, layout=W.Layout(width="110px")
        )
        self.stop_button = W.Button(description="Stop", icon="stop", button_style="danger", disabled=True)
        self.progress = W.IntProgress(value=0, min=0, max=1, layout=W.Layout(flex="1 1 120px", max_width="220px"))
        self.line = StatusLine()
        self.status = self.line.widget
        self._note = ScheduleNote()
        self.schedule_line, self.warning = self._note.line, self._note.warning
        self.warnings: list[str] = self._note.warnings
        """The warning shown now (the schedule's end passed), or none: the current figures, not each version said
        while the form was edited."""
        default = step_fn is None
        self.focus_back = FocusBack(self.step_button)
        """Gives the focus back to Step as a Step ends, if the person is still at the panel (``run_thread.refocus``)."""
        self.live = LiveView(
            session.history,
            metrics=("reward",) if default else None,
            every=every,
            rows=6,
            loss=not default,  # the GRPO loss is ≈0 by construction: watch the reward
            learning_rate=not default,  # the schedule preview above and the table show it
        )
        self.widget = fit.panel_widget(self)
        self.error: BaseException | None = None
        """The exception that stopped the last run (or refused a start), if any."""
        self._stop = threading.Event()
        self.stop_at = -math.inf
        """When the last Stop was asked (``outage.stop``): one before the server stopped answering keeps waiting."""
        self._ended = threading.Event()
        """Set at a run's real end, its last line included (``run_thread``); cleared before ``running`` says a run
        goes: ``join`` waits for it (the thread's own join would return at once before the thread is made)."""
        self._ended.set()
        self._thread: threading.Thread | None = None  # the last run's: a join from its own step is refused
        self.waits_on: threading.Thread | None = None
        """The thread whose step the run waits for, if it waits (its ``join`` is refused: ``run_thread.join``)."""
        self.focus_after: W.Button | None = None
        """The button the keyboard's focus goes back to when the run ends: the one clicked to start it, if any."""
        self._closed = False
        self.step_button.on_click(lambda b: self._clicked(b, 1))
        self.run_button.on_click(lambda b: self._clicked(b, whole(self.n.value)))
        self.stop_clicked = False
        """Whether a click on Stop ended the run: the person is at the panel, the kernel gives the focus back."""
        self.stopped_by: RunPanel | None = None
        """The panel whose Stop, clicked, ended this run: the person is at that one (``focus_back.to_stopper``)."""
        self.stop_button.on_click(self._on_stop_click)
        self._unfollow = self.builder.on_change(self._builder_changed)
        self.n.observe(self._n_changed, names="value")
        self._step = session.step
        """The session's step as the panel last read it (at its start, and at each step of a run): an edit of
        the form shows the schedule at this step, without asking a remote server (one that had gone held the
        kernel ~13 s per keystroke, then raised)."""
        # subscribed before the buttons read ``session.closed``: a close between the two would never be heard (held
        # weakly: the session keeps no panel alive; a session closed already is said at once)
        self._unhear = session.on_close(self._session_closed)
        self._show_ready()
        self._sync_buttons()
        self._sync_schedule()
        turns.opened(self)

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    @property
    def step_timeout(self) -> float | None:
        """Seconds a step of a run waits for another thread's step on the session (a cell's ``rl_step``), saying so in
        the status line, before ``SessionBusy`` stops the run (None: no limit); a Stop ends the wait. Checked when
        set: a bad one set later stopped the next run naming ``timeout``."""
        return self._step_timeout

    @step_timeout.setter
    def step_timeout(self, seconds: float | None) -> None:
        self._step_timeout = check_timeout("step_timeout", seconds)

    @property
    def running(self) -> bool:
        """Whether a run is going on its background thread."""
        return self._busy.is_set()

    def start(self, n: int) -> bool:
        """Run ``n`` steps on a background thread. Returns False, saying why in the status line (and in
        ``error``), when it cannot: the session is closed, ``n`` is not an integer >= 1, or the config is
        refused; while a run is going, False alone (its line and ``error`` stay the run's).
        A closed panel raises ``RuntimeError``: it has no status line left to say so."""
        if self._closed:
            raise RuntimeError("this RunPanel is closed: make a new one to run more steps")
        with self._ending:  # a run's end takes it too (``run_thread``)
            return run_thread.start(self, n)

    def _clicked(self, button: W.Button, n: int) -> None:
        """Step or Run N: the button disables itself as the run starts, so the focus goes on to Stop (a keyboard's
        would drop to the page, Stop a few Tabs away), and back to ``button`` as the run ends, when and how
        ``run_thread.refocus`` says."""
        if self.start(n):
            self.focus_after = button
            self.stop_button.focus()

    def _on_stop_click(self, _button: W.Button) -> None:
        self.stop_clicked = True  # before the stop: the run's end reads it (``run_thread.refocus``)
        self.stopped_by = None  # the person is at this panel now, not at one whose Stop they clicked before
        self._halt(clicked=True)

    def stop(self) -> None:
        """Ask the run, or the Find LR, to stop after the step in progress; also the run of another panel on
        this session (one whose cell was run again is out of sight, and only this Stop can reach it)."""
        self._halt(clicked=False)

    def _halt(self, clicked: bool) -> None:
        """``stop``; ``clicked``: by a click on Stop, which gives this panel the focus as another panel's run it
        stopped ends (``focus_back.to_stopper``)."""
        outage.stop(self)
        self.builder.lr_finder.stop()
        with self._ending:  # a run that ended between the check and the line was left saying "stopping …"
            if self.running:
                self.line.show("stopping after this step …")
        if turns.stop_others(self, clicked):
            self.line.show("asked the other panel's run on this session to stop after its step in progress")

    def join(self, timeout: float = JOIN_DEADLINE) -> bool:
        """Wait until the run ``running`` reports has ended, its last line included (from its first moment: it is
        running before its thread is made); False if it is still going after ``timeout`` seconds (default
        ``JOIN_DEADLINE``: a step that hangs does not hang the kernel). ``RuntimeError`` at once from its own step, or
        from the thread whose step the run waits for (inside ``with session.stepping():``)."""
        timeout = check_seconds("timeout", timeout)
        if threading.current_thread() is self._thread:  # it waited for itself, for the whole deadline
            raise RuntimeError(
                "join() from the run's own step (or a close in it) would wait for itself: stop() ends it"
            )
        return run_thread.join(self, timeout)

    def _rl_step(self, session: Session, params: OptimizerParams) -> dict[str, float]:
        """The default step: one RL step of the panel's task (``steps.rl_figures``)."""
        return rl_figures(session, self.task, params)

    def _builder_changed(self, builder: OptimizerBuilder) -> None:
        if self.running:  # the form of another panel's session (given the builder since) is not this run's
            held = turns.elsewhere(self)
            self.line.held = (
                taken_mid_run(self, builder) if held is None else f"{held}; the run goes on with its config"
            )
            self.line.show_run()
        self._sync_buttons()
        self._sync_schedule()

    def _sync_schedule(self, step: int | None = None) -> None:
        """Show where the next step (``step``: default the session's as last read, ``_step``) is on the schedule
        sent (``steps.sent_schedule``)."""
        self._note.show(*sent_schedule(self), step=self._step if step is None else step)

    def _n_changed(self, _change: Any) -> None:
        problem = n_problem(whole(self.n.value))
        (self.n.remove_class if problem is None else self.n.add_class)(INVALID)
        self._sync_buttons()  # before the line: else it would say "ready" while Run is still disabled
        self.line.n_problem = "" if problem is None else str(n_problem(whole(self.n.value), why=False))
        if problem is not None and not self.running:
            self.line.show(html.escape(str(problem), quote=False), error=True)
        else:  # during a run, after the run's line, which it replaced
            self.line.show_run() if self.running else self._show_ready()

    def _show_ready(self) -> None:
        waits = turns.taken(self) or turns.elsewhere(self)
        self.line.ready(self.session, self._step, waits, turns.form_closed(self), self._finding(), self.form_problem())

    def form_problem(self) -> str | None:
        """Why the form cannot be sent (Step and Run off), as the line says it; None while it is valid."""
        return None if self.builder.valid else "fix the optimizer form: " + "; ".join(self.builder.errors)

    def _finding(self) -> bool:
        """Whether this panel's own Find LR runs (its Step and Run off meanwhile), no run of its own going."""
        finder = self.builder.lr_finder
        return finder.running and not self.running and getattr(self.builder, "panel", None) is self

    def _sync_buttons(self) -> None:
        busy, finding = self.running, self.builder.lr_finder.running
        waits = None if busy else turns.taken(self)
        held = None if busy else turns.form_closed(self) or turns.elsewhere(self)  # no form, or another session's
        off = busy or finding or waits or held or not self.builder.valid or self.session.closed
        self.step_button.disabled = bool(off)
        self.run_button.disabled = bool(off) or n_problem(whole(self.n.value)) is not None
        self.stop_button.disabled = not (busy or finding) and waits is None
        said = held if self.builder.closed else waits or held  # the reason ``_show_ready`` gives first
        said = said or (FINDING if self._finding() else None) or (None if busy else self.form_problem())
        if self.line.stale(said, busy):  # "ready" once Step is: a click on reading it is not lost
            self._show_ready()
        self.builder.lr_finder.sync()

    def _session_closed(self) -> None:
        """The session closed (in another cell, a ``with`` block's end): Step, Run and Find LR off and the line saying
        so at once, not "ready" until a click is refused. A run or Find LR going says so at its end."""
        with self._ending:  # not under a run's end drawing its last line
            if not self._closed:
                self._sync_buttons()
                if not (self.running or self.builder.lr_finder.running):
                    self._show_ready()

    def close(self, timeout: float = 60.0) -> None:
        """Stop any run or Find LR and wait for it (``TimeoutError`` if a step is still going after
        ``timeout`` seconds; the panel then stays open), stop following the history and close the widgets. A
        builder passed in stays open, without the panel's hooks, to be shown again or given to another panel. A
        second close does nothing."""
        if self._closed:
            return
        self.stop()
        deadline = time.monotonic() + timeout
        if not self.join(timeout) or not self.builder.lr_finder.join(max(0.0, deadline - time.monotonic())):
            raise TimeoutError(f"the run was asked to stop but a step is still going after {timeout} s")
        self._closed = True
        self._unhear()
        turns.release(self)
        turns.closed(self)
        self._unfollow()
        if not self._own_builder:
            self.widget.children = [c for c in self.widget.children if c is not self.builder.widget]
        self.live.close()
        close_tree(self.widget)

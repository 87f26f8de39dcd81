"""A RunPanel's run on its background thread: its start (marked running before its thread starts, unmarked if it
cannot), its steps, and its end in the order a person acts on it: the last redraw, then Step and Run enabled (and the
keyboard's focus on the button that started the run), then the status line saying how the run ended. The line said
"stopped: ..." first, while the live view redrew, and a click straight after reading it hit a disabled button."""

from __future__ import annotations

import contextlib
import html
import threading
import time
from typing import Any

from rlnb.params import SUBMIT_AGAIN
from rlnb.session.step_turn import WAIT_SLICE, told
from rlnb.widgets import focus_back, outage, turns
from rlnb.widgets.status_line import FINDING, RED
from rlnb.widgets.steps import done_text, failure_text, log_figures, waiting_text

NEXT_STEP = ": your next Step applies them together with its own batch's"
"""What a run stopped by a refused optim-step (a server's: the panel checked what it could) says in the session's
``SUBMIT_AGAIN`` stead: the panel has no bare optim-step to submit, and each Step samples a new batch."""


def start(panel: Any, n: Any) -> bool:
    """``RunPanel.start``'s work, under its ``_ending`` lock: ``n`` steps on a new thread (``run``), or False and the
    line saying why not; the panel is marked running before its thread starts, and unmarked if it cannot."""
    problem = turns.refusal(panel, n)
    if problem is not None and panel.running:
        return False  # a second click: the line and ``error`` stay the run's (else a success would show as failed)
    if problem is not None:
        panel.error, waits = problem, turns.taken(panel) or turns.elsewhere(panel)
        if waits is None and panel.builder.lr_finder.running:  # its own: the refusal stays until the test ends
            waits = FINDING if panel._finding() else str(problem)
        panel.line.refused(problem, waits)
        panel._sync_buttons()
        return False
    n = int(n)  # a numpy integer too: the progress bar and the status take a plain one
    panel._stop.clear()
    panel.stop_clicked, panel.stopped_by = False, None
    panel.error, panel.line.held, panel.line.waits = None, "", None
    # what the run sends until a valid edit (the form is valid: ``refusal`` checked it)
    panel._config = (panel.session.check_params(panel.builder.params), panel.builder.get_schedule())
    panel.progress.max, panel.progress.value = n, 0
    thread = panel._thread = threading.Thread(target=run, args=(panel, n), name="rlnb-run-panel", daemon=True)
    panel._ended.clear()
    panel._busy.set()
    try:
        turns.follow(panel)  # Step and Run off before the line says the run started (as its end: on, then said)
        # said before the first step, which can take minutes: not "ready", or the last run's error, until then
        # (not the session's step: a GET on a remote session, on the kernel's thread)
        panel.line.show_run(f"running: 0/{n} done …")
        thread.start()
    # said, not a panel left marked running with no thread, for good; an interrupt of the kernel too, then raised
    except BaseException as exc:  # noqa: BLE001
        if thread.is_alive():  # started: its end brings the panel back
            raise
        panel._busy.clear()
        panel.error = exc
        buttons_back(panel)
        panel.line.show(f"not started: {failure_text(exc)}", error=True)
        panel._ended.set()
        if not isinstance(exc, Exception):
            raise
        return False
    return True


def run(panel: Any, n: int) -> None:
    """Run ``n`` steps of ``panel`` (the thread's target), until its Stop; every failure of a step is shown, none lost.
    Each step holds the session's turn (``Session.stepping``): a ``step_fn`` of one's own is kept apart from another
    thread's ``rl_step`` as ``rl_step`` is.
    The session's step as last read is the line's: reading it is a GET on a remote session, which would fail again in
    the handler of a server that has gone (the error escaping, the status staying green)."""
    done, seen, said, error = 0, str(panel._step), "", False  # the step last read: its GET may fail (a server gone)
    try:
        outage.watch(panel)
        step = panel._step = panel.session.step
        seen = str(step)
        for _ in range(n):
            if panel._stop.is_set():
                break
            if panel.session.closed:  # closed in another cell: a step_fn that did not call it stepped on
                raise turns.closed_session(panel.session)
            # the session's turn: a cell's rl_step on this session waits for this step, and this step for the cell's
            with contextlib.ExitStack() as turn:
                try:
                    waited = _take_turn(panel, turn, int(step), done, n)
                except _WaitEnded:
                    if panel._stop.is_set():
                        break
                    raise turns.closed_session(panel.session) from None
                if panel._stop.is_set():  # a Stop as it got the turn
                    break
                if waited:  # another thread's step went first: the schedule's step is the session's now
                    step = panel._step = panel.session.step
                    seen = str(step)
                # read once the turn is the run's: an edit of the form during a wait is sent with this step
                base, schedule = panel._config
                params = base.scaled(schedule.multiplier(step))
                panel.session.check_params(params)
                returned = panel.step_fn(panel.session, params)
            done += 1
            panel.progress.value = done
            step = panel._step = panel.session.step
            seen = str(step)  # the step ran: a refused figure stops the run after it, and says so
            figured = log_figures(panel.session, step, returned, panel._logs)
            panel.returned = tuple(figured or ())
            panel.line.show_run(done_text(step, done, n, figured))
            panel._sync_schedule(step)
        said = f"step {seen} · " + (f"stopped early after {done} of {n}" if done < n else f"{n} done")
    # BaseException too: a step's SystemExit (argparse reading the kernel's argv) ended the thread silently, the
    # status line still green and ``error`` None
    except BaseException as exc:  # noqa: BLE001
        panel.error, error = exc, True
        seen = _step_after(panel, seen)  # a step_fn that raised past its optim-step: the lines at the session's step
        said = f"step {seen} · stopped: {failure_text(exc).replace(SUBMIT_AGAIN, NEXT_STEP)}"
    finally:
        try:
            _end(panel, said, error)
        finally:
            panel._ended.set()  # ``join`` returns: the run has ended, its line said


class _WaitEnded(Exception):
    """A Stop, or the session's close, while the run waited for another thread's step (``_take_turn``)."""


def _take_turn(panel: Any, turn: contextlib.ExitStack, step: int, done: int, n: int) -> bool:
    """The session's step turn for the run's next step, held on ``turn``; whether it waited for another thread's
    step, the line saying whose until ``panel.step_timeout`` (then ``SessionBusy``), and the run's own line again once
    the turn is the run's. ``_WaitEnded`` if a Stop or the session's close ended the wait. Meanwhile ``waits_on`` is
    the thread it waits for (``join``)."""
    said: list[threading.Thread] = []
    before = panel.line.run

    def waiting(holder: threading.Thread) -> None:
        if panel._stop.is_set() or panel.session.closed:
            raise _WaitEnded
        if said != [holder]:  # the run's line, so an edit of the form mid-wait keeps it (``show_run``)
            said[:] = [holder]
            panel.waits_on = holder
            panel.line.show_run(waiting_text(holder, step, done, n, panel.step_timeout))

    try:
        with told(waiting):
            turn.enter_context(panel.session.stepping(panel.step_timeout))
    finally:
        panel.waits_on = None
    if said:
        panel.line.show_run(before)
    return bool(said)


def join(panel: Any, timeout: float) -> bool:
    """``RunPanel.join``'s wait: True once the run has ended, False after ``timeout`` seconds, a ``RuntimeError`` at
    once from a thread the run waits for: ``join()`` inside ``with session.stepping():`` would wait for a run that waits
    for the block, and hang the kernel for the whole deadline."""
    me, end = threading.current_thread(), time.monotonic() + timeout
    while not panel._ended.wait(min(WAIT_SLICE, max(0.0, end - time.monotonic()))):
        # not once a Stop or the session's close is sent: the wait ends at its next slice (a close() in that block)
        if panel.waits_on is me and not (panel._stop.is_set() or panel.session.closed):
            raise RuntimeError(
                "join() waits for a run that waits for the step this thread holds (with session.stepping(), or an "
                "rl_step): end that block first, or stop() the run"
            )
        if time.monotonic() >= end:
            return False
    return True


def _step_after(panel: Any, seen: str) -> str:
    """The session's step after a step that raised (a step_fn may raise past its optim-step), read again where that is
    no network call, and ``panel._step`` with it (the schedule line's): on a remote session, ``seen`` as it is (its GET
    would fail again, slowly, on a server that has gone)."""
    from rlnb.remote.backend import RemoteBackend

    if isinstance(panel.session.backend, RemoteBackend):
        return seen
    try:
        step = panel._step = panel.session.step
    except Exception:  # noqa: BLE001 - a closed or broken session: the step as last read
        return seen
    return str(step)


def _end(panel: Any, said: str, error: bool) -> None:
    """The run's last redraw, then its buttons back, then ``said``. Under the panel's ``_ending`` lock, which a start
    takes too: else a click as Step comes back could start a run whose "running" line this run's end then overwrites.
    A failure to bring the buttons back is said after how the run ended (not Step and Run left off and the line at
    the last step's progress, the error in the thread's excepthook only), and is the panel's ``error`` if the run had
    none."""
    try:
        with contextlib.suppress(Exception):  # shown on the live view, kept in live.error
            panel.live.refresh()
    finally:
        with panel._ending:
            panel._busy.clear()
            panel.line.held = panel.line.outage = ""
            panel.builder.clear_notice()  # a click on the locked tab mid-run: "the run goes on" is over
            failed = buttons_back(panel)  # its buttons, and those of another panel that waited for this run
            try:
                panel._sync_schedule()  # the form's schedule again (an invalid form's: none), not the run's
            except Exception as exc:  # noqa: BLE001  said below
                failed = failed or exc
            refocus(panel)
            if failed is not None:
                panel.error = panel.error if error else failed
                said, error = f"{said} · then its buttons failed: {failure_text(failed)}", True
            # Run off after it: why (the N field); Step and Run off for good (the builder closed, or given to a panel
            # on another session), or until the form is valid: why, which ``_sync_buttons`` said just before this line
            # replaced it
            shut = turns.form_closed(panel) or turns.elsewhere(panel) or panel.form_problem()
            why = f" · <span style='color:{RED}'>{html.escape(shut, quote=False)}</span>" if shut else ""
            panel.line.show(said + panel.line.n_said() + why, error=error)


def buttons_back(panel: Any) -> Exception | None:
    """Step, Run N and Stop as they must be now that ``panel`` runs no more (``turns.follow``: on every panel it shares
    a session or builder with), and the failure if that failed. Then this panel's own are set anyway, and if even that
    fails, Step and Run on and Stop off: a click that cannot start a run is refused, saying why (``turns.refusal``)."""
    try:
        turns.follow(panel)
        return None
    except Exception as exc:  # noqa: BLE001  returned, for the line to say
        try:
            panel._sync_buttons()
        except Exception:  # noqa: BLE001  the failure returned is the first one
            panel.step_button.disabled = panel.run_button.disabled = False
            panel.stop_button.disabled = True
        return exc


def refocus(panel: Any) -> None:
    """The keyboard's focus back on the button whose click started the run and moved it to Stop
    (``RunPanel._clicked``): disabled as the run ended, Stop dropped it to the page, a keyboard's next Enter lost.
    After a click on Stop the person is at the panel: the kernel moves it. A Step that ends by itself (a slow model's
    can take minutes) asks the browser (``focus_back``), which moves it only from nothing or the panel: ``focus()``
    took it from the cell the person had moved on to, and their next Enter started a run. A Run N that ends by itself,
    or is stopped from code, moves none. One ended by a click on another panel's Stop gives that panel the focus."""
    button, panel.focus_after = panel.focus_after, None
    stopper, panel.stopped_by = panel.stopped_by, None
    if stopper is not None:  # the person is at the panel whose Stop they clicked, not at this one
        focus_back.to_stopper(stopper)
        return
    if button is None or button.disabled:
        return
    if panel.stop_clicked:
        button.focus()
    elif button is panel.step_button:
        panel.focus_back.offer()

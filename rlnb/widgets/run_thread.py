"""A RunPanel's run on its background thread: its steps, and its end in the order a person acts on it: the last
redraw, then Step and Run enabled, then the status line saying how the run ended. The line said "stopped: ..." first,
while the live view redrew, and a click straight after reading it hit a disabled button."""

from __future__ import annotations

import contextlib
from typing import Any

from rlnb.widgets import turns
from rlnb.widgets.steps import done_text, failure_text, log_figures


def run(panel: Any, n: int) -> None:
    """Run ``n`` steps of ``panel`` (the thread's target), until its Stop; every failure of a step is shown, none lost.
    The session's step as last read is the line's: reading it is a GET on a remote session, which failed again in the
    handler of a server that had gone (the error escaped, the status stayed green)."""
    done, seen, said, error = 0, "?", "", False
    try:
        step = panel._step = panel.session.step
        seen = str(step)
        for _ in range(n):
            if panel._stop.is_set():
                break
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
        said = f"step {seen} · stopped: {failure_text(exc)}"
    finally:
        _end(panel, said, error)


def _end(panel: Any, said: str, error: bool) -> None:
    """The run's last redraw, then its buttons back, then ``said``. Under the panel's ``_ending`` lock, which a start
    takes too: a click as Step came back started a run whose "running" line this run's end then overwrote."""
    try:
        with contextlib.suppress(Exception):  # shown on the live view, kept in live.error
            panel.live.refresh()
    finally:
        with panel._ending:
            panel._busy.clear()
            panel.line.held = ""
            turns.follow(panel)  # its buttons, and those of another panel that waited for this run
            panel._sync_schedule()  # the form's schedule again (an invalid form's: none), not the run's
            panel.line.show(said, error=error)

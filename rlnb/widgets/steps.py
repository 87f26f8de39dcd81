"""One step of a RunPanel apart from its widgets: what a panel is given to step with, what a step function is and
must return, the default RL step, and the status line's words for a step done or failed (the panel keeps the
thread, the buttons and the lines)."""

from __future__ import annotations

import html
import reprlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rlnb import wire
from rlnb._input.checks import takes
from rlnb.errors import OperationFailed
from rlnb.params import OptimizerParams
from rlnb.params.schedule import Schedule
from rlnb.session import Session
from rlnb.tasks import EVAL_ACCURACY, EVAL_EVERY, Task, VerifiedTask, check_steps, rl_step
from rlnb.viz.draw import short
from rlnb.widgets.describe import base_rates

if TYPE_CHECKING:  # the builder holds Find LR, whose probe of a panel's own step_fn reads this module
    from rlnb.widgets.builder import OptimizerBuilder

StepFn = Callable[[Session, OptimizerParams], dict[str, float] | None]
"""``step_fn(session, params)`` runs one training step and returns figures to log (or None)."""


def check_given(session: object, task: object, step_fn: object) -> None:
    """A panel's ``session``, ``task`` and ``step_fn``, checked when it is made (each wrong one would fail later, or at
    once naming none of them; its ``builder``: ``builder.check_builder``)."""
    if not isinstance(session, Session):  # None: "'NoneType' object has no attribute 'optimizer'"
        raise TypeError(f"session must be an rlnb Session (rlnb.connect(...)), got {session!r}"[:300])
    if task is not None and not isinstance(task, Task):  # Run would fail: "'str' object has no attribute 'group_size'"
        raise TypeError(f"task must be a Task, such as first_letter_task(), or None (that task), got {task!r}")
    if step_fn is not None and not takes(step_fn, 2):  # Run failed: "'str' object is not callable" (or lr_find's i)
        raise TypeError(f"step_fn must be None or a function step_fn(session, params), got {step_fn!r}")
    if step_fn is not None and task is not None:  # the step_fn runs and reads no task: it would be dropped
        raise ValueError("task= and step_fn= both say what a step of the panel runs (a step_fn reads no task): "
                         "pass one")  # fmt: skip


def n_problem(n: object, why: bool = True) -> ValueError | None:
    """Why ``n`` cannot be the number of steps of a run (the N field, ``start(n)``), or None: ``check_steps``'s
    range, [1, ``MAX_STEPS``], the one bound of every entry that runs steps (N too: 10**12 is refused); the reason for
    the bound if ``why`` (not after a run's line, where it buried the run's progress)."""
    try:
        check_steps(n, name="N", why=why)
    except ValueError as exc:
        return exc
    return None


def figures(returned: object) -> dict[str, Any] | None:
    """A step function's answer: ``None`` or a dict of named figures. Anything else (the loss as a bare number) was
    ``History.log() argument after ** must be a mapping, not float``, naming neither the step function nor the fix."""
    if returned is None or (isinstance(returned, dict) and all(isinstance(k, str) for k in returned)):
        return returned
    raise TypeError(
        f"step_fn must return None or a dict of figures to log, such as {{'accuracy': 0.5}}, with str names; "
        f"got {type(returned).__name__} {reprlib.repr(returned)}"
    )


def rl_figures(session: Session, task: Task, params: OptimizerParams) -> dict[str, float]:
    """One RL step of ``task``, its figures logged here: rl_step logs the reward, which the panel logged once more
    (two rows per step in ``history.logged``, the run folder and every sink). Returns them for the status."""
    report = rl_step(session, task, params)
    out = {"reward": report.reward}
    if isinstance(task, VerifiedTask) and report.step % EVAL_EVERY == 0:
        out[EVAL_ACCURACY] = task.evaluate(session)  # the step's weights are synced: reward vs learning
        session.history.log(report.step, **{EVAL_ACCURACY: out[EVAL_ACCURACY]})
    return out


def log_figures(session: Session, step: int, returned: object, log: bool) -> dict[str, Any] | None:
    """What a step function returned at ``step`` (which ran), as ``figures``, logged if ``log``, each as the float
    logged: a value ``history.log`` takes (``torch.tensor([0.5])``, a ``Fraction``) would otherwise fail the status
    line's format after it was logged, ending the run. A figure that ``history.log`` refuses stops the run with a
    ``ValueError`` naming ``step_fn`` and saying the step ran, not ``history.log``, which the person never called,
    with the line giving the step before, as if it had not run."""
    figured = figures(returned)
    if not (figured and log):
        return figured
    try:
        session.history.log(step, **figured)
        return {name: float(value) for name, value in figured.items()}  # each one history.log took as a float
    except ValueError as exc:
        said = str(exc).removeprefix("history.log: ")
        raise ValueError(f"step_fn's figures of step {step} were not logged (the step ran): {said}") from exc


def taken_mid_run(panel: Any, builder: OptimizerBuilder) -> str:
    """An edit of the form while ``panel``'s run goes: a valid config is taken (``panel._config``: sent from the next
    step), any other is not, and the run goes on with the last valid one (a half-typed value ended the run). A click
    on the locked tab is put back: nothing on it can be sent. Returns why the edit is not sent, for the status line,
    or ''."""
    locked, kind = builder.locked, builder.kind
    if locked is not None and kind != locked:
        why = (f"put back to {locked.capitalize()}: the {kind.capitalize()} tab is locked (this session's optimizer "
               f"is {locked}); the run goes on with its config")  # fmt: skip
        builder.selection.notice = why
        builder.kind = locked  # a redraw of the builder: this is called again, the form valid
        return why
    if not builder.valid:
        problems = "; ".join(builder.errors)
        return f"your edit is not used until the form is valid ({problems}); the run goes on with the last valid config"
    try:
        params = panel.session.check_params(builder.params)
    except TypeError as exc:  # a builder locked to another panel's session since
        return f"your edit is not used: {exc}; the run goes on with the last valid config"
    panel._config = (params, builder.get_schedule())
    return ""


def sent_schedule(panel: Any) -> tuple[Schedule | None, tuple[float, ...], str]:
    """The schedule a step of ``panel`` sends, its base rates, and why it is not the form's, for the schedule line:
    the form's; during a run, the run's (``panel._config``), saying so while an edit is not used (an empty line while
    the form is invalid mid-run would hide the schedule the run goes on with); none while the form is invalid and no
    run goes."""
    if panel.running:
        params, schedule = panel._config
        held = "the run's schedule: your edit is not used until the form is valid" if panel.line.held else ""
        return schedule, base_rates(params), held
    try:
        return panel.builder.get_schedule(), base_rates(panel.builder.params), ""
    except ValueError:
        return None, (), ""


def done_text(step: int, done: int, n: int, figures: dict[str, Any] | None) -> str:
    """The status line after a step of a run: ``step 3 · 3/20 done · reward 0.5``, the names escaped."""
    return f"step {step} · {done}/{n} done" + "".join(
        f" · {html.escape(k, quote=False)} {v:.3g}" for k, v in (figures or {}).items()
    )


def waiting_text(holder: threading.Thread, step: int, done: int, n: int, timeout: float | None) -> str:
    """The status line while a run waits for ``holder``'s step on its session, for at most ``timeout`` seconds (None:
    no limit). A notebook cell's step runs on the kernel's main thread, and a click on Stop is handled only once that
    cell ends: the line says the run goes on then, and offers Stop only for a step on a thread of its own."""
    limit = "no limit" if timeout is None else f"at most {timeout:g} s"
    if holder is threading.main_thread():
        said = f"waiting for the session: another cell's step holds it (the run goes on when that cell ends; {limit})"
    else:
        said = f"waiting for the session: a step on thread {holder.name!r} holds it ({limit}; Stop ends the wait)"
    return f"step {step} · {done}/{n} done · " + html.escape(said, quote=False)


def failure_text(exc: BaseException) -> str:
    """What stopped a run, for the status line: a failed operation by its error code and message, anything else
    by its type and message; escaped."""
    if isinstance(exc, OperationFailed):
        what, message = short(exc.code) or wire.OperationStatus.FAILED.name, exc.message or str(exc)
    else:
        what, message = type(exc).__name__, str(exc)
    said = f"<b>{html.escape(what, quote=False)}</b>"
    return f"{said} — {html.escape(message, quote=False)}" if message else said  # a bare interrupt: no dash to nothing

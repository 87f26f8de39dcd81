"""What Find LR's range test probes, and how its status line says it: a RunPanel's own ``step_fn`` (adapted by
``own_probe``), else ``lr_finder.options``'s ``step_fn`` or ``task``, else the task of the RunPanel holding the
builder (added at each test, never kept in ``options``, which the person may set whole), else ``lr_find``'s default,
the digits task. A step_fn reads no task, and ``lr_find`` refuses the two together: the panel's task is not added
beside one; a task the person set is kept, and the test says why."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlnb.tasks import digits_task
from rlnb.widgets.own_probe import OwnStep, objective_of


def own_step(builder: Any, options: Mapping[str, Any]) -> OwnStep | None:
    """The step_fn of the RunPanel holding ``builder`` as ``lr_find``'s, or None: no panel, a panel's RL task, or
    a ``step_fn`` or a task of the person's in ``options`` (each wins over the panel's step_fn). ``ValueError`` saying
    why and how when that step_fn cannot be probed (its last step had no reward or loss): it probed the first_letter
    task instead."""
    panel: Any = getattr(builder, "panel", None)
    step_fn = getattr(panel, "own_step_fn", None)
    if step_fn is None or options.get("step_fn") is not None or options.get("task") is not None:
        return None
    return OwnStep(step_fn, *objective_of(panel.session, panel.returned, options.get("objective")))


def step_options(builder: Any, options: Mapping[str, Any], own: OwnStep | None) -> dict[str, Any]:
    """``options`` as ``lr_find`` takes them: with ``own`` (``own_step``) as the step_fn and its objective, else the
    task of the panel holding ``builder`` where they name no task and no step_fn (read here, at each test: kept in
    ``options``, it went with a dict set whole, and the test probed the digits task)."""
    given = dict(options)
    if own is not None:
        given["step_fn"], given["objective"] = own, own.objective
    panel: Any = getattr(builder, "panel", None)
    if panel is not None and given.get("step_fn") is None and given.get("task") is None:
        given["task"] = panel.task
    return given


def probe(options: Mapping[str, Any], own: str | None = None) -> str:
    """What a range test runs, in words: ``the first_letter task`` (a RunPanel's), ``the digits task``
    (``lr_find``'s default), ``your step_fn``, ``your step_fn's loss`` (a panel's, following ``own``)."""
    if own is not None:
        return f"your step_fn's {own}"
    if options.get("step_fn") is not None:
        return "your step_fn"
    return task_probe(getattr(options.get("task") or digits_task(), "name", "?"))


def task_probe(name: str) -> str:
    """A range test of the task ``name``, in words (``the first_letter task``): what the status line compares."""
    return f"the {name} task"

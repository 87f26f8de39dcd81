"""What a live view's lines are fed, as the step log grows: each settled step's loss, norms, clip threshold and
learning rate (a step that comes again: every step fed again in step order, each once with its last row); each
logged figure to its own panel (made when first seen, where the view shows every figure) or, ``eval/accuracy``, to
the reward's; and a figure logged late (step 2's after step 5's) fed again, in step order."""

from __future__ import annotations

import itertools
import math
from typing import Any

from rlnb.history.figures import EVAL_ACCURACY, StepRow
from rlnb.viz.livepanels import NORMS
from rlnb.viz.livetables import RL_TABLE
from rlnb.viz.names import long_name
from rlnb.viz.series import Series

STEP_LINES = ("loss", *NORMS, "learning_rate")


def feed(view: Any, rows: list[StepRow], logs: list[dict[str, Any]]) -> set[str]:
    """``rows`` (settled steps) and ``logs`` (figures given to ``history.log``) fed to ``view``'s lines; the names of
    the panels whose data changed."""
    changed: set[str] = set()
    clip = view.series["grad_clip_norm"]  # fed at every row
    steps = [clip.last_x if clip.n else -math.inf, *(row.step for row in rows)]
    if any(b <= a for a, b in itertools.pairwise(steps)):  # a step again (a run continued from step 0): the lines
        # would run back across the panel; fed again, in step order, each step once with its last row, as plots.loss
        fed = view.history.step_log.settled(0)[: view._rows_seen]
        rows = [row for _, row in sorted({row.step: row for row in fed}.items())]
        for col in (*STEP_LINES, "grad_clip_norm"):
            if col in view.series:
                view.series[col] = Series(view.ema)
    for row in rows:
        for col in STEP_LINES:
            if col in view.series:
                view.series[col].add(row.step, getattr(row, col))
        threshold = row.grad_clip_norm
        view.series["grad_clip_norm"].add(row.step, threshold if threshold > 0 else math.nan)  # 0 = clipping off
    if rows:
        changed |= {"loss", "grad_norm", "learning_rate"} & set(view.panels)
    late: set[str] = set()
    for entry in logs:
        for name, value in entry.items():
            if name == "step":
                continue
            if name == EVAL_ACCURACY and name in view.series and name not in view.metrics:  # on the reward panel
                _add(view, name, entry["step"], value, late)
                changed.add("reward")
                continue
            if view.auto and name not in view.panels and name not in RL_TABLE:
                view.metrics.append(name)
                color = "C2" if len(view.metrics) == 1 else f"C{(len(view.metrics) + 3) % 10}"
                view._add_panel(name, long_name(name), color)
            if name in view.metrics:
                _add(view, name, entry["step"], value, late)
                changed.add(name)
    for name in late:  # logged late (step 2's after step 5's) or again: fed again, in step order, each step once with
        # the steps table's value: the last number logged there, NaN (a gap) where only NaN was
        points = view.history.step_log.step_values(name)
        view.series[name] = Series(view.ema)
        view.series[name].extend(list(points), list(points.values()))
    return changed


def _add(view: Any, name: str, step: int, value: float, late: set[str]) -> None:
    """``name``'s point fed to its line, and ``name`` put in ``late`` where its step is not past the line's last one
    (fed so, the line would go back across the panel, or draw a step twice: it is then fed again, in step order, each
    step once with its last value, as the static plots draw it)."""
    line = view.series[name]
    if line.n and step <= line.last_x:
        late.add(name)
    line.add(step, value)

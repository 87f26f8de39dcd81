"""What a range test found, said and set: the status line's words for an ``LRFind`` and **Apply**, which puts its
suggestion in the form (``rlnb.widgets.finder.LRFinderControls`` is the range test that finds it).
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import ipywidgets as W

from rlnb import wire
from rlnb.sweep import convert_muon_lr
from rlnb.sweep.lr.curve import significant
from rlnb.sweep.options import RangeTestOptions
from rlnb.widgets.find_probe import task_probe
from rlnb.widgets.muon_units import RED, MuonUnits
from rlnb.widgets.presets import Elsewhere, measured_model, measured_task
from rlnb.wire import OptimizerKind

EDGE_TASK = "first_letter"
"""The task the edge's 40-step figures are of (``Edge.learns``): a range test of another says none."""


@dataclass(frozen=True)
class Edge:
    """One optimizer's range test as measured, and what its suggestion did held constant for 40 steps."""

    learns: str
    """What the suggestion itself did, held from a session at ``session_step``, and the machine (bench/README.md,
    docs/tasks.md; an Intel Xeon's kernels gave Adam's tenth 7 of 10): Apply sets the edge, which for Adam does not
    train; the status line says so where it offers Apply."""
    session_step: int
    """The session's step the range test was measured at."""
    steps: int
    """The range test's steps measured."""


EDGE: dict[OptimizerKind, Edge] = {
    wire.ADAM: Edge(  # a fresh session, the widget's 30 steps (bench_lessons' ``reconcile``; bench_lessons_more's edge)
        learns=f"Adam's learned {EDGE_TASK} on none of seeds 0-9 (a tenth of it on 8), on an AMD EPYC",
        session_step=0,
        steps=30,
    ),
    wire.MUON: Edge(  # after notebook 05's Step and Run 5 (``bench_find_lr.py --notebook05``, ``--learns``); 40 steps,
        # lr_find's default (``--notebook05`` set the finder's options whole, without the widget's ``steps``)
        learns=f"Muon's learned {EDGE_TASK} on 7 of seeds 0-9 (a tenth of it on 7), on an AMD EPYC",
        session_step=6,
        steps=40,
    ),
}
"""Each optimizer's edge as measured, by kind."""
EDGE_RANGE = {"start_lr": None, "end_lr": None, "objective": "reward"}
"""The rest of the range test measured: ``lr_find``'s default range, of the reward."""
EDGE_WEIGHT_DECAY = 0.0
"""Adam's weight decay measured (bench_lessons' ``lrfind_run``: ``AdamParams(weight_decay=0.0)``)."""
EDGE_ADAM_RATIO = 0.04
"""Muon's AdamW rate over its own, measured: the default preset's 2e-3 beside 0.05 (``--notebook05``'s builder)."""
EDGE_SEEDS = range(10)
"""The sessions' seeds measured, 0-9. Adam's range test is of a fresh session of its own seed (``lrfind_run``);
Muon's copied a session of that seed with ``lr_find``'s default seed, 0 (``--notebook05`` set none)."""


def unlike_edge(
    optimizer: OptimizerKind, options: Mapping[str, Any], session: Any, model: Any, params: Any, step: int = 0
) -> list[str]:
    """What a range test has that ``EDGE`` was not measured with, in the status line's words (``[]``: the setup
    measured: ``first_letter_task()`` on ``tiny``, ``Edge.steps``, ``EDGE_RANGE``, a session at ``Edge.session_step``,
    ``EDGE_WEIGHT_DECAY`` or ``EDGE_ADAM_RATIO``, ``EDGE_SEEDS``). ``options`` as ``lr_find`` gets them; ``session``
    the one it copies (None: a fresh one of ``options``' model, else ``model``); ``params`` the config tested; ``step``
    the session's step as the test began (read after it, a remote session's GET failed where the server had gone)."""
    what: list[str] = []
    if options.get("step_fn") is not None:
        what.append(Elsewhere.STEP_FN)
    elif not measured_task(options.get("task")):
        what.append(Elsewhere.TASK)
    if not measured_model(session.history.config.get("model") if session is not None else options.get("model", model)):
        what.append(Elsewhere.MODEL)
    group = options.get("range_test") or RangeTestOptions()  # a name wins over the group given whole, as in lr_find
    measured = {**EDGE_RANGE, "steps": EDGE[optimizer].steps}
    if any(options.get(name, getattr(group, name)) != v for name, v in measured.items()):
        what.append("this range or number of steps")
    if step != EDGE[optimizer].session_step:
        what.append(f"a session at step {step}")
    return what + unlike_config(optimizer, params) + unlike_seed(optimizer, options.get("seed", group.seed), session)


def unlike_config(optimizer: OptimizerKind, params: Any) -> list[str]:
    """Adam's weight decay, or Muon's AdamW rate over its own, where it is not the one measured."""
    resolved = params.resolved()
    if optimizer == wire.ADAM and resolved.weight_decay != EDGE_WEIGHT_DECAY:
        return [f"weight decay {resolved.weight_decay:g}"]
    if optimizer == wire.MUON:
        ratio = resolved.adam.learning_rate / resolved.learning_rate
        if not math.isclose(ratio, EDGE_ADAM_RATIO, rel_tol=1e-9):
            return [f"AdamW at {ratio:.2g}× Muon's rate"]
    return []


def unlike_seed(optimizer: OptimizerKind, seed: int | None, session: Any) -> list[str]:
    """The range test's seed (None: 0), or its session's, where it is not one measured (``EDGE_SEEDS``)."""
    seed = seed or 0
    if session is None:  # a fresh session of the test's own seed, as Adam's were
        return [] if seed in EDGE_SEEDS else [f"seed {seed}"]
    own = session.history.config.get("seed")
    if own not in EDGE_SEEDS:
        return [f"a session of seed {own}"]
    return [] if seed == (own if optimizer == wire.ADAM else 0) else [f"seed {seed}"]


class Suggestion(MuonUnits):
    """The last range test's ``result`` (an ``LRFind``), its words (``describe``) and ``apply`` (the Apply button)."""

    result: Any
    apply_button: W.Button

    @staticmethod
    def describe(result: Any, probe: str, unlike: Sequence[str]) -> str:
        """What the status line says about a range test (of ``probe``, named when given): what its suggestion did held
        40 steps only where ``unlike`` (``unlike_edge``) is empty, the setup measured."""
        if result.suggestion is None:
            return result.reason + (f" ({probe})" if probe else "")
        rates = f"lr {result.suggestion:g}"
        if result.adam_ratio is not None:
            rates += f" (AdamW {result.params.adam.learning_rate:g})"
        rates += f" on {probe}" if probe else ""
        notes = (result.at_chance, result.ended and f"ended early: {result.ended}")  # each said whole, in parentheses
        noted = "".join(f" ({note})" for note in notes if note)
        if not unlike:
            did = f"held constant for 40 steps, {EDGE[result.optimizer].learns}"
        else:  # the probe names another task or a step_fn: said once
            named = probe == task_probe(EDGE_TASK)
            past = [w for w in unlike if named or w not in (Elsewhere.TASK, Elsewhere.STEP_FN)]
            past = ["this first_letter task (not first_letter_task()'s)" if w == Elsewhere.TASK else w for w in past]
            did = f"what it does held constant for 40 steps on {probe or 'this probe'} is not measured"
            did += f" for {' or '.join(past)}" if past else ""
        edge = "the upper edge of the useful range, which Apply sets"
        return f"suggested {rates} — {result.chosen}{noted}; {edge}: {did}. Sweep below it"

    def apply(self) -> None:
        """Put the last suggestion in the form (Muon: both rates). A Muon rate found in other units than the
        form's now (the units were switched since) is converted to them: as found, it would be another step
        size. The status line says what was set, and on which tab when it is not the one shown."""
        params = self.result.params if self.result is not None else None
        if params is None:
            return
        lr, found, units = params.learning_rate, self.result.muon_scaling, self.scaling.value
        said = ""
        if self.result.optimizer == wire.MUON and found is not None and found != units:
            if self.shapes is None:
                self._say(f"<span style='color:{RED}'>✗ not applied: the suggestion is in {found} units and the "
                          f"form's are {units} — {html.escape(self.scaling.tooltip)}</span>")  # fmt: skip
                return
            lr = significant(convert_muon_lr(lr, found, units, self.shapes)) if self.shapes else lr  # []: factor 1
            said = f" in {units} units (found as {params.learning_rate:g} in {found} units)"
        if self.result.optimizer == wire.ADAM:
            self.builder.adam["learning_rate"].value = lr
        else:
            self.builder.muon["learning_rate"].value = lr
            self.builder.muon_adam["learning_rate"].value = params.adam.learning_rate
            said += f" (AdamW {params.adam.learning_rate:g})"
        if self.result.optimizer != self.builder.kind:
            said += f" on the {self.result.optimizer.capitalize()} tab, the optimizer of the test, not the one shown"
        self.apply_button.disabled = True
        self._said = html.escape(f"applied lr {lr:g}{said}: the edge itself — sweep below it for a run")
        self._say(self._said)

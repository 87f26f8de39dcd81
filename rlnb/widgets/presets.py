"""Optimizer presets for the builder, each with the lesson it teaches and the claim that lesson makes.

Every claim is judged on ``rlnb.tasks.lesson.train`` of the first-letter task (``first_letter_task``, the
built-in ``tiny`` model, ``LESSON_STEPS`` RL steps at the preset's rates held constant) and holds on at least 9
of seeds 0-9 for both optimizers (``bench/bench_lessons.py``; hit rates in bench/README.md);
``tests/widgets/test_lessons.py`` checks seeds 0-2. The builder marks a lesson "not measured" under other values,
a schedule that moves the rate, another task or another model (``unmeasured``, ``elsewhere``).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from rlnb import wire
from rlnb.params import ADAM_FIELDS, MUON_ADAM_FIELDS, MUON_FIELDS
from rlnb.params.schedule import Schedule, rate
from rlnb.tasks import first_letter_task
from rlnb.tasks.lesson import LessonRun
from rlnb.tasks.verified import CHANCE_MARGIN
from rlnb.wire import optimizer_kind

LESSON_STEPS = 40
"""RL steps a preset's claim is made for."""
REWARD_BARELY = 0.05
"""A training reward below this has barely moved (a random policy scores ~1/256 on first_letter)."""
LEARNS_ACCURACY, LEARNS_REWARD = 0.8, 0.4
"""Held-out accuracy and training reward at or above which a run has learned."""
COLLAPSED_DISTINCT = 1.5
"""A collapsed run: at most this many distinct completions per group, and held-out accuracy at most chance +
``CHANCE_MARGIN``."""


AUX: Final = "muon.adam"
"""The form's pane (and a preset's values) of a Muon session's AdamW rates, beside ``wire.ADAM`` and ``wire.MUON``."""


def _preset(adam: tuple[float, float, float, float, float, float], muon: tuple[float, float, int, float, float]) -> Any:
    """One preset: the same AdamW values for an Adam session and for Muon's non-matrix weights (but for the clip: a
    Muon step clips one global norm, by Muon's own ``grad_clip_norm``)."""
    adam_values = dict(zip(ADAM_FIELDS, adam, strict=True))
    aux = {name: adam_values[name] for name in MUON_ADAM_FIELDS}
    return {wire.ADAM: adam_values, wire.MUON: dict(zip(MUON_FIELDS, muon, strict=True)), AUX: aux}


DEFAULT_PRESET = "Learns in 40 steps"
TOO_HIGH = "Too high (teaching)"
PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    # (lr, beta1, beta2, eps, weight decay, clip) / Muon (lr, momentum, Newton-Schulz steps, weight decay, clip)
    DEFAULT_PRESET: _preset((2e-3, 0.9, 0.95, 1e-8, 0.0, 1.0), (0.05, 0.95, 5, 0.0, 1.0)),
    # The values in Together's optim-step reference example.
    "Together docs": _preset((1e-4, 0.9, 0.95, 1e-8, 0.1, 10.0), (0.02, 0.95, 5, 0.0, 10.0)),
    # KellerJordan/Muon's SingleDeviceMuonWithAuxAdam defaults (Muon 0.02, momentum 0.95; aux AdamW 3e-4,
    # betas (0.9, 0.95), eps 1e-10); it does not clip: 0 = off.
    "Keller Jordan Muon": _preset((3e-4, 0.9, 0.95, 1e-10, 0.0, 0.0), (0.02, 0.95, 5, 0.0, 0.0)),
    # ~50,000x the rate that learns, clipping off.
    TOO_HIGH: _preset((100.0, 0.9, 0.95, 1e-8, 0.0, 0.0), (50.0, 0.95, 5, 0.0, 0.0)),
}
"""Optimizer values per preset and optimizer kind (``{name: {"adam": {...}, "muon": {...}}}``); Muon's rates in
"original" units, as their lessons were measured (``preset_values`` gives them in a form's units)."""


def preset_values(name: str, muon_rate: Callable[[float], float]) -> dict[str, dict[str, Any]]:
    """``PRESETS[name]`` with Muon's own rate passed through ``muon_rate``: from "original" to a form's units (a
    session made with ``muon_scaling="match_adam"`` would read the preset's 0.05 as another, larger step size)."""
    values = {key: dict(group) for key, group in PRESETS[name].items()}
    values[wire.MUON]["learning_rate"] = muon_rate(values[wire.MUON]["learning_rate"])
    return values


def unconverted(name: str, kind: str, muon_lr: float, units: str | None) -> str:
    """What a form of ``kind`` adds to preset ``name``'s label while it holds that preset's Muon rate, measured in
    "original" units, unconverted to ``units`` (the form's, ``LRFinderControls.unconverted``): to a session reading
    rates as match_adam the same number is another step size, yet the summary said the preset, unmodified."""
    if kind != wire.MUON or units in (None, wire.MUON_ORIGINAL):
        return ""
    if not math.isclose(muon_lr, PRESETS[name][wire.MUON]["learning_rate"], rel_tol=1e-12):
        return ""  # a rate of the person's own
    return f" — its Muon lr in original units, not converted to {units}"


MEASURED_AT = "at a constant rate"
"""The schedule every lesson was measured under (``lesson.train`` sends the preset's rates unscheduled)."""


MEASURED_MODEL = "tiny"
"""The built-in model every lesson was measured on (``connect("local")``'s default, bench_lessons.py's sessions)."""


def unmeasured(schedule: Schedule | None, modified: bool, where: Sequence[str] = ()) -> str:
    """Why a preset's lesson does not speak for what the builder will send (``"not measured for this schedule"``),
    or ``""``: edited values, a schedule that moves the rate within the lesson's steps (judged by its rates: a
    cosine whose floor is the base rate sends the rate measured), or ``where`` (``elsewhere``). Under notebook 05's
    cosine (warmup 3) the default preset's reward claim fails on most seeds (``bench/bench_panel_schedule.py``)."""
    moved = schedule is not None and any(schedule.multiplier(s) != 1.0 for s in range(LESSON_STEPS))
    what = [
        w for w, differ in (("these values (the preset's, modified)", modified), ("this schedule", moved)) if differ
    ]
    return f"not measured for {' or '.join([*what, *where])}" if what or where else ""


def _measured_as(task: Any) -> tuple[Any, ...]:
    """What makes ``task`` the one measured: its prompts and held-out split, answer, tokens, group, and its reward's
    code (each ``first_letter_task()`` call makes a new reward closure, so the function itself never compares)."""
    fields = ("name", "prompts", "eval_prompts", "answer", "max_tokens", "group_size", "chance")
    return (*(getattr(task, f, None) for f in fields), getattr(getattr(task, "reward", None), "__code__", None))


def measured_task(task: Any) -> bool:
    """Whether ``task`` is the first-letter task every lesson was measured on (``first_letter_task()`` as built)."""
    return _measured_as(task) == _MEASURED_AS


def measured_model(model: Any) -> bool:
    """Whether ``model`` (a name, ``rlnb/`` prefixed or not, or a spec) is ``MEASURED_MODEL``."""
    return (model.removeprefix("rlnb/") if isinstance(model, str) else model) == MEASURED_MODEL


class Elsewhere(enum.StrEnum):
    """What a run or range test has that the lessons and Find LR's edge were measured without, in the words the
    builder and the status line say (``elsewhere``, ``suggestion.unlike_edge``; the status line words them by kind)."""

    STEP_FN = "your step_fn"
    TASK = "this task"
    MODEL = "this model"


def elsewhere(panel: Any, model: Any) -> list[str]:
    """What the builder's run has that its lesson was not measured on (the first-letter task on ``MEASURED_MODEL``):
    ``Elsewhere.STEP_FN`` or ``Elsewhere.TASK``, and ``Elsewhere.MODEL``. Read from the RunPanel holding the builder
    (its step, task and session's model); a builder on its own by its ``model`` (no task: the lesson names the one it
    means)."""
    what: list[str] = []
    if panel is not None:
        model = panel.session.history.config.get("model")
        if panel.own_step_fn is not None:
            what.append(Elsewhere.STEP_FN)
        elif not measured_task(panel.task):
            what.append(Elsewhere.TASK)
    if not measured_model(model):
        what.append(Elsewhere.MODEL)
    return what


def differs(groups: Iterable[tuple[dict[str, Any], str]], values: dict[str, dict[str, Any]]) -> bool:
    """Whether a control of ``groups`` (its controls by field, its key in ``values``) differs from ``values``; a rate
    by more than float rounding (one converted to other Muon units and back is the preset's still)."""
    return any(
        not math.isclose(group[f].value, v, rel_tol=1e-12) if f == "learning_rate" else group[f].value != v
        for group, key in groups
        for f, v in values[key].items()
    )


@dataclass(frozen=True)
class Lesson:
    """What a preset teaches, said per optimizer (its values differ: a text citing Together's example or Keller
    Jordan's defaults is about one optimizer), and the check of one measured run against it."""

    claim: str
    """What a run with the preset does, for either optimizer: what ``holds`` checks, no more."""
    values: dict[str, str]
    """By optimizer kind (``"adam"``, ``"muon"``): the values a session of that kind trains with, and their source."""
    holds: Callable[[LessonRun, float], bool]
    """``holds(run, chance)``: ``chance`` is the task's collapsed-policy accuracy (0.25 on first_letter)."""
    muon_lr: float = math.nan
    """The preset's Muon rate, in "original" units (as the lesson was measured)."""

    def text(self, kind: str, muon_lr: float | None = None) -> str:
        """The line beside the preset on a form of optimizer ``kind`` (``ValueError`` naming ``kind`` otherwise);
        ``muon_lr``: the preset's Muon rate in the form's units, named as sent (a match_adam session's line would
        say "Muon lr 0.05" while the form sends 0.0248)."""
        said = self.values[optimizer_kind(kind, "kind")]
        if kind == wire.MUON and muon_lr is not None and not math.isclose(muon_lr, self.muon_lr, rel_tol=1e-12):
            given = f"Muon lr {self.muon_lr:g}"
            said = said.replace(given, f"Muon lr {rate(muon_lr)} ({self.muon_lr:g} in original units)", 1)
        return f"{said} ({MEASURED_AT}): {self.claim}"


def _learns(run: LessonRun, chance: float) -> bool:
    return not run.failed and run.final_accuracy >= LEARNS_ACCURACY and run.final_reward >= LEARNS_REWARD


def _barely(run: LessonRun, chance: float) -> bool:
    return not run.failed and run.final_reward < REWARD_BARELY


def _collapses(run: LessonRun, chance: float) -> bool:
    """A non-finite loss is the collapse; a run that fails otherwise (refused, out of memory) says nothing of the
    rate: a miss."""
    if run.failed:
        return run.failed == wire.OperationErrorCode.NON_FINITE_LOSS
    return run.distinct <= COLLAPSED_DISTINCT and run.final_accuracy <= chance + CHANCE_MARGIN


def _rates(name: str) -> dict[str, str]:
    """The rates each optimizer's session gets from preset ``name``, in words (so a text cannot go stale)."""
    adam, muon, aux = (PRESETS[name][k]["learning_rate"] for k in (wire.ADAM, wire.MUON, AUX))
    return {wire.ADAM: f"AdamW lr {adam:g}", wire.MUON: f"Muon lr {muon:g}, AdamW {aux:g} for the rest"}


def _lesson(name: str, holds: Callable[[LessonRun, float], bool], claim: str, **said: str) -> Lesson:
    """``said``: by optimizer, how to introduce its rates (``{}`` stands for them); default, the rates alone."""
    values = {k: said.get(k, "{}").format(v) for k, v in _rates(name).items()}
    return Lesson(claim, values, holds, PRESETS[name][wire.MUON]["learning_rate"])


_REWARD = "training reward (the mean of the last 5 steps)"
_MEASURED = first_letter_task()
_MEASURED_AS = _measured_as(_MEASURED)
CHANCE = _MEASURED.chance
"""What a collapsed policy scores on the first-letter task, which the texts are about (0.25)."""
LESSONS: dict[str, Lesson] = {
    DEFAULT_PRESET: _lesson(
        DEFAULT_PRESET,
        _learns,
        f"learns the first-letter task — at step {LESSON_STEPS}, held-out accuracy ≥ "
        f"{LEARNS_ACCURACY} and {_REWARD} ≥ {LEARNS_REWARD}",
    ),
    "Together docs": _lesson(
        "Together docs",
        _barely,
        f"at step {LESSON_STEPS} the {_REWARD} is still below {REWARD_BARELY}",
        adam="Together's example for Adam ({}, weight decay 0.1, clip 10)",
        muon="{} (weight decay 0.1, as Together's AdamW example), clip 10",
    ),
    "Keller Jordan Muon": _lesson(
        "Keller Jordan Muon",
        _barely,
        f"at step {LESSON_STEPS} the {_REWARD} is still below {REWARD_BARELY}",
        adam="{}, eps 1e-10, no clipping: the AdamW of Keller Jordan's Muon defaults, here on every weight",
        muon="Keller Jordan's Muon defaults: {}, eps 1e-10, no clipping",
    ),
    TOO_HIGH: _lesson(
        TOO_HIGH,
        _collapses,
        f"far too high — the loss turns non-finite (another failure is a miss) or at step {LESSON_STEPS} "
        f"the policy has collapsed — at most {COLLAPSED_DISTINCT} distinct completions per group of 16 and "
        f"held-out accuracy ≤ {CHANCE + CHANCE_MARGIN:g} (chance {CHANCE:g} + {CHANCE_MARGIN:g})",
        adam="{}, no clipping",
        muon="{}, no clipping",
    ),
}
"""The lesson of each preset, checked on seeds 0-9 by bench/bench_lessons.py."""

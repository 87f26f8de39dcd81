"""Optimizer presets for the builder, each with the lesson it teaches and the claim that lesson makes.

Every claim is judged on ``rlnb.tasks.lesson.train`` of the first-letter task (``first_letter_task``, the
built-in ``tiny`` model, ``LESSON_STEPS`` RL steps) and holds on at least 9 of seeds 0-9 for both optimizers
(``bench/bench_lessons.py``; hit rates in bench/README.md); ``tests/widgets/test_lessons.py`` checks seeds 0-2.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from rlnb.params import ADAM_FIELDS, MUON_FIELDS
from rlnb.tasks.lesson import LessonRun

LESSON_STEPS = 40
"""RL steps a preset's claim is made for."""
REWARD_BARELY = 0.05
"""A training reward below this has barely moved (a random policy scores ~1/256 on first_letter)."""


def _preset(adam: tuple[float, float, float, float, float, float], muon: tuple[float, float, int, float, float]) -> Any:
    """One preset: the same AdamW values for an Adam session and for Muon's non-matrix weights."""
    adam_values = dict(zip(ADAM_FIELDS, adam, strict=True))
    return {"adam": adam_values, "muon": dict(zip(MUON_FIELDS, muon, strict=True)), "muon.adam": dict(adam_values)}


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
    session made with ``muon_scaling="match_adam"`` read the preset's 0.05 as another, larger step size)."""
    values = {key: dict(group) for key, group in PRESETS[name].items()}
    values["muon"]["learning_rate"] = muon_rate(values["muon"]["learning_rate"])
    return values


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
    """What a preset teaches (``text``, shown beside it) and the check of one measured run against it."""

    text: str
    holds: Callable[[LessonRun, float], bool]
    """``holds(run, chance)``: ``chance`` is the task's collapsed-policy accuracy (0.25 on first_letter)."""


def _learns(run: LessonRun, chance: float) -> bool:
    return not run.failed and run.final_accuracy >= 0.8 and run.final_reward >= 0.4


def _barely(run: LessonRun, chance: float) -> bool:
    return not run.failed and run.final_reward < REWARD_BARELY


def _collapses(run: LessonRun, chance: float) -> bool:
    return bool(run.failed) or (run.distinct <= 1.5 and run.final_accuracy <= chance + 0.1)


LESSONS: dict[str, Lesson] = {
    DEFAULT_PRESET: Lesson(
        f"learns the first-letter task: held-out accuracy ≥ 0.8 and training reward ≥ 0.4 by step {LESSON_STEPS}",
        _learns),
    "Together docs": Lesson(
        f"sized for large models: on this tiny model the training reward stays below {REWARD_BARELY} for "
        f"{LESSON_STEPS} steps (lr 1e-4 is far too small here)", _barely),
    "Keller Jordan Muon": Lesson(
        f"Muon's own defaults: AdamW at 3e-4 holds the embeddings and the head back, so the training reward "
        f"stays below {REWARD_BARELY} for {LESSON_STEPS} steps", _barely),
    TOO_HIGH: Lesson(
        "far too high, clipping off: the policy collapses onto one answer for every prompt (completions stop "
        "varying) and held-out accuracy ends at chance or below — or the loss turns non-finite", _collapses),
}
"""The lesson of each preset, checked on seeds 0-9 by bench/bench_lessons.py."""

"""A preset's lesson is shown only for what it was measured with: the preset's values at a constant rate. Notebook
05 switched the builder to a cosine (warmup 3) and the default preset's "reward ≥ 0.4" still stood beside it, while
that flow's reward failed it on seeds 0, 12 and 13 (review39a F1). Widgets driven through ``.value``."""

import html
import re

import pytest

from rlnb.params import AdamParams, MuonParams
from rlnb.sweep.lr.find import LRFind
from rlnb.widgets import LESSONS, OptimizerBuilder
from rlnb.widgets.presets import DEFAULT_PRESET, Elsewhere
from rlnb.widgets.suggestion import Suggestion

SCHEDULE = "not measured for this schedule"
VALUES = "not measured for these values (the preset's, modified)"
MACHINE = {"adam": "an AMD EPYC", "muon": "an AMD EPYC"}  # docs/tasks.md, bench/README.md: each figure's machine


def shown(b: OptimizerBuilder) -> str:
    return html.unescape(re.sub(r"<[^>]*>", "", b.lesson.value))  # the line as read


@pytest.mark.parametrize("kind", ["adam", "muon"])
def test_a_schedule_that_moves_the_rate_marks_the_lesson_not_measured(kind):
    b = OptimizerBuilder(kind, total_steps=40)
    assert LESSONS[DEFAULT_PRESET].text(kind) in shown(b) and "not measured" not in shown(b) + b.summary
    assert "(at a constant rate): learns the first-letter task" in shown(b)  # the lesson says its conditions
    b.sched_kind.value = "cosine"
    b.warmup.value = 3
    assert shown(b).endswith(f"≥ 0.4 — {SCHEDULE}") and b.summary.endswith(
        f"preset {DEFAULT_PRESET} — lesson {SCHEDULE}"
    )
    b.sched_kind.value = "constant"  # a warmup alone lowers the first steps' rates: not what was measured
    assert shown(b).endswith(SCHEDULE) and not b.modified
    b.warmup.value = 0  # the conditions measured: the lesson stands again, unmarked
    assert "not measured" not in shown(b) + b.summary and shown(b).endswith("≥ 0.4")


def test_edited_values_mark_the_lesson_and_picking_the_preset_again_clears_it():
    b = OptimizerBuilder("muon", total_steps=40)
    b.muon["momentum"].value = 0.9
    assert b.modified and shown(b).endswith(VALUES) and b.summary.endswith(f"preset {DEFAULT_PRESET} (modified)")
    b.sched_kind.value = "linear"
    assert shown(b).endswith(f"{VALUES} or this schedule")
    b.preset.value = DEFAULT_PRESET  # the preset's values again; the schedule is still the form's own
    assert not b.modified and shown(b).endswith(SCHEDULE)


@pytest.mark.parametrize(("kind", "learned", "tenth"), [("adam", "none", "8"), ("muon", "7", "7")])
def test_find_lr_says_that_apply_sets_the_edge_and_what_the_edge_did(kind, learned, tenth):
    """ "the upper edge of the useful range: sweep below it. Apply sets it": Apply put in the edge itself, which held
    for 40 steps learned on none of seeds 0-9 for Adam (bench_lessons_more edge), on 7 for Muon (bench_find_lr)."""
    muon = kind == "muon"
    adam = AdamParams(learning_rate=0.015 if muon else 0.019)
    params = MuonParams(learning_rate=0.37, adam=adam) if muon else adam
    why, units, ratio = "steepest ascent of the smoothed reward", "original" if muon else None, 0.04 if muon else None
    found = LRFind([0.01], [0.0], [0.0], params.learning_rate, "reward", kind, units, why, None, ratio, params)
    said = Suggestion.describe(found, "the first_letter task", [])  # the setup measured (test_find_lr_measured)
    assert said.endswith(
        f"the upper edge of the useful range, which Apply sets: held constant for 40 steps, {kind.capitalize()}'s "
        f"learned first_letter on {learned} of seeds 0-9 (a tenth of it on {tenth}), on {MACHINE[kind]}. Sweep below it"
    )
    assert "sweep below it. Apply sets it" not in said


@pytest.mark.parametrize("setting", ["cosine at min ratio 1", "warmup 1"])
def test_a_schedule_that_sends_the_same_rate_every_step_is_not_marked(setting):
    """Judged by the rates sent over the lesson's 40 steps, not the kind: a cosine whose floor is the base rate, or a
    warmup of 1 step (its first step gets 1/1 of the rate), sends the rate measured (review39e L2)."""
    b = OptimizerBuilder("adam", total_steps=40)
    if setting == "warmup 1":
        b.warmup.value = 1
    else:
        b.sched_kind.value = "cosine"
        b.min_ratio.value = 1.0
    assert {b.schedule(s) for s in range(40)} == {0.002}
    assert "not measured" not in shown(b) + b.summary and shown(b).endswith("≥ 0.4")
    b.warmup.value = 2  # the first step at half the rate: moved
    assert shown(b).endswith(SCHEDULE)


def test_an_invalid_schedule_keeps_the_mark_of_the_last_valid_one():
    """A warmup past the total is refused; the lesson line and the title kept no mark meanwhile (review39e L3)."""
    b = OptimizerBuilder("adam", total_steps=40)
    b.sched_kind.value = "cosine"
    b.warmup.value = 3
    b.warmup.value = 50
    assert b.errors and b.errors[0].startswith("Schedule.warmup_steps = 50 is invalid")
    assert shown(b).endswith(SCHEDULE) and b.summary.endswith(f"lesson {SCHEDULE}")
    b.warmup.value = 0
    b.sched_kind.value = "constant"
    b.total.value = 0  # invalid, after a constant schedule: unmarked still
    assert b.errors and "not measured" not in shown(b) + b.summary


@pytest.mark.parametrize("probe", ["the digits task", "your step_fn", "your step_fn's loss"])
def test_find_lr_gives_the_first_letter_figure_only_beside_a_first_letter_probe(probe):
    """A builder alone probes lr_find's default, the digits task: the first_letter figure beside it spoke for another
    task (review39e L4); the line says the edge's 40-step result there is not measured."""
    adam = AdamParams(learning_rate=0.019)
    found = LRFind(
        [0.01], [0.0], [0.0], 0.019, "reward", "adam", None, "steepest ascent of the reward", None, None, adam
    )
    said = Suggestion.describe(found, probe, [Elsewhere.STEP_FN if "step_fn" in probe else Elsewhere.TASK])
    assert "first_letter" not in said and "seeds" not in said
    assert said.endswith(
        f"which Apply sets: what it does held constant for 40 steps on {probe} is not measured. Sweep below it"
    )


def test_the_presets_build_the_measured_task_once_at_import(monkeypatch):
    """``rlnb.widgets.presets`` built ``first_letter_task()`` (128 prompts, a split) twice at import, once for what
    the lessons were measured on and once for its chance: one task serves both. Its code run again as a module of
    its own (``sys.modules``' stays), counting the calls."""
    import importlib.util

    import rlnb.tasks

    calls, build = [], rlnb.tasks.first_letter_task
    monkeypatch.setattr(rlnb.tasks, "first_letter_task", lambda *a, **k: calls.append(k) or build(*a, **k))
    spec = importlib.util.find_spec("rlnb.widgets.presets")
    assert spec is not None and spec.loader is not None
    again = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(again)
    assert calls == [{}] and again.CHANCE == 0.25

"""A schedule's step counts are bounded by the steps a run takes, refused naming the field and its range."""

import numpy as np
import pytest

import rlnb.tasks
from rlnb.params.schedule import MAX_STEPS, Schedule
from rlnb.widgets import OptimizerBuilder

RANGE = r"must be an integer >= {} and <= 1000003 \(the most steps a run takes\)"


@pytest.mark.parametrize(
    ("kwargs", "field", "low"),
    [
        ({"total_steps": 1_000_004}, "total_steps", 1),
        ({"total_steps": 10**400}, "total_steps", 1),  # the builder's plot raised OverflowError
        ({"total_steps": np.int64(2**40)}, "total_steps", 1),
        ({"warmup_steps": 10**7, "total_steps": 10**7}, "warmup_steps", 0),
        ({"warmup_steps": -1}, "warmup_steps", 0),
    ],
)
def test_total_and_warmup_steps_past_any_run_are_refused_naming_the_field_and_range(kwargs, field, low):
    """``total_steps=10**300`` was a valid schedule whose floor no run could reach (a run takes at most
    ``rlnb.tasks.MAX_STEPS`` steps); the message names the field and the range, and a huge value is abbreviated."""
    with pytest.raises(ValueError, match=rf"^Schedule\.{field} = \S+ is invalid: {RANGE.format(low)}$") as caught:
        Schedule("cosine", **kwargs)
    assert len(str(caught.value)) < 200


def test_the_longest_schedule_is_a_runs_longest():
    assert MAX_STEPS == rlnb.tasks.MAX_STEPS  # rlnb.tasks is a layer above: the number is written twice
    edge = Schedule("linear", warmup_steps=MAX_STEPS, total_steps=MAX_STEPS)
    assert edge.total_steps == MAX_STEPS and edge.multiplier(MAX_STEPS - 1) == 1.0


@pytest.mark.slow  # imports the widgets and builds a form (several seconds on a loaded machine)
def test_the_builder_marks_a_schedule_past_any_run_invalid():
    """The form took ``10**300`` total steps as valid, and raised OverflowError from its plot at ``10**400``."""
    builder = OptimizerBuilder("adam", total_steps=100)
    builder.sched_kind.value = "cosine"
    for total in (1_000_004, 10**400):
        builder.total.value = total
        assert not builder.valid and "rlnb-invalid" in builder.total._dom_classes
        assert builder.errors[0].startswith("Schedule.total_steps = ") and "<= 1000003" in builder.errors[0]
    builder.total.value = MAX_STEPS
    assert builder.valid and builder.errors == []


@pytest.mark.parametrize(
    ("kind", "expected"),
    [  # step: 0, 4, 9 warm up (step + 1) / 10; 10 starts the decay; 15 is half-way; 19 is 9/10 of it; 20 is the floor
        ("constant", [0.1, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0]),
        ("linear", [0.1, 0.5, 1.0, 1.0, 0.55, 0.19, 0.1]),  # 0.1 + 0.9 * (1 - 0.9)
        ("cosine", [0.1, 0.5, 1.0, 1.0, 0.55, 0.12202457, 0.1]),  # 0.1 + 0.9 * (1 + cos(0.9 pi)) / 2
    ],
)
def test_the_decay_spans_the_steps_after_the_warmup(kind, expected):
    """Warmup 10 of 20 steps: the decay runs from step 10 to step 20, so step 19 is 9/10 of the way down. A span
    that counted the warmup (20 steps) put step 19 at 9/20, a linear 0.595 (review41c G7)."""
    schedule = Schedule(kind, warmup_steps=10, total_steps=20, min_lr_ratio=0.1)
    got = [schedule.multiplier(step) for step in (0, 4, 9, 10, 15, 19, 20)]
    assert got == pytest.approx(expected, abs=1e-8)


@pytest.mark.parametrize("kind", ["linear", "cosine"])
def test_the_step_a_misfit_names_is_the_history_row_it_is_about(kind):
    """``misfit``'s words number steps from 1, as ``history.steps`` and the run panel do: the step it names past the
    end is the first row at the floor (the multiplier of optim-step ``n - 1``), and the last step of a short run is
    row ``steps``, with that row's rate."""
    schedule = Schedule(kind, total_steps=3, min_lr_ratio=0.5)
    assert schedule.misfit(5).startswith("step 4 of 5 is past the end")
    assert schedule.multiplier(3 - 1) > 0.5 == schedule.multiplier(4 - 1)  # row 3 decays still, row 4 is the floor
    long = Schedule(kind, total_steps=50)
    assert long.misfit(5).startswith(f"step 5, the last of 5, comes before the end of the {kind} schedule")
    assert f"it gets {long.multiplier(5 - 1):.2g}× the base rate" in long.misfit(5)

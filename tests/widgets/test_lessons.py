"""Every preset keeps the promise its lesson makes, on the seeds a notebook user runs first (0, 1, 2), for
both optimizers, with the values the builder sends. bench/bench_lessons.py checks seeds 0-9 (bench/README.md)."""

import pytest

import rlnb
from rlnb.tasks import first_letter_task
from rlnb.tasks.lesson import train
from rlnb.widgets import LESSONS, OptimizerBuilder
from rlnb.widgets.presets import LESSON_STEPS

pytestmark = pytest.mark.slow  # 24 training runs of 40 RL steps (~6 min of CPU)


@pytest.mark.parametrize("optimizer", ["adam", "muon"])
@pytest.mark.parametrize("preset", list(LESSONS))
def test_preset_holds_its_lesson_on_seeds_0_1_2(preset, optimizer):
    task, params = first_letter_task(), OptimizerBuilder(optimizer, preset=preset).params
    for seed in (0, 1, 2):
        with rlnb.connect("local", optimizer=optimizer, seed=seed, device="cpu", record=False, threads=1) as s:
            run = train(s, task, params, LESSON_STEPS, seed=seed)
        assert LESSONS[preset].holds(run, task.chance), (seed, run)

"""One bound on ``steps`` (``rlnb.tasks.MAX_STEPS``), checked by every entry that runs RL steps before anything runs:
step ``i`` of seed ``s`` samples with seed ``s * SEED_STRIDE + i``, so a longer run sampled with the next seed's seeds
(two seeds' runs were no longer apart), and past 2**63 steps the seed's range turned over, a refusal that blamed
the seed."""

import threading

import pytest

import rlnb
from rlnb.batched import Member, run_batched
from rlnb.sweep import TrialOptions, ablate, sweep
from rlnb.tasks import MAX_STEPS, SEED_STRIDE, first_letter_task, seed_range
from rlnb.tasks.lesson import train

PAST = (MAX_STEPS + 1, 10**20)
"""Just past the bound, and past an int64 (where ``seed_range`` turned over)."""
STOPPED = threading.Event()
STOPPED.set()  # a run that is not refused stops before its first step (not a million steps later)


def said(low: int, steps: int) -> str:
    return (
        f"^steps must be an integer in \\[{low}, {MAX_STEPS}\\] \\(step i of seed s samples with seed s \\* "
        f"{SEED_STRIDE} \\+ i: more steps would sample with the next seed's seeds\\), got {steps}$"
    )


def test_the_bound_keeps_each_seeds_step_seeds_apart():
    last = 0 * SEED_STRIDE + MAX_STEPS - 1  # seed 0's last step
    assert last < 1 * SEED_STRIDE  # seed 1's first
    low, high = seed_range(MAX_STEPS)
    assert low < 0 < high and high * SEED_STRIDE + MAX_STEPS - 1 < 2**63  # an int64, the range not turned over


@pytest.mark.parametrize("steps", PAST)
def test_a_lesson_past_the_bound_is_refused_naming_steps_before_its_first_evaluation(steps, monkeypatch):
    def evaluated(*args):
        raise AssertionError("the lesson ran")  # (not for a million steps)

    monkeypatch.setattr("rlnb.tasks.lesson.log_accuracy", evaluated)
    with rlnb.connect("local", device="cpu", record=False) as s:
        with pytest.raises(ValueError, match=said(0, steps)):
            train(s, first_letter_task(), rlnb.AdamParams(), steps, seed=10**12)  # a seed of range for 10**20 steps
        assert len(s.history) == 0 and s.history.logged.empty  # nothing sampled, no accuracy logged


@pytest.mark.parametrize("every", [0, *PAST])
def test_a_lessons_eval_every_past_the_bound_is_refused_naming_it_and_its_range(every, monkeypatch):
    """``eval_every`` had no upper bound (10**20 was taken); one above the lesson's steps is taken, and says what it
    does: the accuracy before the first step and after the last only."""
    monkeypatch.setattr("rlnb.tasks.lesson.log_accuracy", lambda *a: pytest.fail("the lesson ran"))
    words = (
        rf"^eval_every must be an integer in \[1, {MAX_STEPS}\] \(the most steps one run takes, MAX_STEPS; one "
        rf"above the lesson's steps evaluates before its first step and after its last only\), got {every}$"
    )
    with rlnb.connect("local", device="cpu", record=False) as s:
        with pytest.raises(ValueError, match=words):
            train(s, first_letter_task(), rlnb.AdamParams(), 3, eval_every=every)
        assert len(s.history) == 0 and s.history.logged.empty


@pytest.mark.parametrize("steps", PAST)
def test_a_batched_run_past_the_bound_is_refused_naming_steps_before_a_model_is_built(steps, tmp_path):
    with pytest.raises(ValueError, match=said(0, steps)):
        run_batched("tiny", "adam", [Member(rlnb.AdamParams(), 10**12)], steps=steps, runs_dir=tmp_path, stop=STOPPED)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("steps", PAST)
def test_a_sweep_or_ablation_past_the_bound_is_refused_naming_steps_before_its_folder(steps, tmp_path):
    """It was seeds the refusal named ("seeds must be in [-9223344366821, -9077635...]"), or none at all."""
    with pytest.raises(ValueError, match=said(1, steps)):
        sweep(rlnb.AdamParams(), steps=steps, seeds=(10**12,), runs_dir=tmp_path, progress=False, stop=STOPPED)
    with pytest.raises(ValueError, match=said(1, steps)):
        ablate(
            rlnb.AdamParams(),
            {"lr": {"learning_rate": 1e-3}},
            steps=steps,
            runs_dir=tmp_path,
            progress=False,
            stop=STOPPED,
        )
    with pytest.raises(ValueError, match=said(1, steps)):
        TrialOptions(steps=steps)
    assert list(tmp_path.iterdir()) == []


def test_the_bound_itself_is_taken_with_the_seeds_it_allows():
    low, high = seed_range(MAX_STEPS)
    assert TrialOptions(steps=MAX_STEPS, seeds=(low, high)).steps == MAX_STEPS
    with pytest.raises(ValueError, match=r"^seeds must be in "):
        TrialOptions(steps=MAX_STEPS, seeds=(high + 1,))

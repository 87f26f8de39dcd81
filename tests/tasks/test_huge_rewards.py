"""Rewards of any finite size: near 1e308 their sum overflowed ``statistics.fmean`` ("intermediate overflow in
fsum", naming nothing) after the step was sampled. Advantages and the step's metrics are now made of them, with
the same bits as before for every reward a float could sum."""

from __future__ import annotations

import math

import pytest

import rlnb
from rlnb.sweep.trial import objective_value
from rlnb.tasks import Task, group_advantages, rl_step, step_metrics
from rlnb.tasks.rollouts import Rollout

HUGE = [1e308, 1e308, 1e308, 0.0]
ORDINARY = [0.0, 1.0, 1.0, 0.5, 0.25, 0.0, 1.0, 0.75]


def test_huge_rewards_get_their_advantages_in_every_scale_mode():
    # mean 7.5e307; sample std 5e307 (the 1e-4 epsilon is nothing beside it); population std 1e308 * sqrt(3) / 4
    assert group_advantages(HUGE) == pytest.approx([0.5, 0.5, 0.5, -1.5], rel=1e-12)
    root3 = math.sqrt(3)
    assert group_advantages(HUGE, "population_std") == pytest.approx([1 / root3] * 3 + [-root3], rel=1e-12)
    assert group_advantages(HUGE, "none") == pytest.approx([2.5e307] * 3 + [-7.5e307], rel=1e-12)
    assert group_advantages([1.7e308] * 4, "population_std") == [0.0] * 4  # equal: exactly 0, as any equal group


@pytest.mark.parametrize("scale", ["sample_std", "population_std", "none"])
def test_the_scaling_changes_no_bit_of_the_advantages_of_ordinary_or_huge_rewards(scale):
    """Rewards times a power of two: the population-scaled advantages are the very same floats, the unscaled ones
    the same times that power, and TRL's (whose epsilon does not scale) as close as that epsilon allows."""
    big = [r * 2.0**1000 for r in ORDINARY]
    small = group_advantages(ORDINARY, scale)
    if scale == "population_std":
        assert group_advantages(big, scale) == small
    elif scale == "none":
        assert group_advantages(big, scale) == [a * 2.0**1000 for a in small]
    else:
        assert group_advantages(big, scale) == pytest.approx(small, rel=1e-3)


def test_unscaled_advantages_no_float_holds_are_refused_naming_the_rewards_and_the_range():
    with pytest.raises(
        ValueError,
        match=r"scale='none' .* rewards \[1\.7e\+308, -1\.7e\+308, -1\.7e\+308\] .*"
        r"below 8\.988e\+307, or use scale='sample_std'",
    ):
        group_advantages([1.7e308, -1.7e308, -1.7e308], "none")
    root3 = math.sqrt(3)
    assert group_advantages([1.7e308, -1.7e308, -1.7e308]) == pytest.approx([2 / root3, -1 / root3, -1 / root3])


def rollout(reward: float) -> Rollout:
    return Rollout(0, "p", "c", (1, 2), False, reward, 0.0)


def test_step_metrics_and_a_sweeps_objective_of_huge_rewards_are_finite():
    metrics = step_metrics([[rollout(r) for r in HUGE]], None)
    assert metrics["reward"] == pytest.approx(7.5e307) and metrics["reward_std"] == pytest.approx(5e307)
    assert metrics["frac_reward_zero_std"] == 0.0
    assert objective_value("reward", [1.5e308] * 5, [0.0] * 5) == pytest.approx(1.5e308)


def test_an_rl_step_trains_on_huge_rewards(tmp_path):
    task = Task("huge", ["n=", "x: "], lambda prompt, completion: 1e308 if len(completion) % 2 else 0.0,
                group_size=4, max_tokens=6)  # fmt: skip
    huge_only = Task("all huge", ["n="], lambda prompt, completion: 1.5e308, group_size=4, max_tokens=4)
    with rlnb.connect("local", model="tiny", seed=0, device="cpu", runs_dir=tmp_path, run_id="r") as s:
        report = rl_step(s, task, rlnb.AdamParams(learning_rate=1e-3), seed=0)
        same = rl_step(s, huge_only, rlnb.AdamParams(learning_rate=1e-3), seed=1)
    assert report.status == rlnb.wire.OperationStatus.COMPLETED and math.isfinite(report.loss)
    assert 0 <= report.reward <= 1e308 and set(report.rewards) <= {0.0, 1e308}
    assert same.reward == pytest.approx(1.5e308) and same.metrics["frac_reward_zero_std"] == 1.0
    table = s.history.completions
    assert table.advantage.map(math.isfinite).all() and list(s.history.steps.reward) == [report.reward, same.reward]


@pytest.mark.parametrize(
    ("rewards", "words"),
    [("10", r"rewards must be a list of numbers, got '10'"), (["1", "0"], r"rewards\[0\] is '1'; a reward must be a "
     r"number a float holds"), ([0.0, 10**400], r"rewards\[1\] is 1000.*000; a reward must be a number a float holds"),
     ([1.0, 2j], r"rewards\[1\] is 2j;"), (7, "rewards must be a list of numbers, got 7")],
    ids=["text", "list of text", "10**400", "complex", "one number"],
)  # fmt: skip
def test_rewards_that_are_no_numbers_a_float_holds_are_refused_naming_them(rewards, words):
    """``group_advantages("10")`` and ``(["1", "0"])`` gave [0.707, -0.707]: text read as rewards; ``[10**400, 0]``
    was float()'s bare ``OverflowError``."""
    with pytest.raises(TypeError, match=words):
        group_advantages(rewards)
    assert group_advantages([True, False]) == group_advantages([1, 0.0])  # bools and ints are numbers

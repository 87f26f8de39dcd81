"""``ablate``'s delta pairs the variant's seeds with the baseline's: where trials failed, a difference of the means over
each one's survivors compared other seeds (one seed left of six against the baseline's others)."""

import math

import pytest

import rlnb
from rlnb.sweep import _ablation_summary as summary_of
from rlnb.sweep import ablate


@pytest.fixture(scope="module")
def trials(tmp_path_factory):
    """A real ablation of one step on seeds 0-2, its rewards set by hand below (which seed failed decides the pairs)."""
    base = rlnb.AdamParams(learning_rate=3e-3)
    found, _ = ablate(base, {"hi": {"learning_rate": 3e-2}}, seeds=[0, 1, 2], steps=1,
                      runs_dir=tmp_path_factory.mktemp("ablate"), progress=False)  # fmt: skip
    return found


def ended(trials, rewards):
    """``trials`` with each (variant, seed)'s final_reward from ``rewards``, FAILED where it is None."""
    out = trials.copy()
    for (variant, seed), reward in rewards.items():
        row = (out.variant == variant) & (out.seed == seed)
        out.loc[row, "status"] = "COMPLETED" if reward is not None else "FAILED"
        out.loc[row, "final_reward"] = math.nan if reward is None else reward
    return out


def test_the_delta_is_over_the_seeds_both_completed_on(trials):
    """The baseline failed on seed 0 and ``hi`` on seeds 1 and 2: no seed has both. On seed 0 alone against seeds 1-2
    the difference of means was 0.5 - 0.2 = +0.3, though ``hi`` is below the baseline on every seed both have."""
    rewards = {("baseline", 0): None, ("baseline", 1): 0.1, ("baseline", 2): 0.3,
               ("hi", 0): 0.5, ("hi", 1): None, ("hi", 2): None}  # fmt: skip
    summary = summary_of(ended(trials, rewards), ["baseline", "hi"], "final_reward")
    assert list(summary["pairs"]) == [2, 0] and summary.loc["baseline", "delta"] == 0
    assert math.isnan(summary.loc["hi", "delta"]) and summary.loc["hi", "mean"] == 0.5
    rewards[("hi", 2)] = 0.25  # one pair: seed 2, 0.25 - 0.3
    summary = summary_of(ended(trials, rewards), ["baseline", "hi"], "final_reward")
    assert list(summary["pairs"]) == [2, 1] and summary.loc["hi", "delta"] == pytest.approx(-0.05)
    assert list(summary["failed"]) == [1, 1]


def test_ablate_reports_its_pairs(tmp_path):
    """Every trial completed: each variant's pairs are its seeds, and the delta is the difference of the means."""
    _, summary = ablate(rlnb.AdamParams(learning_rate=3e-3), {"hi": {"learning_rate": 3e-2}}, seeds=[0, 1], steps=1,
                        progress=False, runs_dir=tmp_path)  # fmt: skip
    assert list(summary["pairs"]) == [2, 2]
    assert summary.loc["hi", "delta"] == pytest.approx(summary.loc["hi", "mean"] - summary.loc["baseline", "mean"])

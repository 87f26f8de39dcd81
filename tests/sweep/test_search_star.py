"""``search_plot``'s star: with several COMPLETED seeds per config, the config whose mean (``summarize``'s) is best,
not the single luckiest (config, seed); one seed each, the best trial; a tie says how many tie."""

import pandas as pd
import pytest
from matplotlib.collections import PathCollection

from rlnb.sweep import search_plot, summarize


def table(values: dict[float, list[float]], statuses: dict[float, list[str]] | None = None) -> pd.DataFrame:
    """One row per (learning rate, seed), in the order given."""
    rows = []
    for lr, seeds in values.items():
        for seed, value in enumerate(seeds):
            status = (statuses or {}).get(lr, ["COMPLETED"] * len(seeds))[seed]
            rows.append({"trial": len(rows), "label": f"lr={lr:g}", "learning_rate": lr, "seed": seed,
                         "status": status, "value": value, "diverged_at": None})  # fmt: skip
    trials = pd.DataFrame(rows)
    trials.attrs["objective"] = "reward"
    return trials


def star(trials: pd.DataFrame, y: str = "value") -> tuple[list[list[float]], str]:
    ax = search_plot(trials, y=y)
    offsets = [c for c in ax.collections if isinstance(c, PathCollection)][-1].get_offsets().tolist()
    return offsets, [t.get_text() for t in ax.get_legend().get_texts()][-1]


def test_several_seeds_star_the_config_with_the_best_mean_not_the_luckiest_seed():
    """1e-2 has the single best seed (0.9) and the worst mean: it was starred as ``best learning_rate 0.01``."""
    trials = table({1e-4: [0.6, 0.62, 0.58, 0.6], 1e-3: [0.5, 0.5, 0.5, 0.5], 1e-2: [0.9, 0.1, 0.2, 0.3]})
    means = summarize(trials, "value")["mean"]
    assert means.idxmax() == 1e-4
    offsets, label = star(trials)
    assert label == "best mean learning_rate 0.0001 (4 seeds)"
    assert offsets == [[1e-4, pytest.approx(means[1e-4])]]


def test_the_seed_count_is_the_starred_configs_completed_seeds():
    """A stopped seed (a resume runs it) is no lost one: its config may be starred, for the seeds that completed."""
    trials = table({1e-3: [0.7, 0.8, 0.1], 1e-2: [0.2, 0.3, 0.4]}, {1e-3: ["COMPLETED", "COMPLETED", "STOPPED"]})
    assert star(trials) == ([[1e-3, pytest.approx(0.75)]], "best mean learning_rate 0.001 (2 seeds)")


def test_one_seed_each_stars_the_best_trial():
    trials = table({1e-4: [0.2], 1e-3: [0.9], 1e-2: [0.5]})
    assert star(trials) == ([[1e-3, 0.9]], "best trial learning_rate 0.001")


def test_a_tie_of_trials_says_how_many_tie_and_goes_to_the_first_in_the_table():
    """A constant reward: three trials at 1.0, and the legend named the first as if it alone were best."""
    trials = table({1.0: [1.0], 0.1: [1.0], 0.01: [0.5], 1e-3: [1.0]})
    assert star(trials) == ([[1.0, 1.0]], "best trial learning_rate 1 (3 tied at 1)")


def test_a_tie_of_means_says_how_many_tie():
    trials = table({1e-3: [0.4, 0.6], 1e-2: [0.5, 0.5], 0.1: [0.9, 0.0]})
    assert star(trials) == ([[1e-3, 0.5]], "best mean learning_rate 0.001 (2 seeds; 2 tied at 0.5)")


def test_a_config_with_a_diverged_seed_is_never_starred():
    """Guard: a config whose loss went NaN on one seed has the best mean of its finite rewards."""
    trials = table({1e-3: [0.5, 0.5], 1.0: [0.9, 0.9]})
    trials.loc[3, "diverged_at"] = 2
    assert star(trials) == ([[1e-3, 0.5]], "best mean learning_rate 0.001 (2 seeds)")


@pytest.mark.parametrize("lost", ["FAILED", "PRUNED"])
def test_a_config_with_a_failed_or_pruned_seed_is_never_starred_for_its_survivors_mean(lost):
    """review41f's star1: at 0.01 seed 0 FAILED (its reward raised) and seed 1 reached 0.292; 0.03 reached 0.222 and
    0.306. The star went to ``best mean learning_rate 0.01 (1 seed)``: one lucky survivor, as a diverged seed's was,
    and still so where that seed was PRUNED (review41k L1: an Optuna grid with seeds=2 and a pruner)."""
    trials = table({1e-2: [float("nan"), 0.292], 3e-2: [0.222, 0.306]}, {1e-2: [lost, "COMPLETED"]})
    assert star(trials) == ([[3e-2, pytest.approx(0.264)]], "best mean learning_rate 0.03 (2 seeds)")


def test_where_every_config_lost_a_seed_the_star_is_the_best_trial():
    trials = table({1e-2: [float("nan"), 0.292], 3e-2: [0.222, 0.306]}, {1e-2: ["FAILED", "COMPLETED"]})
    trials.loc[2, "status"] = "FAILED"
    assert star(trials) == ([[3e-2, 0.306]], "best trial learning_rate 0.03")


def timed(**columns: list[float]) -> pd.DataFrame:
    """Two completed trials, of 3 s and 9 s, with ``columns`` beside them."""
    trials = pd.DataFrame({"trial": [0, 1], "label": ["a", "b"], "learning_rate": [1e-3, 1e-2], "seed": [0, 0],
                           "status": ["COMPLETED"] * 2, "value": [0.5, 0.6], "wall_s": [3.0, 9.0],
                           "steps_done": [10, 12], **columns})  # fmt: skip
    trials.attrs["objective"] = "reward"
    return trials


def test_the_fastest_trial_is_starred_for_wall_s():
    """review41f's star2: ``y="wall_s"`` starred the 9 s trial, the objective's end (a reward's highest)."""
    assert star(timed(), "wall_s") == ([[1e-3, 3.0]], "best trial learning_rate 0.001")


@pytest.mark.parametrize("y", ["steps_done", "seed", "trial", "beta1", "accuracy"])
def test_a_y_with_no_better_end_draws_no_star(y):
    """More steps done, a higher seed or beta1 is no better trial: each was starred at its highest as if a reward. A
    column of your own named as neither a reward nor a loss (``accuracy``) has no end rlnb knows better: no star."""
    ax = search_plot(timed(beta1=[0.8, 0.9], accuracy=[0.3, 0.9]), y=y)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["completed (2)"]
    assert not [c for c in ax.collections if c.get_label().startswith("best")]


def test_a_column_of_your_own_named_as_a_reward_or_a_loss_is_starred_at_its_best_end():
    trials = timed(eval_reward=[0.9, 0.1], eval_loss=[2.0, 1.0])
    assert star(trials, "eval_reward") == ([[1e-3, 0.9]], "best trial learning_rate 0.001")
    assert star(trials, "eval_loss") == ([[1e-2, 1.0]], "best trial learning_rate 0.01")

"""The sweep lesson's figures, checked on their artists: seed bands that stay within the values the
seeds took, and a search's trials by status against the learning rate (none yet: said in the title)."""

import math
import threading

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PathCollection, PolyCollection

import rlnb
from rlnb.sweep import grid, random_search, search_plot, summarize, sweep
from rlnb.viz import plots


def seeds_frame(n_seeds: int) -> pd.DataFrame:
    """Rewards in [0, 1]: at every step one seed sits at 0, one at 1, the others in between."""
    rows = []
    for seed in range(n_seeds):
        value = seed / (n_seeds - 1)
        rows += [{"run": "lr=0.3", "seed": seed, "step": step, "reward": value} for step in (1, 2, 3)]
    return pd.DataFrame(rows)


def band_edges(ax) -> tuple[float, float]:
    (band,) = [c for c in ax.collections if isinstance(c, PolyCollection)]
    y = band.get_paths()[0].vertices[:, 1]
    return float(y.min()), float(y.max())


def test_few_seeds_get_a_min_max_band_within_the_metric_range():
    frame = seeds_frame(3)
    assert band_edges(plots.compare(frame, y="reward")) == (0.0, 1.0)
    low, high = band_edges(plots.compare(frame, y="reward", band="std"))  # the old default: 0.5 ± 0.5
    assert low == pytest.approx(0.0) and high == pytest.approx(1.0)
    low, high = band_edges(plots.compare(seeds_frame(2), y="reward", band="std"))  # 0.5 ± 0.71
    assert low < 0 and high > 1  # what "auto" avoids


def test_many_seeds_get_a_std_band_clipped_to_the_seeds():
    frame = seeds_frame(12)
    low, high = band_edges(plots.compare(frame, y="reward"))
    std = np.std(np.linspace(0, 1, 12), ddof=1)
    assert low == pytest.approx(0.5 - std) and high == pytest.approx(0.5 + std)
    assert low >= 0 and high <= 1


def test_seed_lines_instead_of_a_band():
    ax = plots.compare(seeds_frame(3), y="reward", band="seeds")
    assert not [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(ax.lines) == 4 and [ln.get_label() for ln in ax.lines][0] == "lr=0.3 (3 seeds)"
    assert sorted(ln.get_ydata()[0] for ln in ax.lines[1:]) == [0.0, 0.5, 1.0]
    with pytest.raises(ValueError, match="band must be"):
        plots.compare(seeds_frame(3), y="reward", band="iqr")


def test_search_plot_marks_each_status_and_the_best():
    trials = pd.DataFrame(
        {
            "trial": [0, 1, 2, 3],
            "learning_rate": [1e-5, 3e-3, 0.05, 0.5],
            "status": ["PRUNED", "COMPLETED", "COMPLETED", "PRUNED"],
            "value": [0.04, 0.6, 0.9, 0.01],
        }
    )
    trials.attrs["objective"] = "reward"
    ax = search_plot(trials)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["pruned (2)", "completed (2)", "best trial learning_rate 0.05"]
    stars = [c for c in ax.collections if isinstance(c, PathCollection)][-1]
    assert stars.get_offsets().tolist() == [[0.05, 0.9]]
    assert ax.get_xscale() == "log" and ax.get_ylabel() == "reward (mean of the last 5 steps)"
    trials.attrs["objective"] = "loss"
    stars = [c for c in search_plot(trials).collections if isinstance(c, PathCollection)][-1]
    assert stars.get_offsets().tolist() == [[3e-3, 0.6]]  # a loss is minimised


def test_a_column_the_trials_lack_is_named():
    """``summarize(trials, metric="reward")``, ``search_plot`` of a search without a learning rate, and
    ``random_search(2.5, ...)`` raised pandas' and range()'s bare errors."""
    trials = pd.DataFrame({"trial": [0, 1], "label": ["a", "b"], "weight_decay": [0.0, 0.1], "seed": [0, 0],
                           "status": ["COMPLETED"] * 2, "final_reward": [0.5, 0.7], "value": [0.5, 0.7]})  # fmt: skip
    with pytest.raises(ValueError, match=r"metric='reward' is not a column of these trials; numeric columns: trial, "
                                         r"weight_decay, seed, final_reward, value"):  # fmt: skip
        summarize(trials, metric="reward")
    with pytest.raises(ValueError, match="x='learning_rate' is not a column of these trials"):
        search_plot(trials, x="learning_rate")
    with pytest.raises(ValueError, match="y='reward' is not a column of these trials"):
        search_plot(trials, x="weight_decay", y="reward")
    assert len(search_plot(trials, x="weight_decay").collections) == 2  # the completed trials and the best
    for n in (2.5, -1, True):
        with pytest.raises(ValueError, match=rf"n must be an integer in \[1, 10000\], got {n}"):
            random_search(n, learning_rate=(1e-4, 1e-2))


def test_search_plot_of_a_space_without_a_learning_rate_draws_its_first_numeric_parameter():
    """``space={"optimizer": [...], "momentum": Float(...), "weight_decay": ...}``: ``search_plot(trials)`` was
    ``ValueError: x='learning_rate' is not a column``; it draws momentum (the optimizer, text, is no axis), named."""
    trials = pd.DataFrame({"trial": [0, 1, 2], "label": ["a", "b", "c"], "optimizer": ["muon"] * 3,
                           "momentum": [0.8, 0.9, 0.95], "weight_decay": [0.0, 0.1, 0.01], "seed": [0, 0, 0],
                           "status": ["COMPLETED", "COMPLETED", "PRUNED"], "final_reward": [0.2, 0.7, 0.1],
                           "value": [0.2, 0.7, 0.1], "wall_s": [1.0, 1.0, 0.5]})  # fmt: skip
    trials.attrs["objective"] = "reward"
    ax = search_plot(trials)
    assert ax.get_xlabel() == "momentum" and ax.get_xscale() == "linear"
    assert ax.get_title() == "against momentum, the first numeric parameter searched (no learning_rate)"
    points = [c.get_offsets().tolist() for c in ax.collections if isinstance(c, PathCollection)]
    assert points == [[[0.8, 0.2], [0.9, 0.7]], [[0.95, 0.1]], [[0.9, 0.7]]]  # completed, pruned, the best
    assert [t.get_text() for t in ax.get_legend().get_texts()][-1] == "best trial momentum 0.9"
    assert search_plot(trials, x="weight_decay").get_title() == ""  # an x given is not announced
    with pytest.raises(ValueError, match=r"^x: these trials searched no numeric parameter \(their config columns: "
                                         r"optimizer\); pass x= a numeric column$"):  # fmt: skip
        search_plot(trials.drop(columns=["momentum", "weight_decay"]))


def test_summarize_refuses_a_metric_of_text():
    """``summarize(trials, metric="reason")`` (a column of None) gave NaN with count 0 for every config, silently;
    ``metric="status"`` was pandas' "dtype 'str' does not support operation 'mean'"."""
    trials = pd.DataFrame({"trial": [0, 1], "label": ["a", "b"], "weight_decay": [0.0, 0.1], "seed": [0, 0],
                           "status": ["COMPLETED"] * 2, "reason": [None] * 2, "final_reward": [0.5, 0.7]})  # fmt: skip
    for metric in ("reason", "status"):
        with pytest.raises(ValueError, match=rf"metric='{metric}' is not a numeric column of these trials; numeric "
                                             r"columns: trial, weight_decay, seed, final_reward"):  # fmt: skip
            summarize(trials, metric=metric)
    assert list(summarize(trials)["mean"]) == [0.5, 0.7]


def test_summarize_keeps_variants_of_one_config_apart():
    """``ablate``'s table of a ``{}`` control beside the baseline: one config, two variants, summarized as one."""
    trials = pd.DataFrame({"variant": ["baseline", "control", "wd"] * 2, "weight_decay": [None, None, 0.1] * 2,
                           "seed": [0, 0, 0, 1, 1, 1], "status": ["COMPLETED"] * 6,
                           "final_reward": [0.5, 0.4, 0.7, 0.7, 0.2, 0.9]})  # fmt: skip
    table = summarize(trials)
    assert [v for v, _ in table.index] == ["baseline", "control", "wd"]
    assert table["mean"].round(6).tolist() == [0.6, 0.3, 0.8] and table["count"].tolist() == [2, 2, 2]


@pytest.mark.parametrize(("objective", "y", "best_lr"), [("loss", "final_reward", 1e-2), ("reward", "wall_s", 1e-2)])
def test_search_plot_stars_the_best_of_y_whatever_the_objective(objective, y, best_lr):
    """A reward drawn from a search of the loss starred its lowest reward, the worst trial: ``y`` says which end is
    best (a time drawn from a search of the reward is starred at its lowest)."""
    trials = pd.DataFrame({"trial": [0, 1, 2], "learning_rate": [1e-3, 1e-2, 1e-1], "status": ["COMPLETED"] * 3})
    trials["final_reward"], trials["wall_s"] = [0.1, 0.9, 0.5], [3.0, 1.0, 2.0]
    trials["value"] = trials["wall_s"]
    trials.attrs["objective"] = objective
    stars = [c for c in search_plot(trials, y=y).collections if isinstance(c, PathCollection)][-1]
    assert stars.get_offsets().tolist() == [[best_lr, float(trials.loc[1, y])]]


def stopped() -> threading.Event:
    stop = threading.Event()
    stop.set()
    return stop


@pytest.mark.slow  # an Optuna study (~5 s on a loaded CPU: optuna's import, its SQLite storage)
def test_search_plot_of_a_search_stopped_before_its_first_trial_is_empty_axes_saying_so(tmp_path):
    """An Optuna search stopped before its first trial returns a table with no rows, nor its space's columns:
    ``search_plot`` raised "x='learning_rate' is not a column of these trials", in the cell meant to watch it."""
    trials = sweep(rlnb.AdamParams(weight_decay=0.0), space={"learning_rate": (1e-4, 1e-2, "log")}, n_trials=2,
                   search="optuna", steps=1, runs_dir=tmp_path, progress=False, stop=stopped())  # fmt: skip
    assert trials.empty and "learning_rate" not in trials.columns
    ax = search_plot(trials)
    assert ax.get_title() == "no finished trials yet" and not ax.collections and ax.get_legend() is None
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("learning_rate", "reward (mean of the last 5 steps)")


def test_search_plot_of_trials_stopped_before_they_started_says_none_finished(tmp_path):
    """A list sweep stopped before any trial started: its rows are drawn by status (no value), the title says why
    nothing is plotted."""
    trials = sweep(rlnb.AdamParams(weight_decay=0.0), grid(learning_rate=[1e-3, 2e-3]), steps=1, runs_dir=tmp_path,
                   progress=False, stop=stopped())  # fmt: skip
    ax = search_plot(trials)
    assert ax.get_title() == "no finished trials yet"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["stopped (2)"]
    trials.loc[0, ["status", "value"]] = ["COMPLETED", 0.5]  # one finished: no such title
    assert search_plot(trials).get_title() == ""


@pytest.mark.parametrize(
    ("statuses", "title"),
    [(["FAILED"] * 4, "no trial has a value: 4 failed"),
     (["FAILED", "STOPPED", "COMPLETED"], "no trial has a value: 1 failed, 1 stopped, 1 completed"),
     (["STOPPED", "STOPPED"], "no finished trials yet")],
)  # fmt: skip
def test_search_plot_of_trials_none_of_which_has_a_value_says_how_they_ended(statuses, title):
    """A sweep whose every trial FAILED (a reward that raises) was titled "no finished trials yet": they had all
    finished, and "yet" told the person to wait for trials that would never come. Stopped ones run again on resume.
    Two statuses or more with no value on a log x were matplotlib's "Data cannot be log-scaled" when drawn."""
    n = len(statuses)
    trials = pd.DataFrame({"trial": range(n), "label": "baseline", "learning_rate": [1e-3 * (i + 1) for i in range(n)],
                           "seed": 0, "status": statuses, "value": math.nan, "diverged_at": None})  # fmt: skip
    ax = search_plot(trials)
    assert ax.get_title() == title

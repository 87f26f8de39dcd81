"""The sweep table's step counts are integers, as a user reads and compares them: ``diverged_at`` empty for a healthy
trial (pandas' ``<NA>``), never ``3.0`` beside ``NaN``."""

import math
from pathlib import Path

import pytest

import rlnb
from rlnb.sweep import search_plot, summarize, sweep
from rlnb.sweep.rows import table


def row(trial: int, **result) -> dict:
    return {"trial": trial, "label": "baseline", "seed": 0, "status": "COMPLETED", "reason": None, "steps_done": 4,
            "final_loss": 0.5, "run_path": None, **result}  # fmt: skip


def test_diverged_at_and_steps_done_are_nullable_integer_columns(tmp_path: Path):
    rows = [row(0, diverged_at=None), row(1, diverged_at=3, final_loss=math.nan), row(2, steps_done=math.nan)]
    out = table(rows, tmp_path, "final_reward", set())  # trial 2: an older rlnb's row (no diverged_at), hand-edited
    assert out["diverged_at"].dtype == "Int64" and out["steps_done"].dtype == "Int64"
    assert out["diverged_at"].isna().tolist() == [True, False, True] and out.at[1, "diverged_at"] == 3
    assert out["steps_done"].tolist()[:2] == [4, 4] and out["steps_done"].isna().tolist() == [False, False, True]
    assert str(out.at[1, "diverged_at"]) == "3"


def test_a_table_of_rows_without_step_counts_still_has_them_as_integer_columns(tmp_path: Path):
    """A sweep stopped before its first trial: no rows, the columns there all the same (summaries read them)."""
    out = table([], tmp_path, "final_reward", set())
    assert out["diverged_at"].dtype == "Int64" and out["steps_done"].dtype == "Int64" and len(out) == 0


def test_columns_follow_the_plan_not_the_order_trials_finished_in(tmp_path: Path):
    """Trial 2 (an ``eps`` config) failed first, so its row came first: ``eps`` led the configs, and was
    ``search_plot``'s default x and ``summarize``'s first key on one executor and not on another."""

    def planned(trial: int, config: dict, status: str = "COMPLETED") -> dict:  # a row as identity() begins it
        return {"trial": trial, "label": str(config), **config, "seed": 0, "status": status, "reason": None,
                "steps_done": 2, "final_loss": 0.5, "run_path": None}  # fmt: skip

    done = [planned(2, {"eps": 1e-50}, "FAILED"), planned(0, {"beta2": 0.9}), planned(1, {"beta2": 0.99})]
    for rows in (done, done[::-1]):  # as batched finished them, and as threads did
        out = table(rows, tmp_path, "reward", set())
        assert list(out.columns)[:5] == ["trial", "label", "beta2", "eps", "seed"]
        assert list(out.columns)[5:] == ["status", "reason", "steps_done", "final_loss", "run_path", "best_loss",
                                         "final_reward", "best_reward", "value", "wall_s", "diverged_at"]  # fmt: skip
        assert list(out.trial) == [0, 1, 2]


def test_a_variant_leads_the_config_and_the_seed_follows_it(tmp_path: Path):
    rows = [{"trial": 1, "variant": "hi", "label": "learning_rate=0.01", "learning_rate": 0.01, "momentum": 0.9,
             "seed": 0, "status": "COMPLETED"}, {"trial": 0, "variant": "control", "label": "baseline", "seed": 0,
             "status": "COMPLETED"}]  # fmt: skip
    out = table(rows, tmp_path, "reward", set())
    assert list(out.columns)[:6] == ["trial", "variant", "label", "learning_rate", "momentum", "seed"]


@pytest.mark.slow  # two sweeps of three trials (~2 s)
def test_a_batched_sweep_and_the_same_on_threads_give_one_table_layout(tmp_path: Path):
    """Batched, the ``eps`` member fails at step 1 and its row was made first: its table began ``trial, label, eps``,
    and ``search_plot`` drew against ``eps``, where the same sweep on threads drew against ``beta2``."""
    configs = [{"beta2": 0.9}, {"beta2": 0.99}, {"eps": 1e-50}]
    base = rlnb.AdamParams(weight_decay=0.0)
    tables = [sweep(base, configs, seeds=[0], steps=2, runs_dir=tmp_path, executor=executor, progress=False)
              for executor in ("batched", "threads")]  # fmt: skip
    batched, threads = tables
    assert list(batched.executor) == ["batched"] * 3 and list(batched.status) == ["COMPLETED"] * 2 + ["FAILED"]
    assert list(batched.columns) == list(threads.columns)
    assert list(batched.columns)[:5] == ["trial", "label", "beta2", "eps", "seed"]
    assert [search_plot(t).get_xlabel() for t in tables] == ["beta2", "beta2"]
    assert [summarize(t).index.names for t in tables] == [["beta2", "eps"]] * 2

"""The sweep table's step counts are integers, as a user reads and compares them: ``diverged_at`` empty for a healthy
trial (pandas' ``<NA>``), never ``3.0`` beside ``NaN``."""

import math
from pathlib import Path

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

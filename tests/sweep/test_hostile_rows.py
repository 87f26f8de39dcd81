"""A sweep folder's ``trials.jsonl`` damaged or written by someone else: a row whose ``run_path`` climbs out of the
folder, a JSON ``true`` where a seed (an integer) is read, and what a skipped line's warning promises, for a grid
sweep and an Optuna search alike."""

import json
import math
import warnings
from pathlib import Path

import pytest

from rlnb.sweep.folder import begin
from rlnb.sweep.rows import planned_rows, table

SETTINGS = {"search": None, "base": {"learning_rate": 3e-3}, "seeds": [0], "steps": 2}
ROW = {"trial": 0, "status": "COMPLETED", "seed": 1, "label": "a", "final_loss": 1.0, "run_path": "trial-000-seed1"}


def resumed(folder: Path, lines: list[str], search: str | None = None) -> tuple[list[dict], list[str]]:
    """The rows a resume of a sweep folder holding ``lines`` in trials.jsonl reads, and the warnings it gives."""
    settings = {**SETTINGS, "search": search}
    begin(folder, settings, resume=False)
    (folder / "trials.jsonl").write_text("".join(line + "\n" for line in lines))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows = begin(folder, settings, resume=True)
    return rows, [str(w.message) for w in caught]


@pytest.mark.parametrize("climbs", ["../elsewhere", "trial-000-seed1/../../../etc", "..", "a/../.."])
def test_a_rows_run_path_out_of_the_sweep_folder_is_dropped_naming_the_line(tmp_path, climbs):
    """``"run_path": "../elsewhere"`` made the table (and ``histories``) read a run outside the sweep folder."""
    rows, said = resumed(tmp_path, [json.dumps(ROW), json.dumps({**ROW, "trial": 1, "run_path": climbs})])
    out = table(rows, tmp_path, "loss", set())
    assert out.run_path[0] == str(tmp_path / "trial-000-seed1") and out.run_path.isna().tolist() == [False, True]
    assert any(f"trials.jsonl line 2: trial 1's run_path {climbs!r} leads out of the sweep folder" in m
               for m in said), said  # fmt: skip


def test_a_run_path_inside_the_folder_is_kept(tmp_path):
    rows, said = resumed(tmp_path, [json.dumps({**ROW, "run_path": "runs/../trial-000-seed1"})])
    assert rows[0]["run_path"] == "runs/../trial-000-seed1" and said == []


def test_a_json_true_for_a_rows_seed_is_not_the_plans_seed_1(tmp_path):
    """``"seed": true`` matched the plan's seed 1 (``True == 1``): no warning, and the table's seed said True."""
    row = {**ROW, "seed": True}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (kept,) = planned_rows(tmp_path, [row], lambda trial: {"trial": 0, "seed": 1, "label": "a"})
    said = [str(w.message) for w in caught]
    assert any("trial 0's row differs from the sweep's plan" in m and "seed: True (the plan has 1)" in m
               for m in said), said  # fmt: skip
    assert kept["seed"] == 1 and type(kept["seed"]) is int


@pytest.mark.parametrize(("search", "promise"), [(None, "so its trial runs again"),
                                                 ("optuna", "the Optuna study holds its trial")])  # fmt: skip
def test_a_broken_lines_warning_says_what_the_resume_does_with_its_trial(tmp_path, search, promise):
    """An Optuna search's broken line was said to run its trial again: the study counts a finished trial done."""
    rows, said = resumed(tmp_path, ["{not json", json.dumps(ROW)], search)
    assert len(rows) == 1 and not math.isnan(rows[0]["final_loss"])
    assert any("trials.jsonl line 1 is not JSON" in m and promise in m for m in said), said
    if search:
        assert not any("runs again" in m for m in said), said


@pytest.mark.parametrize("key", ["diverged_at", "steps_done"])
def test_a_json_true_for_a_step_count_is_no_number(tmp_path, key):
    """``"diverged_at": true`` read as step 1 in the table (the trial counted diverged at its first step)."""
    rows, said = resumed(tmp_path, [json.dumps({**ROW, key: True})])
    assert table(rows, tmp_path, "loss", set())[key].isna().all()
    assert any(f"trial 0's {key} True is no number" in m for m in said), said


@pytest.mark.parametrize("root", [False, True])
def test_an_absolute_run_path_outside_the_folder_and_not_in_it_by_name_is_dropped(tmp_path, root):
    """``"run_path": "/etc"`` (no run ``etc`` in the folder) made the table and ``histories`` read outside it; ``"/"``
    (no name) the sweep folder itself."""
    folder, outside = tmp_path / "sweep", tmp_path / "elsewhere" / "trial-001-seed1"
    outside.mkdir(parents=True)
    folder.mkdir()
    outside = Path("/") if root else outside
    rows, said = resumed(folder, [json.dumps(ROW), json.dumps({**ROW, "trial": 1, "run_path": str(outside)})])
    assert table(rows, folder, "loss", set()).run_path.isna().tolist() == [False, True]
    assert any(f"trials.jsonl line 2: trial 1's run_path {str(outside)!r} leads out of the sweep folder" in m
               for m in said), said  # fmt: skip


@pytest.mark.parametrize("where", ["moved", "here", "nested"])
def test_an_older_rlnbs_absolute_run_path_is_kept(tmp_path, where):
    """Guard: an older rlnb's absolute path, of a folder moved since (found by name) or inside the folder itself."""
    folder = tmp_path / "sweep"
    run = folder / ("x/trial-001-seed1" if where == "nested" else "trial-001-seed1")
    run.mkdir(parents=True)
    recorded = {"moved": "/old/place/sweep/trial-001-seed1", "here": str(run),
                "nested": str(folder / "y" / ".." / "x" / "trial-001-seed1")}[where]  # fmt: skip
    rows, said = resumed(folder, [json.dumps({**ROW, "trial": 1, "run_path": recorded})])
    assert table(rows, folder, "loss", set()).run_path.tolist() == [recorded if where == "nested" else str(run)]
    assert said == []

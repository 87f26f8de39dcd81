"""A sweep folder that stays true when it is moved, copied, resumed, edited by hand or read back; and the sweep's
configs, ablations and docs lines that failed as written."""

import json
import re
import shutil
import threading
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import pytest

import rlnb
from rlnb.history import History
from rlnb.sweep import ablate, grid, histories, random_search, sweep
from rlnb.sweep.optuna_search import OptunaSource
from rlnb.sweep.space import parse_space

BASE = rlnb.AdamParams(learning_rate=3e-3, weight_decay=0.0)
CONFIGS = grid(learning_rate=[1e-3, 2e-3])
DOCS = Path(__file__).resolve().parents[2] / "docs" / "sweeps.md"


def rows_of(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "trials.jsonl").read_text().splitlines()]


def test_a_moved_sweep_folder_resumes_and_its_table_reads_the_runs_where_they_are_now(tmp_path):
    """Rows stored absolute run paths: after a move the table named the old folder (histories() raised
    FileNotFoundError), after a copy it named the original's runs, silently."""
    first = sweep(BASE, CONFIGS, steps=1, runs_dir=tmp_path / "a", progress=False)
    old = Path(first.attrs["path"])
    assert [r["run_path"] for r in rows_of(old)] == ["trial-000-seed0", "trial-001-seed0"]  # relative on disk
    moved = tmp_path / "b" / "moved"
    moved.parent.mkdir()
    shutil.move(old, moved)
    again = sweep(BASE, CONFIGS, steps=1, resume=moved, progress=False)
    assert list(again.run_path) == [str(moved / "trial-000-seed0"), str(moved / "trial-001-seed0")]
    assert [len(h.steps) for h in histories(again)] == [1, 1]
    copy = tmp_path / "copy"
    shutil.copytree(moved, copy)
    lines = rows_of(copy)  # as an older rlnb wrote them: absolute, naming the folder where the trials ran
    (copy / "trials.jsonl").write_text("".join(json.dumps({**r, "run_path": str(old / r["run_path"])}) + "\n"
                                               for r in lines))  # fmt: skip
    copied = sweep(BASE, CONFIGS, steps=1, resume=copy, progress=False)
    assert list(copied.run_path) == [str(copy / "trial-000-seed0"), str(copy / "trial-001-seed0")]


def test_a_hand_edited_trials_file_warns_for_a_broken_line_and_ignores_a_trial_outside_the_sweep(tmp_path):
    """A line that is no JSON (a comma too many) was skipped without a word, and a row of trial 99 in a sweep of two
    was a row of the table (its config NaN) and counted done: "done 3 of 2"."""
    first = sweep(BASE, CONFIGS, steps=1, runs_dir=tmp_path, progress=False)
    folder = Path(first.attrs["path"])
    lines = (folder / "trials.jsonl").read_text().splitlines()
    lines[0] = lines[0].replace('"seed": 0,', '"seed": 0,,')
    lines.append(json.dumps({"trial": 99, "status": "COMPLETED", "final_reward": 5.0}))
    (folder / "trials.jsonl").write_text("\n".join(lines) + "\n")
    done = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = sweep(BASE, CONFIGS, steps=1, resume=folder, progress=lambda d, t, r: done.append((d, t, r["trial"])))
    messages = [str(w.message) for w in caught]
    assert any("trials.jsonl line 1 is not JSON" in m and "runs again" in m for m in messages), messages
    assert any("trial 99 is not a trial of this sweep; its row is ignored" in m for m in messages), messages
    assert done == [(2, 2, 0)]  # trial 0 ran again; trial 99 is not done work
    assert list(again.trial) == [0, 1] and not again.learning_rate.isna().any()



"""Resuming an Optuna search whose ``study.db`` was damaged or removed (a sync tool, a hand clean-up): the study
holds the search's trials, so the resume is refused naming the file, before any trial runs — it was a bare
sqlalchemy ``DatabaseError`` naming no file, or (removed) a new search of the whole budget whose finished rows
were "not a trial of this sweep" and dropped from the table."""

from pathlib import Path

import pytest

import rlnb
from rlnb.sweep import sweep

ADAM = rlnb.AdamParams(learning_rate=3e-3, weight_decay=0.0)
SEARCH = dict(search="optuna", space={"learning_rate": (1e-4, 1e-2, "log")}, n_trials=2, steps=1, progress=False,
              sampler="random", pruner=None)  # fmt: skip


@pytest.mark.slow  # Optuna
def test_resuming_a_search_whose_study_file_is_damaged_or_gone_is_refused_naming_it(tmp_path):
    folder = Path(sweep(ADAM, runs_dir=tmp_path, **SEARCH).attrs["path"])
    rows = (folder / "trials.jsonl").read_text()
    study = folder / "study.db"
    study.write_bytes(b"not a database" * 100)
    with pytest.raises(ValueError, match=rf"resume: {study} cannot be read as the search's Optuna study \("
                       r".*file is not a database"):  # fmt: skip
        sweep(ADAM, resume=folder, **SEARCH)
    study.unlink()
    with pytest.raises(ValueError, match=rf"resume: {study} is missing: it holds the search's 2 recorded trials"):
        sweep(ADAM, resume=folder, **SEARCH)
    assert (folder / "trials.jsonl").read_text() == rows  # nothing ran
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == ["trial-000-seed0", "trial-001-seed0"]

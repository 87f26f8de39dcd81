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


@pytest.mark.slow  # Optuna
def test_resuming_a_search_whose_study_file_holds_none_of_its_trials_is_refused_naming_it(tmp_path):
    """An empty ``study.db`` (a copy to another machine cut short, a sync tool's placeholder) or another search's
    (copied over it, its study renamed by hand) was read as a new study: the search began again under the recorded
    trials' numbers, and their rows were dropped from the table as "not a trial of this sweep" (hostile7)."""
    folder = Path(sweep(ADAM, runs_dir=tmp_path, **SEARCH).attrs["path"])
    rows = (folder / "trials.jsonl").read_text()
    study = folder / "study.db"
    study.write_bytes(b"")
    refused = rf"resume: {study} holds no trials of this search \(an empty file, or another study's\), but the " \
              r"search recorded 2 trials"  # fmt: skip
    with pytest.raises(ValueError, match=refused):
        sweep(ADAM, resume=folder, **SEARCH)
    import optuna

    storage = f"sqlite:///{study}"
    assert optuna.study.get_all_study_names(storage) == []  # the study made in it is gone again
    optuna.create_study(study_name="another search", storage=storage).ask()
    with pytest.raises(ValueError, match=refused):
        sweep(ADAM, resume=folder, **SEARCH)
    assert optuna.study.get_all_study_names(storage) == ["another search"]  # left as it was found
    assert (folder / "trials.jsonl").read_text() == rows  # nothing ran
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == ["trial-000-seed0", "trial-001-seed0"]

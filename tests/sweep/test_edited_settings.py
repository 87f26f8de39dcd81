"""A sweep folder's ``sweep.json`` edited by hand: a setting every rlnb records that was removed let the resume run
with any value of it (the seeds, the base params, the configs), mixing their trials in one table without a word;
a setting an older rlnb did not record yet is still not compared."""

import json
from pathlib import Path

import pytest

import rlnb
from rlnb.sweep import grid, sweep
from rlnb.sweep.folder import begin

BASE = rlnb.AdamParams(learning_rate=3e-3, weight_decay=0.0)
SETTINGS = {"search": None, "base": {"learning_rate": 3e-3}, "seeds": [0], "steps": 2, "variants": None}


@pytest.mark.parametrize("removed", ["seeds", "base", "search"])
def test_a_resume_of_a_sweep_json_lacking_what_every_rlnb_records_is_refused_naming_it(tmp_path, removed):
    begin(tmp_path, SETTINGS, resume=False)
    stored = json.loads((tmp_path / "sweep.json").read_text())
    del stored[removed]
    (tmp_path / "sweep.json").write_text(json.dumps(stored))
    with pytest.raises(ValueError, match=rf"resume: .*sweep\.json lacks {removed}, which every rlnb records"):
        begin(tmp_path, SETTINGS, resume=True)


def test_a_setting_an_older_rlnb_did_not_record_is_still_not_compared(tmp_path):
    begin(tmp_path, {k: v for k, v in SETTINGS.items() if k != "variants"}, resume=False)
    assert begin(tmp_path, SETTINGS, resume=True) == []


@pytest.mark.slow  # two sweeps of a step each
def test_a_sweep_whose_seeds_were_removed_from_sweep_json_is_not_resumed_with_other_seeds(tmp_path):
    first = sweep(BASE, grid(learning_rate=[1e-3]), seeds=[0], steps=1, runs_dir=tmp_path, progress=False)
    folder = Path(first.attrs["path"])
    stored = json.loads((folder / "sweep.json").read_text())
    del stored["seeds"]
    (folder / "sweep.json").write_text(json.dumps(stored))
    with pytest.raises(ValueError, match="lacks seeds"):
        sweep(BASE, grid(learning_rate=[1e-3]), seeds=[5], steps=1, resume=folder, progress=False)
    assert len((folder / "trials.jsonl").read_text().splitlines()) == 1


@pytest.mark.parametrize(("key", "edited"), [("steps", True), ("seeds", [True]), ("base", {"learning_rate": 3e-3,
                                                                                        "x": False})])  # fmt: skip
def test_a_json_true_in_sweep_json_is_not_the_integer_1(tmp_path, key, edited):
    """``"steps": true`` resumed a sweep of ``steps=1``: ``True == 1`` in Python, so the check saw no change."""
    settings = {**SETTINGS, "steps": 1, "seeds": [1], "base": {"learning_rate": 3e-3, "x": 0}}
    begin(tmp_path, settings, resume=False)
    stored = json.loads((tmp_path / "sweep.json").read_text())
    (tmp_path / "sweep.json").write_text(json.dumps({**stored, key: edited}))
    with pytest.raises(ValueError, match=rf"changed: {key}: .* \(the sweep used .*(True|False).*\)$"):
        begin(tmp_path, settings, resume=True)

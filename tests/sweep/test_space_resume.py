"""Resuming an Optuna search compares what its space means, not how it was written: ``(1e-4, 1e-2, "log")`` and
``Float(1e-4, 1e-2, log=True)`` are one space (the resume was refused, as ``sweep.json`` held the space's repr),
while another range, a linear one, or other choices are still refused. A folder whose ``sweep.json`` an older rlnb
wrote (the space as typed) resumes with the same space written either way."""

import json
from pathlib import Path

import numpy as np
import pytest

import rlnb
from rlnb.sweep import Categorical, Float, Int, sweep

pytestmark = pytest.mark.slow  # Optuna searches of one trial each (~1 s)

ADAM = rlnb.AdamParams(learning_rate=3e-3, weight_decay=0.0)
ARGS = dict(search="optuna", steps=1, progress=False)
TYPED = {"learning_rate": (1e-4, 1e-2, "log"), "newton_schulz_steps": (3, 5, "int"), "optimizer": ["muon"]}
SAME = {"learning_rate": Float(0.0001, 0.01, log=True), "newton_schulz_steps": Int(3.0, 5),
        "optimizer": Categorical((np.str_("muon"),))}  # fmt: skip


def first_trial(tmp_path, space) -> Path:
    trials = sweep(rlnb.MuonParams(adam={"learning_rate": 3e-3}), space=space, n_trials=1, runs_dir=tmp_path, **ARGS)
    assert list(trials.status) == ["COMPLETED"]
    return Path(trials.attrs["path"])


def test_the_same_space_written_another_way_resumes(tmp_path):
    folder = first_trial(tmp_path, TYPED)
    again = sweep(rlnb.MuonParams(adam={"learning_rate": 3e-3}), space=SAME, n_trials=2, resume=folder, **ARGS)
    assert list(again.status) == ["COMPLETED", "COMPLETED"]
    recorded = json.loads((folder / "sweep.json").read_text())["space"]
    assert recorded["learning_rate"] == "Float(low=0.0001, high=0.01, log=True)"  # what it means


@pytest.mark.parametrize(
    ("field", "other"),
    [("learning_rate", (1e-4, 1e-1, "log")), ("learning_rate", Float(1e-4, 1e-2)), ("newton_schulz_steps", [3, 5]),
     ("learning_rate", [1e-4, 1e-2])],
)  # fmt: skip
def test_another_space_is_still_refused(tmp_path, field, other):
    folder = first_trial(tmp_path, TYPED)
    with pytest.raises(ValueError, match=rf"resume: run it with the same arguments; changed: space: .*{field}"):
        sweep(rlnb.MuonParams(adam={"learning_rate": 3e-3}), space={**TYPED, field: other}, n_trials=2, resume=folder,
              **ARGS)  # fmt: skip


def test_a_folder_that_recorded_the_space_as_typed_resumes_with_it_either_way(tmp_path):
    """Older rlnb wrote each dimension's repr as given: ``"(0.0001, 0.01, 'log')"``, ``"Int(low=3.0, high=5, ...)"``."""
    folder = first_trial(tmp_path, TYPED)
    path = folder / "sweep.json"
    stored = json.loads(path.read_text())
    stored["space"] = {"learning_rate": "(0.0001, 0.01, 'log')",
                       "newton_schulz_steps": "Int(low=3.0, high=5, log=False)", "optimizer": "['muon']"}  # fmt: skip
    path.write_text(json.dumps(stored))
    again = sweep(rlnb.MuonParams(adam={"learning_rate": 3e-3}), space=SAME, n_trials=2, resume=folder, **ARGS)
    assert list(again.status) == ["COMPLETED", "COMPLETED"]
    stored["space"]["learning_rate"] = "(0.0001, 0.1, 'log')"  # another range, as that rlnb wrote it
    path.write_text(json.dumps(stored))
    with pytest.raises(ValueError, match=r"changed: space: .*learning_rate.*\(0\.0001, 0\.1, 'log'\)"):
        sweep(rlnb.MuonParams(adam={"learning_rate": 3e-3}), space=TYPED, n_trials=3, resume=folder, **ARGS)

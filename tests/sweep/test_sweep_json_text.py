"""A sweep folder's ``sweep.json`` and ``trials.jsonl`` as standard JSON (a NaN or infinite number as the string
``"NaN"``, ``"Infinity"``, ``"-Infinity"``, read back as the float), a folder an older rlnb wrote with bare ``NaN``
still resuming, and never written through a link."""

import json
import math
import os
from pathlib import Path

import pytest

import rlnb
from rlnb.sweep import grid, sweep
from rlnb.sweep.folder import begin
from rlnb.sweep.rows import append_row
from rlnb.tasks import Task
from tests.support.pipes import refusal_in_time

BASE = rlnb.AdamParams(learning_rate=3e-3, weight_decay=0.0)
SETTINGS = {"search": None, "steps": 2, "options": {"model_options": {"scale": math.nan, "cap": math.inf}}}
ROW = {"trial": 0, "label": "NaN", "learning_rate": 1e-3, "seed": 0, "status": "FAILED", "reason": "Infinity",
       "final_loss": math.nan, "best_loss": -math.inf, "final_reward": math.inf, "value": math.nan}  # fmt: skip


def strict(text: str) -> object:
    """``text`` read as standard JSON: a bare ``NaN`` / ``Infinity`` is refused, as jq and ``JSON.parse`` refuse it."""

    def refuse(constant: str) -> None:
        raise ValueError(f"not standard JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_a_trials_row_with_nan_and_infinity_is_standard_json_and_resumes_as_the_floats(tmp_path):
    begin(tmp_path, SETTINGS, resume=False)
    append_row(tmp_path, ROW)
    line = (tmp_path / "trials.jsonl").read_text(encoding="utf-8")
    assert strict(line)["final_loss"] == "NaN" and strict(line)["best_loss"] == "-Infinity"
    (row,) = begin(tmp_path, SETTINGS, resume=True)
    assert math.isnan(row["final_loss"]) and math.isnan(row["value"])
    assert (row["best_loss"], row["final_reward"]) == (-math.inf, math.inf)
    assert (row["label"], row["reason"]) == ("NaN", "Infinity")  # text stays text


def test_a_sweep_json_with_nan_is_standard_json_and_resumes_with_the_same_settings(tmp_path):
    """A NaN setting was written bare, and read back it differed from itself (NaN != NaN): the resume was refused."""
    begin(tmp_path, SETTINGS, resume=False)
    stored = strict((tmp_path / "sweep.json").read_text(encoding="utf-8"))
    assert stored["options"]["model_options"] == {"scale": "NaN", "cap": "Infinity"}
    assert begin(tmp_path, SETTINGS, resume=True) == []


def test_a_sweep_folder_an_older_rlnb_wrote_with_bare_nan_still_resumes(tmp_path):
    (tmp_path / "sweep.json").write_text(json.dumps(SETTINGS, indent=2))  # bare NaN, as it was written
    (tmp_path / "trials.jsonl").write_text(json.dumps(ROW) + "\n")
    assert "NaN," in (tmp_path / "trials.jsonl").read_text()
    (row,) = begin(tmp_path, SETTINGS, resume=True)
    assert math.isnan(row["final_loss"]) and row["best_loss"] == -math.inf and row["label"] == "NaN"


def test_a_failed_trials_nan_losses_are_standard_json_and_the_sweep_resumes(tmp_path):
    def reward(prompt, completion):
        raise RuntimeError("no reward")

    task = Task("raising", [[104, 105]], reward, group_size=4)
    first = sweep(BASE, grid(learning_rate=[1e-3]), steps=1, task=task, runs_dir=tmp_path, progress=False)
    folder = Path(first.attrs["path"])
    (row,) = [strict(line) for line in (folder / "trials.jsonl").read_text(encoding="utf-8").splitlines()]
    assert row["status"] == "FAILED" and row["final_loss"] == "NaN"
    strict((folder / "sweep.json").read_text(encoding="utf-8"))
    again = sweep(BASE, grid(learning_rate=[1e-3]), steps=1, task=task, resume=folder, progress=False)
    assert list(again.status) == ["FAILED"] and math.isnan(again.final_loss[0])  # kept, not run again


def plant(folder: Path, how: str) -> Path:
    """``trials.jsonl`` in ``folder`` made a symbolic or a hard link to a notes file; the notes file."""
    notes = folder.parent / f"notes-{how}.txt"
    notes.write_text("mine\n")
    if how == "symlink":
        (folder / "trials.jsonl").symlink_to(notes)
    else:
        os.link(notes, folder / "trials.jsonl")
    return notes


@pytest.mark.parametrize(("how", "says"), [("symlink", "is a symbolic link"), ("hardlink", "is a hard link")])
def test_a_trials_file_that_is_a_link_is_refused_before_the_resume_and_never_appended_through(tmp_path, how, says):
    """A sweep folder copied from elsewhere with its links: each row went into the link's target (a user's notes)."""
    folder = tmp_path / "sweep"
    folder.mkdir()
    begin(folder, SETTINGS, resume=False)
    notes = plant(folder, how)
    with pytest.raises(OSError, match=says):
        begin(folder, SETTINGS, resume=True)
    with pytest.raises(OSError, match=says):
        append_row(folder, ROW)
    assert notes.read_text() == "mine\n"


def test_a_sweep_json_link_is_replaced_not_written_through_and_one_at_its_temporary_name_refused(tmp_path):
    folder = tmp_path / "sweep"
    folder.mkdir()
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    (folder / "sweep.json").symlink_to(notes)
    (folder / "sweep.json.tmp").symlink_to(tmp_path / "other.txt")
    with pytest.raises(OSError, match=r"sweep\.json\.tmp is a symbolic link"):
        begin(folder, SETTINGS, resume=False)
    assert not (tmp_path / "other.txt").exists()
    (folder / "sweep.json.tmp").unlink()
    begin(folder, SETTINGS, resume=False)
    assert notes.read_text() == "mine\n" and not (folder / "sweep.json").is_symlink()
    assert strict((folder / "sweep.json").read_text())["steps"] == 2


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
@pytest.mark.parametrize(("name", "resume"), [("trials.jsonl", False), ("trials.jsonl", True), ("sweep.json", True)])
def test_a_sweep_file_that_is_a_named_pipe_is_refused_not_waited_on(tmp_path, name, resume):
    """A named pipe was opened and waited on for ever for its other end: a new sweep hung at its first finished trial
    (appending a row), a resume at its start (reading the settings or the rows). Refused, naming it; rows are appended
    as a run folder's lines are (``locks.appending``)."""
    folder = tmp_path / "sweep"
    folder.mkdir()
    begin(folder, SETTINGS, resume=False)
    (folder / name).unlink(missing_ok=True)
    os.mkfifo(folder / name)
    call = (lambda: begin(folder, SETTINGS, resume=True)) if resume else (lambda: append_row(folder, ROW))
    said = str(refusal_in_time(call, folder / name))
    assert f"{name} is a named pipe, not a file" in said
    assert said.startswith("resume: ") == (name == "sweep.json")  # as the resume's other refusals begin


def test_a_resumed_sweeps_settings_that_are_a_folder_are_refused_naming_resume(tmp_path):
    """``sweep.json`` made a folder: a bare ``IsADirectoryError`` named neither ``resume`` nor what to do."""
    folder = tmp_path / "sweep"
    (folder / "sweep.json").mkdir(parents=True)
    with pytest.raises(IsADirectoryError, match=r"^resume: .*sweep\.json is a folder, not a file"):
        sweep(BASE, grid(learning_rate=[1e-3]), steps=1, resume=folder, progress=False)


def test_a_resumed_sweeps_rows_that_are_a_folder_are_refused_naming_resume(tmp_path):
    """``trials.jsonl`` made a folder: a bare ``IsADirectoryError``, as ``sweep.json``'s was."""
    begin(tmp_path, SETTINGS, resume=False)
    (tmp_path / "trials.jsonl").mkdir()
    with pytest.raises(IsADirectoryError, match=r"^resume: .*trials\.jsonl is a folder, not a file: .*start a new"):
        begin(tmp_path, SETTINGS, resume=True)

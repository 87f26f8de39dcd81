"""A named pipe put in a file's place after rlnb looked (``_files.refuse_pipe``, ``reading._regular``) and before
it opened the file: refused as it is opened (``_files.regular``: opened without waiting, its type read from the
descriptor), naming it. The check passed, and the open then waited for ever for a writer: a resumed sweep, a server's
start, a run's load. The swap is made inside the check (monkeypatched), with a real pipe; each call runs with a
deadline (``refusal_in_time``), so a wait fails."""

import os
from pathlib import Path

import pytest

from rlnb import _files
from rlnb.history import History, reading
from rlnb.server import state
from rlnb.server.state import Journal, StateDirError
from rlnb.sweep import folder as sweep_folder
from rlnb.sweep import rows as sweep_rows
from tests.support.pipes import refusal_in_time

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")


def swap_after_check(monkeypatch, module, target: Path) -> None:
    """``module.refuse_pipe`` looks at ``target`` (a regular file: it passes), then puts a named pipe in its place."""
    real = _files.refuse_pipe

    def check(file: Path, mode: int | None = None) -> None:
        real(file, mode)
        if mode is None and Path(file) == target:
            target.unlink()
            os.mkfifo(target)

    monkeypatch.setattr(module, "refuse_pipe", check)


def test_a_sweeps_settings_swapped_for_a_pipe_are_refused_on_resume(tmp_path, monkeypatch):
    sweep_folder.begin(tmp_path, {"steps": 1}, resume=False)
    target = tmp_path / sweep_folder.SETTINGS_FILE
    swap_after_check(monkeypatch, sweep_folder, target)
    said = refusal_in_time(lambda: sweep_folder.begin(tmp_path, {"steps": 1}, resume=True), target)
    assert f"{target} is a named pipe, not a file" in str(said), said


def test_a_sweeps_rows_swapped_for_a_pipe_are_refused_on_resume(tmp_path, monkeypatch):
    sweep_folder.begin(tmp_path, {"steps": 1}, resume=False)
    sweep_rows.append_row(tmp_path, {"trial": 0, "status": "COMPLETED"})
    target = tmp_path / sweep_rows.ROWS_FILE
    swap_after_check(monkeypatch, sweep_rows, target)
    said = refusal_in_time(lambda: sweep_folder.begin(tmp_path, {"steps": 1}, resume=True), target)
    assert f"{target} is a named pipe, not a file" in str(said), said


def test_a_servers_journal_swapped_for_a_pipe_stops_its_start_naming_it(tmp_path, monkeypatch):
    journal = Journal(tmp_path)
    journal.rewrite([("resource", {"id": "m"})])
    journal.close()
    target = tmp_path / state.JOURNAL
    swap_after_check(monkeypatch, state, target)
    again = Journal(tmp_path)
    try:
        said = refusal_in_time(lambda: again.load(keep_ops=10), target, StateDirError)
    finally:
        again.close()
    assert f"{target} is a named pipe, not a file" in str(said), said


def test_a_servers_signing_key_swapped_for_a_pipe_stops_its_start_naming_it(tmp_path, monkeypatch):
    journal = Journal(tmp_path)
    journal.signing_key()
    target = tmp_path / state.KEY_FILE
    swap_after_check(monkeypatch, state, target)
    try:
        said = refusal_in_time(journal.signing_key, target, StateDirError)
    finally:
        journal.close()
    assert f"{target} is a named pipe, not a file" in str(said), said


def test_a_run_file_swapped_for_a_pipe_is_refused_as_it_is_opened_to_append(tmp_path, monkeypatch):
    """``_files.appending`` (every ``.jsonl`` rlnb appends to): a pipe with no reader, opened to append, waited."""
    target = tmp_path / "ops.jsonl"
    target.write_text("")
    swap_after_check(monkeypatch, _files, target)
    said = refusal_in_time(lambda: _files.appending(target), target)
    assert f"{target} is a named pipe or a socket, not a file" in str(said), said


def test_a_lock_file_swapped_for_a_pipe_is_refused_as_it_is_opened(tmp_path, monkeypatch):
    target = tmp_path / "run.lock"
    target.write_text("")
    swap_after_check(monkeypatch, _files, target)
    said = refusal_in_time(lambda: _files.hold_lock(target, "taken by {holder}"), target)
    assert f"{target} is a named pipe, not a file" in str(said), said


@pytest.mark.parametrize("name", ["metrics.jsonl", "config.json"])
def test_a_run_file_swapped_for_a_pipe_is_left_out_of_a_load_with_a_warning(tmp_path, monkeypatch, name):
    """``History.load`` looked (``reading._regular``), then read: a pipe put there in between was read for ever."""
    history = History.create({"lr": 1e-3}, runs_dir=tmp_path, run_id="r")
    history.log(1, reward=0.5)
    history.close()
    target = tmp_path / "r" / name
    real = reading._regular

    def look(file: Path) -> bool:
        regular = real(file)
        if file == target:
            target.unlink()
            os.mkfifo(target)
        return regular

    def load() -> None:
        raise Loaded(History.load(tmp_path / "r"))  # the loaded run, out of refusal_in_time's thread

    monkeypatch.setattr(reading, "_regular", look)
    with pytest.warns(RuntimeWarning, match=f"{name} is not a regular file; the run is loaded without it"):
        said = refusal_in_time(load, target, Loaded)
    assert isinstance(said, Loaded)
    assert said.history.config.get("lr") == (None if name == "config.json" else 1e-3)
    assert len(said.history.logged) == (1 if name == "config.json" else 0)


class Loaded(Exception):  # noqa: N818 - not an error: what a call in refusal_in_time's thread returned
    def __init__(self, history: History):
        super().__init__("loaded")
        self.history = history

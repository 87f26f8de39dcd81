"""A sweep stopped twice over (two Ctrl-Cs, an error then a Ctrl-C) keeps a row for every trial: the trials not yet
started are stored before any progress callback runs, and the caller's own ``stop=`` Event is left as it was."""

import _thread
import json
import threading
from pathlib import Path

import pytest

import rlnb
from rlnb.sweep import dispatch, grid, sweep
from rlnb.sweep.executors import RunStop

BASE = rlnb.AdamParams(learning_rate=3e-3, weight_decay=0.0)
CONFIGS = grid(learning_rate=[1e-3, 2e-3, 3e-3, 4e-3, 5e-3, 6e-3])


def lines(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "trials.jsonl").read_text().splitlines()]


def test_a_second_interrupt_while_the_stopped_rows_are_reported_loses_none_of_them(tmp_path):
    """The progress callback (a widget's redraw) is where a Ctrl-C lands: the first, after trial 0, stops the sweep;
    the second, at the first "stopped before it started" row, dropped every later one from the table and the file."""
    calls = []

    def progress(done, total, row):
        calls.append(row["trial"])
        if len(calls) <= 2:
            raise KeyboardInterrupt

    trials = sweep(BASE, CONFIGS, steps=1, runs_dir=tmp_path, progress=progress, executor="threads")
    assert sorted(trials.trial) == list(range(6)) and trials.attrs["interrupted"] is True
    assert list(trials.status) == ["COMPLETED"] + ["STOPPED"] * 5
    assert sorted(r["trial"] for r in lines(Path(trials.attrs["path"]))) == list(range(6))


def test_an_interrupt_while_an_errors_rows_are_stored_loses_none_of_them(tmp_path, monkeypatch):
    """An error (the progress callback's) stops the sweep; a Ctrl-C while the trials not yet started were being
    stored escaped with the rest of them unstored, and replaced the error."""
    real, written = dispatch.append_row, []

    def append_row(folder, row):
        real(folder, row)
        written.append(row["trial"])
        if len(written) == 3:  # the second stopped row: a real SIGINT, as Ctrl-C sends
            _thread.interrupt_main()

    def boom(done, total, row):
        raise RuntimeError("my progress bar broke")

    monkeypatch.setattr(dispatch, "append_row", append_row)
    with pytest.raises(RuntimeError, match="my progress bar broke"):
        sweep(BASE, CONFIGS, steps=1, runs_dir=tmp_path, progress=boom, executor="threads")
    rows = lines(next(tmp_path.iterdir()))
    assert sorted(r["trial"] for r in rows) == list(range(6))


@pytest.mark.slow  # three sweeps (~3 s here)
@pytest.mark.parametrize("executor", ["threads", "auto"])
def test_an_interrupted_sweep_leaves_the_callers_stop_event_unset(tmp_path, executor):
    """A Stop button's Event, reused cell after cell: a Ctrl-C (or an error) set it, and the next sweep given it ran
    nothing, every trial "stopped before it started", ``interrupted`` False."""
    stop = threading.Event()

    def interrupt(done, total, row):
        raise KeyboardInterrupt

    kwargs = {"steps": 1, "runs_dir": tmp_path, "executor": executor, "stop": stop}
    first = sweep(BASE, CONFIGS[:2], progress=interrupt, max_concurrent=1, **kwargs)
    assert first.attrs["interrupted"] is True and "STOPPED" in set(first.status) and not stop.is_set()
    with pytest.raises(RuntimeError, match="my progress bar broke"):
        sweep(BASE, CONFIGS[:1], progress=lambda *a: (_ for _ in ()).throw(RuntimeError("my progress bar broke")),
              **kwargs)  # fmt: skip
    assert not stop.is_set()
    assert list(sweep(BASE, CONFIGS[:1], progress=False, **kwargs).status) == ["COMPLETED"]


def test_a_sweeps_own_stop_follows_the_callers_event_and_never_sets_it():
    """The trials watch the run's own Event: the caller's is seen at once (a trial stops at its next step, a slot
    wait ends), and setting the run's leaves the caller's as it was."""
    caller = threading.Event()
    own = RunStop(caller)
    assert not own.is_set() and not own.wait(0.05)
    threading.Timer(0.05, caller.set).start()
    assert own.wait(30) and own.is_set()
    other = threading.Event()
    interrupted = RunStop(other)
    interrupted.set()
    assert interrupted.is_set() and interrupted.wait(0) and not other.is_set()


def test_an_error_in_progress_names_the_folder_to_resume_and_carries_the_table(tmp_path):
    """A ``progress`` that raised on the second row: the error came back with no note, and the table (its
    ``attrs["path"]`` the only way to resume) was lost with the return value; the folder had to be found by hand."""

    def bad(done, total, row):
        if done == 2:
            raise ZeroDivisionError("my progress bug")

    configs = CONFIGS[:3]
    with pytest.raises(ZeroDivisionError, match="my progress bug") as caught:
        sweep(BASE, configs, steps=1, runs_dir=tmp_path, progress=bad, executor="threads", max_concurrent=1)
    (folder,) = tmp_path.iterdir()
    trials = caught.value.trials
    assert trials.attrs["path"] == str(folder) and list(trials.trial) == [0, 1, 2]
    assert list(trials.status[:2]) == ["COMPLETED"] * 2 and trials.status[2] == "STOPPED"
    (note,) = caught.value.__notes__
    assert note == (f"sweep: the table of its 3 trials (2 COMPLETED, 1 STOPPED) is kept in {folder} and as this "
                    f"exception's trials attribute; sweep(..., resume={str(folder)!r}) with the same arguments runs "
                    "what is left")  # fmt: skip
    again = sweep(BASE, configs, steps=1, resume=trials.attrs["path"], progress=False)
    assert list(again.status) == ["COMPLETED"] * 3


def test_an_error_in_progress_whose_table_cannot_be_made_is_still_the_error_raised(tmp_path, monkeypatch):
    """The table made for the error's note fails too: the caller's error is still the one raised, its note naming
    the folder and why there is no table."""
    from rlnb.sweep import driver

    def broken(*args):
        raise ValueError("bad row")

    def bad(done, total, row):
        raise ZeroDivisionError("my progress bug")

    monkeypatch.setattr(driver, "table", broken)
    with pytest.raises(ZeroDivisionError, match="my progress bug") as caught:
        sweep(BASE, CONFIGS[:1], steps=1, runs_dir=tmp_path, progress=bad, executor="threads")
    (folder,) = tmp_path.iterdir()
    (note,) = caught.value.__notes__
    assert note == (f"sweep: its rows are in {folder} (trials.jsonl; the table could not be made: "
                    f"ValueError('bad row')); sweep(..., resume={str(folder)!r}) with the same arguments runs what is "
                    "left")  # fmt: skip
    assert not hasattr(caught.value, "trials")

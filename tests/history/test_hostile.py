"""A hostile user's runs: a file system that cannot lock, text that is not valid Unicode in what a run records, a
run folder deleted while it is written. Each must keep what was recorded, or say plainly what it could not."""

import errno
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

import rlnb
from rlnb import samples, wire
from rlnb._files import LockUnsupportedWarning
from rlnb.history import History
from rlnb.history.runs import RunContinuedWarning
from rlnb.history.store import RunStoreWarning
from rlnb.testing import FakeBackend

BATCH = [samples.cross_entropy(list(b"hostile"))]


def test_a_file_system_that_cannot_lock_records_the_run_and_says_it_is_unlocked(tmp_path, monkeypatch):
    """Lustre without ``-o flock`` answers ENOSYS: every session was refused as ``RunLocked`` by "pid unknown", so no
    run could be recorded there at all. A lock held by another file is still ``RunLocked`` (test_records)."""

    def no_locks(fd, op):
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    with pytest.warns(LockUnsupportedWarning, match=r"run\.lock cannot be locked on this file system \(\[Errno 38\]"):
        session = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="lustre")
        session.forward_backward(BATCH)
        session.optim_step()
        session.wait()
        session.close()
    loaded = History.load(tmp_path / "lustre")
    assert len(loaded) == 2 and list(loaded.steps.step) == [1]


ROW = {"group": 0, "prompt": "2+2=", "completion": "4", "reward": 1.0, "advantage": 0.5, "length": 2,
       "truncated": False}  # fmt: skip


@pytest.mark.parametrize("column", ["prompt", "completion"])
def test_a_completion_that_is_not_valid_unicode_is_refused_and_one_written_before_is_shown_escaped(tmp_path, column):
    """A lone surrogate was kept, and ``history.completions`` raised ``UnicodeEncodeError`` from then on, in every
    load of the run too (``rlnb.history.completions(path)``): every completion of the run unreadable."""
    history = History.create({"optimizer": "adam"}, tmp_path, "rl")
    history.log_completions(1, [ROW])
    with pytest.raises(ValueError, match=rf"rows\[0\]: {column} holds a lone surrogate at position 1"):
        history.log_completions(2, [{**ROW, column: "a\ud800b"}])
    assert list(history.completions.step) == [1]  # nothing of the refused step kept
    history.close()
    with (tmp_path / "rl" / "completions.jsonl").open("a") as fh:  # as an rlnb before this check wrote it
        fh.write(
            '{"step": 2, "group": 0, "prompt": "a\\udcffb", "completion": "a\\ud800b", "reward": 1.0, '
            '"advantage": 0.5, "length": 2, "truncated": false}\n'
        )
    with pytest.warns(RuntimeWarning, match=r"1 completion\(s\) hold text that is not valid Unicode"):
        table = History.load(tmp_path / "rl").completions
    assert list(table.prompt) == ["2+2=", "a\\udcffb"] and list(table.completion) == ["4", "a\\ud800b"]
    with pytest.warns(RuntimeWarning, match="shown with escapes"):
        assert len(rlnb.history.completions(tmp_path / "rl")) == 2


def test_an_error_message_that_is_not_valid_unicode_is_kept_escaped_and_the_tables_build(tmp_path):
    """A message holding a lone surrogate (a server's ``\\ud800`` escape, an exception's text) failed ``history.df``
    with ``UnicodeEncodeError`` from then on, in every load of the run, ``rlnb.runs()`` and every plot too."""
    history = History.create({"optimizer": "adam"}, tmp_path, "bad")
    rec = history.new("sample", 0, None, 1.7e9)
    history.update(rec, wire.Operation.failed("op-\ud800", "INVALID_INPUT", "no \udcff here"), 1.7e9 + 1)
    df = history.df
    assert df.op_id[0] == "op-\\ud800" and df.error_message[0].endswith("no \\udcff here")
    history.close()
    line = {**json.loads((tmp_path / "bad" / "ops.jsonl").read_text().splitlines()[-1]), "seq": 1}
    line.update(kind="k\ud801", error_message="m\ud802", na_reason="n\ud803")  # as a hand edit or older rlnb wrote
    with (tmp_path / "bad" / "ops.jsonl").open("a") as fh:
        fh.write(json.dumps(line) + "\n")
    loaded = History.load(tmp_path / "bad").df
    assert list(loaded.kind) == ["sample", "k\\ud801"] and loaded.error_message[1] == "m\\ud802"
    assert loaded.na_reason[1] == "n\\ud803"
    assert rlnb.runs(tmp_path).error.tolist() == [None]


def test_a_run_folder_deleted_while_recording_is_said_at_the_next_write_and_the_run_goes_on_in_memory(tmp_path):
    """The open files kept taking every line into files no folder held any more: the run was gone with no word until
    ``close()`` failed to write its config (and a kill before then said nothing at all)."""
    session = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="gone")
    session.forward_backward(BATCH)
    session.wait()
    shutil.rmtree(tmp_path / "gone")
    with pytest.warns(RunStoreWarning, match=r"gone/run\.lock was deleted while the run was recorded \(its run folder"):
        session.optim_step().result(timeout=30)
    session.history.log(1, reward=1.0)  # said once
    session.close()
    assert len(session.history) == 2 and list(session.history.steps.reward) == [1.0]
    session.history.save(tmp_path / "kept")
    assert len(History.load(tmp_path / "kept")) == 2


SAVER = """
import sys
from rlnb import wire
from rlnb.history import History, export

history = History()
for i in range(50):
    rec = history.new("forward-backward", i, None, 1.7e9 + i)
    history.update(rec, wire.Operation(id=str(i), status="TRAINING_OPERATION_STATUS_COMPLETED",
                                       output=wire.ForwardBackwardResult(loss=1.0)), 1.7e9 + i)
    history.log(i, reward=0.5)
write_new = export.write_new

def write_then_stop(file, data, **kwargs):  # the kill lands right after the operations are written
    write_new(file, data, **kwargs)
    if file.name.startswith("ops.jsonl"):
        print("wrote", flush=True)
        sys.stdin.read()

export.write_new = write_then_stop
history.save(sys.argv[1])
"""


@pytest.mark.slow  # a Python process killed mid-save
def test_a_save_killed_part_way_is_no_run_and_can_be_retried(tmp_path):
    """A save killed after ``ops.jsonl`` left a folder that loaded as the run without its logged figures, without a
    word, and refused a retry ("holds ops.jsonl, config.json already"): each file is written under a name of its own
    and renamed into place once all are written, ``ops.jsonl`` last."""
    saver = subprocess.Popen([sys.executable, "-c", SAVER, str(tmp_path / "saved")], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert saver.stdout is not None and saver.stdout.readline().strip() == "wrote"
        os.kill(saver.pid, signal.SIGKILL)
    finally:
        saver.wait(timeout=30)
        saver.stdin.close(), saver.stdout.close()
    assert saver.returncode == -signal.SIGKILL
    with pytest.raises(FileNotFoundError, match="not an rlnb run folder"):
        History.load(tmp_path / "saved")
    history = History()
    history.log(1, reward=1.0)
    assert History.load(history.save(tmp_path / "saved")).logged.to_dict("records") == [{"step": 1, "reward": 1.0}]


def test_a_run_lock_deleted_as_stale_while_recording_stops_the_store_before_a_second_writer_doubles_it(tmp_path):
    """Deleting ``run.lock`` (as a stale lock of a crashed run) let a second session start on the run as if none
    wrote it: both appended, numbering their operations alike. The first stops writing at its next line and says so;
    what it records goes on in memory, and the run folder holds the second session's lines after the first's."""
    first = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")
    first.forward_backward(BATCH)
    first.wait()
    (tmp_path / "r" / "run.lock").unlink()
    second = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")  # nothing can tell it the run is written
    with pytest.warns(RunStoreWarning, match=r"r/run\.lock was deleted .*: another session"):
        first.history.annotate(label="first")  # config.json is the second's
    first.forward_backward(BATCH).result(timeout=30)
    second.forward_backward(BATCH).result(timeout=30)
    first.close()
    second.close()
    assert len(first.history) == 2  # in memory
    loaded = History.load(tmp_path / "r")
    assert list(loaded.df.seq) == [0, 1] and "label" not in loaded.config  # the first's one op, then the second's


def test_a_file_system_that_counts_no_links_is_not_taken_for_a_deleted_run_folder(tmp_path, monkeypatch):
    """The deleted-file check reads ``st_nlink``; a FUSE file system may say 0 for a file still in its folder."""
    fstat = os.fstat
    monkeypatch.setattr(os, "fstat", lambda fd: os.stat_result((*fstat(fd)[:3], 0, *fstat(fd)[4:])))
    session = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="fuse")
    session.forward_backward(BATCH)
    session.optim_step()
    session.wait()
    session.close()
    assert len(History.load(tmp_path / "fuse")) == 2


def test_one_history_is_refused_to_a_second_open_session_and_taken_once_the_first_closes(tmp_path):
    """``rlnb.Session(backend, history=h)`` with ``h`` already recording an open session: both recorded into it and
    its steps read 1, 1, 2, 2, without a word. It is refused before anything is submitted (and by ``connect`` before a
    model loads); once the first session is closed, a new one continues it."""
    first = rlnb.Session(FakeBackend(), record=False)
    history = first.history
    first.forward_backward(BATCH)
    first.optim_step().result(timeout=30)
    with pytest.raises(ValueError, match=rf"history records the open session {first.id} already"):
        rlnb.Session(FakeBackend(), history)
    with pytest.raises(ValueError, match="two sessions recording into one History double its steps"):
        rlnb.connect("local", history=history, model=object())  # refused before the model is looked at
    assert len(history) == 2
    first.close()
    with pytest.warns(RunContinuedWarning), rlnb.Session(FakeBackend(), history) as second:
        second.forward_backward(BATCH).result(timeout=30)
    assert len(history) == 3

"""Records are never lost and never stop a run: a full disk under the run store, one
writer per run id, continuing a run, loading damaged runs, listing a folder with a bad run in it."""

import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import httpx
import pandas as pd
import pytest

import rlnb
from rlnb import samples
from rlnb.history import History, RunContinuedWarning, export, reading, store
from rlnb.history.store import RunStoreWarning
from rlnb.testing import FakeBackend
from tests.support.fake_api import BASE, KEY, FakeAPI

DONE, FAILED = "TRAINING_OPERATION_STATUS_COMPLETED", "TRAINING_OPERATION_STATUS_FAILED"
PENDING = "TRAINING_OPERATION_STATUS_PENDING"
BATCH = [samples.cross_entropy(list(b"hello records"))]


class _Writes:
    """A run file, opened for real, whose ``write`` is ``write(fh, data)``: a full disk's, a partial write's."""

    def __init__(self, fh, write):
        self._fh, self._write = fh, write

    def write(self, data):
        return self._write(self._fh, data)

    def __getattr__(self, name):  # fileno (the store's fstat), close, name, tell
        return getattr(self._fh, name)


def run_files_write(run: Path, names: tuple[str, ...], write, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the files ``names`` of the run folder ``run`` take every write through ``write(fh, data)``."""
    append_to = store._append_to

    def opened(path):
        fh = append_to(path)
        return _Writes(fh, write) if path.parent == run and path.name in names else fh

    monkeypatch.setattr(store, "_append_to", opened)


def full_disk(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every line written to a run folder's two logs fail with ENOSPC, as on a full disk. (They were links to
    /dev/full; a session refuses a run folder whose files are links, which it would write through.)"""

    def full(fh, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    run_files_write(run, ("ops.jsonl", "metrics.jsonl"), full, monkeypatch)


def test_a_line_a_write_takes_only_part_of_is_written_whole(tmp_path, monkeypatch):
    """A raw write may take only part of a line: the store writes the rest (a line cut short loses its record)."""
    run_files_write(tmp_path / "r", ("ops.jsonl",), lambda fh, data: fh.write(bytes(data[:7])), monkeypatch)
    s = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")
    s.forward_backward(BATCH)
    s.optim_step().result(timeout=30)
    s.close()
    assert s.history.store is not None and s.history.store.failed is None
    lines = (tmp_path / "r" / "ops.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["status"] for line in lines) == [DONE, DONE, PENDING, PENDING]  # each line whole
    pd.testing.assert_frame_equal(History.load(tmp_path / "r").df, s.history.df)


def test_a_full_disk_warns_once_and_the_local_session_carries_on_in_memory(tmp_path, monkeypatch):
    full_disk(tmp_path / "runs" / "r", monkeypatch)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        s = rlnb.connect(
            "local", model="tiny", device="cpu", runs_dir=tmp_path / "runs", run_id="r",
            checkpoint_dir=tmp_path / "elsewhere",
        )  # fmt: skip
        fb = s.forward_backward(BATCH)
        step = s.optim_step(rlnb.AdamParams(learning_rate=1e-3))
        assert fb.result(timeout=30).loss > 0 and step.result(timeout=30).step == 1
        s.history.log(1, reward=0.5)
        ckpt = s.save_training_checkpoint().result(timeout=30)
        s.close()
    store_warnings = [w for w in caught if issubclass(w.category, RunStoreWarning)]
    assert len(store_warnings) == 1 and "No space left" in str(store_warnings[0].message)
    assert "in memory" in str(store_warnings[0].message)
    assert s.backend.checkpoint_path(ckpt.checkpoint.id).exists()  # checkpoints went elsewhere
    assert list(s.history.df.status) == [DONE] * 3 and s.history.logged.reward.tolist() == [0.5]
    assert s.history.store is not None and "No space left" in (s.history.store.failed or "")


def test_a_full_disk_under_a_remote_session_never_hides_a_result(tmp_path, monkeypatch):
    """The remote case showed COMPLETED while result() timed out."""
    full_disk(tmp_path / "r", monkeypatch)
    with pytest.warns(RunStoreWarning, match="in memory"):
        s = rlnb.connect(
            BASE, api_key=KEY, transport=httpx.MockTransport(FakeAPI()), ready_timeout=5, poll_min=0.002,
            poll_max=0.02, runs_dir=tmp_path, run_id="r",
        )  # fmt: skip
        fb, step = s.forward_backward(BATCH), s.optim_step()
        assert fb.result(timeout=10).loss == 2.5 and step.result(timeout=10).step == 1
    s.close()
    assert list(s.history.df.status) == [DONE, DONE]


def test_a_recording_that_fails_cannot_hide_a_result():
    """A History listener that raises (a bug, a failing sink) is logged; result() still returns."""
    s = rlnb.Session(FakeBackend(), record=False)
    s.history.on_record(lambda rec: 1 / 0)
    assert s.forward_backward(BATCH).result(timeout=5).loss == pytest.approx(1.0)
    s.close()


def test_a_second_writer_of_a_run_is_refused_and_a_continued_run_appends(tmp_path):
    first = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="shared")
    with pytest.raises(rlnb.RunLocked, match="being written by another session"):
        rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="shared")
    for _ in range(5):
        first.forward_backward(BATCH)
        first.optim_step()
    first.wait()
    first.close()
    # adv5b: it advised "resume_from= a checkpoint of that run" to someone who had resumed from an earlier one
    with pytest.warns(RunContinuedWarning, match="reached step 5, and this one starts at step 0: steps 1-5 will") as w:
        second = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="shared")
    assert "resume_from= the run's checkpoint at step 5 to go on counting" in str(w[0].message)
    for _ in range(5):
        second.forward_backward(BATCH)
        second.optim_step()
    second.wait()
    second.close()
    df = History.load(tmp_path / "shared").df
    assert len(df) == 20 and list(df.seq) == list(range(20)) and (df.status == DONE).all()
    assert len(second.history.df) == 20  # the continued session's history holds the earlier records too
    config = json.loads((tmp_path / "shared" / "config.json").read_text())
    assert config["created_at"] == first.history.config["created_at"] and len(config["continued_at"]) == 1


def test_the_warning_of_a_continued_run_says_step_1_and_no_checkpoint_of_a_fresh_model(tmp_path):
    """A fresh session on a run that reached step 1 was told "steps 1-1 will appear twice" and that an earlier
    checkpoint repeats the steps after it "as here", though it resumed from no checkpoint."""
    first = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")
    first.forward_backward(BATCH)
    first.optim_step().result(30)
    first.close()
    with pytest.warns(RunContinuedWarning, match="starts at step 0: step 1 will appear twice in history.steps") as w:
        rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r").close()
    assert "as here" not in str(w[0].message) and "1-1" not in str(w[0].message)


def test_a_run_continued_after_a_crash_mid_line_loses_none_of_its_new_lines(tmp_path):
    """A killed process may leave a half-written last line. The session that continues the run ends that line
    first: its own first lines are not glued to the damaged one and skipped with it on reload."""
    first = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")
    first.forward_backward(BATCH).result(30)
    first.history.log(0, reward=0.1)
    first.close()
    run = tmp_path / "r"
    for name in ("ops.jsonl", "metrics.jsonl"):  # the crash: the last line cut short
        (run / name).write_bytes((run / name).read_bytes()[:-5])
    with pytest.warns(RuntimeWarning, match="corrupt or half-written"):
        second = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")
    second.forward_backward(BATCH).result(30)
    second.history.log(1, reward=0.9)
    second.close()
    with pytest.warns(RuntimeWarning, match="corrupt or half-written") as caught:
        loaded = History.load(run)
    assert all("1 corrupt or half-written" in str(w.message) for w in caught)  # the crash's own line, no more
    assert loaded.logged.to_dict("records") == [{"step": 1, "reward": 0.9}]
    # The first operation's end line was the one cut: its submission line remains. The second is whole.
    assert loaded.df.seq.tolist() == [0, 1] and loaded.df.status.tolist() == [PENDING, DONE]


def test_a_continued_run_keeps_figures_logged_without_operations_and_warns_when_steps_repeat(tmp_path):
    first = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")
    for step in (1, 2, 3):
        first.history.log(step, reward=step / 10)
    first.close()
    with pytest.warns(RunContinuedWarning, match="reached step 3") as caught:
        second = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")
    assert len(caught) == 1
    second.history.log(1, reward=9.0)
    assert second.history.logged.reward.tolist() == [0.1, 0.2, 0.3, 9.0]  # the first session's rows, loaded
    assert len(second.history.config["continued_at"]) == 1
    second.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fresh run, or one continued from where it stopped: no warning
        rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="new").close()


WRITER = """
import sys, time, rlnb
from rlnb.testing import FakeBackend
s = rlnb.Session(FakeBackend(), runs_dir=sys.argv[1], run_id="r")
print("holding", flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("run_id", ["../escape", "a/b", "..", ".", "", "a\\b", "/tmp/abs", 7])
def test_a_run_id_that_is_not_one_folder_name_is_refused(tmp_path, run_id):
    runs = tmp_path / "runs"
    with pytest.raises(ValueError, match=r"run_id must be a folder name inside the runs folder .*got "):
        rlnb.connect("local", run_id=run_id, runs_dir=runs)
    with pytest.raises(ValueError, match="run_id must be a folder name"):
        History.create({}, runs, run_id)
    assert list(tmp_path.iterdir()) == []  # nothing written, inside the runs folder or beside it


def test_a_run_id_longer_than_a_folder_name_is_refused_up_front(tmp_path):
    runs = tmp_path / "runs"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not "the run goes on in memory" first
        with pytest.raises(ValueError, match="run_id must be at most 255 bytes .*got 300 bytes"):
            rlnb.connect("local", run_id="r" * 300, runs_dir=runs)
        with pytest.raises(ValueError, match="at most 255 bytes .*got 256 bytes"):
            History.create({}, runs, "é" * 128)
    assert list(tmp_path.iterdir()) == []
    with rlnb.connect("local", run_id="r" * 255, runs_dir=runs) as s:
        assert s.history.path is not None and s.history.path.is_dir()


def test_a_run_id_with_a_lone_surrogate_is_a_value_error_naming_run_id(tmp_path):
    """tnb U2: ``run_id="x\ud800y"`` was a bare UnicodeEncodeError from the size check, naming nothing."""
    runs = tmp_path / "runs"
    with pytest.raises(ValueError, match=r"run_id holds a lone surrogate, '\\ud800' at position 1"):
        rlnb.connect("local", run_id="x\ud800y", runs_dir=runs)
    with pytest.raises(ValueError, match="run_id holds a lone surrogate"):
        History.create({}, runs, "x\ud800y")
    assert list(tmp_path.iterdir()) == []


def test_a_run_id_that_is_a_symlink_in_the_runs_folder_is_refused(tmp_path):
    runs, target = tmp_path / "runs", tmp_path / "elsewhere"
    runs.mkdir()
    target.mkdir()
    (runs / "linked").symlink_to(target)
    with pytest.raises(ValueError, match=r"run_id 'linked': .*linked is a symbolic link \(to '.*elsewhere'\)"):
        rlnb.connect("local", run_id="linked", runs_dir=runs)
    with pytest.raises(ValueError, match="is a symbolic link"):
        History.create({}, runs, "linked")
    (runs / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="is a symbolic link"):
        History.create({}, runs, "dangling")
    assert list(target.iterdir()) == [] and not (tmp_path / "nowhere").exists()


def test_a_run_id_with_dots_inside_is_a_folder_name(tmp_path):
    with rlnb.connect("local", run_id="lr..1e-3.v2", runs_dir=tmp_path) as s:
        assert s.history.path == tmp_path / "lr..1e-3.v2"


@pytest.mark.slow  # a Python process
def test_a_run_held_by_another_process_is_refused_and_freed_when_it_dies(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(WRITER), str(tmp_path)], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"holding"
        with pytest.raises(rlnb.RunLocked, match=f"pid {proc.pid}"):
            rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")
    finally:
        proc.kill()
        proc.wait(timeout=30)
        proc.stdout.close()
    rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r").close()  # the OS released the lock


def good_run(root: Path, run_id: str) -> Path:
    s = rlnb.Session(FakeBackend(), runs_dir=root, run_id=run_id)
    for i in range(3):
        s.forward_backward(BATCH)
        s.optim_step()
        s.history.log(i + 1, reward=0.1 * i)
    s.wait()
    s.close()
    return root / run_id


def test_a_corrupt_config_does_not_stop_the_operations_loading(tmp_path):
    run = good_run(tmp_path, "r")
    (run / "config.json").write_text('{"run_id": "r", "created_at": 17')
    with pytest.warns(RuntimeWarning, match="config.json is corrupt"):
        h = History.load(run)
    assert len(h) == 6 and h.config == {} and len(h.steps) == 3


def test_a_run_folder_a_windows_editor_saved_with_a_bom_loads_and_continues_whole(tmp_path):
    """A ``config.json`` given a label by hand and saved with a UTF-8 byte-order mark (PowerShell's
    ``Set-Content -Encoding UTF8``, older Notepad) was "corrupt": loaded as ``{}``, and a session continuing the run
    wrote its own config over it, the label and the first ``created_at`` lost for good. A BOM before the first line
    of ``ops.jsonl`` lost that operation."""
    run = good_run(tmp_path, "r")
    config = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text("\ufeff" + json.dumps({**config, "label": "baseline"}), encoding="utf-8")
    ops = run / "ops.jsonl"
    ops.write_text("\ufeff" + ops.read_text(encoding="utf-8"), encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        h = History.load(run)
    assert len(h) == 6 and h.config["label"] == "baseline" and h.config["created_at"] == config["created_at"]
    with pytest.warns(RunContinuedWarning):
        rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r").close()
    again = json.loads((run / "config.json").read_text())
    assert again["label"] == "baseline" and again["created_at"] == config["created_at"]


def test_a_config_that_cannot_be_read_is_kept_aside_when_a_session_continues_the_run(tmp_path):
    """A ``config.json`` annotated by hand with a trailing comma: a session continuing the run wrote its own config over
    it, and the label, the note and the first ``created_at`` were gone for good. It is kept as
    ``config.json.damaged`` (then ``.damaged.1``), said, for the user to mend."""
    run = good_run(tmp_path, "r")
    text = json.dumps({**json.loads((run / "config.json").read_text()), "label": "baseline"}, indent=2)
    damaged = text[: text.rindex("}")].rstrip() + ",\n}"  # a trailing comma: no longer JSON
    (run / "config.json").write_text(damaged)
    for kept in ("config.json.damaged", "config.json.damaged.1"):
        with pytest.warns(Warning) as caught:
            rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r").close()
        said = [str(w.message) for w in caught if "could not be read" in str(w.message)]
        assert len(said) == 1 and f"kept as {kept} (mend it" in said[0], [str(w.message) for w in caught]
        assert (run / kept).read_text() == damaged
        assert json.loads((run / "config.json").read_text())["run_id"] == "r"  # the new session's, readable
        (run / "config.json").write_text(damaged)
    (run / "config.json").write_text("[1, 2]")  # JSON, but no object
    with pytest.warns(Warning) as caught:
        rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r").close()
    assert any("kept as config.json.damaged.2" in str(w.message) for w in caught)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a readable config is left where it is
        warnings.simplefilter("ignore", RunContinuedWarning)
        rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r").close()
    assert sorted(p.name for p in run.glob("config.json*")) == [
        "config.json",
        "config.json.damaged",
        "config.json.damaged.1",
        "config.json.damaged.2",
    ]


def test_a_session_continuing_a_run_reads_its_config_once(tmp_path, monkeypatch):
    """A session continuing a run read ``config.json`` through ``read_run``, then again (and parsed it again) to know
    whether to set it aside as damaged. It is read once, the set-aside deciding from that read; a damaged config
    is still kept aside, and a folder that holds a config and no operations is read once too."""
    run = good_run(tmp_path, "r")
    (tmp_path / "bare").mkdir()
    (tmp_path / "bare" / "config.json").write_text('{"label": "x",}')  # damaged, no operations
    reads: list[str] = []
    read_text, read_bytes, opened = Path.read_text, Path.read_bytes, reading._opened

    def counted(real):
        def read(self, *args, **kwargs):
            if self.name == "config.json":
                reads.append(self.parent.name)
            return real(self, *args, **kwargs)

        return read

    monkeypatch.setattr(Path, "read_text", counted(read_text))
    monkeypatch.setattr(Path, "read_bytes", counted(read_bytes))
    monkeypatch.setattr(reading, "_opened", counted(opened))  # every file of a run is read through it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RunContinuedWarning)
        rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r").close()
    assert reads == ["r"]
    (run / "config.json").write_text("[1]")  # no object: set aside, from the same single read
    with pytest.warns(Warning) as caught:
        rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r").close()
    assert any("kept as config.json.damaged" in str(w.message) for w in caught)
    with pytest.warns(RuntimeWarning) as caught:
        rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="bare").close()
    assert len(caught) == 1 and "kept as config.json.damaged (" in str(caught[0].message)  # no "corrupt" one
    assert reads == ["r", "r", "bare"] and (tmp_path / "bare" / "config.json.damaged").exists()


def deep(n: int) -> str:
    return "[" * n + "]" * n


@pytest.mark.parametrize("depth", [40, 990, 100_000])
def test_deeply_nested_lines_are_skipped_and_a_deep_config_is_left_out(tmp_path, depth):
    """Past Python's recursion limit the decoder raises RecursionError; just under it the line loads and the
    record fails when it is encoded again (to_parquet). Either way it is damage: skipped, with a warning."""
    run = good_run(tmp_path, "r")
    good = History.load(run)
    with open(run / "ops.jsonl", "a") as fh:
        fh.write(deep(depth) + "\n")
        fh.write(f'{{"seq": 6, "kind": "optim-step", "status": "{DONE}", "params": {{"x": {deep(depth)}}}}}\n')
    with open(run / "metrics.jsonl", "a") as fh:
        fh.write(f'{{"step": 4, "reward": {deep(depth)}}}\n')
    (run / "config.json").write_text(f'{{"run_id": "r", "sweep": {deep(depth)}}}')
    with pytest.warns(RuntimeWarning) as caught:
        h = History.load(run)
    messages = [str(w.message) for w in caught]
    assert any("ops.jsonl: skipped 2 corrupt" in m for m in messages)
    assert any("metrics.jsonl: skipped 1 corrupt" in m for m in messages)
    assert any("config.json is corrupt (nested deeper than" in m for m in messages)
    pd.testing.assert_frame_equal(h.df, good.df)
    assert h.config == {} and h.logged.step.tolist() == [1, 2, 3]
    h.to_parquet(tmp_path / "h.parquet")  # what was loaded encodes again


def test_well_formed_lines_with_wrong_types_load_what_is_readable(tmp_path):
    run = good_run(tmp_path, "r")
    with open(run / "ops.jsonl", "a") as fh:
        fh.write(json.dumps({"seq": 6, "kind": "forward-backward", "loss": "oops", "status": DONE, "step": 3}) + "\n")
        fh.write(json.dumps({"seq": "7", "kind": "optim-step"}) + "\n")  # no usable seq: skipped
        fh.write(json.dumps({"seq": 8, "kind": "optim-step", "status": DONE, "step": True, "metrics": [1]}) + "\n")
        fh.write(json.dumps({"seq": 9, "kind": 5}) + "\n")
        fh.write(json.dumps({"seq": 2**70, "kind": "optim-step"}) + "\n")  # past int64: skipped
        fh.write(
            json.dumps({"seq": 10, "kind": "sample", "status": DONE, "weights_version": 2**70, "finished_at": 1e300})
            + "\n"
        )  # past int64 / any datetime: left out
    with open(run / "metrics.jsonl", "a") as fh:
        fh.write(json.dumps({"step": 4, "reward": "high", "kl": 0.1}) + "\n")
        fh.write(json.dumps({"step": "5", "reward": 1.0}) + "\n")
        fh.write(json.dumps({"step": 2**70, "reward": 1.0}) + "\n")
    with pytest.warns(RuntimeWarning, match="wrong type") as caught:
        h = History.load(run)
    assert any("loss = 'oops'" in str(w.message) for w in caught)
    df, steps = h.df, h.steps  # building the tables must not fail
    assert list(df.seq) == [0, 1, 2, 3, 4, 5, 6, 8, 10]
    assert pd.isna(df.loss.iloc[6]) and pd.isna(df.step.iloc[7]) and df.metrics.iloc[7] == {}
    assert pd.isna(df.weights_version.iloc[8]) and pd.isna(df.finished_at.iloc[8])
    assert h.logged.step.tolist() == [1, 2, 3, 4] and pd.isna(h.logged.reward.iloc[3])
    assert len(steps) == 3


def test_one_bad_run_is_a_row_with_its_error(tmp_path):
    good_run(tmp_path, "good")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "ops.jsonl").mkdir()  # unreadable as a file
    weird = good_run(tmp_path, "weird")
    (weird / "config.json").write_text(json.dumps({"run_id": "weird", "created_at": "yesterday"}))
    table = rlnb.runs(tmp_path)
    assert set(table.run_id) == {"good", "bad", "weird"}
    rows = table.set_index("run_id")
    assert rows.loc["good", "error"] is None and rows.loc["good", "steps"] == 3
    assert "ops.jsonl is not a file" in rows.loc["bad", "error"] and pd.isna(rows.loc["bad", "operations"])
    assert rows.loc["weird", "error"] is None and pd.isna(rows.loc["weird", "created_at"])
    assert table.run_id.iloc[0] == "good"  # newest first, unknown times last


class Trickle:
    """A raw file that takes at most ``n`` bytes per write, as write(2) may; 0 bytes: it takes nothing. ``fileno``: the
    real file's it stands for (the store checks that file is still in its folder before each line)."""

    def __init__(self, n: int, fileno: int) -> None:
        self.n, self.data, self.closed, self.name = n, b"", False, "trickle"
        self.fileno = lambda: fileno

    def write(self, data) -> int:
        taken = bytes(data[: self.n])
        self.data += taken
        return len(taken)

    def close(self) -> None:
        self.closed = True


def test_a_line_the_os_takes_in_pieces_is_written_whole_and_one_it_refuses_stops_the_store_with_a_warning(
    tmp_path,
):
    from rlnb.history.store import RunStore

    store = RunStore(tmp_path / "r")
    real = store._ops
    store._ops = Trickle(3, real.fileno())
    store.write_op({"seq": 0, "kind": "sample", "note": "ünïcode"})
    assert json.loads(store._ops.data.decode("utf-8")) == {"seq": 0, "kind": "sample", "note": "ünïcode"}
    store._ops = Trickle(0, real.fileno())
    with pytest.warns(RunStoreWarning, match="could not write"):
        store.write_op({"seq": 1, "kind": "sample"})
    assert store.failed is not None
    store.close()
    real.close()


def test_an_integer_past_any_float_in_a_figure_is_left_out_and_the_run_loads(tmp_path):
    """JSON integers have no size limit: a figure of 10**400 (written by hand, or damage) is no float. It used to
    stop History.load with OverflowError (metrics.jsonl) and the operations table with it (ops.jsonl)."""
    run = good_run(tmp_path, "r")
    huge = "1" + "0" * 400
    with open(run / "ops.jsonl", "a") as fh:
        fh.write(
            f'{{"seq": 6, "kind": "forward-backward", "status": "{DONE}", "step": 3, "loss": {huge}, '
            f'"metrics": {{"kl": {huge}}}}}\n'
        )
        fh.write(f'{{"seq": 7, "kind": "optim-step", "status": "{DONE}", "step": 4, "grad_norm": {huge}}}\n')
    with open(run / "metrics.jsonl", "a") as fh:
        fh.write(f'{{"step": 4, "reward": {huge}, "kl": 12}}\n')
    with pytest.warns(RuntimeWarning, match="wrong type") as caught:
        h = History.load(run)
    assert any("loss = 1000" in str(w.message) for w in caught)
    df, steps = h.df, h.steps
    assert list(df.seq) == [0, 1, 2, 3, 4, 5, 6, 7]
    assert pd.isna(df.loss.iloc[6]) and df.metrics.iloc[6] == {} and pd.isna(df.grad_norm.iloc[7])
    assert h.logged.step.tolist() == [1, 2, 3, 4] and pd.isna(h.logged.reward.iloc[3]) and h.logged.kl.iloc[3] == 12
    assert steps.step.tolist() == [1, 2, 3, 4]
    h.to_parquet(tmp_path / "h.parquet")


@pytest.mark.parametrize(
    "config",
    [
        {"continued_at": 5, "created_at": "yesterday"},
        {"continued_at": "abc"},
        {"continued_at": [1.0, "x", None, True], "created_at": [1]},
    ],
)
def test_a_run_whose_config_has_wrong_types_is_continued_and_its_lock_never_leaks(tmp_path, config):
    """A config.json whose ``continued_at`` is no list (edited by hand, damage) stopped the next session on that
    run id with ``TypeError: Value after * must be an iterable``, after the run's lock was taken: the lock stayed
    held until the garbage collector found it, so even a retry was refused as RunLocked."""
    run = good_run(tmp_path, "r")
    (run / "config.json").write_text(json.dumps({"run_id": "r", **config}))
    with pytest.warns(RunContinuedWarning):
        s = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")
    s.forward_backward(BATCH).result()
    s.close()
    h = History.load(run)
    continued = h.config["continued_at"]
    assert isinstance(continued, list) and all(type(t) is float for t in continued) and len(h) == 7
    assert type(h.config["created_at"]) is float and continued[-1] >= h.config["created_at"]
    with pytest.warns(RunContinuedWarning):
        rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r").close()  # the lock was released


def test_a_session_that_fails_to_open_a_run_releases_its_lock(tmp_path, monkeypatch):
    good_run(tmp_path, "r")
    monkeypatch.setattr("rlnb.history.runs.environment", lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")
    monkeypatch.undo()
    with pytest.warns(RunContinuedWarning):
        rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r").close()  # not RunLocked


ROW = {"group": 0, "prompt": "p", "completion": "c", "reward": 1.0, "advantage": 0.0, "length": 2, "truncated": False}


def test_what_is_logged_on_a_loaded_history_is_said_to_stay_in_memory(tmp_path):
    """``h = History.load(run); h.log(step, eval_accuracy=...)`` (a checkpoint evaluated a day later): kept in memory
    only, silently, and lost with the kernel; ``History.load`` came back without it."""
    s = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")
    s.history.log(1, reward=0.5)
    s.close()
    h = History.load(tmp_path / "r")
    with pytest.warns(RunStoreWarning, match=r"loaded from .*r: what is logged on it stays in memory.*history.save"):
        h.log(2, reward=0.7)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once
        h.log_completions(2, [ROW])
    assert h.logged.reward.tolist() == [0.5, 0.7]  # kept in memory, as said
    assert History.load(tmp_path / "r").logged.reward.tolist() == [0.5]  # the folder is only read
    History().log(1, reward=0.5)  # a history made by hand has no folder to speak of: nothing said


def test_what_is_recorded_after_close_reaches_the_run_folder(tmp_path):
    """A figure logged once the session has ended (an evaluation after ``with connect(...)``), completions kept
    then, or a closed history given to a new session: all went to memory only, silently, since the store's files
    were closed: ``History.load`` came back without them. Now each is appended under the run's lock."""
    with rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r") as s:
        s.forward_backward(BATCH)
        s.optim_step()
        s.wait()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s.history.log(1, eval_accuracy=0.75)
        s.history.log_completions(1, [ROW])
    with pytest.warns(RunContinuedWarning):  # a fresh FakeBackend starts at step 0 again
        again = rlnb.Session(FakeBackend(), history=s.history)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again.forward_backward(BATCH).result()
        again.close()
    h = History.load(tmp_path / "r")
    assert h.logged.to_dict("records") == [{"step": 1, "eval_accuracy": 0.75}]
    assert h.completions.completion.tolist() == ["c"]
    assert len(h) == 3 and h.df.status.tolist() == [DONE] * 3
    pd.testing.assert_frame_equal(h.df, s.history.df)


def test_a_figure_logged_on_a_closed_history_while_another_session_writes_its_run_warns(tmp_path):
    first = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")
    first.history.log(1, reward=0.5)
    first.close()
    with pytest.warns(RunContinuedWarning):
        second = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")
    with pytest.warns(RunStoreWarning, match="being written by another session.*goes on in memory"):
        first.history.log(2, reward=0.6)
    assert first.history.logged.reward.tolist() == [0.5, 0.6]  # kept in memory, and said so
    second.close()
    assert History.load(tmp_path / "r").logged.reward.tolist() == [0.5]


def test_a_run_whose_folder_could_not_be_written_is_saved_whole_elsewhere(tmp_path, monkeypatch):
    """The full-disk warning said to save the history "elsewhere with history.to_csv or to_parquet": both write the
    operations alone, so the logged figures, the completions and the config were lost even then, and neither
    can be loaded back. ``history.save(folder)`` writes a run folder that ``History.load`` restores whole."""
    full_disk(tmp_path / "runs" / "r", monkeypatch)
    with pytest.warns(RunStoreWarning, match=r"save it elsewhere with history.save\(folder\)"):
        s = rlnb.Session(FakeBackend(), runs_dir=tmp_path / "runs", run_id="r")
        for i in range(2):
            s.forward_backward(BATCH)
            s.optim_step()
            s.history.log_completions(i + 1, [ROW])
            s.history.log(i + 1, reward=0.5 * i, **{"eval/acc": float("nan")})
        s.close()
    saved = s.history.save(tmp_path / "elsewhere")
    h = History.load(saved)
    pd.testing.assert_frame_equal(h.df, s.history.df)
    pd.testing.assert_frame_equal(h.logged, s.history.logged)
    pd.testing.assert_frame_equal(h.steps, s.history.steps)
    pd.testing.assert_frame_equal(h.completions, s.history.completions)
    assert h.config["run_id"] == "r" and h.config["optimizer"] == "adam"
    with pytest.raises(FileExistsError, match="holds ops.jsonl, metrics.jsonl, completions.jsonl, config.json"):
        s.history.save(saved)  # never over a run
    assert len(History.load(saved)) == 4
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"history.save: .*notes.txt is a file, not a folder"):
        s.history.save(tmp_path / "notes.txt")
    with pytest.raises(ValueError, match=r"history.save: path must be a folder's path, got ''"):
        s.history.save("")  # Path("") is the working folder
    with pytest.raises(TypeError, match=r"path must be a path \(str or os.PathLike\), got int"):
        s.history.save(5)


def test_save_never_writes_over_a_models_config_or_through_a_link(tmp_path):
    """``history.save("my_model")`` into a Hugging Face model folder replaced its ``config.json`` with the run's
    (the check looked only at the .jsonl files); a dangling link named ``ops.jsonl`` was written through."""
    s = rlnb.Session(FakeBackend(), record=False)
    s.forward_backward(BATCH)
    s.optim_step()
    s.wait()
    model = tmp_path / "my_model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "gpt2"}')
    with pytest.raises(FileExistsError, match=r"holds config.json already .*nothing was written"):
        s.history.save(model)
    assert (model / "config.json").read_text() == '{"model_type": "gpt2"}'
    assert sorted(p.name for p in model.iterdir()) == ["config.json"]
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "ops.jsonl").symlink_to(tmp_path / "elsewhere.txt")
    with pytest.raises(FileExistsError, match="holds ops.jsonl already"):
        s.history.save(linked)
    assert not (tmp_path / "elsewhere.txt").exists()
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")  # mkdir's bare "[Errno 17] File exists"
    with pytest.raises(ValueError, match=r"history.save: .*dangling is a link to .*nowhere', which does not exist"):
        s.history.save(tmp_path / "dangling")
    s.close()


def _disk_full_at_ops(monkeypatch):
    """Make ``save``'s file writes fail "No space left on device" at ``ops.jsonl`` (it writes it under a name of its
    own, then renames it); returns the real write."""
    write_new = export.write_new

    def full(file, data, **kwargs):
        if file.name.startswith("ops.jsonl"):
            raise OSError(28, "No space left on device")
        return write_new(file, data, **kwargs)

    monkeypatch.setattr(export, "write_new", full)
    return write_new


def test_a_save_that_fails_part_way_leaves_nothing_and_can_be_retried(tmp_path, monkeypatch):
    """A save onto a full disk (where the full-disk warning sends a run) wrote ``config.json`` and stopped at
    ``ops.jsonl``: once space was freed, the retry was refused, "holds config.json already ... (nothing was
    written)". What the save wrote is removed, and the folder if it made it."""
    s = rlnb.Session(FakeBackend(), record=False)
    s.forward_backward(BATCH)
    s.optim_step()
    s.wait()
    s.history.log(1, reward=0.5)
    write_new = _disk_full_at_ops(monkeypatch)
    for folder in (tmp_path / "new", tmp_path / "empty"):
        (tmp_path / "empty").mkdir(exist_ok=True)
        with pytest.raises(OSError, match="No space left"):
            s.history.save(folder)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"] and not any((tmp_path / "empty").iterdir())
    monkeypatch.setattr(export, "write_new", write_new)
    for folder in (tmp_path / "new", tmp_path / "empty"):
        pd.testing.assert_frame_equal(History.load(s.history.save(folder)).logged, s.history.logged)
    s.close()


def test_a_save_that_fails_part_way_removes_the_parent_folders_it_made(tmp_path, monkeypatch):
    """``history.save("out/2026/run")`` onto a full disk made ``out/2026/run`` (``mkdir(parents=True)``) and, failing,
    removed ``run`` alone: ``out/2026`` stayed behind, empty. Every folder the save made goes; those it found stay."""
    s = rlnb.Session(FakeBackend(), record=False)
    s.forward_backward(BATCH)
    s.wait()
    (tmp_path / "kept").mkdir()
    _disk_full_at_ops(monkeypatch)
    for folder in (tmp_path / "out" / "2026" / "run", tmp_path / "kept" / "a" / "b"):
        with pytest.raises(OSError, match="No space left"):
            s.history.save(folder)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept"] and not any((tmp_path / "kept").iterdir())
    mkdir = Path.mkdir

    def leaf_refused(self, *args, **kwargs):  # the parents are made, then the leaf fails (a full disk, EACCES)
        if self.name == "run":
            mkdir(self.parent, parents=True, exist_ok=True)
            raise OSError(28, "No space left on device")
        return mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", leaf_refused)
    with pytest.raises(OSError, match="No space left"):
        s.history.save(tmp_path / "out" / "2026" / "run")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept"]
    s.close()


def test_save_into_a_folder_of_runs_is_refused_and_the_listing_keeps_working(tmp_path):
    """``history.save("rlnb-runs")`` (the runs folder itself) wrote the run's files beside its runs: from then on
    ``rlnb.runs("rlnb-runs")`` refused the folder as "a run folder, not a folder of runs"."""
    s = rlnb.Session(FakeBackend(), runs_dir=tmp_path / "runs", run_id="r")
    s.forward_backward(BATCH)
    s.close()
    with pytest.raises(ValueError, match=r"save: .*runs is a folder of runs \(r, \.\.\.\): save to a new folder"):
        s.history.save(tmp_path / "runs")
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["r"]
    assert list(rlnb.runs(tmp_path / "runs").run_id) == ["r"]
    s.history.save(tmp_path / "runs" / "copy")  # a new folder in it, as said
    assert sorted(rlnb.runs(tmp_path / "runs").path.map(lambda p: Path(p).name)) == ["copy", "r"]


def test_exports_write_dict_columns_as_json(tmp_path):
    s = rlnb.Session(FakeBackend(), record=False)
    s.forward_backward(BATCH)
    s.optim_step(rlnb.AdamParams(learning_rate=1e-3))
    s.wait()
    s.history.to_csv(tmp_path / "h.csv")
    csv = pd.read_csv(tmp_path / "h.csv")
    assert json.loads(csv.params.iloc[1]) == s.history.df.params.iloc[1]
    assert json.loads(csv.metrics.iloc[1]) == s.history.df.metrics.iloc[1]
    s.close()


def test_a_completion_with_a_number_no_table_column_holds_is_left_out(tmp_path):
    """``completions.jsonl`` with a reward of 10**400 or a step / length past int64 loaded, but ``completions``
    then failed with ``OverflowError: Python int too large to convert to C long``."""
    run = tmp_path / "r"
    run.mkdir()
    (run / "ops.jsonl").write_text("")
    lines = [
        {"step": 1, **ROW},
        {"step": 1, **ROW, "reward": 10**400},
        {"step": 2**70, **ROW},
        {"step": 1, **ROW, "length": 2**70},
        {"step": 1, **ROW, "group": -(2**64)},
    ]
    (run / "completions.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.warns(RuntimeWarning, match="left out 4 value"):
        table = History.load(run).completions
    assert table.to_dict("records") == [{"step": 1, **ROW}]
    with pytest.warns(RuntimeWarning, match="left out 4 value"):
        assert len(rlnb.history.completions(run)) == 1


def test_a_runs_dir_or_run_id_that_is_a_file_is_refused_up_front(tmp_path, monkeypatch):
    """``runs_dir`` naming a file (or a path through one) was a RunStoreWarning and a run in memory only, after
    the model was loaded: a typo cost the whole recording. Now a ValueError naming the field, before anything."""
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for runs_dir in (notes, notes / "runs"):
            with pytest.raises(ValueError, match=r"runs_dir .*notes.txt is a file, not a folder"):
                rlnb.connect("local", runs_dir=runs_dir)
            with pytest.raises(ValueError, match=r"runs_dir .*notes.txt is a file, not a folder"):
                rlnb.Session(FakeBackend(), runs_dir=runs_dir, run_id="r")
        with pytest.raises(ValueError, match=r"run_id 'notes.txt': .*notes.txt is a file, not a run folder"):
            rlnb.connect("local", runs_dir=tmp_path, run_id="notes.txt")
        monkeypatch.setenv("RLNB_RUNS_DIR", str(notes))
        with pytest.raises(ValueError, match=r"\$RLNB_RUNS_DIR .*notes.txt is a file, not a folder"):
            rlnb.connect("local")
    assert notes.read_text() == "mine"


@pytest.mark.parametrize(
    ("kw", "error", "text"),
    [
        ({"runs_dir": 5}, TypeError, "runs_dir must be a path .*got int: 5"),
        ({"runs_dir": ""}, ValueError, "runs_dir must be a folder's path or None, got ''"),
        ({"record": "no"}, ValueError, "record must be True or False, got 'no'"),
        ({"history": "mine.csv"}, TypeError, "history must be an rlnb.History or None, got str"),
    ],
)
def test_recording_options_of_the_wrong_kind_are_refused_naming_them(tmp_path, monkeypatch, kw, error, text):
    """``runs_dir=5`` was Path's TypeError naming no field; ``runs_dir=""`` wrote runs into the working folder;
    ``record="no"`` (truthy) recorded; ``history="mine.csv"`` was an AttributeError (``steps_reached``)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(error, match=text):
        rlnb.connect("local", **kw)
    with pytest.raises(error, match=text):
        rlnb.Session(FakeBackend(), **kw)
    assert list(tmp_path.iterdir()) == []


def test_compare_takes_runs_whose_config_seed_is_damaged(tmp_path):
    """A config.json ``seed`` that is a list (hand-edited, damage) stopped ``compare`` (and ``plots.compare``) with
    ``TypeError: unhashable type: 'list'``; now the seed is left out with a warning and the runs are compared."""
    for run_id in ("a", "b"):
        run = good_run(tmp_path, run_id)
        config = json.loads((run / "config.json").read_text())
        (run / "config.json").write_text(json.dumps({**config, "seed": [1, 2], "label": {"lr": 1}}))
    with pytest.warns(RuntimeWarning, match=r"config.json: its seed \[1, 2\] is not an integer; compared without"):
        both = rlnb.compare([tmp_path / "a", tmp_path / "b"])
    assert both.seed.isna().all() and len(both) == 6 and both.run.nunique() == 2


def in_thread(fn, timeout=10.0):
    """``fn()``'s result, or a failure if it is still running after ``timeout`` (it would hang)."""
    import threading

    out: dict = {}
    thread = threading.Thread(target=lambda: out.update(value=fn()), daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"{fn} hung"
    return out["value"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes")
def test_a_named_pipe_in_a_run_folder_never_hangs_a_load_or_a_session(tmp_path):
    """``metrics.jsonl`` / ``completions.jsonl`` / ``config.json`` a named pipe (``mkfifo``, to tail a run live):
    ``History.load`` and ``rlnb.runs()`` waited forever for a writer to open it, and a session on that run id
    waited forever for a reader."""
    run = good_run(tmp_path, "r")
    for name in ("metrics.jsonl", "completions.jsonl", "config.json"):
        (run / name).unlink(missing_ok=True)
        os.mkfifo(run / name)
    with pytest.warns(RuntimeWarning, match="not a regular file") as caught:
        h = in_thread(lambda: History.load(run))
    assert len(h) == 6 and h.config == {} and len(caught) == 3
    with pytest.warns(RuntimeWarning, match="not a regular file"):
        assert in_thread(lambda: rlnb.runs(tmp_path)).operations.tolist() == [6]
    with (
        pytest.warns(RunStoreWarning, match="metrics.jsonl is a named pipe"),
        pytest.warns(RunContinuedWarning),
        pytest.warns(RuntimeWarning, match="not a regular file"),
    ):
        s = in_thread(lambda: rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r"))
    s.history.log(1, reward=1.0)
    assert s.history.logged.reward.tolist() == [1.0]  # in memory
    s.close()


@pytest.mark.parametrize(
    ("step", "change", "problem"),
    [
        (1, {"reward": "high"}, "reward = 'high'"),
        (1, {"group": None}, "group = None"),
        (1, {"length": 2.5}, "length = 2.5"),
        (1, {"truncated": "no"}, "truncated = 'no'"),
        (1, {"prompt": 5}, "prompt = 5"),
        (1, {"completion": None}, "completion = None"),
        # these three were kept: as NaN, as a column of its own, as a length of -1
        (1, {"advantage": ...}, r"rows\[1\]: advantage missing"),
        (1, {"advantage_": 0.5}, "'advantage_' is no column"),
        (1, {"length": -1}, r"length = -1 \(tokens: >= 0\)"),
        (-1, {}, "step must be an integer >= 0 and < 2\\*\\*63, got -1"),
        (True, {}, "step must be an integer >= 0 and < 2\\*\\*63, got True"),
        (2**70, {}, "step must be an integer >= 0 and < 2\\*\\*63"),
        ("1", {}, "step must be an integer >= 0 and < 2\\*\\*63, got '1'"),
    ],
)
def test_log_completions_refuses_a_row_no_table_can_hold_before_keeping_it(tmp_path, step, change, problem):
    """A row the completions table cannot hold was kept in memory and on disk: from then on ``history.completions``
    failed (ValueError, TypeError, OverflowError) at every call, or quietly held ``length`` 2 for 2.5 and
    ``truncated`` True for "no"; a reload left the row out. Now a ValueError naming it, and nothing is kept."""
    s = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")
    s.history.log_completions(1, [ROW])
    bad = {k: v for k, v in {**ROW, **change}.items() if v is not ...}
    with pytest.raises(ValueError, match=rf"history.log_completions: .*{problem}"):
        s.history.log_completions(step, [ROW, bad])
    assert s.history.completions.to_dict("records") == [{"step": 1, **ROW}]
    s.close()
    assert History.load(tmp_path / "r").completions.to_dict("records") == [{"step": 1, **ROW}]


def test_a_run_in_a_relative_runs_folder_survives_a_change_of_working_folder(tmp_path, monkeypatch):
    """The default runs folder is relative (``./rlnb-runs``): after ``os.chdir`` (``%cd`` in a notebook) the first
    completions, ``config.json`` at close and ``history.path`` went to the new working folder — the store failed with
    a RunStoreWarning and wrote nothing more, and ``History.load(history.path)`` found no run."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s = rlnb.Session(FakeBackend(), runs_dir="rlnb-runs", run_id="r")  # the default, relative
        s.forward_backward(BATCH).result()
        monkeypatch.chdir(tmp_path / "b")
        s.history.log_completions(1, [ROW])
        s.optim_step().result()
        s.close()
        s.history.log(1, reward=1.0)
    h = History.load(s.history.path)
    assert s.history.path == tmp_path / "a" / "rlnb-runs" / "r"
    assert len(h) == 2 and len(h.completions) == 1 and h.logged.reward.tolist() == [1.0]
    assert h.config["session_id"] == s.id and list((tmp_path / "b").iterdir()) == []


def test_a_continued_run_keeps_what_was_annotated_on_it(tmp_path):
    """``config.json`` was rewritten from the new session's config alone: a label or note given with
    ``history.annotate`` (a sweep's label, ``trial``) was lost when another session continued the run id, and
    ``rlnb.compare`` named the run otherwise. The new session's own values win; the others are kept."""
    s = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")
    s.history.annotate(label="baseline", note="first try")
    s.forward_backward(BATCH).result()
    s.close()
    again = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")  # another optimizer is refused (below)
    assert again.history.config["label"] == "baseline"
    again.close()
    config = History.load(tmp_path / "r").config
    assert (config["label"], config["note"]) == ("baseline", "first try")
    assert config["session_id"] == again.id != s.id and len(config["continued_at"]) == 1


@pytest.mark.parametrize("field", ["run_id", "created_at", "continued_at"])
def test_annotate_refuses_the_runs_own_fields_and_keeps_the_config(tmp_path, field):
    """``annotate(run_id="x")`` rewrote the config's run id (not its folder): ``rlnb.runs`` and the sinks then named
    the run ``x``. Those fields are the run's own: a ValueError naming the field, the config on disk unchanged."""
    with rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r") as s:
        before = (tmp_path / "r" / "config.json").read_text()
        with pytest.raises(ValueError, match=f"annotate: {field} is the run's own field"):
            s.history.annotate(label="kept?", **{field: "x"})
        assert s.history.config["run_id"] == "r" and "label" not in s.history.config
        assert (tmp_path / "r" / "config.json").read_text() == before


def test_annotate_refuses_what_config_json_cannot_hold_and_the_close_still_flushes_the_sinks(tmp_path):
    """``annotate(grid={(1, 2): 0.5})`` (or a list holding itself) raised the JSON encoder's TypeError after keeping the
    value: every later config write failed with it, ``session.close()`` raised it too and left its sinks unflushed (the
    last steps missing there until the interpreter exited). A value nested past what a load reads back was written,
    and the whole config left out at the next load. Now a ValueError naming the field, with nothing kept."""
    loop: list = []
    loop.append(loop)
    deep: list = []
    for _ in range(40):
        deep = [deep]
    tb = rlnb.sinks.TensorBoard(tmp_path / "tb", interval=60)  # nothing is written before the close flushes it
    s = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r", sinks=[tb])
    s.forward_backward(BATCH)
    s.optim_step().result()
    for bad in ({(1, 2): 0.5}, loop, deep):
        with pytest.raises(ValueError, match="annotate: grid cannot be written to config.json and read back"):
            s.history.annotate(label="kept?", grid=bad)
    assert "grid" not in s.history.config and "label" not in s.history.config
    s.history.annotate(grid={"1,2": 0.5}, note=None)
    s.close()
    assert History.load(tmp_path / "r").config["grid"] == {"1,2": 0.5}
    assert (tmp_path / "tb" / "r").is_dir() and list((tmp_path / "tb" / "r").iterdir())  # the close flushed it


def test_annotate_refuses_a_field_that_is_not_valid_unicode_naming_it(tmp_path):
    """tnb U1: ``annotate(label="a\\ud800")`` (a lone surrogate, in a name or anywhere in a value) was kept and
    written as an escape: ``rlnb.compare`` of the run then failed (UnicodeEncodeError). Now a ValueError naming the
    field; nothing kept, on disk or in memory."""
    with rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r") as s:
        before = (tmp_path / "r" / "config.json").read_text()
        for fields, named in (
            ({"label": "a\ud800"}, "label"),
            ({"l\ud800": 1}, r"l\\ud800"),
            ({"grid": {"k\udcff": [1]}}, "grid"),
            ({"tags": ["ok", "b\udfff"]}, "tags"),
        ):
            with pytest.raises(ValueError, match=f"annotate: {named} cannot be written .*lone surrogate"):
                s.history.annotate(note="kept?", **fields)
        assert "note" not in s.history.config and (tmp_path / "r" / "config.json").read_text() == before
        s.history.annotate(label="café 日本")
    assert History.load(tmp_path / "r").config["label"] == "café 日本"


def test_the_html_summary_of_a_loaded_run_escapes_what_the_run_folder_says(tmp_path):
    """A run folder is data (one downloaded, shared): its ``config.json`` run id and its operations' status strings
    went into the notebook's HTML summary raw, so ``History.load(path)`` displayed ran the folder's script."""
    run = good_run(tmp_path, "r")
    (run / "config.json").write_text(json.dumps({"run_id": "<script>alert(1)</script>"}))
    with open(run / "ops.jsonl", "a") as fh:
        fh.write(json.dumps({"seq": 6, "kind": "<b>k</b>", "status": "<img src=x onerror=alert(2)>"}) + "\n")
    html = History.load(run)._repr_html_()
    assert "<script>" not in html and "<img" not in html and "<b>k</b>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "&lt;img src=x onerror=alert(2)&gt;" in html


@pytest.mark.parametrize("created", [1e300, float("inf"), -1e12, 10**400])
def test_runs_lists_a_run_whose_created_at_no_datetime_holds(tmp_path, created):
    """A ``created_at`` past what a datetime holds made the whole run a row with only an error
    (OutOfBoundsDatetime), though it loads; -1e12 showed as 1970-04-05. Now that time alone is missing."""
    run = good_run(tmp_path, "r")
    config = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**config, "created_at": created}))
    row = rlnb.runs(tmp_path).iloc[0]
    assert row.error is None and row.operations == 6 and row.steps == 3 and pd.isna(row.created_at)


def test_a_run_id_held_by_another_session_is_refused_before_a_model_loads_or_a_remote_session_starts(
    tmp_path, monkeypatch
):
    """A notebook cell ``connect(run_id="exp")`` run again while its first session is open: the model was loaded
    (minutes for a large one) or a remote session started (billed), and only then was the run found locked."""
    from rlnb.engine.backend import LocalBackend
    from rlnb.errors import RunLocked

    first = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="exp")

    def loaded(*args, **kwargs):
        raise AssertionError("the model was loaded before the run's lock was tried")

    monkeypatch.setattr(LocalBackend, "__init__", loaded)
    with pytest.raises(RunLocked, match=f"pid {os.getpid()}"):
        rlnb.connect("local", runs_dir=tmp_path, run_id="exp")
    first.close()
    monkeypatch.undo()
    with rlnb.connect("local", runs_dir=tmp_path, run_id="exp") as again:  # free again
        assert again.history.path == tmp_path / "exp"


def test_a_loaded_history_given_to_a_session_says_it_records_in_memory_only(tmp_path):
    """adv5b: ``Session(backend, history=History.load(path))`` went on in memory only, silently."""
    first = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")
    first.history.log(0, reward=0.5)  # step 0: no step repeats (RunContinuedWarning), only this warning
    first.close()
    loaded = History.load(tmp_path / "r")
    assert loaded.loaded_from == tmp_path / "r"
    with pytest.warns(RunStoreWarning, match=r"loaded from .*r: this session adds to it in memory only.*run_id='r'"):
        again = rlnb.Session(FakeBackend(), history=loaded)
    again.history.log(2, reward=0.7)
    again.close()
    assert History.load(tmp_path / "r").logged.reward.tolist() == [0.5]  # as it said: nothing written
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a history made by hand is in memory by choice
        rlnb.Session(FakeBackend(), history=History(config={})).close()


def test_negative_steps_in_a_run_folder_are_left_out_on_load(tmp_path):
    """adv5b: lines with a negative ``step`` (a hand edit; ``log`` refuses one) were kept on load."""
    s = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")
    s.forward_backward(BATCH).result()
    s.history.log(0, reward=0.5)
    s.close()
    with open(tmp_path / "r" / "metrics.jsonl", "a") as fh:
        fh.write(json.dumps({"step": -3, "reward": 0.9}) + "\n")
    with open(tmp_path / "r" / "ops.jsonl", "a") as fh:
        fh.write(json.dumps({"seq": 7, "kind": "optim-step", "status": DONE, "step": -2}) + "\n")
    with pytest.warns(RuntimeWarning, match="left out") as caught:
        loaded = History.load(tmp_path / "r")
    said = " ".join(str(w.message) for w in caught)
    assert "step = -3" in said and "step = -2" in said
    assert loaded.logged.step.tolist() == [0] and pd.isna(loaded.df.set_index("seq").loc[7, "step"])


def test_a_logged_rows_session_that_is_no_sessions_number_is_left_out_and_the_row_kept(tmp_path):
    """A ``metrics.jsonl`` line's ``rlnb_session`` (the session that logged it) that is no number of a session (a hand
    edit) is left out with the load's warning; the row keeps its figures and is read as an older rlnb's, of no
    session."""
    s = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")
    s.forward_backward(BATCH).result()
    s.close()
    with open(tmp_path / "r" / "metrics.jsonl", "a") as fh:
        for session in ("one", -1, 1.5, True):
            fh.write(json.dumps({"step": 2, "reward": 0.5, "rlnb_session": session}) + "\n")
    with pytest.warns(RuntimeWarning, match="left out") as caught:
        loaded = History.load(tmp_path / "r")
    said = " ".join(str(w.message) for w in caught)
    assert "left out 4 value(s)" in said and "rlnb_session = 'one'; rlnb_session = -1; rlnb_session = 1.5" in said
    assert loaded.logged_rows() == [({"step": 2, "reward": 0.5}, None)] * 4


def test_the_completions_of_a_path_that_is_no_run_folder_are_refused_not_empty(tmp_path):
    """``rlnb.history.completions("rlnb-runs/<mistyped id>")`` gave an empty table, as if the run had sampled
    nothing; ``completions(5)`` Path's bare TypeError. A run of no RL step still gives an empty table."""
    with pytest.raises(FileNotFoundError, match=r"typo is not an rlnb run folder \(no ops.jsonl\)"):
        rlnb.history.completions(tmp_path / "typo")
    with pytest.raises(TypeError, match=r"path must be a path \(str or os.PathLike\), got int"):
        rlnb.history.completions(5)
    s = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")
    s.forward_backward(BATCH)
    s.close()
    assert list(rlnb.history.completions(tmp_path / "r").columns)[:3] == ["step", "group", "prompt"]
    assert rlnb.history.completions(tmp_path / "r").empty


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="macOS and Windows refuse such a folder name")
def test_runs_lists_a_run_folder_named_in_another_encoding_escaped_with_its_error(tmp_path):
    """A run folder copied from a Latin-1 system (``b"r\\xff"``): Python lists its name with a lone surrogate, which
    the table's text columns refuse, and ``rlnb.runs()`` failed whole with a ``UnicodeEncodeError``."""
    s = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="good")
    s.forward_backward(BATCH)
    s.close()
    shutil.copytree(os.fsencode(tmp_path / "good"), os.fsencode(tmp_path) + b"/r\xff")
    table = rlnb.runs(tmp_path)
    assert len(table) == 2 and table.operations.tolist() == [1, 1]  # both read
    good, odd = (table[table.path.str.endswith(end)].iloc[0] for end in ("good", "r\\udcff"))
    assert good.error is None
    assert odd.error == (
        "path not valid Unicode text (a folder name in another encoding?): shown with escapes; "
        "rename the folder to load it by this path"
    )
    assert History.load(os.fsdecode(os.fsencode(tmp_path) + b"/r\xff")).df.seq.tolist() == [0]


def test_runs_lists_a_run_folder_it_cannot_look_into_as_a_row_with_its_error(tmp_path, monkeypatch):
    """A runs folder shared with another user whose run folder is private (mode 700: its files give EACCES, which
    ``Path.exists`` raises): ``rlnb.runs()`` failed whole with that PermissionError, listing none of the readable
    runs. That folder is a row whose ``error`` says why, as another unreadable run is. (Simulated: root here.)"""
    for run_id in ("a", "b"):
        rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id=run_id).close()
    stat = Path.stat

    def private(self, **kwargs):
        if self.parent == tmp_path / "b":
            raise PermissionError(13, "Permission denied", str(self))
        return stat(self, **kwargs)

    monkeypatch.setattr(Path, "stat", private)
    table = rlnb.runs(tmp_path).set_index("run_id")
    assert table.loc["a", "error"] is None and table.loc["a", "operations"] == 0
    assert table.loc["b", "error"].startswith("PermissionError: [Errno 13] Permission denied")


def _unreadable(monkeypatch, *names: str) -> None:
    """The folders ``names`` cannot be looked into (mode 700, another user's): what is in them gives EACCES, which
    ``Path.exists`` raises. (Simulated: root reads anything.)"""
    stat = Path.stat

    def private(self, **kwargs):
        if self.parent.name in names:
            raise PermissionError(13, "Permission denied", str(self))
        return stat(self, **kwargs)

    monkeypatch.setattr(Path, "stat", private)


def test_one_probe_says_whether_a_folder_holds_a_run_each_caller_answering_for_an_unreadable_one(tmp_path, monkeypatch):
    """``history.save`` and ``rlnb.runs`` each had a copy of the "is there an ``ops.jsonl`` here" probe, with opposite
    answers for a folder that cannot be looked into. One probe, ``store.holds_run``; its caller gives that answer:
    ``runs`` lists such a folder (with its error), ``save`` does not count it as a run beside which it would write."""
    from rlnb.history.store import holds_run

    rlnb.Session(FakeBackend(), runs_dir=tmp_path / "runs", run_id="a").close()
    for name in ("private", "empty"):
        (tmp_path / "runs" / name).mkdir()
    (tmp_path / "shared" / "private").mkdir(parents=True)
    s = rlnb.Session(FakeBackend(), record=False)
    s.forward_backward(BATCH)
    _unreadable(monkeypatch, "private")
    runs = tmp_path / "runs"
    assert [holds_run(runs / n, unreadable=True) for n in ("a", "private", "empty")] == [True, True, False]
    assert [holds_run(runs / n, unreadable=False) for n in ("a", "private", "empty")] == [True, False, False]
    listed = rlnb.runs(runs).set_index("run_id")
    assert sorted(listed.index) == ["a", "private"] and listed.loc["private", "error"].startswith("PermissionError")
    assert s.history.save(tmp_path / "shared") == tmp_path / "shared"  # its unreadable folder is no run
    s.close()


def test_runs_skips_a_lost_and_found_folder_it_cannot_look_into(tmp_path, monkeypatch):
    """A runs folder at the root of a file system holds root's ``lost+found`` (mode 700): ``rlnb.runs()`` listed it as
    a run with a PermissionError. It is the file system's own, never a run: left out. Another folder that cannot be
    looked into is still listed with its error (another user's run)."""
    for run_id in ("a", "b"):
        rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id=run_id).close()
    (tmp_path / "lost+found").mkdir()
    _unreadable(monkeypatch, "lost+found", "b")
    table = rlnb.runs(tmp_path).set_index("run_id")
    assert sorted(table.index) == ["a", "b"] and table.loc["a", "error"] is None
    assert table.loc["b", "error"].startswith("PermissionError")


def test_a_session_with_another_optimizer_than_its_run_is_refused_naming_both(tmp_path):
    """A Muon session on an Adam run's id was taken in silence: the run's config said muon from then on, and
    ``rlnb.runs()`` and the plots showed the Adam session's steps as Muon's."""
    run = good_run(tmp_path, "r")
    before = {f.name: f.read_bytes() for f in run.iterdir() if f.is_file() and f.name != ".lock"}
    with pytest.raises(ValueError, match=r"run r was recorded with optimizer adam, and this session's is muon"):
        rlnb.Session(FakeBackend(optimizer="muon"), runs_dir=tmp_path, run_id="r")
    assert {f.name: f.read_bytes() for f in run.iterdir() if f.is_file() and f.name != ".lock"} == before
    with pytest.warns(RunContinuedWarning):  # its lock was let go, and the run's own optimizer goes on
        rlnb.Session(FakeBackend(optimizer="adam"), runs_dir=tmp_path, run_id="r").close()
    assert History.load(run).config["optimizer"] == "adam"


def test_a_run_whose_config_names_no_optimizer_is_continued_with_the_change_named(tmp_path):
    """An optimizer a damaged config.json does not name (5, no string) is not refused as another optimizer: the one
    comparison of the two sessions' setups names it among the changes, as any other field."""
    run = good_run(tmp_path, "r")
    config = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**config, "optimizer": 5}))
    with pytest.warns(RunContinuedWarning) as said:  # and that it starts at step 0 again
        rlnb.Session(FakeBackend(optimizer="adam"), runs_dir=tmp_path, run_id="r").close()
    assert any("optimizer 5 -> 'adam'" in str(w.message) for w in said), [str(w.message) for w in said]
    assert History.load(run).config["optimizer"] == "adam"


def test_a_session_that_continues_a_run_with_another_seed_keeps_the_earlier_ones_and_says_so(tmp_path):
    """A session with seed 7 continuing a seed-0 run replaced the run's config in silence: it said seed 7 for
    every step, and nothing kept the earlier seed. Now a warning at the user's line names the change, and the
    earlier sessions' own fields stay in ``earlier_sessions`` (left out of what a sink gets as hyperparameters)."""
    from rlnb.sinks.base import RunInfo

    def continue_with(seed: int) -> None:
        with rlnb.connect("local", runs_dir=tmp_path, run_id="r", seed=seed, threads=1) as s:
            s.forward_backward([samples.cross_entropy([1, 2, 3])]).result(60)

    continue_with(0)
    with pytest.warns(RunContinuedWarning, match=r"seed 0 -> 7") as said:
        continue_with(7)
    assert {w.filename for w in said if "seed 0 -> 7" in str(w.message)} == {__file__}
    config = History.load(tmp_path / "r").config
    assert config["seed"] == 7 and [e["seed"] for e in config["earlier_sessions"]] == [0]
    assert config["earlier_sessions"][0]["session_id"] != config["session_id"]
    assert "earlier_sessions" not in RunInfo.from_config(config).params
    with warnings.catch_warnings(record=True) as said:  # the same setup again: nothing said, every session kept
        warnings.simplefilter("always")
        continue_with(7)
    assert not [w for w in said if "set up otherwise" in str(w.message)]
    assert [e["seed"] for e in History.load(tmp_path / "r").config["earlier_sessions"]] == [0, 7]

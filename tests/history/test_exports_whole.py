"""A history's whole-table exports (``to_csv``, ``to_parquet``) on a disk that fills, and what a CSV of a continued run
carries: the last good file stays when a new one cannot be written whole, and the sessions' boundaries come back."""

import contextlib
import errno
import io
import os
import re
import sys

import pandas as pd
import pytest

import rlnb
from rlnb import samples
from rlnb.history.runs import RunContinuedWarning
from rlnb.history.tables import steps_table
from rlnb.testing import FakeBackend

BATCH = [samples.cross_entropy(list(b"exports"))]


def steps(session: rlnb.Session, n: int) -> None:
    for _ in range(n):
        session.forward_backward(BATCH)
        session.optim_step()
    session.wait()


@contextlib.contextmanager
def file_size_limit(size: int):
    """Every write past ``size`` bytes of a file fails with ``EFBIG``, as a full disk fails with ``ENOSPC``: the
    process's own limit (``RLIMIT_FSIZE``), which needs no root and no tmpfs."""
    import resource
    import signal

    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    before = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails instead of killing the process
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, before)


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_a_full_disk_leaves_the_last_good_export_whole(tmp_path, fmt):
    """``to_csv`` wrote in place: the disk filled part way and the good file was replaced by a truncated one, which
    pandas read as fewer rows without a word. The new file is written beside it and renamed over it once whole."""
    if fmt == "parquet":
        pytest.importorskip("pyarrow")
    session = rlnb.Session(FakeBackend())
    steps(session, 1)
    (tmp_path / "out").mkdir()
    file = tmp_path / "out" / f"ops.{fmt}"
    write = getattr(session.history, f"to_{fmt}")
    write(file)
    good = file.read_bytes()
    steps(session, 20)
    with file_size_limit(len(good) + 64), pytest.raises(OSError) as refused:
        write(file)
    assert refused.value.errno == errno.EFBIG
    assert file.read_bytes() == good
    assert sorted(p.name for p in file.parent.iterdir()) == [file.name]  # no half-written file beside it
    write(file)  # with room again, the new table is written whole
    read = pd.read_csv if fmt == "csv" else pd.read_parquet
    assert len(read(file)) == len(session.history.df) == 42
    session.close()


def test_a_buffer_and_a_compressed_name_still_take_the_csv():
    """pandas takes a buffer or a ``.csv.gz`` name; the export written whole takes them too."""
    session = rlnb.Session(FakeBackend())
    steps(session, 2)
    text = io.StringIO()
    session.history.to_csv(text)
    text.seek(0)
    assert list(pd.read_csv(text).seq) == [0, 1, 2, 3]
    session.close()


def test_a_gzip_name_is_compressed(tmp_path):
    session = rlnb.Session(FakeBackend())
    steps(session, 1)
    session.history.to_csv(tmp_path / "ops.csv.gz")
    assert (tmp_path / "ops.csv.gz").read_bytes()[:2] == b"\x1f\x8b"
    assert list(pd.read_csv(tmp_path / "ops.csv.gz").seq) == [0, 1]
    session.close()


def test_a_csv_of_a_continued_run_keeps_its_sessions_steps_apart(tmp_path):
    """The sessions' boundaries lived in ``df.attrs``, which CSV cannot carry: the steps of a continued run read back
    from CSV added the dead session's unstepped forward-backward's loss (5) to the next session's first step (12, where
    the history and its Parquet show 7). The ``session`` column carries them."""
    losses = iter([10.0, 5.0, 7.0, 1.0])
    first = rlnb.Session(FakeBackend(loss=lambda step: next(losses)), runs_dir=tmp_path, run_id="r")
    steps(first, 1)
    first.forward_backward(BATCH).result(timeout=30)
    first.history.close()  # the process dies before its optim-step
    with pytest.warns(RunContinuedWarning):
        again = rlnb.Session(FakeBackend(loss=lambda step: next(losses)), runs_dir=tmp_path, run_id="r")
    steps(again, 2)
    again.close()
    again.history.to_csv(tmp_path / "ops.csv")
    read = pd.read_csv(tmp_path / "ops.csv")
    assert list(read.session) == [0, 0, 0, 1, 1, 1, 1]
    expected = [{"step": 1, "loss": 10.0}, {"step": 1, "loss": 7.0}, {"step": 2, "loss": 1.0}]
    assert again.history.steps[["step", "loss"]].to_dict("records") == expected
    assert steps_table(read)[["step", "loss"]].to_dict("records") == expected
    shuffled = read.sample(frac=1, random_state=0)  # the first operation of a session by number, not by row
    assert steps_table(shuffled.sort_values("seq"))[["step", "loss"]].to_dict("records") == expected
    os.remove(tmp_path / "ops.csv")


def test_an_export_goes_through_a_link_into_a_pipe_and_names_a_missing_folder(tmp_path):
    """Written whole, an export still goes where pandas wrote it: through a symbolic link into its target (the link
    kept), into a named pipe as it is read; a folder that does not exist is named (not the file written beside)."""
    import threading

    session = rlnb.Session(FakeBackend())
    steps(session, 1)
    target, link = tmp_path / "target.csv", tmp_path / "latest.csv"
    target.write_text("old")
    link.symlink_to(target)
    session.history.to_csv(link)
    assert link.is_symlink() and list(pd.read_csv(target).seq) == [0, 1]
    with pytest.raises(FileNotFoundError, match=f"its folder {tmp_path / 'gone'} does not exist"):
        session.history.to_csv(tmp_path / "gone" / "ops.csv")
    if hasattr(os, "mkfifo"):
        pipe = tmp_path / "pipe"
        os.mkfifo(pipe)
        read: list[bytes] = []
        reader = threading.Thread(target=lambda: read.append(pipe.read_bytes()), daemon=True)
        reader.start()
        session.history.to_csv(pipe)
        reader.join(timeout=30)
        assert read and read[0].startswith(b"seq,kind") and pipe.exists() and not pipe.is_file()
    session.close()


@pytest.mark.parametrize("name", ["ops.jsonl", "metrics.jsonl", "config.json", "run.lock", "completions.jsonl"])
@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_an_export_over_a_run_folders_own_file_is_refused_and_the_run_loads_whole(tmp_path, name, fmt):
    """``to_csv(history.path / "ops.jsonl")`` (a path mistyped) replaced the run's own file with the table: the run
    reloaded with 0 steps and three corrupt-file warnings. ``save`` refused such a folder; the export now refuses
    its files by the same rule, through a link too, before anything is written."""
    if fmt == "parquet":
        pytest.importorskip("pyarrow")
    session = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")
    steps(session, 3)
    session.history.log(1, r=1.0)
    session.close()
    run = session.history.path
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    history = rlnb.History.load(run)
    write = getattr(history, f"to_{fmt}")
    refused = rf"{re.escape(str(run / name))} is one of the files of {re.escape(str(run))}, .*nothing was written"
    with pytest.raises(FileExistsError, match=refused):
        write(run / name)
    (tmp_path / "latest").symlink_to(run / name)
    with pytest.raises(FileExistsError, match=re.escape(f"{run / name} is one of the files")):
        write(tmp_path / "latest")
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before
    again = rlnb.History.load(run)
    assert (len(again.steps), len(again.logged)) == (3, 1)
    write(run / f"ops.{fmt}")  # a table of its own beside the run's files is written as before
    assert len((pd.read_csv if fmt == "csv" else pd.read_parquet)(run / f"ops.{fmt}")) == len(history.df) == 6

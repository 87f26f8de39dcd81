"""A lock file (a run's, a sweep's, a server's state folder's) that is a named pipe or a folder: refused naming it,
as every other file rlnb reads or appends to there (``locks.refuse_pipe``)."""

import os

import pytest

from rlnb.history.store import lock_run
from rlnb.server.state import Journal, StateDirError
from rlnb.sweep.folder import lock
from tests.support.pipes import refusal_in_time

LOCKS = [
    ("run.lock", lock_run, OSError),
    ("sweep.lock", lambda folder: lock(folder, resume=False), OSError),
    ("state.lock", Journal, StateDirError),
]
"""Each lock file rlnb holds, what takes it, and what its refusal raises."""

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")


@pytest.mark.parametrize(("name", "take", "kind"), LOCKS)
def test_a_lock_file_that_is_a_named_pipe_is_refused_naming_it(tmp_path, name, take, kind):
    """It was opened (a pipe opened to read and write waits for no one) and the start failed with io's bare "File or
    stream is not seekable.", naming no file (a server's: its folder, not why)."""
    os.mkfifo(tmp_path / name)
    said = refusal_in_time(lambda: take(tmp_path), tmp_path / name, kind)
    assert f"{tmp_path / name} is a named pipe, not a file" in str(said), said


@pytest.mark.parametrize(("name", "take", "kind"), LOCKS)
def test_a_lock_file_that_is_a_folder_is_refused_naming_it(tmp_path, name, take, kind):
    """leftovers6 found it: a ``sweep.lock`` that is a folder raised the bare ``IsADirectoryError`` of ``open``."""
    (tmp_path / name).mkdir()
    with pytest.raises(kind) as info:
        take(tmp_path)
    assert f"{tmp_path / name} is a folder, not a lock file" in str(info.value), info.value

"""A hostile user's runs: a file system that cannot lock, text that is not valid Unicode in what a run records, a
run folder deleted while it is written. Each must keep what was recorded, or say plainly what it could not."""

import errno
import fcntl

import pytest

import rlnb
from rlnb import samples
from rlnb.history import History
from rlnb.history.locks import LockUnsupportedWarning
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

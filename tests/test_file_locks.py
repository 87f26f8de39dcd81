"""Every lock rlnb takes without waiting (a run or sweep folder's, a partial checkpoint's, a sink's run claim) tells
"another open file holds it" from "this file system cannot lock" by one rule, ``rlnb._files.take``: the three copies
of it had told ``EACCES`` apart differently (held for a folder's lock, "cannot tell" for a partial's)."""

import errno
import os

import pytest

from rlnb import _files
from rlnb.engine import held
from rlnb.sinks import leases

fcntl = pytest.importorskip("fcntl", reason="flock is POSIX")


def test_a_lock_held_by_another_open_file_is_not_taken_and_one_free_is(tmp_path):
    path = tmp_path / "lock"
    path.touch()
    first, second = os.open(path, os.O_RDWR), os.open(path, os.O_RDWR)
    try:
        assert _files.take(first) is True
        assert _files.take(second) is False
        _files.release(first)
        assert _files.take(second) is True
    finally:
        _files.release(second)


@pytest.mark.parametrize(
    ("error", "taken"),
    [
        (errno.EWOULDBLOCK, False),  # flock's "another holds it"
        (errno.EACCES, False),  # Windows' (and some file systems'): a partial's lock took it for "cannot tell"
        (errno.EDEADLK, False),
        (errno.ENOLCK, None),  # an NFS without its lock daemon
        (errno.ENOSYS, None),  # Lustre without -o flock
    ],
)
def test_every_lock_tells_a_held_lock_from_a_file_system_without_locks_by_one_rule(tmp_path, monkeypatch, error, taken):
    def flock(fd, op):
        raise OSError(error, os.strerror(error))

    path = tmp_path / "lock"
    path.touch()
    fd = os.open(path, os.O_RDWR)
    monkeypatch.setattr(fcntl, "flock", flock)
    monkeypatch.setattr(leases.tempfile, "gettempdir", lambda: str(tmp_path))
    try:
        if taken is None:
            with pytest.raises(OSError, match=os.strerror(error)):
                _files.take(fd)
        else:
            assert _files.take(fd) is taken
        assert held._take(fd) is taken  # a partial checkpoint's, a server's scratch folder's
        assert leases._hold(("place", "run")) is taken  # a sink's run claim
    finally:
        os.close(fd)

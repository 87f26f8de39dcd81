"""The folder of a sink's run claims (``rlnb.sinks.leases``) is in the shared temporary folder: another user of the
machine can make it first. One that is not the user's own private folder is not used."""

import fcntl
import hashlib
import os

import pytest

from rlnb.sinks import leases
from rlnb.sinks.base import SinkWarning

WHERE, NAME = "TensorBoard(logdir='/home/alice/tb')", "run"


@pytest.fixture
def tmp(monkeypatch, tmp_path):
    monkeypatch.setattr(leases.tempfile, "gettempdir", lambda: str(tmp_path))
    return tmp_path


def _planted(folder) -> int:
    """The lock file of (WHERE, NAME) in ``folder``, made and held as another user's process would."""
    digest = hashlib.sha256("\0".join((WHERE, NAME)).encode()).hexdigest()[:32]
    fd = os.open(folder / f"{digest}.lock", os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


@pytest.mark.parametrize("how", ["world-writable", "a link to another folder"])
def test_a_claims_folder_someone_else_can_write_never_keeps_a_run_from_its_sink(tmp, how, monkeypatch):
    """Another user made ``rlnb-sink-claims-<user>`` first (writable by all, or a link to a folder of theirs) and
    held the lock file of a run's name: every run of that name was left out of its sink ("being written there now
    by another session"), the points lost there. The fallback (runs told apart within this process only) is said
    once, not silently."""
    folder = leases.folder()
    if how == "world-writable":
        folder.mkdir()
        folder.chmod(0o777)
        theirs = folder
    else:
        theirs = tmp / "theirs"
        theirs.mkdir()
        folder.symlink_to(theirs)
    fd = _planted(theirs)
    monkeypatch.setattr(leases, "_warned", False)
    try:
        with pytest.warns(SinkWarning, match=r"rlnb-sink-claims-.* is not a private folder of this user's"):
            claim = leases.take(WHERE, NAME)
        assert claim is not None  # the run is written to its sink
        try:
            assert leases.take(WHERE, NAME) is None  # a second run of that name in this process is still refused
        finally:
            leases.drop(claim)
    finally:
        os.close(fd)

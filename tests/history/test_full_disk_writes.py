"""A disk that fills while ``write_new`` writes a new file (a run's config, a sweep's settings, a server's journal):
the bytes may be refused only at the ``fsync`` or the close (NFS, a quota, a small write held in a buffer). No file
of it may be left, and the error must name it."""

import errno
import os

import pytest

from rlnb import _files
from rlnb._files import write_new


def _full_once(monkeypatch, name):
    """``os.<name>`` fails once with ``ENOSPC`` (a close closes its descriptor first, as a real one does)."""
    real = getattr(os, name)
    failed = []

    def full(fd):
        if not failed:
            failed.append(fd)
            if name == "close":
                real(fd)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd)

    monkeypatch.setattr(_files.os, name, full)
    return failed


@pytest.mark.parametrize("name", ["close", "fsync"])
def test_a_disk_full_at_the_close_or_fsync_leaves_no_file_and_names_it(tmp_path, monkeypatch, name):
    """An empty file was left where the disk filled at the close: the clean-up covered only the write."""
    file = tmp_path / "config.json.tmp"
    failed = _full_once(monkeypatch, name)
    with pytest.raises(OSError) as refused:
        write_new(file, b'{"lr": 1e-05}', sync=True)
    assert failed, f"os.{name} was never called"
    assert refused.value.errno == errno.ENOSPC and refused.value.filename == str(file)
    assert str(file) in str(refused.value)
    assert list(tmp_path.iterdir()) == []


def test_a_new_file_is_written_whole(tmp_path):
    """The clean-up changes nothing when the disk has room: the bytes are there, each of them."""
    file = tmp_path / "journal.tmp"
    data = bytes(range(256)) * 64
    write_new(file, data, sync=True, mode=0o600)
    assert file.read_bytes() == data
    if os.name == "posix":
        assert file.stat().st_mode & 0o077 == 0

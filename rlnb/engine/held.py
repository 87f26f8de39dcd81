"""Files a live process holds: an exclusive ``flock`` taken by the writer of a partial checkpoint (and by ``rlnb
serve`` on its scratch folder) for as long as it writes, which the kernel releases however the process ends.

A process id says whether a writer is alive only in the process namespace it ran in: two containers with one
hostname sharing a ``checkpoint_dir`` would each see the other's live writer as a dead process (or a reused pid
as alive). A lock that can be taken has no live holder, wherever it ran. Where ``fcntl`` is missing (Windows)
nothing is held and the process-id rule alone decides.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

from rlnb import _files

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

SCRATCH_PREFIX = "rlnb-serve-checkpoints-"
_SCRATCH_LOCK = ".held-by-rlnb-serve"
"""The lock file of a server's scratch folder: one without it (an older rlnb's) is never removed."""


def _take(fd: int) -> bool | None:
    """``_files.take``: False if another open file holds ``fd``'s lock; None where locks cannot be taken (no
    ``fcntl``: Windows' locks would refuse the writer's own writes to its partial; a file system without them,
    ENOLCK): nothing can be told."""
    if fcntl is None:
        return None
    try:
        return _files.take(fd)
    except OSError:
        return None


def hold(partial: Path, folder: bool) -> int | None:
    """Make ``partial`` (an empty file, or a folder) and hold its lock: the descriptor to close once it is renamed
    or removed (None where nothing can be held)."""
    if folder:
        partial.mkdir()
        if fcntl is None:
            return None
        fd = os.open(partial, os.O_RDONLY)
    else:
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        _take(fd)  # a new file: nobody else holds it (without locks, the process-id rule alone keeps it)
        if os.stat(partial, follow_symlinks=False).st_ino != os.fstat(fd).st_ino:  # removed before it was held
            raise FileNotFoundError(f"the partial {partial} was removed by another process as it was made; save again")
    except BaseException:
        _files.release(fd)  # unlocked, not only closed: a child forked meanwhile would keep the lock
        raise
    return fd


@contextlib.contextmanager
def unheld(entry: Path) -> Iterator[bool]:
    """Whether no live process holds ``entry``'s lock; if so it is taken until the block ends (while ``entry`` is
    removed). A link, or a file this process cannot open, holds no lock of rlnb's. Where locks do not exist
    (Windows, a file system without them) it is True: the process-id rule decides alone there."""
    try:
        fd = os.open(entry, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        yield True
        return
    try:
        yield _take(fd) is not False
    finally:
        _files.release(fd)


MAKING = ".making-"
"""A scratch folder's name until its lock is held: no sweep looks at it (two servers started at once: one swept the
other's new folder between the lock file's creation and its lock, and the other failed with FileNotFoundError)."""
MAKING_KEPT = 3600.0
"""Seconds a folder that was never held (its maker killed while making it) is kept before a sweep removes it."""


def scratch_folder(prefix: str = SCRATCH_PREFIX) -> tuple[Path, int | None]:
    """A fresh temporary folder (a server's checkpoints, a Ray trial's run), and the descriptor of its lock (held
    for the folder's life). The folders of ``prefix`` whose holders died without their cleanup (killed, out of
    memory) are removed first: their lock is free. A new folder gets its name only once its lock is held."""
    _sweep(prefix)
    making = Path(tempfile.mkdtemp(prefix=f"{MAKING}{prefix}"))
    fd = hold(making / _SCRATCH_LOCK, folder=False)
    scratch = making.with_name(making.name.removeprefix(MAKING))
    os.rename(making, scratch)  # mkdtemp's name was unique: so is this one, without the prefix
    return scratch, fd


def _sweep(prefix: str) -> None:
    tmp = Path(tempfile.gettempdir())
    for made in tmp.glob(f"{MAKING}{prefix}*"):  # killed while made: its lock may never have been taken
        with contextlib.suppress(OSError):
            if time.time() - made.stat().st_mtime > MAKING_KEPT:
                shutil.rmtree(made)
    for old in tmp.glob(f"{prefix}*"):
        try:
            fd = _files.regular(str(old / _SCRATCH_LOCK), os.O_RDONLY, follow=False)  # a pipe there: never waited on
        except OSError:  # an older rlnb's, another user's, a pipe or link planted there: kept
            continue
        try:
            if _take(fd):  # None (cannot tell): kept
                shutil.rmtree(old)
        except OSError as exc:
            warnings.warn(f"a scratch folder that a stopped process left could not be removed: "
                          f"{exc.filename or old}: {exc.strerror or exc}", RuntimeWarning, stacklevel=2)  # fmt: skip
        finally:
            _files.release(fd)

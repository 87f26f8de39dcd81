"""One writer at a time: a file lock the OS releases when its holder's process dies (a run folder's
``run.lock``, a sweep folder's, a server's state folder's, a checkpoint's partial), its holder's pid written inside
for the error of whoever finds it taken; and the writes every folder of rlnb shares (``write_new``, ``appending``,
``fsync``): never through a link, never a named pipe. Below history, engine, sweep and the server, which all use it.

A file system that takes no locks at all (Lustre mounted without ``flock``, an NFS without its lock daemon:
``ENOSYS``, ``ENOLCK``, ``EOPNOTSUPP``) is not another writer: the folder is written unlocked, with a
``LockUnsupportedWarning``. Refused as ``RunLocked`` by "pid unknown", no run could be recorded there.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
import warnings
from pathlib import Path
from typing import IO, Any, Literal, overload

from rlnb.errors import RunLocked, user_stacklevel

TAKEN = frozenset({errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES, errno.EDEADLK})
"""The errors of a lock another file holds: flock's ``EWOULDBLOCK``; Windows' ``EACCES`` / ``EDEADLOCK``. Any
other error is a file system that cannot lock."""


class LockUnsupportedWarning(RuntimeWarning):
    """The file system cannot lock files: the folder is written without its lock, and nothing keeps out a second
    writer."""


def hold_lock(file: Path, busy: str) -> IO[str]:
    """Hold ``file`` exclusively until the returned handle is closed (the OS releases it if the process dies),
    writing this process's pid in it; else ``RunLocked`` with ``busy`` (its ``{holder}``: the holder's pid). On a
    file system that cannot lock, the handle is returned unlocked, with a ``LockUnsupportedWarning``."""
    refuse_link(file)  # its pid would be written over the target: a user's notes, in a run folder from elsewhere
    refuse_pipe(file)  # opened, it failed with io's "File or stream is not seekable.", naming no file
    if file.is_dir():  # open's bare "[Errno 21] Is a directory"
        raise IsADirectoryError(
            errno.EISDIR, f"{file} is a folder, not a lock file: move it away, rlnb writes its lock there"
        )
    fh = open(file, "a+", encoding="utf-8", opener=no_follow)  # noqa: SIM115 - held open for the lock's life
    refuse_shared(fh, file)  # its pid would be written over another name's file (a cp -al copy's lock)
    try:
        taken = take(fh.fileno())
    except OSError as exc:
        taken = None
        warnings.warn(f"{file} cannot be locked on this file system ({exc}): it is written without a lock, and "
                      "nothing stops a second session or process writing it at once: run one at a time there",
                      LockUnsupportedWarning, stacklevel=user_stacklevel())  # fmt: skip
    if taken is False:
        fh.seek(0)
        holder = fh.read().strip() or "unknown"
        fh.close()
        raise RunLocked(busy.replace("{holder}", holder), holder=holder)  # a path may hold braces
    with contextlib.suppress(OSError):  # a full disk: the lock is held all the same; the pid is a courtesy
        fh.truncate(0)
        fh.write(f"{os.getpid()}\n")
        fh.flush()
    return fh


NO_FOLLOW = getattr(os, "O_NOFOLLOW", 0)
"""Opening a link fails (``ELOOP``) rather than going through it (POSIX; Windows has no such flag)."""
NON_BLOCK = getattr(os, "O_NONBLOCK", 0)
"""Opening a named pipe returns at once (or fails) rather than waiting for its other end (POSIX)."""


def regular(path: str, flags: int, follow: bool = True) -> int:
    """``open``'s opener for a file rlnb reads or appends to: a named pipe, a device or a socket is refused as it is
    opened (``OSError`` naming it), not only when ``refuse_pipe`` looked: one put there in between waited for ever
    (``sweep`` resumed, a server's start). Opened without waiting (``O_NONBLOCK``), its type read from the descriptor
    itself, then made a blocking file again. ``follow=False``: never through a symbolic link (``no_follow``)."""
    try:
        fd = os.open(path, flags | NON_BLOCK | (0 if follow else NO_FOLLOW), 0o666)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a pipe opened to write with no reader, or a socket
            raise OSError(f"{path} is a named pipe or a socket, not a file: writing it would wait for ever") from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        refuse_pipe(Path(path), mode)
        raise OSError(f"{path} is not a regular file")
    if NON_BLOCK:
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~NON_BLOCK)
    return fd


def no_follow(path: str, flags: int) -> int:
    """``open``'s opener for a file rlnb writes in a folder of its own: never through a symbolic link (a link made
    after ``refuse_link`` looked, too), and only a regular file (``regular``)."""
    return regular(path, flags, follow=False)


def refuse_link(file: Path) -> None:
    """``OSError`` naming ``file`` and its target when it is a symbolic link: rlnb writes its folders' files (a run's,
    a sweep's, a server's) only there, never through a link (a run folder copied from elsewhere with its links)."""
    if file.is_symlink():
        raise OSError(f"{file} is a symbolic link (to {os.readlink(file)!r}): rlnb writes the files of its folders "
                      "only there, never through a link; remove the link")  # fmt: skip


def refuse_pipe(file: Path, mode: int | None = None) -> None:
    """``OSError`` naming ``file`` when it is a named pipe: opening it to read or append waits for ever for the other
    end (a folder from elsewhere, or a hostile one); or (itself or through a link) a device or socket: ``/dev/zero``
    read whole never ends, taking the memory. ``mode``: its ``st_mode`` as an open descriptor's ``fstat`` read it
    (``regular``); else it is looked up by name, a check a pipe put there before the open gets past."""
    if mode is None:
        try:
            mode = file.stat().st_mode
        except (OSError, ValueError):  # missing, or a link to nothing: the open that follows says so
            return
    if stat.S_ISFIFO(mode):
        raise OSError(f"{file} is a named pipe, not a file: opening it would wait for ever")
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISSOCK(mode):
        raise OSError(f"{file} is a device, not a file: reading it may never end")


def refuse_shared(fh: IO[Any], file: Path) -> None:
    """Close ``fh``, opened at ``file``, and raise ``OSError`` naming it when the file has other names (a hard link: a
    snapshot made with ``cp -al``, ``ln``): what rlnb appends or writes there would change the other copy too."""
    names = os.fstat(fh.fileno()).st_nlink
    if names > 1:
        fh.close()
        raise OSError(shared(file, names))


def shared(file: Path, names: int) -> str:
    """Why a hard link is not written into (``refuse_shared``, and a run folder's check up front)."""
    return (
        f"{file} is a hard link ({names} names for one file: a copy made with cp -al, or ln): rlnb writes the files "
        "of its folders only where no other name would change with them; copy the folder with cp -a"
    )


def write_new(file: Path, data: bytes, sync: bool = False, mode: int = 0o666) -> None:
    """Write ``data`` as a new file at ``file`` (a temporary name, renamed into place after), never through what is
    there: a symbolic link is refused (``refuse_link``), a file left there (a killed write's) is removed first, not
    written over (a hard link's other names would keep the new text), and the file is created exclusively (``O_EXCL``,
    ``O_NOFOLLOW``): a link or file put there in between fails the write instead of taking it. A write that fails
    part way (a full disk), at its ``fsync`` or at its close (a small write's bytes refused only there: NFS, a quota),
    removes the file it made, its error naming ``file``. ``sync``: on the disk before it returns (``fsync``), for a
    file whose rename must not outrun its text (a server's journal); ``mode``: its permissions (less the umask)."""
    refuse_link(file)
    with contextlib.suppress(FileNotFoundError):
        file.unlink()
    fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NO_FOLLOW | BINARY, mode)  # x: O_EXCL
    is_open = True
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
        is_open = False  # a close that fails has closed the descriptor all the same (POSIX): never closed twice
        os.close(fd)  # a full disk may refuse the bytes only here (NFS, a quota): the file is removed as well
    except BaseException as exc:
        if is_open:
            with contextlib.suppress(OSError):
                os.close(fd)
        file.unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.filename is None:  # os.write's, os.fsync's, os.close's name no file
            raise type(exc)(exc.errno, exc.strerror, str(file)) from exc
        raise


BINARY = getattr(os, "O_BINARY", 0)
"""Bytes written as they are (Windows would turn each newline into two)."""


def fsync(path: Path) -> None:
    """Flush ``path`` to the disk: a file's text, or (POSIX) a folder's names, so that a rename into it survives a
    power loss (a checkpoint's, a server's signing key's). Elsewhere a folder cannot be opened: nothing is done."""
    if os.name != "posix" and path.is_dir():
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@overload
def appending(file: Path, binary: Literal[False] = False) -> IO[str]: ...
@overload
def appending(file: Path, binary: Literal[True]) -> IO[bytes]: ...
def appending(file: Path, binary: bool = False) -> IO[Any]:
    """``file`` opened to append lines to (text, or unbuffered bytes: a run folder's journals), never through a link:
    a symbolic link is refused (``refuse_link``, and ``O_NOFOLLOW`` for one made after it looked), a hard link too
    (``refuse_shared``): the lines went into the link's target (a ~/.bashrc, a user's notes) or another copy's file;
    and a named pipe, which opening would wait on for ever for a reader. The one rule of every file rlnb appends to."""
    refuse_link(file)
    refuse_pipe(file)
    if binary:
        fh: IO[Any] = open(file, "ab", buffering=0, opener=no_follow)  # noqa: SIM115 - the caller closes it
    else:
        fh = open(file, "a", encoding="utf-8", opener=no_follow)  # noqa: SIM115 - the caller closes it
    refuse_shared(fh, file)
    return fh


def release(fh: IO[str] | int | None) -> None:
    """Unlock ``fh`` (a file, or a descriptor), then close it. A process forked while it was held (a DataLoader's
    workers, a ``multiprocessing`` pool) shares the lock, and closing alone left it held until that child exited: the
    run stayed locked against its own notebook (``RunLocked`` naming the notebook's pid). A close that fails (a full
    disk) is said elsewhere."""
    if fh is None or (not isinstance(fh, int) and fh.closed):
        return
    fd = fh if isinstance(fh, int) else fh.fileno()
    if sys.platform != "win32":  # Windows forks no process: its close releases the lock
        import fcntl

        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
    with contextlib.suppress(OSError):
        if isinstance(fh, int):
            os.close(fh)
        else:
            fh.close()


def take(fd: int) -> bool:
    """Lock ``fd`` exclusively without waiting: True once held, False if another open file holds it (an error in
    ``TAKEN``); any other ``OSError`` is raised: the file system cannot lock (every lock of rlnb tells the two apart
    by this one rule)."""
    try:
        if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
            import msvcrt

            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        else:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in TAKEN:
            return False
        raise
    return True

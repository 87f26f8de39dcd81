"""One writer at a time: a file lock the OS releases when its holder's process dies (a run folder's
``run.lock``, a sweep folder's, a server's state folder's), its holder's pid written inside for the error
of whoever finds it taken."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import IO

from rlnb.errors import RunLocked


def hold_lock(file: Path, busy: str) -> IO[str]:
    """Hold ``file`` exclusively until the returned handle is closed (the OS releases it if the process dies),
    writing this process's pid in it; else ``RunLocked`` with ``busy`` (its ``{holder}``: the holder's pid)."""
    fh = open(file, "a+", encoding="utf-8")  # noqa: SIM115 - held open for the lock's life
    try:
        try_lock(fh)
    except OSError:
        fh.seek(0)
        holder = fh.read().strip() or "unknown"
        fh.close()
        raise RunLocked(busy.replace("{holder}", holder), holder=holder) from None  # a path may hold braces
    with contextlib.suppress(OSError):  # a full disk: the lock is held all the same; the pid is a courtesy
        fh.truncate(0)
        fh.write(f"{os.getpid()}\n")
        fh.flush()
    return fh


def try_lock(fh: IO[str]) -> None:
    """Lock ``fh`` exclusively without waiting (``OSError`` if another file holds it)."""
    if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
        import msvcrt

        msvcrt.locking(fh.fileno(), msvcrt.LK_NBLCK, 1)
    else:
        import fcntl

        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)

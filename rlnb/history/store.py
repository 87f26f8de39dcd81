"""The run folder on disk: ``config.json``, ``ops.jsonl``, ``metrics.jsonl``, ``completions.jsonl`` (RL runs)
and the lock that makes one session at a time its writer (``rlnb._files``).

Writing never stops a run. When a line cannot be written (a full disk, a folder that went away), the
store warns once (``RunStoreWarning``), stops writing and the session carries on: its History keeps
every record in memory, results still return and ``close()`` succeeds.

A closed store still writes what is recorded later (a figure logged after the session ended): each write
takes the run's lock for itself, and one that another session holds stops the store with the same warning.

Where the folder is (the runs folder, the run id) is ``rlnb.history.paths``; reading it back is
``rlnb.history.reading``.
"""

from __future__ import annotations

import contextlib
import os
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from rlnb._files import appending, fsync, hold_lock, release, write_new
from rlnb.errors import RunLocked
from rlnb.history.jsontext import config_text, line, row_line
from rlnb.history.record import COLUMNS, ROW_FIELDS

OPS_FILE, METRICS_FILE, CONFIG_FILE, LOCK_FILE = "ops.jsonl", "metrics.jsonl", "config.json", "run.lock"
COMPLETIONS_FILE = "completions.jsonl"
CONFIG_TMP = CONFIG_FILE + ".tmp"
WRITTEN = (OPS_FILE, METRICS_FILE, COMPLETIONS_FILE, CONFIG_TMP, LOCK_FILE)
"""The files a session writes into: none may be a symbolic link, whose target would be written. ``config.json`` is
not one: it is replaced by a rename of ``CONFIG_TMP``, never written through."""
RUN_FILES = (*WRITTEN, CONFIG_FILE)
"""Every file rlnb writes in a run folder, the one list of them: ``save`` refuses a folder holding one, an export
(``to_csv``) a file of their names beside one, the demo replaces a ``run/`` that holds nothing else."""


def holds_run(folder: Path, unreadable: bool) -> bool:
    """Whether ``folder`` is a run folder (it has an ``ops.jsonl``). ``unreadable`` answers for one that cannot be
    looked into (another user's, mode 700), as each caller decides: ``runs`` lists it, ``save`` does not count it."""
    try:
        return (folder / OPS_FILE).exists()
    except OSError:
        return unreadable


class RunStoreWarning(RuntimeWarning):
    """The run folder could not be written; the run goes on in memory (``session.history``)."""


def lock_run(path: Path) -> IO[str]:
    """Hold ``run.lock`` exclusively until the returned file is closed (the OS releases it if the process
    dies), or raise ``RunLocked`` naming the holder."""
    busy = f"run folder {path} is being written by another session (pid {{holder}}): close that session, or pick "
    return hold_lock(path / LOCK_FILE, busy + "another run_id")


class RunStore:
    """An append-only run folder, written by one session at a time (``run.lock``; a second writer gets
    ``RunLocked``). Every line goes to the OS at once (one unbuffered write), so a ``kill -9`` loses nothing that
    was recorded."""

    def __init__(self, path: str | Path):
        self.path = Path(path).absolute()  # a relative one would follow os.chdir (``%cd`` in a notebook)
        self.failed: str | None = None
        """Why the store stopped writing (None while it writes)."""
        self._lock = threading.Lock()
        # Unbuffered binary files: each line is one write(2) straight to the OS, so it survives the process
        # as a flushed text file's would, without the text and buffer layers' cost on every operation.
        self._ops: IO[bytes] | None = None
        self._metrics: IO[bytes] | None = None
        self._completions: IO[bytes] | None = None  # opened by the first completions written
        self._held: IO[str] | None = None
        self.closed = False
        """Whether ``close()`` was called: each later write takes the lock for itself."""
        self._ends: tuple[int, ...] = ()
        """How long its files were when it last wrote, once closed: ``reopen`` sees whether another session wrote."""
        self._files = {name: self.path / name for name in (OPS_FILE, METRICS_FILE, COMPLETIONS_FILE, LOCK_FILE)}
        """Each file's path, joined once: a join is 7 Python calls, and every line written checks two files."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            self._held = lock_run(self.path)
            self._ops = _append_to(self.path / OPS_FILE)
            self._metrics = _append_to(self.path / METRICS_FILE)
        except OSError as exc:
            self._fail(exc)

    def write_config(self, config: dict[str, Any]) -> None:
        """Replace ``config.json`` whole (written and synced, renamed, the folder synced: a crash or a power loss
        leaves the old or the new one, never an empty file)."""
        with self._lock:
            if self.failed:
                return
            try:
                with self._held_again():
                    if not self.closed:  # a closed store's lock is taken afresh for this write
                        _lock_still_there(self._held, self._files[LOCK_FILE])
                    tmp = self.path / CONFIG_TMP
                    write_new(tmp, config_text(config).encode("utf-8"), sync=True)  # standard JSON: NaN as "NaN"
                    tmp.replace(self.path / CONFIG_FILE)
                    fsync(self.path)
            except (OSError, RunLocked) as exc:
                self._fail(exc)

    def write_op(self, row: dict[str, Any]) -> None:
        """Append an operation's current state (at submission and at the end), flushed at once. Every line is
        standard JSON (``jsontext.line``: NaN as ``"NaN"``)."""
        self._append("_ops", OPS_FILE, line(row))

    def write_record(self, rec: Any) -> None:
        """``write_op(as_row(rec))``, the record's row made here and its line by ``jsontext.row_line``: a record is
        written twice, and ``as_row`` and ``line`` would be 8 Python calls a step. The same bytes."""
        self._append("_ops", OPS_FILE, row_line(dict(zip(COLUMNS, ROW_FIELDS(rec), strict=True))))

    def write_metrics(self, row: dict[str, Any]) -> None:
        self._append("_metrics", METRICS_FILE, line(row))

    def write_completions(self, rows: list[dict[str, Any]]) -> None:
        """Append one line per completion, flushed once; the file is created by the first rows written."""
        self._append("_completions", COMPLETIONS_FILE, "".join(map(line, rows)))

    def _append(self, which: str, name: str, text: str) -> None:
        """Append ``text`` to the file ``name``, held open as attribute ``which`` while the store is open. After
        ``close()`` (a figure logged once the session ended, a closed history given to a new session) the lock
        is taken again for this one write; if another session holds it, the store warns and stops."""
        data = text.encode("utf-8")
        with self._lock:
            if self.failed:
                return
            try:
                if self.closed:
                    with self._held_again():
                        with _appending(self._files[name]) as fh:
                            _write_all(fh, data)
                        self._ends = self._sizes()
                    return
                fh = getattr(self, which)
                if fh is None:  # completions.jsonl: made by the first rows written
                    fh = _append_to(self._files[name])
                    setattr(self, which, fh)
                # Its folder removed, or its lock deleted as stale; then its own file deleted or replaced. Checked
                # here, inline (an fstat each, then a call only where one has no link): a call per check and per
                # write cost a step 12 Python calls (4 lines a step).
                held = self._held
                if (
                    held is not None
                    and not os.fstat(held.fileno()).st_nlink
                    and not _still_there(held, self._files[LOCK_FILE])
                ):
                    raise _lock_gone(self._files[LOCK_FILE])
                if not os.fstat(fh.fileno()).st_nlink and not _still_there(fh, self._files[name]):
                    raise OSError(f"{self._files[name]} was deleted or replaced while the run was recorded (by hand, "
                                  "a sync tool, git): the lines written since would reach no file")  # fmt: skip
                written = fh.write(data)
                if written != len(data):  # a raw write may take only part of it
                    _write_all(fh, data[written or 0 :])
            except (OSError, RunLocked) as exc:
                self._fail(exc)

    @contextlib.contextmanager
    def _held_again(self) -> Iterator[None]:
        """The run's lock, taken for one write of a closed store (``RunLocked`` if another session holds it)."""
        if not self.closed:
            yield
            return
        held = lock_run(self.path)
        try:
            yield
        finally:
            release(held)

    def _fail(self, exc: OSError | RunLocked) -> None:
        """Stop writing, warn once; the History goes on in memory."""
        if self.failed:
            return
        self.failed = f"{type(exc).__name__}: {exc}"
        for fh in (self._ops, self._metrics, self._completions):
            _close_quietly(fh)
        warnings.warn(
            f"rlnb cannot write the run folder {self.path} ({self.failed}); the run goes on in memory: session.history "
            "keeps every record (save it elsewhere with history.save(folder), which History.load reads back)",
            RunStoreWarning,
            stacklevel=2,
        )

    def reopen(self) -> None:
        """Hold the run's lock again for a new session that continues this closed store's run (``history=``), until
        it closes: ``RunLocked`` if another session writes the run now, a ``ValueError`` if one wrote it since (this
        history lacks its records: its numbers would be taken twice). A store that failed stays in memory."""
        with self._lock:
            if self.failed or not self.closed:
                return
            try:
                held = lock_run(self.path)
            except OSError as exc:
                self._fail(exc)
                return
            if self._sizes() != self._ends:
                release(held)
                raise ValueError(
                    f"run folder {self.path} was written by another session since this history's session closed, and "
                    f"this history lacks what it wrote: continue the run with runs_dir={str(self.path.parent)!r}, "
                    f"run_id={self.path.name!r} instead of history= (that reads it all)"
                )
            self._held, self.closed, self._completions = held, False, None
            try:
                self._ops = _append_to(self._files[OPS_FILE])
                self._metrics = _append_to(self._files[METRICS_FILE])
            except OSError as exc:
                self._fail(exc)

    def _sizes(self) -> tuple[int, ...]:
        """The length of each file lines are appended to (0 for one not there)."""
        sizes = []
        for name in (OPS_FILE, METRICS_FILE, COMPLETIONS_FILE):
            try:
                sizes.append(os.stat(self._files[name]).st_size)
            except OSError:
                sizes.append(0)
        return tuple(sizes)

    def close(self) -> None:
        """Close the files and release the lock; what is written later takes the lock for its write alone."""
        with self._lock:
            if not self.closed:  # before the lock is let go: nobody else wrote yet (its lines are unbuffered)
                self._ends = self._sizes()
            self.closed = True
            for fh in (self._ops, self._metrics, self._completions):
                _close_quietly(fh)
            release(self._held)  # run.lock: unlocked, then closed


def _append_to(path: Path) -> IO[bytes]:
    """``path`` opened to append unbuffered lines (see ``RunStore``). A run continued after a crash may end in a
    half-written line: it is ended first, so that the first new line is not glued to it and lost with it."""
    fh = appending(path, binary=True)  # never through a link, nor a named pipe
    try:
        if fh.tell():
            with open(path, "rb") as tail:
                tail.seek(-1, os.SEEK_END)
                if tail.read(1) != b"\n":
                    _write_all(fh, b"\n")
    except OSError:
        fh.close()
        raise
    return fh


@contextlib.contextmanager
def _appending(path: Path) -> Iterator[IO[bytes]]:
    fh = _append_to(path)
    try:
        yield fh
    finally:
        fh.close()


def _write_all(fh: IO[bytes], data: bytes) -> None:
    """Write all of ``data`` to an unbuffered file (a raw write may take only part of it)."""
    view = memoryview(data)
    while view:
        written = fh.write(view)
        if not written:  # a regular file takes something or raises (ENOSPC): never spin here
            raise OSError(f"could not write to {getattr(fh, 'name', 'the run folder')}")
        view = view[written:]


def _lock_still_there(held: IO[str] | None, lock: Path) -> None:
    """``OSError`` if the held ``run.lock`` at ``lock`` was deleted: the run folder removed (its lines went into
    deleted files without a word), or the lock deleted as a stale one (a second session started on the run as if none
    wrote it, and both appended)."""
    if held is not None and not os.fstat(held.fileno()).st_nlink and not _still_there(held, lock):
        raise _lock_gone(lock)


def _lock_gone(lock: Path) -> OSError:
    """The error of a deleted ``run.lock`` (``_lock_still_there``; ``RunStore._append`` checks inline)."""
    return OSError(f"{lock} was deleted while the run was recorded (its run folder removed, or the lock deleted as a "
                   "stale one): another session may be writing the run now")  # fmt: skip


def _still_there(fh: IO[Any], path: Path) -> bool:
    """Whether the open file ``fh``, that its file system says has no link (the callers' one ``fstat`` per line
    written, inline), is still the file at ``path`` (``_append``: a file deleted, or replaced by ``rm``, a sync tool's
    or ``git stash``'s copy, would take the lines into a file no folder holds, without a word): a
    file system that says so of a file still there (a FUSE one may) is taken at its path."""
    try:
        return os.path.samestat(os.fstat(fh.fileno()), os.stat(path))
    except OSError:
        return False


def _close_quietly(fh: IO[Any] | None) -> None:
    """Close a file; a flush that fails on a full disk has already been warned about (or will not matter)."""
    if fh is not None:
        with contextlib.suppress(OSError):
            fh.close()

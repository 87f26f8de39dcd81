"""How far each sink has written a run, kept in the run folder: a later session continuing a run whose process was
killed (``kill -9``, an OOM-killed kernel) with points still queued for a sink sends that sink what it had not written,
and nothing twice.

A ``Mark`` says which operations' points and failures a sink holds (or was never to be sent: those before it was
attached) and how many ``history.log`` rows. Its sink's thread writes it beside ``ops.jsonl`` after each batch the
library took (one small file per sink place), and the session writes it when the sink is attached, so that a process
killed before the first batch leaves one too.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

from rlnb._files import no_follow, refuse_link
from rlnb.history import Record
from rlnb.sinks.base import Sink
from rlnb.sinks.process import place

MARK_FILE = "sink-{name}-{digest}.json"
"""One file per sink place in the run folder: the place's hash, never the place itself (an MLflow URI's password)."""
MAX_BEYOND = 256
"""Operations past the last unbroken one a mark lists before it gives up on the one holding them back (an operation
whose end is never heard would make every mark longer)."""


@dataclass(frozen=True, slots=True)
class Mark:
    """What a sink holds of a run: every operation up to ``seq`` and those in ``beyond`` (a failure said when it
    ended, while an earlier operation still ran), and the first ``logged`` rows of ``history.log``."""

    seq: int
    beyond: frozenset[int]
    logged: int

    def holds(self, seq: int) -> bool:
        return seq <= self.seq or seq in self.beyond


def path(folder: Path, sink: Sink) -> Path | None:
    """The file of ``sink``'s mark in the run folder ``folder``, or None for a sink that cannot say where it writes."""
    where = place(sink)
    if where is None:
        return None
    digest = hashlib.sha256(where.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return folder / MARK_FILE.format(name=type(sink).__name__, digest=digest)


def read(file: Path) -> Mark | None:
    """The mark in ``file``; None if there is none (the sink never streamed this run); ``ValueError`` naming the file
    if it cannot be read as one: a symbolic link or a named pipe there too, never opened through (a pipe waited for
    ever), as no run file is."""
    try:
        refuse_link(file)
        with open(file, encoding="utf-8", opener=no_follow) as fh:
            data = json.loads(fh.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        said = str(exc) if str(file) in str(exc) else f"{file} cannot be read ({exc})"
        raise ValueError(said) from None
    fields = data if isinstance(data, dict) else {}
    seq, beyond, logged = fields.get("seq"), fields.get("beyond"), fields.get("logged")
    if not (_count(seq) and _count(logged) and isinstance(beyond, list) and all(_count(n) for n in beyond)):
        raise ValueError(f"{file} is not a sink's mark (seq, beyond, logged: integers >= -1): {str(data)[:200]}")
    return Mark(seq, frozenset(beyond), logged)


def _count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= -1


class MarkFile:
    """A sink's mark file, kept open by its run's thread: each mark is one ``pwrite`` over the last (~15 µs; opening
    and renaming a file cost milliseconds a batch), padded with spaces to the longest written, so that a shorter one
    leaves no tail of the last. A run folder that cannot be written (deleted, a full disk) keeps the older mark: the
    run's store says so itself, and the sink goes on; so does a link or a pipe there, never written through (the
    mark's read named it)."""

    def __init__(self, file: Path) -> None:
        self.file = file
        self._fd: int | None = None
        self._width = 0
        self._lock = threading.Lock()

    def read(self) -> Mark | None:
        return read(self.file)

    def write(self, mark: Mark) -> None:
        text = json.dumps({"seq": mark.seq, "beyond": sorted(mark.beyond), "logged": mark.logged})
        with self._lock:
            try:
                if self._fd is None:
                    self._fd = no_follow(str(self.file), os.O_WRONLY | os.O_CREAT)
                    self._width = os.fstat(self._fd).st_size
                data = text.ljust(self._width).encode()
                os.pwrite(self._fd, data, 0)
                self._width = len(data)
            except OSError:
                self._close()

    def close(self) -> None:
        with self._lock:
            self._close()

    def remove(self) -> None:
        """No mark: the sink left this run out (it holds another of that name), so nothing of it is sent there later."""
        with self._lock:
            self._close()
            with contextlib.suppress(OSError):
                self.file.unlink(missing_ok=True)

    def _close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


def whole(folder: Path | None, sink: Sink, records: list[Record], logged: int) -> None:
    """Mark the run in ``folder`` as written whole to ``sink`` (``rlnb.export``): a later session continuing it sends
    that sink nothing of it again."""
    file = path(folder, sink) if folder is not None else None
    if file is not None:
        write_once(file, Mark(max((r.seq for r in records), default=-1), frozenset(), logged))


def write_once(file: Path, mark: Mark) -> None:
    """``mark`` written to ``file`` by a ``MarkFile`` of its own, closed at once (off a run's thread)."""
    marked = MarkFile(file)
    marked.write(mark)
    marked.close()

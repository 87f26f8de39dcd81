"""W&B's ``.wandb`` file, read without W&B's server: the run's project and name (``WandB.holds``), how many of its
rows are on disk yet (``rows``), and whether the run's end is (``wait_ended``).

The file is a LevelDB-style log: a 7-byte header (``:W&B``, 0xBEE1, 0), then 32 KiB blocks of chunks, each with a
``<crc32, length, type>`` header (type 1 a whole record; 2, 3, 4 its first, middle and last parts); a block's tail too
short for a header is padding. Each record is W&B's protobuf ``Record``.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

BLOCK = 32768
"""The block size of a ``.wandb`` file."""
HEADER = 7
"""The size of the file's header, and of each chunk's."""
POLL = 0.02
"""Seconds between two looks at a ``.wandb`` file whose end is not on disk yet."""


def records(file: Path) -> Iterator[bytes]:
    """The records of a ``.wandb`` file, from its start; nothing for another program's file."""
    return Reader(file).new()


def project_and_name(file: Path) -> tuple[str, str] | None:
    """The project and display name in a ``.wandb`` file's run record, among its first records; None for a file that
    holds none, or none it can read (a run cut short, another program's file): it must not stop the run or export."""
    from google.protobuf.message import DecodeError  # type: ignore[import-untyped]

    try:
        for i, raw in enumerate(records(file)):
            record = _record(raw)
            if record.WhichOneof("record_type") == "run":
                return record.run.project, record.run.display_name
            if i > 100:
                break
    except (OSError, struct.error, DecodeError):
        return None
    return None


class Index:
    """The project and name of each offline run under a W&B folder (``WandB.holds``), each file read once: a sweep's
    every trial looked in every other's file (a sweep of N trials read N² files). A file is read again only when it
    is another file (deleted and made again) or, while it held no run record yet, when it has grown since."""

    def __init__(self) -> None:
        self._known: dict[Path, tuple[int, int, tuple[str, str] | None]] = {}  # inode, size, what it held

    def look(self, root: Path) -> list[tuple[Path, tuple[str, str] | None]]:
        """Each ``offline-run-*/run-*.wandb`` file under ``root`` (sorted) and its project and name, or None."""
        known, self._known = self._known, {}
        found = []
        for file in sorted(root.glob("offline-run-*/run-*.wandb")):
            try:
                stat = file.stat()
            except OSError:  # deleted since the glob
                continue
            seen = known.get(file)
            fresh = seen is not None and seen[0] == stat.st_ino and (seen[2] is not None or seen[1] == stat.st_size)
            held = seen[2] if fresh and seen is not None else project_and_name(file)
            self._known[file] = (stat.st_ino, stat.st_size, held)
            found.append((file, held))
        return found


def ended(file: Path, start: int = 0) -> bool:
    """Whether the run's exit record is in the file, among the records from the block that holds offset ``start`` on
    (the file's size before the run's ``finish()``: W&B writes its exit record after that call)."""
    return _holds_exit(Reader(file, start))


def wait_ended(file: Path, timeout: float, start: int = 0) -> None:
    """Return once the run's end is in ``file``. W&B's ``run.finish()`` returns once wandb-core has the run's last
    records, but wandb-core writes them to the file only when it closes the run's stream, later (``inform_finish``
    is sent without waiting for an answer): a reader right after ``finish`` (``wandb sync``, an export's look for
    the run) missed the last points, or the whole run. Each look reads only what was added since the last one, from
    ``start`` on (``ended``), so a run's end is found wherever it lies and whatever W&B writes after it.
    ``TimeoutError`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    reader = Reader(file, start)
    while not _holds_exit(reader):
        if not file.exists():  # made when the run started: deleted since (``rm -rf wandb``), it never ends
            raise FileNotFoundError(f"{file} was deleted before W&B wrote the end of the run there")
        if time.monotonic() > deadline:
            raise TimeoutError(f"W&B had not written the end of the run to {file} {timeout:g} s after its finish(): "
                               "its last points may be missing there")  # fmt: skip
        time.sleep(POLL)


class Reader:
    """The records of a ``.wandb`` file from the block holding offset ``start`` on, read as W&B appends them: each
    ``new()`` goes on from the chunk the last one stopped before (a record written in part so far is read again then,
    whole). A record begun before that block is skipped: each block starts with a chunk's header, so the records are
    found from any block's start."""

    def __init__(self, file: Path, start: int = 0):
        self.file = file
        self._block = max(0, start) // BLOCK
        self._at = HEADER if self._block == 0 else 0  # the next chunk's offset in the block
        self._parts: bytes | None = b"" if self._block == 0 else None  # None: in a record begun before ``start``
        self._foreign = False  # another program's file: nothing to read

    def new(self) -> Iterator[bytes]:
        """The records written whole since the last call (the file's first, at the first)."""
        if self._foreign:
            return
        with self.file.open("rb") as f:
            f.seek(self._block * BLOCK)
            data = f.read(BLOCK)
            if self._block == 0 and data[:4] != b":W&B"[: len(data)]:
                self._foreign = True
                return
            while True:
                if len(data) == BLOCK and self._at + HEADER > BLOCK:  # the block's tail: padding
                    self._block, self._at, data = self._block + 1, 0, f.read(BLOCK)
                if len(data) < self._at + HEADER:  # what follows is not written yet
                    return
                _, length, kind = struct.unpack("<IHB", data[self._at : self._at + HEADER])
                end = self._at + HEADER + length
                if end > len(data) or kind not in (1, 2, 3, 4):  # written in part so far; or nothing W&B writes
                    return
                chunk, self._at = data[self._at + HEADER : end], end
                if kind in (1, 2):
                    self._parts = chunk if kind == 2 else b""
                    if kind == 1:
                        yield chunk
                elif self._parts is not None:
                    self._parts += chunk
                    if kind == 4:
                        yield self._parts
                        self._parts = b""


MAX_EXIT = 4096
"""Bytes an exit record never reaches (its exit code, runtime and ids: a few dozen): a longer record is not parsed."""


def rows(reader: Reader) -> int:
    """How many history rows (one each ``run.log``) the reader's new records hold; those read until a record it cannot
    read (the file deleted: the sink's ``Watched`` says so) count."""
    from google.protobuf.message import DecodeError

    found = 0
    try:
        for raw in reader.new():
            found += _record(raw).WhichOneof("record_type") == "history"
    except (OSError, struct.error, DecodeError):
        return found
    return found


def _holds_exit(reader: Reader) -> bool:
    """Whether the reader's new records hold the run's exit record; False for a file it cannot read (deleted, cut short
    in the middle of a record, another program's)."""
    from google.protobuf.message import DecodeError

    try:
        return any(len(raw) < MAX_EXIT and _record(raw).WhichOneof("record_type") == "exit" for raw in reader.new())
    except (OSError, struct.error, DecodeError):
        return False


def _record(raw: bytes) -> Any:
    from wandb.proto import wandb_internal_pb2

    record = wandb_internal_pb2.Record()  # type: ignore[attr-defined]
    record.ParseFromString(raw)
    return record

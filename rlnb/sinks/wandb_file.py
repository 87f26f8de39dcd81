"""W&B's ``.wandb`` file, read without W&B's server: the run's project and name (``WandB.holds``), and whether the
run's end is on disk yet (``wait_ended``).

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
    with file.open("rb") as f:
        data = f.read(BLOCK)
        if data[:4] != b":W&B":
            return
        yield from _chunks(data, HEADER, f)


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


def ended(file: Path) -> bool:
    """Whether the run's exit record, the last one W&B writes, is in the file: read from the start of the block
    before the last, as the record is small (a few bytes past one block's end at most)."""
    from google.protobuf.message import DecodeError

    try:
        with file.open("rb") as f:
            size = f.seek(0, 2)
            start = max(0, (size - 1) // BLOCK - 1) * BLOCK
            f.seek(start)
            data = f.read(BLOCK)
            tail = list(_chunks(data, HEADER if start == 0 else 0, f, whole_only=start > 0))
        return any(_record(raw).WhichOneof("record_type") == "exit" for raw in tail)
    except (OSError, struct.error, DecodeError):
        return False


def wait_ended(file: Path, timeout: float) -> None:
    """Return once the run's end is in ``file``. W&B's ``run.finish()`` returns once wandb-core has the run's last
    records, but wandb-core writes them to the file only when it closes the run's stream, later (``inform_finish``
    is sent without waiting for an answer): a reader right after ``finish`` (``wandb sync``, an export's look for
    the run) missed the last points, or the whole run. ``TimeoutError`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not ended(file):
        if not file.exists():  # made when the run started: deleted since (``rm -rf wandb``), it never ends
            raise FileNotFoundError(f"{file} was deleted before W&B wrote the end of the run there")
        if time.monotonic() > deadline:
            raise TimeoutError(f"W&B had not written the end of the run to {file} {timeout:g} s after its finish(): "
                               "its last points may be missing there")  # fmt: skip
        time.sleep(POLL)


def _chunks(data: bytes, at: int, rest: Any, whole_only: bool = False) -> Iterator[bytes]:
    """The records from offset ``at`` of the block ``data`` on, reading further blocks from ``rest``. ``whole_only``:
    ``data`` is a block in the middle of the file, whose first chunks may end a record begun before it (skipped)."""
    parts: bytes | None = None if whole_only else b""
    while data:
        while at + HEADER <= len(data):
            _, length, kind = struct.unpack("<IHB", data[at : at + HEADER])
            chunk, at = data[at + HEADER : at + HEADER + length], at + HEADER + length
            if at > len(data):  # written in part so far
                return
            if kind == 1:
                yield chunk
                parts = b""
            elif kind == 2:
                parts = chunk
            elif kind in (3, 4) and parts is not None:
                parts += chunk
                if kind == 4:
                    yield parts
                    parts = b""
            elif kind not in (3, 4):
                return
        data, at = rest.read(BLOCK), 0


def _record(raw: bytes) -> Any:
    from wandb.proto import wandb_internal_pb2

    record = wandb_internal_pb2.Record()  # type: ignore[attr-defined]
    record.ParseFromString(raw)
    return record

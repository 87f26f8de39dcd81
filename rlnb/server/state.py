"""The registry on disk (``rlnb serve --state-dir DIR``), so that a restarted server knows what it served.

``DIR/registry.jsonl`` is an append-only journal, one JSON object per line, the last line of an object
winning: ``{"resource": ModelResources}``, ``{"session": Session}`` (its view), ``{"op": {"session",
"kind", "key", "fingerprint", "env"}}`` (at submission and at its end), ``{"checkpoint": {"info",
"path"}}`` and ``{"dropped": {"session", "id", "kind", "key"}}`` (an operation past ``max_kept_operations``:
its tombstone). At start it is read back, keeping only each session's newest ``max_kept_operations`` finished
operations in memory as it reads (``restore`` makes the registry's tables of it), and rewritten compactly;
``DIR/signing.key`` keeps presigned URLs valid across restarts and ``DIR/state.lock`` makes one server at a time its
owner. A running server rewrites the journal the same way once it has grown past twice its compact size
(``COMPACT_AFTER`` lines at least): else every operation's two lines would make it grow without bound, and a restart
would read every line ever written. Checkpoint files go to ``DIR/checkpoints`` unless ``checkpoint_dir`` says otherwise.

Every line is standard JSON (``history.jsontext``: an optim-step's infinite gradient norm is ``"Infinity"``, read back
as the float by the wire's models; an older rlnb's bare ``Infinity`` still reads), and the journal is written as a run
folder's files are: never through a link (``_files.write_new``, ``_files.appending``); a journal that is a symbolic link
stops the start, naming it.

A journal that cannot be written (a full disk) is logged once; the server goes on in memory and tries now and then
to write it again, whole (``Registry.mend_journal``): a server that stopped writing for good would lose every change
after the failure at its restart, and remove the checkpoints saved since as never journaled.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import threading
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import IO, Any

from rlnb import wire
from rlnb._files import (
    appending,
    fsync,
    hold_lock,
    no_follow,
    refuse_link,
    refuse_pipe,
    regular,
    release,
    write_new,
)
from rlnb._input.checks import refuse_not_folder
from rlnb.errors import RunLocked
from rlnb.history.jsontext import LINE, line, writable

log = logging.getLogger("rlnb")

JOURNAL, KEY_FILE, LOCK_FILE, CHECKPOINTS = "registry.jsonl", "signing.key", "state.lock", "checkpoints"
KINDS = ("resource", "session", "op", "checkpoint", "dropped")


COMPACT_AFTER = 100_000
"""Lines appended since the last rewrite past which a journal twice its compact size is rewritten while serving."""

MIN_KEY_BYTES = 32
"""A signing key shorter than this is refused: an empty one would let anyone sign a download URL."""


@dataclass(frozen=True)
class Raw:
    """A member's value as JSON text made elsewhere (a finished operation's answer, UTF-8): ``journal_line`` embeds
    it, never encoding it again."""

    json: bytes


def journal_line(kind: str, data: Any) -> str:
    """``{kind: data}`` as the journal's line: ``history.jsontext.line``'s, byte for byte, where ``data`` holds a
    ``Raw`` member too, written from its parts: the raw text as it is where ASCII, else its value escaped as ``line``
    writes it (the journal's lines are ASCII)."""
    if not (isinstance(data, dict) and Raw in map(type, data.values())):  # C passes: no Python call a line
        return line({kind: data})
    members = ",".join(f"{encode_basestring_ascii(k)}:{_member(v)}" for k, v in data.items())
    return f"{{{encode_basestring_ascii(kind)}:{{{members}}}}}\n"


def _member(value: Any) -> str:
    if not isinstance(value, Raw):
        return LINE.encode(writable(value))
    return value.json.decode("ascii") if value.json.isascii() else LINE.encode(writable(json.loads(value.json)))


class StateDirError(RuntimeError):
    """The state directory cannot be used; the message says why and what to do."""


class StateDirLocked(StateDirError):
    """Another ``rlnb serve`` owns the state directory."""


class Journal:
    def __init__(self, directory: Path):
        self.dir = directory
        try:  # a file or a named pipe there: mkdir would say "[Errno 17] File exists"
            refuse_not_folder("state_dir", directory, "the server's state goes")
        except ValueError as exc:
            raise StateDirError(str(exc)) from None
        try:  # held for the server's life; unlocked, said, on a file system that cannot lock (the server starts)
            directory.mkdir(parents=True, exist_ok=True)
            self._lock_file = hold_lock(directory / LOCK_FILE, f"{directory} is in use by another rlnb serve (pid "
                                                               "{holder})")  # fmt: skip
        except RunLocked as exc:
            raise StateDirLocked(str(exc)) from None
        except OSError as exc:  # a file of that name, a folder without write access
            raise StateDirError(f"cannot keep the server's state in {directory}: {exc}") from None
        self._lock = threading.Lock()
        self._fh: IO[str] | None = None
        self.failed = self.closed = False
        self.compact_lines = self.appended = 0  # the journal's lines at its last rewrite, and since

    def signing_key(self) -> bytes:
        """The key presigned URLs are signed with, made once and kept. It is written whole or not at all
        (a temporary file, fsynced, then renamed), and a short or damaged one stops the start."""
        path = self.dir / KEY_FILE
        if path.exists():
            try:
                refuse_pipe(path)  # reading one waited for ever: the server never listened
                return _read_key(path)
            except OSError as exc:
                raise StateDirError(f"rlnb serve cannot read its signing key: {exc}") from None
        key = secrets.token_bytes(MIN_KEY_BYTES)
        tmp = path.with_name(KEY_FILE + ".tmp")
        try:  # never through a link planted at the temporary name: the key would go into its target, readable by others
            write_new(tmp, key.hex().encode("ascii"), sync=True, mode=0o600)
            os.replace(tmp, path)
            fsync(self.dir)  # the rename itself survives a crash
        except OSError as exc:
            if not tmp.is_symlink():  # a link planted there is not ours to remove: it is named in the error
                tmp.unlink(missing_ok=True)
            raise StateDirError(f"rlnb serve cannot write its signing key {path}: {exc}") from None
        return key

    def load(self, keep_ops: int) -> dict[str, list[dict[str, Any]]]:
        """The latest line of each object, by kind, in first-written order. Unreadable lines are skipped. Past a
        session's ``keep_ops`` newest finished operations, the older ones become tombstones as they are read."""
        latest: dict[str, dict[str, dict[str, Any]]] = {kind: {} for kind in KINDS}
        ops = _OpLines(keep_ops, latest["dropped"])
        path = self.dir / JOURNAL
        try:  # a link would be read through (another file's state taken as this server's), then replaced by the rewrite
            refuse_link(path)
            refuse_pipe(path)  # reading one waited for ever: the server never listened
            # one put there after the checks is refused as it is opened (``no_follow``), not waited on
            journal = open(path, encoding="utf-8", errors="replace", opener=no_follow) if path.exists() else None  # noqa: SIM115
        except OSError as exc:
            raise StateDirError(f"cannot keep the server's state in {self.dir}: {exc}") from None
        if journal is not None:
            with journal as fh:
                for n, line in enumerate(fh, 1):
                    try:
                        entry = json.loads(line)
                        (kind, data), *_ = entry.items()
                        key = _ident(kind, data)
                        if kind == "op":
                            ops.add(key, data)
                        else:
                            latest[kind][key] = data
                    except (ValueError, AttributeError, KeyError, TypeError, RecursionError) as exc:
                        log.warning("%s:%d: skipped an unreadable line (%s)", path, n, type(exc).__name__)
        latest["op"] = {key: data for lines in ops.kept.values() for key, data in lines.items()}
        return {kind: list(objs.values()) for kind, objs in latest.items()}

    def rewrite(self, entries: list[tuple[str, Any]]) -> None:
        """Replace the journal by these entries (written then renamed), and append after them from now on. After a
        failure (``failed``) this is what writes the journal again, whole: the registry calls it now and then."""
        path, tmp = self.dir / JOURNAL, self.dir / (JOURNAL + ".tmp")
        with self._lock:
            if self.closed:
                return
            try:
                text = "".join(journal_line(kind, data) for kind, data in entries)
                write_new(tmp, text.encode("utf-8"), sync=True)  # whole before it replaces the journal: a crash keeps
                if self._fh is not None:  # one or the other; never through a link planted at the temporary name
                    self._fh.close()
                tmp.replace(path)
                self._fh = appending(path)
                self.compact_lines, self.appended = len(entries), 0
            except OSError as exc:
                self._fail(exc)
                return
            if self.failed:
                self.failed = False
                log.warning("rlnb serve writes its state to %s again (every change since it failed included)", self.dir)

    def too_long(self) -> bool:
        """Whether the lines appended since the last rewrite call for another (``COMPACT_AFTER``)."""
        return self.appended > max(COMPACT_AFTER, self.compact_lines) and not self.failed

    def append(self, kind: str, data: Any, text: str | None = None) -> None:
        """``{kind: data}`` as a line at the journal's end; ``text``: that line, made already (``journal_line``)."""
        text = journal_line(kind, data) if text is None else text  # a NaN as "NaN": the wire's models read it back
        with self._lock:
            if self._fh is None or self.failed:
                return
            try:
                self._fh.write(text)
                self._fh.flush()
                self.appended += 1
            except OSError as exc:
                self._fail(exc)

    def _fail(self, exc: OSError) -> None:
        """Stop appending (a line cut short may end the file) until a ``rewrite`` replaces the journal; said once."""
        if self._fh is not None:
            with contextlib.suppress(OSError):  # its unwritten lines are in memory: the rewrite writes them
                self._fh.close()
            self._fh = None
        if not self.failed:
            log.error("rlnb serve cannot write its state to %s (%s); it goes on in memory and writes it again, whole, "
                      "once it can", self.dir, exc)  # fmt: skip
        self.failed = True

    def close(self) -> None:
        with self._lock:
            if self._fh is not None:
                with contextlib.suppress(OSError):
                    self._fh.close()
            release(self._lock_file)  # unlocked first: a process forked by the server held it on after a close
            self._fh = None  # a line after the close (an abandoned operation's worker, at last) is not written
            self.closed = True  # nor a rewrite: the folder is another server's to own now


class _OpLines:
    """The op lines of a journal as it is read: per session, every unfinished operation and the newest ``keep``
    finished ones; an older one becomes a tombstone, with the progress a restored session's view needs."""

    def __init__(self, keep: int, dropped: dict[str, dict[str, Any]]):
        self.keep, self.dropped = keep, dropped
        self.kept: dict[str, dict[str, dict[str, Any]]] = {}
        self.finished: dict[str, dict[str, None]] = {}

    def add(self, op_id: str, data: dict[str, Any]) -> None:
        sid = str(data["session"])
        lines = self.kept.setdefault(sid, {})
        lines[op_id] = data
        self.dropped.pop(op_id, None)
        if data["env"]["status"] not in wire.TERMINAL_STATUSES:
            return
        done = self.finished.setdefault(sid, {})
        done[op_id] = None
        while len(done) > self.keep:
            old = next(iter(done))
            del done[old]
            gone = lines.pop(old)
            out = gone["env"].get("output") if gone["env"]["status"] == wire.OperationStatus.COMPLETED else None
            facts = {k: out[k] for k in ("step", "weights_version") if isinstance(out, dict) and k in out}
            self.dropped[old] = {"session": sid, "id": old, "kind": gone["kind"], "key": gone["key"], **facts}


def _read_key(path: Path) -> bytes:
    with open(path, encoding="ascii", errors="replace", opener=regular) as fh:  # a pipe put there: refused
        text = fh.read().strip()
    remedy = "delete it to make a new key (presigned URLs signed with the old one stop working)"
    try:
        key = bytes.fromhex(text)
    except ValueError:
        raise StateDirError(f"{path} is not a hex signing key: {remedy}") from None
    if len(key) < MIN_KEY_BYTES:
        raise StateDirError(
            f"{path} holds a {len(key)}-byte signing key (a failed write, e.g. on a full disk, leaves one empty); "
            f"a key needs {MIN_KEY_BYTES} bytes: {remedy}"
        )
    return key


def _ident(kind: str, data: dict[str, Any]) -> str:
    if kind == "op":
        return str(data["env"]["id"])
    if kind == "checkpoint":
        return str(data["info"]["id"])
    if kind == "dropped":
        return str(data["id"])
    if kind in KINDS:
        return str(data["id"])
    raise KeyError(kind)

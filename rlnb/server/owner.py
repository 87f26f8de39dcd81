"""Whose a checkpoint folder is: a folder another server's start would clear is refused, in either order.

A server with a state folder S and no ``checkpoint_dir`` clears ``S/checkpoints`` of every checkpoint its journal does
not list, at each start (``stopping.clear_leftovers``). So ``S/checkpoints`` given to another server as its
``checkpoint_dir`` is refused both ways round: at that server's start when S holds a journal or a lock
(``refuse_foreign_state_dir``) or the folder's mark says it is S's own; at S's start when the mark says another server
was given it. The mark, ``OWNER``, is written at every start that uses the folder: ``{"named": bool, "state_dir": str
| null}``, named by ``checkpoint_dir`` (by a server with that state folder, or none) or its state folder's own. It is
written whole (a temporary file, fsynced, renamed), never through a link; a mark that cannot be read is written again.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
from pathlib import Path
from typing import Any

from rlnb._files import fsync, no_follow, write_new
from rlnb.server.state import CHECKPOINTS, JOURNAL, LOCK_FILE, StateDirError

log = logging.getLogger("rlnb")

OWNER = ".rlnb-serve-owner.json"
"""The mark in a checkpoint folder saying whose it is."""


def refuse_foreign_state_dir(checkpoints: Path, own: Path | None) -> None:
    """A ``ValueError`` naming both if ``checkpoints`` is the ``checkpoints`` folder of a state folder other than
    ``own``, as its journal or lock says: that server's restart removes the checkpoints it never journaled from it, this
    server's with them. (The rest of a state folder, and folders below its ``checkpoints``, are never cleared: a
    checkpoint folder there is taken.)"""
    folder = checkpoints.resolve()
    state = folder.parent
    if folder.name != CHECKPOINTS or (own is not None and Path(own).resolve() == state):
        return
    if any(os.path.lexists(state / name) for name in (LOCK_FILE, JOURNAL)):
        raise ValueError(_foreign(folder, f"it holds {LOCK_FILE} or {JOURNAL}"))


def claim(folder: Path, state_dir: Path | None, *, named: bool) -> None:
    """Refuse ``folder`` if its mark says another server's start would clear it, else mark it as this server's:
    ``named`` by ``checkpoint_dir``, or ``state_dir``'s own. A ``StateDirError`` for a state folder whose checkpoints
    another server was given, a ``ValueError`` for a ``checkpoint_dir`` its mark gives to a state folder not ours."""
    folder = folder.resolve()
    own = str(Path(state_dir).resolve()) if state_dir is not None else None
    path = folder / OWNER
    mark = _read(path)
    if mark is not None and mark["named"] and not named and mark["state_dir"] != own:
        who = f"its state folder {mark['state_dir']}" if mark["state_dir"] else "without a state folder"
        raise StateDirError(
            f"{folder} is the checkpoint_dir of another rlnb serve ({who}), as {path} says: this server's start would "
            "remove that server's checkpoints there as never journaled; name another state_dir, or give this server a "
            f"checkpoint_dir elsewhere (or delete {OWNER} once that server's checkpoints there are not wanted)"
        )
    if mark is not None and not mark["named"] and named and own != str(folder.parent):
        raise ValueError(_foreign(folder, f"as {path} says"))
    wanted = {"named": named, "state_dir": own}
    if mark != wanted:
        _write(path, wanted)


def _foreign(folder: Path, how: str) -> str:
    return (
        f"checkpoint_dir {folder} is the checkpoint folder of {folder.parent}, the state folder of another rlnb serve "
        f"({how}): its restart would remove this server's checkpoints as never journaled; name a checkpoint folder "
        "outside it"
    )


def _read(path: Path) -> dict[str, Any] | None:
    """The mark at ``path``, or None: none there, or one that cannot be read (damaged, a link, a pipe)."""
    try:
        with open(path, "rb", opener=no_follow) as fh:
            mark = json.loads(fh.read(64 * 1024))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(mark, dict) or set(mark) != {"named", "state_dir"} or not isinstance(mark["named"], bool):
        return None
    return mark if isinstance(mark["state_dir"], str | None) else None


def _write(path: Path, mark: dict[str, Any]) -> None:
    tmp = path.with_name(f"{OWNER}.{secrets.token_hex(4)}.tmp")  # two servers given one folder never share it
    try:
        path.parent.mkdir(parents=True, exist_ok=True)  # a state folder's, made by its first save otherwise
        write_new(tmp, json.dumps(mark).encode("utf-8") + b"\n", sync=True)
        os.replace(tmp, path)  # a link there is replaced, never written through
        fsync(path.parent)
    except OSError as exc:  # the folder was checked writable: a full disk. The next start writes it
        tmp.unlink(missing_ok=True)
        log.warning("rlnb serve: could not mark %s as this server's checkpoint folder (%s)", path.parent, exc)

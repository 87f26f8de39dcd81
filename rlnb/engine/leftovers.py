"""What a killed process leaves in a checkpoint folder: hidden partials of saves cut short (removed once their writer
is dead) and, for ``rlnb serve``, checkpoints saved whole but never journaled (``unknown_checkpoints``)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import stat
import warnings
from collections.abc import Iterable
from pathlib import Path

from rlnb.engine import held

_HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
"""Which machine wrote a partial: a process id says whether its writer is alive only on the machine it ran on."""
SAVED = re.compile(r"ckpt-(?:train-[0-9a-f]{12}\.pt|infer-[0-9a-f]{12})")
"""The name a checkpoint's file (training) or folder (inference) takes once saved whole."""
_PARTIAL = re.compile(rf"\.({SAVED.pattern})(?:\.(?P<host>[0-9a-f]{{8}})-(?P<pid>\d+)-[0-9a-f]{{8}})?\.partial")
"""The partials of the checkpoints a session names (``.<id>.pt.<host>-<pid>-<nonce>.partial``, or a folder; rlnb
before the writer's host and pid were in the name wrote ``.<id>.pt.partial``). No other file is ever removed."""


def remove_leftovers(folder: Path) -> None:
    """Remove the partials in ``folder`` that a process of this machine, now dead, left mid-save (and those of rlnb
    before partials named their writer); a live writer's (its pid alive here, or its lock held: ``held``), another
    machine's and any other file are kept."""
    try:
        entries = list(folder.iterdir())
    except OSError as exc:  # a folder that can be written but not listed (mode -wx): saves still work
        warnings.warn(f"checkpoint_dir {str(folder)!r} cannot be listed ({exc.strerror or exc}): partial checkpoints "
                      "an ended process left there are not looked for", RuntimeWarning, stacklevel=2)  # fmt: skip
        return
    for entry in entries:
        match = _PARTIAL.fullmatch(entry.name)
        if match is None or match["host"] not in (None, _HOST) or match["pid"] and _alive(int(match["pid"])):
            continue
        try:
            with held.unheld(entry) as dead:  # a live writer in another container (one hostname) holds its lock
                if dead and entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                elif dead:
                    entry.unlink(missing_ok=True)
        except FileNotFoundError:  # another process's cleanup got there first
            continue
        except OSError as exc:  # the save or session goes on; what stays is said
            warnings.warn(f"a partial checkpoint an ended process left could not be removed: {exc.filename or entry}: "
                          f"{exc.strerror or exc}", RuntimeWarning, stacklevel=2)  # fmt: skip


def remove_sibling_leftovers(own: Path, prefix: str) -> None:
    """Remove the dead processes' partials (``remove_leftovers``' rules) in the folders beside ``own`` whose names
    start with ``prefix`` (the temporary folders, ``rlnb-checkpoints-*``, of sessions that used the default
    ``checkpoint_dir``): no session reopens another's random folder, so a kernel killed mid-save left a checkpoint's
    size there for good. Only this user's folders are looked in; saved checkpoints and the folders themselves stay (a
    live session's empty one is still its own)."""
    user = os.getuid() if hasattr(os, "getuid") else None
    try:
        siblings = [e for e in own.parent.iterdir() if e.name.startswith(prefix) and e.name != own.name]
    except OSError:  # a temporary folder that cannot be listed: the session's own save goes on
        return
    for folder in siblings:
        try:
            st = folder.lstat()
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and user in (None, st.st_uid):
            remove_leftovers(folder)


def _alive(pid: int) -> bool:
    if pid == os.getpid() or os.name != "posix":  # on Windows, os.kill(pid, 0) would end the process
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: alive, another user's
        return True
    return True


def unknown_checkpoints(folder: Path, known: Iterable[Path]) -> list[Path]:
    """The saved checkpoints in ``folder`` that are not ``known`` (what a server killed between a save's rename and
    its journal line left); nothing but ``SAVED`` names, and no symlink, is ever named."""
    kept = {Path(p).name for p in known}
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return []
    return [e for e in entries if SAVED.fullmatch(e.name) and e.name not in kept and not e.is_symlink()]

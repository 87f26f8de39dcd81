"""The stop of ``rlnb serve`` with work in flight: every session's running operation gets ``STOP_DEADLINE``
seconds (a second Ctrl-C: none), then it is abandoned and journaled FAILED, as a ``kill -9`` leaves it read at
restart, so that a stop never waits minutes on a real model's forward-backward or save. And what a killed server
left in its checkpoint folder, cleared at the restart (``clear_leftovers``)."""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from rlnb import wire
from rlnb.engine.leftovers import remove_leftovers, unknown_checkpoints

if TYPE_CHECKING:
    from rlnb.server.registry import Registry

log = logging.getLogger("rlnb")

STOP_DEADLINE = 30.0
"""Seconds a stopping server waits for its sessions' running operations (after ``app.SHUTDOWN_GRACE`` for the
requests in flight); then they are abandoned."""

BUILD = "rlnb-build-"
"""The name of a thread building a session's model, before the session's id (``sessions._build_later``)."""

ABANDONED = (
    "rlnb serve stopped while this operation was {status}; it was abandoned unfinished {why} (a training "
    "checkpoint saved before it resumes the session)"
)
"""Why an operation still running when a stop gave up on it is FAILED."""


class Abandoned(NamedTuple):
    """One thing a stop gave up on: ``what`` it was, in words, and the status it ``ends`` in (an operation FAILED,
    a model's build its session ERROR), for ``rlnb serve``'s line about it."""

    what: str
    ends: wire.OperationStatus | wire.SessionStatus

    @property
    def end(self) -> str:
        """``ends`` in words: ``FAILED`` (the operation), ``its session ERROR`` (a build)."""
        status = wire.short_name(self.ends)
        return f"its session {status}" if isinstance(self.ends, wire.SessionStatus) else status


def settle(registry: Registry, timeout: float | None = None, hurry: threading.Event | None = None) -> bool:
    """Wait until every stopped session's backend is closed and let go; False if ``timeout`` passed first or
    ``hurry`` was set (a second Ctrl-C). Backends that waited for a thread to close on (``_unclosed``) try again."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        registry._close_later([])  # those that waited for a thread, if any
        with registry.lock:
            closers = [t for t in registry._closers if t.is_alive()]
            unclosed = bool(registry._unclosed)
        if not closers and not unclosed:
            return True
        if (hurry is not None and hurry.is_set()) or (deadline is not None and time.monotonic() >= deadline):
            return False
        step = 0.1 if deadline is None else min(0.1, max(deadline - time.monotonic(), 0))
        if closers:
            closers[0].join(step)
        else:
            time.sleep(step)


def abandon(registry: Registry, timeout: float | None, hurry: threading.Event | None) -> list[Abandoned]:
    """Record every unfinished operation FAILED (journaled; its worker's later report is ignored) and say which,
    and which model builds were still running (their sessions ended ERROR with the stop)."""
    hurried = hurry is not None and hurry.is_set()
    why = "at a second Ctrl-C or SIGTERM" if hurried else f"after the stop's deadline ({timeout or 0:g} s)"
    said: list[Abandoned] = []
    with registry.lock:
        for s in registry.sessions.values():
            for op in [op for op in s.ops.values() if op.env.status not in wire.TERMINAL_STATUSES]:
                message = ABANDONED.format(status=op.env.status, why=why)
                op.env = wire.Operation.failed(op.env.id, wire.OperationErrorCode.SESSION_NOT_ACTIVE, message)
                op.abandoned = True
                s.finish(op.env.id, *registry.settings.kept())
                registry._save_op(s, op)
                said.append(Abandoned(f"{op.kind} operation {op.env.id} of session {s.id}", op.env.status))
        said += [Abandoned(f"the build of session {t.name.removeprefix(BUILD)}'s model", wire.SessionStatus.ERROR)
                 for t in registry._closers if t.is_alive() and t.name.startswith(BUILD)]  # fmt: skip
    return said


def clear_leftovers(folder: Path, known: Iterable[Path], *, own: bool) -> None:
    """At a restart: remove the partials a killed server left mid-save (no session opens the folder to do it), and
    the checkpoints it saved whole but never journaled (killed between the rename and the journal line: never
    listed, never removed, GBs each), one warning line each. In a ``checkpoint_dir`` the user named (not ``own``,
    the state directory's) such a checkpoint may be another program's: it is named and kept."""
    if not folder.is_dir():
        return
    remove_leftovers(folder)
    for path in unknown_checkpoints(folder, known):
        if not own:
            log.warning("rlnb serve: %s is no checkpoint of its journal (a server killed mid-save, or another "
                        "program's?): kept, not served; remove it if nothing else wrote it", path)  # fmt: skip
            continue
        try:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
            log.warning("rlnb serve: removed %s, a checkpoint saved as the server was killed, before it was "
                        "journaled", path)  # fmt: skip
        except OSError as exc:
            log.warning("rlnb serve: could not remove %s, a checkpoint never journaled (%s)", path, exc.strerror or exc)

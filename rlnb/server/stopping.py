"""The stop of ``rlnb serve`` with work in flight: every session's running operation gets ``STOP_DEADLINE``
seconds (a second Ctrl-C: none), then it is abandoned and journaled FAILED, as a ``kill -9`` leaves it read at
restart, so that a stop never waits minutes on a real model's forward-backward or save (``Registry.settle`` and
``Registry.abandon`` wait and give up; here are their deadline and words). What a killed server left in its
checkpoint folder, cleared at the restart (``clear_leftovers``). The stop signals that come while uvicorn starts
(``noted``)."""

from __future__ import annotations

import logging
import shutil
import signal
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from rlnb import wire
from rlnb.engine.leftovers import remove_leftovers, unknown_checkpoints

log = logging.getLogger("rlnb")

STOP_DEADLINE = 30.0
"""Seconds a stopping server waits for its sessions' running operations (after ``app.SHUTDOWN_GRACE`` for the
requests in flight); then they are abandoned."""

LOOK = 0.5
"""Seconds a stop waits for its sessions' backends to close before it says what it waits for: an idle session's
closes in milliseconds."""

WAITING = "rlnb serve: stopping; waiting{limit} for {what}; Ctrl-C or SIGTERM again abandons it"
"""Said as a stop begins to wait for what still runs: a silent half-minute read as a hung server."""

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


def left(end: float | None, most: float | None = None) -> float | None:
    """Seconds from now to ``end`` (``time.monotonic()``; None: no end), at most ``most``, never below 0."""
    if end is None:
        return most
    seconds = max(end - time.monotonic(), 0.0)
    return seconds if most is None else min(seconds, most)


def builds(closers: Iterable[threading.Thread]) -> list[str]:
    """The models still being built (``BUILD`` threads alive), in words."""
    return [f"the build of session {t.name.removeprefix(BUILD)}'s model" for t in closers
            if t.is_alive() and t.name.startswith(BUILD)]  # fmt: skip


def waiting(timeout: float | None, sessions: Iterable[Any], closers: Iterable[threading.Thread]) -> str:
    """``WAITING`` for ``sessions``' unfinished operations (``SessionRecord``s) and the models still being built."""
    what = [f"the running {op.kind} operation {op.env.id} of session {s.id}" for s in sessions
            for op in s.ops.values() if op.env.status not in wire.TERMINAL_STATUSES]  # fmt: skip
    what += builds(closers)
    limit = "" if timeout is None else f" up to {timeout:g} s"
    return WAITING.format(limit=limit, what=" and ".join(what) or "its sessions' backends to close")


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


HURRY = 3
"""The stop signal ``noted`` raises at once before uvicorn's handlers are in, as ``rlnb.cli.interrupts`` raises a third
Ctrl-C during an import: a start that hangs (an import, a loop's set-up) can still be broken."""


class Noted:
    """The stop signals ``noted`` took, in order; ``handed()`` gives uvicorn's handler those before it went in."""

    def __init__(self) -> None:
        self.signals: list[int] = []
        self.starting = True

    def handed(self) -> list[int]:
        """The signals noted so far, forgotten here: uvicorn's handler is in, and what it re-raises at its end is
        noted again, raised when ``noted`` ends (never at once)."""
        given, self.signals, self.starting = self.signals, [], False
        return given


@contextmanager
def noted(ignored: bool) -> Iterator[Noted]:
    """SIGINT (unless ``ignored``) and SIGTERM noted, not raised, while uvicorn starts: raised at whatever line ran
    then, the ``KeyboardInterrupt`` (SIGTERM's ``SystemExit``) could land in uvloop's set-up of its signal pipe, which
    left the loop marked running (``RuntimeError: Cannot close a running event loop``, exit status 1). ``app.run``
    gives those noted to uvicorn's handler once it is in (``Noted.handed``): a stop as one while it listens. At the
    end the handlers before are back, and what was noted after uvicorn's had gone (uvicorn re-raises the signals it
    stopped on) is raised again, in order, to them: outside the event loop. The ``HURRY``-th before the hand-over is
    raised at once. Off the main thread (where no handler can be set) nothing is noted."""
    taken = Noted()
    if threading.current_thread() is not threading.main_thread():
        yield taken
        return
    stops = [signal.SIGTERM] if ignored else [signal.SIGINT, signal.SIGTERM]
    before: dict[int, Any] = {}

    def note(signum: int, _frame: object) -> None:
        taken.signals.append(signum)
        if taken.starting and len(taken.signals) >= HURRY:  # raised at once, by the handlers before
            taken.signals.clear()
            for stop, handler in before.items():
                signal.signal(stop, handler)
            signal.raise_signal(signum)

    before.update((stop, signal.signal(stop, note)) for stop in stops)
    try:
        yield taken
    finally:
        for stop, handler in before.items():
            signal.signal(stop, handler)
        for signum in taken.signals:
            signal.raise_signal(signum)

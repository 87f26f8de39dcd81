"""The server's state: model resources, sessions, their operations, checkpoints and payloads. ``Registry`` holds
the tables, the journal and the closing of sessions' backends; its mixins ``resources``, ``sessions`` and ``ops``
act on one kind of record each, and ``core.RegistryCore``, the base class they share with it, states once what they
need of the registry and of each other.

**Locking rule.** One re-entrant lock, ``Registry.lock``, guards every record (and the payload store).
Hold it only to read or change records — never across a call that waits for a session's worker
(``backend.close()`` joins it; building a model is slow), because the worker reports each status change
through ``_record``, which takes the lock. Handlers get copies, never live records.

Sessions are driven only through the ``Backend`` protocol plus checkpoint files (``SessionBackend``);
``backends.make_backend`` is the one place a ``LocalBackend`` is built. A session holds it only while
active: a stopped or expired session keeps its last view and lets the backend (model, optimizer, thread)
go, closed on a thread of its own so that a stop never waits for a running operation.

Live objects are capped (``max_live_resources``, ``max_live_sessions``, a resource's session cap: 429).
With ``state_dir`` every change is journaled (``state.Journal``) and read back at start: resources,
sessions, operations and checkpoints survive a restart; sessions that were active end ERROR with the
reason, operations that were in flight FAILED (``SESSION_NOT_ACTIVE``), and checkpoints can be resumed.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from rlnb import wire
from rlnb.server import owner, stopping
from rlnb.server.backends import checkpoint_dir
from rlnb.server.links import Signer
from rlnb.server.ops import OperationsMixin
from rlnb.server.payloads import PayloadStore
from rlnb.server.records import CheckpointRecord, OpRecord, SessionRecord
from rlnb.server.resources import ResourcesMixin
from rlnb.server.restore import restore
from rlnb.server.sessions import SessionsMixin
from rlnb.server.settings import ServerSettings
from rlnb.server.state import Journal

log = logging.getLogger("rlnb")

RESTARTED = (
    "rlnb serve restarted while this session was {status}; its model is gone: start a new session, resuming "
    "from one of its training checkpoints (resume_from_checkpoint_id)"
)
"""Why a session that was active when the server stopped is now ERROR."""
NEVER_BUILT = (
    "rlnb serve stopped while this session's model was being built (CREATING): it never ran and has no "
    "checkpoints; start a new session"
)
"""Why a session that was CREATING when the server stopped (or was killed) is now ERROR."""
UNFINISHED = (
    "rlnb serve restarted before this operation had finished (queued or running): it did not run to its end; "
    "send it again, with a new Idempotency-Key, in a new session"
)
"""Why an operation journaled unfinished is FAILED after a restart. Only its first and its last status are journaled
(a line per step's RUNNING would double the journal's writes), so the status it had at the stop is not known."""


def restarted(status: wire.SessionStatus) -> str:
    """Why a session active when the server stopped is now ERROR: a CREATING one never ran."""
    return NEVER_BUILT if status == wire.SessionStatus.CREATING else RESTARTED.format(status=status)


JOURNAL_RETRY = 30.0
"""Seconds between tries to write a journal that failed (a full disk) again: each writes the whole registry."""


class Registry(ResourcesMixin, SessionsMixin, OperationsMixin):
    """Everything ``rlnb serve`` knows. ``clock`` (seconds since the epoch) is injectable for expiry tests."""

    def __init__(self, settings: ServerSettings, clock: Callable[[], float] = time.time):
        self.settings, self.clock = settings, clock
        self.lock = threading.RLock()
        self.resources: dict[str, wire.ModelResources] = {}
        self.sessions: dict[str, SessionRecord] = {}
        self.checkpoints: dict[str, CheckpointRecord] = {}
        self.payloads = PayloadStore(self.lock, settings, clock)
        self._closers: set[threading.Thread] = set()
        """Threads closing stopped sessions' backends (``_close_later``) or building sessions' models
        (``_build_later``): a stop waits for them (``settle``)."""
        self._unclosed: list[SessionRecord] = []
        """Stopped sessions whose backends wait for a thread to close them on (``_close_later`` could start none)."""
        self._mend_at = 0.0
        """When a journal that failed may next be written again (``mend_journal``), by ``clock``."""
        self.abandoned: list[stopping.Abandoned] | None = None
        """Once closed: the operations the stop gave up on (``close``)."""
        self.journal = Journal(settings.state_dir) if settings.state_dir is not None else None
        try:
            root = checkpoint_dir(settings)
            if root is not None:  # before the restore clears it
                owner.claim(root, settings.state_dir, named=settings.checkpoint_dir is not None)
            key = self.journal.signing_key() if self.journal is not None else secrets.token_bytes(32)
            self.signer = Signer(key, settings.public_url, clock)
            if self.journal is not None:
                self._restore(self.journal.load(settings.max_kept_operations))
        except BaseException:
            if self.journal is not None:  # a bad key or journal: the state folder is left unlocked
                self.journal.close()
            raise

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.clock(), UTC)

    def close(
        self, timeout: float | None = None, hurry: threading.Event | None = None, *, began: float | None = None
    ) -> list[stopping.Abandoned]:
        """Shut down: active sessions end ERROR (their queued operations FAILED by their workers), backends close,
        then the journal. What still runs ``timeout`` s after ``began`` (``time.monotonic()``, by default now: the
        lifespan's wait for the reaper's turn spends the same deadline) or at ``hurry`` is abandoned (``_abandon``) and
        named; a wait past a first look says on stderr what it waits for (``stopping.WAITING``)."""
        if self.abandoned is not None:
            return self.abandoned
        with self.lock:
            active = [s for s in self.sessions.values() if s.status in wire.SESSION_ACTIVE]
            for s in active:
                self._end(s, wire.SessionStatus.ERROR, restarted(s.status))
        for s in active:  # each on a thread of its own: one deadline for all
            self._close_later([s])
        end = None if timeout is None else (time.monotonic() if began is None else began) + timeout
        self.abandoned = [] if self._settled(timeout, end, hurry) else self._abandon(timeout, hurry)
        if self.journal is not None:
            self._mend_at = 0.0  # a journal that failed gets a last try, whatever the time since the one before
            self.mend_journal()
            self.journal.close()
        return self.abandoned

    def settle(self, timeout: float | None = None, hurry: threading.Event | None = None) -> bool:
        """Wait until every stopped session's backend is closed and let go; False if ``timeout`` passed first or
        ``hurry`` was set (a second Ctrl-C). Backends that waited for a thread to close on (``_unclosed``) try again."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self._close_later([])  # those that waited for a thread, if any
            with self.lock:
                closers = [t for t in self._closers if t.is_alive()]
                unclosed = bool(self._unclosed)
            if not closers and not unclosed:
                return True
            if (hurry is not None and hurry.is_set()) or (deadline is not None and time.monotonic() >= deadline):
                return False
            step = 0.1 if deadline is None else min(0.1, max(deadline - time.monotonic(), 0))
            if closers:
                closers[0].join(step)
            else:
                time.sleep(step)

    def _settled(self, timeout: float | None, end: float | None, hurry: threading.Event | None) -> bool:
        """``settle`` until ``end``, said once a first look (``stopping.LOOK``) finds something still running."""
        if self.settle(stopping.left(end, stopping.LOOK), hurry):
            return True
        if (hurry is not None and hurry.is_set()) or stopping.left(end) == 0:
            return False
        with self.lock:
            line = stopping.waiting(timeout, self.sessions.values(), self._closers)
        log.warning(line)
        return self.settle(stopping.left(end), hurry)

    def _abandon(self, timeout: float | None, hurry: threading.Event | None) -> list[stopping.Abandoned]:
        """Record every unfinished operation FAILED (journaled; its worker's later report is ignored) and say which,
        and which model builds were still running (their sessions ended ERROR with the stop)."""
        hurried = hurry is not None and hurry.is_set()
        why = "at a second Ctrl-C or SIGTERM" if hurried else f"after the stop's deadline ({timeout or 0:g} s)"
        said: list[stopping.Abandoned] = []
        with self.lock:
            for s in self.sessions.values():
                for op in [op for op in s.ops.values() if op.env.status not in wire.TERMINAL_STATUSES]:
                    message = stopping.ABANDONED.format(status=op.env.status, why=why)
                    op.env = wire.Operation.failed(op.env.id, wire.OperationErrorCode.SESSION_NOT_ACTIVE, message)
                    op.abandoned = True
                    s.finish(op.env.id, *self.settings.kept())
                    self._save_op(s, op)
                    said.append(stopping.Abandoned(f"{op.kind} operation {op.env.id} of session {s.id}", op.env.status))
            said += [stopping.Abandoned(what, wire.SessionStatus.ERROR) for what in stopping.builds(self._closers)]
        return said

    # -- the journal -----------------------------------------------------------------------------

    def _save(self, kind: str, data: Any, text: str | None = None) -> None:
        """Journal one object's new state (under the lock, so lines keep the order of changes); ``text``: its line,
        made already (``records.made_answer``)."""
        if self.journal is not None and self.journal.failed:  # the change is in memory: the mended journal has it
            self.mend_journal()
        elif self.journal is not None:
            self.journal.append(kind, data.model_dump(mode="json") if isinstance(data, wire._Model) else data, text)
            if self.journal.too_long():  # what is in memory is the newest state: it replaces every line before
                self.journal.rewrite(self._entries())

    def mend_journal(self) -> None:
        """Write a journal that failed (a full disk) again, whole, from memory, at most every ``JOURNAL_RETRY`` seconds
        (at a change, and at the reaper's turn). Stopped for good, a restart would lose every change after the failure,
        and remove the checkpoints saved since, as a killed server's never journaled."""
        with self.lock:
            if self.journal is None or not self.journal.failed or self.clock() < self._mend_at:
                return
            self._mend_at = self.clock() + JOURNAL_RETRY
            self.journal.rewrite(self._entries())

    def _save_op(self, s: SessionRecord, op: OpRecord, text: str | None = None) -> None:
        if self.journal is not None:
            self._save("op", s.op_line(op), text)

    def _restore(self, saved: dict[str, list[dict[str, Any]]]) -> None:
        """Read the journal back: what was active when the server stopped has ended, with the reason."""
        now = self.now()
        root = checkpoint_dir(self.settings)
        assert root is not None  # a state directory gives a checkpoint folder
        restored = restore(saved, root)
        known = [c.path for c in restored.checkpoints.values()]
        stopping.clear_leftovers(root, known, own=self.settings.checkpoint_dir is None)
        self.resources.update(restored.resources)
        self.sessions.update(restored.sessions)
        self.checkpoints.update(restored.checkpoints)
        for res in self.resources.values():
            if res.status == wire.ModelResourcesStatus.READY:  # a restart counts as activity
                res.expires_at, res.updated_at = now + timedelta(seconds=res.inactive_timeout), now
        for s in self.sessions.values():
            if s.status in wire.SESSION_ACTIVE:
                self._end(s, wire.SessionStatus.ERROR, restarted(s.status))
            elif s.status == wire.SessionStatus.STOPPING:  # stopped before the server did: its model is gone now
                self._end(s, wire.SessionStatus.STOPPED)
            for op in [op for op in s.ops.values() if op.env.status not in wire.TERMINAL_STATUSES]:
                op.env = wire.Operation.failed(op.env.id, wire.OperationErrorCode.SESSION_NOT_ACTIVE, UNFINISHED)
                s.finish(op.env.id, *self.settings.kept())
            s.trim(*self.settings.kept())
        for rid in list(self.resources):  # STOPPING at the stop: its sessions have ended now
            self._stopped_once_idle(rid)
        assert self.journal is not None
        self.journal.rewrite(self._entries())

    def _entries(self) -> list[tuple[str, Any]]:
        """The registry as a compact journal: each object's latest line."""
        entries: list[tuple[str, Any]] = [("resource", r.model_dump(mode="json")) for r in self.resources.values()]
        for s in self.sessions.values():
            entries += s.journal_lines()
        return entries + [("checkpoint", {"info": c.info.model_dump(mode="json"), "path": str(c.path)})
                          for c in self.checkpoints.values()]  # fmt: skip

    def _end(
        self,
        s: SessionRecord,
        status: wire.SessionStatus,
        reason: str | None = None,
        code: wire.SessionErrorCode = wire.SessionErrorCode.SESSION_FAILED,
    ) -> None:
        """Mark a session ended (under the lock) and free its payloads (its offloaded results are served whole
        from now on); its backend is closed and let go by ``_close``. ``reason`` (and ``code``): why it is ERROR."""
        self.payloads.drop_session(s.id)
        s.keep_whole()
        now = self.now()
        s.status, s.updated_at = status, now
        if reason is not None:
            s.error = wire.SessionError(code=code, message=reason, occurred_at=now)
        self._save("session", s.view())
        self._stopped_once_idle(s.resource_id)

    def _close(self, sessions: list[SessionRecord]) -> None:
        """Close backends outside the lock (close joins the worker, whose listener takes the lock; a running
        sample stops between tokens), then keep each session's last view and let its backend go."""
        for s in sessions:
            backend = s.backend
            if backend is not None:
                backend.close()
                with self.lock:
                    s.final, s.backend = backend.session(), None
                    if s.status == wire.SessionStatus.STOPPING:  # its running operation has finished
                        s.status, s.updated_at = wire.SessionStatus.STOPPED, self.now()
                    self._save("session", s.view())
                    self._stopped_once_idle(s.resource_id)

    def _close_later(self, sessions: list[SessionRecord]) -> None:
        """``_close`` on a thread of its own, so that a stop answers at once: joining a worker whose
        operation runs for minutes must not hold a request thread (45 such stops would take the whole thread
        pool, /health included). At most one thread per active session: ``max_live_sessions``. When no thread can
        be started they wait in ``_unclosed`` for the next call (the reaper's turn, a stop, ``settle``): closing
        them here would hold the request (or a server stop, past its deadline) for as long as a worker runs."""
        with self.lock:
            waited, self._unclosed = self._unclosed, []
        sessions = [*waited, *sessions]
        if not sessions:
            return

        def close() -> None:
            try:
                self._close(sessions)
            finally:
                with self.lock:
                    self._closers.discard(thread)

        thread = threading.Thread(target=close, name="rlnb-close", daemon=True)
        with self.lock:
            self._closers.add(thread)
        try:
            thread.start()
        except RuntimeError as exc:
            with self.lock:
                self._closers.discard(thread)
                self._unclosed[:0] = sessions
            if not waited:  # said once, not at each retry
                log.warning("rlnb serve: no thread could be started to close %d stopped session(s)' backends (%s); "
                            "retried at the next stop or reaper turn", len(sessions), exc)  # fmt: skip

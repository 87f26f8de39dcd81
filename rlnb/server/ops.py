"""Operations and checkpoints of the registry's sessions: submit, status changes, long-polls, checkpoint files.

A mixin of ``Registry`` (its second half, split off to keep one module per concern); what it needs of the registry
is ``core.RegistryCore``. It follows the registry's one locking rule and uses its records.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from pathlib import Path
from typing import Any, Literal

from rlnb import wire
from rlnb.engine.checkpoint_files import UnsafeCheckpointFile, served_files
from rlnb.server.core import RegistryCore
from rlnb.server.errors import SHOWN, ServerError, not_found
from rlnb.server.records import CheckpointRecord, OpRecord, SessionRecord, made_answer, page
from rlnb.server.settings import ServerSettings

log = logging.getLogger("rlnb")

PENDING_RETRY = 1
"""Seconds a submission refused by ``max_pending_operations`` is asked to wait (``Retry-After``): rlnb's client and the
SDK retry a 429 after it, five and two times."""

FileKind = Literal["merged", "adapter"]
"""The two sets of files of an inference checkpoint."""


def gone(settings: ServerSettings) -> str:
    """Why an operation is no longer kept."""
    n, budget = settings.max_kept_operations, settings.max_kept_result_bytes
    count = f"its newest {n:,} finished operation{'s' * (n != 1)} (max_kept_operations)"
    return f"a session keeps {count}, as long as they hold at most {budget:,} bytes of JSON (max_kept_result_bytes)"


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class OperationsMixin(RegistryCore):
    _polls_released = False
    """Set when the server begins to stop (``release_long_polls``): a long-poll answers at once."""

    # -- operations ------------------------------------------------------------------------------

    def replay(self, sid: str, kind: wire.OperationKind, key: str, fingerprint: str) -> OpRecord | None:
        """The operation an earlier request with this Idempotency-Key made (a retry: never a second run),
        or None for a new key. A key reused for another kind or another body is a 409 saying so, and so is the key
        of an operation no longer kept (``max_kept_operations``): running it again could train twice."""
        with self.lock:
            s = self.session(sid)
            op_id = s.keys.get(key, "")
            op = s.ops.get(op_id)
            if op is None and op_id in s.dropped:
                raise ServerError(
                    409,
                    f"Idempotency-Key {wire.shown(key, SHOWN)} was used for {s.dropped[op_id]} operation {op_id}, "
                    f"which this server no longer keeps ({gone(self.settings)}); a new request needs a new key",
                    param="Idempotency-Key",
                )
            if op is None:
                return None
            if op.kind != kind:
                raise ServerError(
                    409,
                    f"Idempotency-Key {wire.shown(key, SHOWN)} was already used for {op.kind} operation {op.env.id}; "
                    "a retry must send the same request, and a new request needs a new key",
                    param="Idempotency-Key",
                )
            if op.fingerprint != fingerprint:
                raise ServerError(
                    409,
                    f"Idempotency-Key {wire.shown(key, SHOWN)} was already used with a different body (operation "
                    f"{op.env.id}); a retry must send the same body, and a new request needs a new key",
                    param="Idempotency-Key",
                )
            return op

    def submit(
        self,
        sid: str,
        kind: wire.OperationKind,
        key: str,
        body: wire._Model | None,
        fingerprint: str,
        payload_id: str | None = None,
        size: int = 0,
    ) -> OpRecord:
        """Queue an operation (or replay the key's); the upload ``body`` was read from is claimed under the lock.
        ``size``: the bytes it came from (``max_pending_bytes``)."""
        with self.lock:
            known = self.replay(sid, kind, key, fingerprint)
            if known is not None:
                return known
            s = self.session(sid)
            if s.backend is None and s.status in wire.SESSION_ACTIVE:
                raise ServerError(409, f"session {sid} is still being created", param="session_id", retry=True)
            if s.status not in wire.SESSION_ACTIVE:  # ended (its backend may still be closing): fails at once
                env = wire.Operation.failed(
                    str(uuid.uuid4()), wire.OperationErrorCode.SESSION_NOT_ACTIVE, f"session {sid} is {s.status}"
                )
                op = s.ops[env.id] = OpRecord(kind, env, key=key, fingerprint=fingerprint)
                s.keys[key] = env.id
                s.finish(env.id, *self.settings.kept())
                self._save_op(s, op)  # its answer, made by ``finish``
                return op
            if s.backend is None:
                raise ServerError(409, f"session {sid} is still being created", param="session_id", retry=True)
            self._check_pending(s, size, payload_id)
            if payload_id:
                self.payloads.claim(sid, payload_id)  # its bytes are in the body now
            first: list[str] = []
            s.backend.submit(kind, body, lambda env: self._record(s, kind, env, first, key, fingerprint))
            s.keys[key] = first[0]  # the backend reported PENDING at once
            op = s.ops[first[0]]
            if first[0] not in s.finished:  # counted until ``SessionRecord.ended`` (after this: we hold the lock)
                op.body_bytes, s.pending_bytes = size, s.pending_bytes + size
            self._touch(s.resource_id)
            return op

    def _check_pending(self, s: SessionRecord, size: int, payload_id: str | None) -> None:
        """429 once ``s`` has ``max_pending_operations`` queued or running, or their bodies and this one's ``size``
        would pass ``max_pending_bytes``: each holds its parsed body until it ran. A body over that alone is a 400."""
        most = self.settings.pending_bytes()
        if size > most:  # first: it would never fit, a 429 would be retried in vain
            upload = f" (with payload {payload_id})" if payload_id else ""
            raise ServerError(
                400, f"this body{upload} is {size:,} bytes; a session queues at most {most:,} bytes of operation "
                "bodies (max_pending_bytes): split it", param="payload_id" if payload_id else None,
            )  # fmt: skip
        pending, limit = len(s.ops) - len(s.finished), self.settings.max_pending_operations
        if pending >= limit:
            raise ServerError(
                429, f"session {s.id} has {pending} operations queued or running; the limit is {limit} "
                "(max_pending_operations): wait for one to finish, then submit again", retry_after=PENDING_RETRY,
            )  # fmt: skip
        if s.pending_bytes + size > most:
            raise ServerError(
                429, f"session {s.id} has {s.pending_bytes:,} bytes of operation bodies queued or running; with this "
                f"body's {size:,} that passes the limit of {most:,} (max_pending_bytes): wait for one to finish, then "
                "submit again", retry_after=PENDING_RETRY,
            )  # fmt: skip

    def context_length(self, sid: str) -> int | None:
        """Session ``sid``'s model's (``max_seq_length``); None without a backend: ``submit`` answers for those."""
        with self.lock:
            backend = self.session(sid).backend
        return None if backend is None else backend.context_length

    def _record(
        self,
        s: SessionRecord,
        kind: wire.OperationKind,
        env: wire.Operation[Any],
        first: list[str],
        key: str,
        fingerprint: str,
    ) -> None:
        """A status change from the session's worker: store it (journal the first and the last), wake
        long-polls, register checkpoints. A last one's answer and journal line are made before the lock is taken."""
        done = env.status in wire.TERMINAL_STATUSES
        made = made_answer(s.id, kind, env, key, fingerprint, self.journal is not None) if done else (None, None)
        with self.lock:
            op = s.ops.get(env.id)
            if op is not None and op.abandoned:  # by a stop, which said its end
                self._discard_late_checkpoint(s, env)
                return
            new = op is None
            if op is None:
                op = s.ops[env.id] = OpRecord(kind, env, key=key, fingerprint=fingerprint)
                first.append(env.id)
            op.env = env
            waiters, op.waiters = op.waiters, []
            if env.status in wire.TERMINAL_STATUSES:
                self._touch(s.resource_id)  # finishing is activity: a resource never expires mid-operation
            if env.status == wire.OperationStatus.COMPLETED and kind in wire.CHANGES_SESSION:
                s.updated_at = self.now()
            if env.status == wire.OperationStatus.COMPLETED and isinstance(
                env.output, wire.InferenceCheckpointResult | wire.TrainingCheckpointResult
            ):
                self._record_checkpoint(s, env.output)
            if env.status in wire.TERMINAL_STATUSES and env.id not in s.finished:
                s.finish(env.id, *self.settings.kept(), made[0])  # journaled as it is sent
            if new or env.status in wire.TERMINAL_STATUSES:
                self._save_op(s, op, made[1] if op.answer is made[0] else None)
        for loop, fut in waiters:
            loop.call_soon_threadsafe(_wake, fut)

    def _discard_late_checkpoint(self, s: SessionRecord, env: wire.Operation[Any]) -> None:
        """Remove what an operation abandoned by a stop saved as it ended after all: its checkpoint is never
        journaled nor listed, and lay whole in the checkpoint folder until the next start cleared it (GBs each)."""
        out = env.output if env.status == wire.OperationStatus.COMPLETED else None
        if not isinstance(out, wire.InferenceCheckpointResult | wire.TrainingCheckpointResult) or s.backend is None:
            return
        try:
            s.backend.discard_checkpoint(out.checkpoint.id)
        except OSError as exc:  # the next start clears it (``stopping.clear_leftovers``)
            log.warning("rlnb serve: %s", exc)

    def _record_checkpoint(
        self, s: SessionRecord, out: wire.InferenceCheckpointResult | wire.TrainingCheckpointResult
    ) -> None:
        training = isinstance(out, wire.TrainingCheckpointResult)
        info = wire.Checkpoint(
            id=out.checkpoint.id, base_model=s.base_model, created_at=out.checkpoint.created_at, session_id=s.id,
            step=out.checkpoint.step, type=wire.CHECKPOINT_TRAINING if training else wire.CHECKPOINT_INFERENCE,
            lora_rank=s.lora_config.rank if s.lora_config else None,
        )  # fmt: skip
        assert s.backend is not None  # a worker is reporting
        c = self.checkpoints[info.id] = CheckpointRecord(info, s.backend.checkpoint_path(info.id))
        self._save("checkpoint", {"info": info.model_dump(mode="json"), "path": str(c.path)})

    def operation(self, sid: str, kind: wire.OperationKind, op_id: str) -> OpRecord:
        with self.lock:
            s = self.session(sid)
            op = s.ops.get(op_id)
            if op is None and s.dropped.get(op_id) == kind:
                raise ServerError(
                    404, f"{kind} operation {op_id!r} is no longer kept ({gone(self.settings)})", param="operation_id"
                )
            if op is None or op.kind != kind:
                raise not_found(f"{kind} operation", op_id, "operation_id")
            return op

    async def wait_for_change(self, op: OpRecord, seen: str | None, timeout: float) -> None:
        """Return as soon as the operation's status differs from ``seen`` (default: its status now) or it is
        terminal, or after ``timeout`` seconds."""
        loop = asyncio.get_running_loop()
        with self.lock:
            status = op.env.status
            if status in wire.TERMINAL_STATUSES or (seen is not None and status != seen) or timeout <= 0:
                return
            if self._polls_released:
                return
            fut: asyncio.Future[None] = loop.create_future()
            op.waiters.append((loop, fut))
        try:
            await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            pass
        finally:
            with self.lock:
                if (loop, fut) in op.waiters:
                    op.waiters.remove((loop, fut))

    def release_long_polls(self) -> None:
        """Answer every held long-poll now, and every later one at once: the server is stopping. Its graceful
        shutdown waits for the requests in flight before the app's shutdown changes any status: a held GET would keep
        the stop ``SHUTDOWN_GRACE`` seconds longer, then be cancelled (a 500, a traceback on stderr)."""
        waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        with self.lock:
            self._polls_released = True
            for s in self.sessions.values():
                for op in s.ops.values():
                    waiters.extend(op.waiters)
                    op.waiters = []
        for loop, fut in waiters:
            loop.call_soon_threadsafe(_wake, fut)

    # -- checkpoints -----------------------------------------------------------------------------

    def checkpoint(self, cid: str) -> CheckpointRecord:
        with self.lock:
            if cid not in self.checkpoints:
                raise not_found("checkpoint", cid, "checkpoint_id")
            return self.checkpoints[cid]

    def list_checkpoints(
        self, after: str | None, limit: int, base_model: str | None, sid: str | None, type: str | None
    ) -> wire.CheckpointList:
        with self.lock:
            infos = [c.info for c in self.checkpoints.values()]

        def wanted(c: wire.Checkpoint) -> bool:
            return base_model in (None, c.base_model) and sid in (None, c.session_id) and type in (None, c.type)

        data, meta = page(infos, after, limit, wanted, lambda c: c.id, lambda c: c.created_at)
        return wire.CheckpointList(data=data, meta=meta)

    def checkpoint_files(self, cid: str, kind: FileKind) -> list[Path]:
        """The files of an inference checkpoint: ``"merged"`` (the full model with the trained weights
        applied; what MERGED and UNSPECIFIED download) or ``"adapter"`` (the LoRA weights only). They are
        read from the checkpoint's folder, which outlives its session."""
        c = self.checkpoint(cid)
        if c.info.type != wire.CHECKPOINT_INFERENCE:
            raise ServerError(400, "only inference checkpoints can be downloaded", param="checkpoint_id")
        if kind == "adapter" and c.info.lora_rank is None:
            raise ServerError(400, "the ADAPTER variant exists only for LoRA sessions", param="variant")
        folder = c.path / kind
        if not folder.is_dir():
            log.warning("rlnb serve: checkpoint %s's files are gone from %s", cid, c.path)  # the operator's to see
            raise ServerError(409, f"checkpoint {cid}'s files are gone from this server", param="checkpoint_id")
        try:  # a symlink, a pipe: the whole download is refused (a part of a model would load as a broken one)
            return served_files(cid, c.path, folder)
        except UnsafeCheckpointFile as exc:
            log.warning("rlnb serve: checkpoint %s is not served: %s", cid, exc)  # the operator's to mend
            name = exc.file.relative_to(c.path) if exc.file and exc.file.is_relative_to(c.path) else kind
            what = "a symlink" if exc.file and exc.file.is_symlink() else "not a regular file"
            said = f"checkpoint {cid}'s file {name} is {what} (not a file rlnb saved): its download is refused"
            raise ServerError(409, said, param="checkpoint_id") from None

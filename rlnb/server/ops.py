"""Operations and checkpoints of the registry's sessions: submit, status changes, long-polls, checkpoint files.

A mixin of ``Registry`` (its second half, split off to keep one module per concern); it follows the
registry's one locking rule and uses its records.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from rlnb import wire
from rlnb.server.errors import ServerError, not_found
from rlnb.server.records import CheckpointRecord, OpRecord, SessionRecord, page

FileKind = Literal["merged", "adapter"]
"""The two sets of files of an inference checkpoint."""


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class OperationsMixin:
    lock: threading.RLock
    checkpoints: dict[str, CheckpointRecord]

    if TYPE_CHECKING:  # provided by Registry

        def session(self, sid: str) -> SessionRecord: ...

        def _touch(self, rid: str) -> None: ...

    # -- operations ------------------------------------------------------------------------------

    def submit(self, sid: str, kind: str, key: str, body: wire._Model | None) -> wire.Operation[Any]:
        with self.lock:
            s = self.session(sid)
            if key in s.keys:  # a retry: the original operation, never a second run
                op = s.ops[s.keys[key]]
                if op.kind != kind:
                    raise ServerError(
                        409, f"Idempotency-Key was already used for a {op.kind} operation", param="Idempotency-Key"
                    )
                return op.env
            if s.backend is None:
                raise ServerError(409, f"session {sid} is still being created", param="session_id")
            first: list[str] = []
            s.backend.submit(kind, body, lambda env: self._record(s, kind, env, first))  # reports PENDING at once
            s.keys[key] = first[0]
            self._touch(s.resource_id)
            return s.ops[first[0]].env

    def _record(self, s: SessionRecord, kind: str, env: wire.Operation[Any], first: list[str]) -> None:
        """A status change from the session's worker: store it, wake long-polls, register checkpoints."""
        with self.lock:
            op = s.ops.get(env.id)
            if op is None:
                op = s.ops[env.id] = OpRecord(kind, env)
                first.append(env.id)
            op.env = env
            waiters, op.waiters = op.waiters, []
            if env.status in wire.TERMINAL_STATUSES:
                self._touch(s.resource_id)  # finishing is activity: a resource never expires mid-operation
            if env.status == wire.STATUS_COMPLETED and isinstance(
                env.output, wire.InferenceCheckpointResult | wire.TrainingCheckpointResult
            ):
                self._record_checkpoint(s, env.output)
        for loop, fut in waiters:
            loop.call_soon_threadsafe(_wake, fut)

    def _record_checkpoint(
        self, s: SessionRecord, out: wire.InferenceCheckpointResult | wire.TrainingCheckpointResult
    ) -> None:
        training = isinstance(out, wire.TrainingCheckpointResult)
        info = wire.Checkpoint(
            id=out.checkpoint.id, base_model=s.base_model, created_at=out.checkpoint.created_at, session_id=s.id,
            step=out.checkpoint.step, type="CHECKPOINT_TYPE_TRAINING" if training else "CHECKPOINT_TYPE_INFERENCE",
            lora_rank=s.lora_config.rank if s.lora_config else None,
        )  # fmt: skip
        self.checkpoints[info.id] = CheckpointRecord(info, s, secrets.token_urlsafe(16))

    def operation(self, sid: str, kind: str, op_id: str) -> OpRecord:
        with self.lock:
            op = self.session(sid).ops.get(op_id)
            if op is None or op.kind != kind:
                raise not_found(f"{kind} operation", op_id, "operation_id")
            return op

    async def wait_for_change(self, op: OpRecord, seen: str | None, timeout: float) -> wire.Operation[Any]:
        """The operation's envelope as soon as its status differs from ``seen`` (default: its status
        now) or it is terminal, or after ``timeout`` seconds."""
        loop = asyncio.get_running_loop()
        with self.lock:
            status = op.env.status
            if status in wire.TERMINAL_STATUSES or (seen is not None and status != seen) or timeout <= 0:
                return op.env
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
        with self.lock:
            return op.env

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
        applied; what MERGED and UNSPECIFIED download) or ``"adapter"`` (the LoRA weights only)."""
        c = self.checkpoint(cid)
        if c.info.type != "CHECKPOINT_TYPE_INFERENCE":
            raise ServerError(400, "only inference checkpoints can be downloaded", param="checkpoint_id")
        if kind == "adapter" and c.info.lora_rank is None:
            raise ServerError(400, "the ADAPTER variant exists only for LoRA sessions", param="variant")
        assert c.session.backend is not None  # a checkpoint exists only once its session ran
        return c.session.backend.checkpoint_files(cid, kind)

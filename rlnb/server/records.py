"""What the registry keeps per object, and cursor pagination. Plain data: the registry's lock guards it.

A session holds its backend (model, optimizer, worker thread) only while it is active: when it stops, its
last view is kept (``final``) and the backend is let go, so a stopped session costs a few records.

A session keeps its newest ``max_kept_operations`` finished operations, as long as their envelopes hold at most
``max_kept_result_bytes`` of JSON (``SessionRecord.finish``); an older one is let go, leaving its id, kind and
Idempotency-Key (a tombstone of ~300 bytes), so that a GET or a retry of it is answered clearly. The Together API
reference states no retention rule for operations (nor for keys).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol, TypeVar

from rlnb import wire
from rlnb.server.errors import SHOWN, ServerError
from rlnb.server.state import Raw, journal_line


class SessionBackend(Protocol):
    """What the server needs of a session's backend: the ``Backend`` protocol plus checkpoint files."""

    optimizer: wire.OptimizerKind

    @property
    def context_length(self) -> int: ...

    def submit(
        self, kind: wire.OperationKind, body: wire._Model | None, listener: Callable[[wire.Operation[Any]], None]
    ) -> None: ...
    def session(self) -> wire.Session: ...
    def close(self) -> None: ...
    def checkpoint_path(self, ckpt_id: str) -> Path: ...
    def discard_checkpoint(self, ckpt_id: str) -> None: ...


@dataclass
class OpRecord:
    kind: wire.OperationKind
    env: wire.Operation[Any]
    """The latest envelope."""
    waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = field(default_factory=list)
    """Long-polls waiting for the next status change."""
    offloaded: bytes | None = None
    """The envelope as served while its session is active: its output's large members offloaded through the payload
    side channel, or its ``answer`` where the output is small enough to be served whole."""
    key: str = ""
    """The Idempotency-Key it was submitted with."""
    fingerprint: str = ""
    """Of the body it was submitted with (``limits.fingerprint``): the key is bound to it."""
    body_bytes: int = 0
    """Bytes of the request body (and upload) it came from, counted against ``max_pending_bytes`` until it ends."""
    size: int = 0
    """Bytes of its envelope as JSON, once finished, and of its offloaded copy and result payload while they are held
    (counted against ``max_kept_result_bytes``)."""
    result_payload: str | None = None
    """The payload holding its offloaded output's large members (``offloaded``): dropped with the operation."""
    answer: bytes | None = None
    """Once finished: its envelope as the API sends it, made once (``SessionRecord.ended``), measured, journaled and
    sent by every GET and retry; ``env`` then keeps no output (its objects take ~3x these bytes)."""
    abandoned: bool = False
    """Recorded FAILED by a stop that gave up on it (``Registry._abandon``): what its worker reports later is not."""

    def reply(self) -> bytes:
        """The envelope as the API sends it: its ``answer`` once finished, else made of ``env`` now."""
        env = self.env  # read before ``answer``: ``ended`` sets ``answer`` before it lets ``env``'s output go
        answer = self.answer
        return answer if answer is not None else envelope_bytes(env)


def envelope_bytes(env: wire.Operation[Any]) -> bytes:
    """An envelope as JSON, byte for byte as a ``JSONResponse`` of its ``model_dump(mode="json")`` sends it."""
    return json_body(env.model_dump(mode="json"))


def made_answer(
    session_id: str, kind: wire.OperationKind, env: wire.Operation[Any], key: str, fingerprint: str, journaled: bool
) -> tuple[bytes, str | None]:
    """A finished operation's answer (``envelope_bytes``), and its journal line where a journal is ``journaled``: made
    by the session's worker before it takes the registry's lock (``SessionRecord.finish`` keeps them). A 24 MB answer
    took 0.8 s to encode, and under the lock every other request waited for it, ``/health`` and other sessions' too."""
    answer = envelope_bytes(env)
    return answer, journal_line("op", _op_entry(session_id, kind, key, fingerprint, Raw(answer))) if journaled else None


def _op_entry(session_id: str, kind: wire.OperationKind, key: str, fingerprint: str, env: Any) -> dict[str, Any]:
    return {"session": session_id, "kind": kind, "key": key, "fingerprint": fingerprint, "env": env}


def json_body(data: Any) -> bytes:
    """``data`` as a ``JSONResponse`` renders it (compact, UTF-8, no NaN): every operation answer's bytes."""
    return json.dumps(data, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")).encode("utf-8")


@dataclass
class SessionRecord:
    id: str
    resource_id: str
    base_model: str
    created_by: str
    created_at: datetime
    updated_at: datetime
    status: wire.SessionStatus
    lora_config: wire.LoraConfig | None
    resume_from: str | None
    display_name: str | None = None
    metadata: wire.SessionMetadata = field(default_factory=wire.SessionMetadata)
    backend: SessionBackend | None = None
    """Set while the session is active: None while CREATING (its model is being built) and once it ended."""
    final: wire.Session | None = None
    """The backend's last view (step, checkpoints, policy), kept when the backend is let go."""
    error: wire.SessionError | None = None
    ops: dict[str, OpRecord] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)
    """Idempotency-Key → operation id (of a kept or a dropped operation)."""
    finished: dict[str, None] = field(default_factory=dict)
    """Ids of the finished (COMPLETED, FAILED) operations in ``ops``, oldest first."""
    dropped: dict[str, wire.OperationKind] = field(default_factory=dict)
    """Operations let go by ``finish``: id → kind (their keys stay in ``keys``)."""
    kept_bytes: int = 0
    """The ``size`` of the operations in ``finished``, together."""
    pending_bytes: int = 0
    """The ``body_bytes`` of the operations not yet in ``finished``, together."""
    drop_payload: Callable[[str], None] | None = field(default=None, repr=False)
    """Frees a result payload (the server's payload store): an operation let go takes its offloaded result along."""

    def finish(self, op_id: str, keep: int, budget: int, answer: bytes | None = None) -> None:
        """Note that an operation ended, and let the oldest finished ones go past the newest ``keep``, or past
        ``budget`` bytes of JSON (the newest stays, whatever its size: its result is yet to be fetched). A pending
        or running one is never let go; a long-poll holds its record, and waits only on unfinished ones."""
        self.ended(op_id, answer)
        self.trim(keep, budget)

    def ended(self, op_id: str, answer: bytes | None = None) -> None:
        """Count a finished operation in ``finished`` and ``kept_bytes``, letting none go (a restart trims later).
        ``answer``: its envelope's bytes, made already (``made_answer``); else made here."""
        op = self.ops[op_id]
        op.answer = answer if answer is not None else envelope_bytes(op.env)
        op.env = op.env.model_copy(update={"output": None})  # its id, status and error: the answer has the rest
        op.size = len(op.answer)
        self.finished[op_id] = None
        self.kept_bytes += op.size
        self.pending_bytes -= op.body_bytes

    def trim(self, keep: int, budget: int) -> None:
        """Let the oldest finished operations go past the newest ``keep`` or ``budget`` bytes (see ``finish``)."""
        while len(self.finished) > keep or (self.kept_bytes > budget and len(self.finished) > 1):
            old = next(iter(self.finished))
            del self.finished[old]
            op = self.ops.pop(old)
            self.kept_bytes -= op.size
            self.dropped[old] = op.kind
            if op.result_payload is not None and self.drop_payload is not None:
                self.drop_payload(op.result_payload)

    def offload(self, op: OpRecord, body: bytes, payload: tuple[str, int] | None) -> None:
        """Keep ``body``, ``op``'s envelope as served with its large members in ``payload`` (id, bytes), counted with
        the finished operation's size until the session ends (``keep_whole``)."""
        extra = len(body) + payload[1] if payload else 0  # else ``body`` is ``answer`` itself
        op.offloaded, op.result_payload = body, payload[0] if payload else None
        op.size += extra
        self.kept_bytes += extra

    def keep_whole(self) -> None:
        """Forget every offloaded copy (the session ended: its payloads are freed, its results served whole)."""
        for op in self.ops.values():
            if op.offloaded is not None and op.answer is not None:
                self.kept_bytes -= op.size - len(op.answer)
                op.size = len(op.answer)
            op.offloaded, op.result_payload = None, None

    def op_line(self, op: OpRecord) -> dict[str, Any]:
        """An operation as the state journal keeps it: a finished one's ``answer`` as its ``env``, the bytes
        embedded (``state.Raw``), not its objects dumped again."""
        answer = op.answer
        env = op.env.model_dump(mode="json") if answer is None else Raw(answer)
        return _op_entry(self.id, op.kind, op.key, op.fingerprint, env)

    def journal_lines(self) -> list[tuple[str, Any]]:
        """The session, its tombstones and its kept operations as the state journal keeps them."""
        lines: list[tuple[str, Any]] = [("session", self.view().model_dump(mode="json"))]
        for key, op_id in self.keys.items():
            if op_id in self.dropped:
                lines.append(("dropped", {"session": self.id, "id": op_id, "kind": self.dropped[op_id], "key": key}))
        return lines + [("op", self.op_line(op)) for op in self.ops.values()]

    def busy(self) -> bool:
        """Whether an operation of this session is queued or running."""
        return any(op.env.status not in wire.TERMINAL_STATUSES for op in self.ops.values())

    def view(self) -> wire.Session:
        """The session as the API shows it: the server's own ids and state, the backend's progress."""
        backend = self.backend  # read once: a stop may let it go meanwhile
        info = backend.session() if backend is not None else self.final
        return wire.Session(
            id=self.id,
            status=self.status,
            base_model=self.base_model,
            model_resources_id=self.resource_id,
            created_by=self.created_by,
            created_at=self.created_at,
            updated_at=self.updated_at,
            step=info.step if info else 0,
            inference_checkpoints=info.inference_checkpoints if info else [],
            training_checkpoints=info.training_checkpoints if info else [],
            metadata=self.metadata,
            policy_state=info.policy_state if info else wire.PolicyState(),
            display_name=self.display_name,
            lora_config=info.lora_config if info and info.lora_config else self.lora_config,
            resume_from_checkpoint_id=self.resume_from,
            error=self.error,
        )

    @classmethod
    def restored(cls, view: wire.Session) -> SessionRecord:
        """A session from its saved view (a restarted server): no backend, its progress in ``final``."""
        return cls(
            id=view.id, resource_id=view.model_resources_id, base_model=view.base_model, created_by=view.created_by,
            created_at=view.created_at, updated_at=view.updated_at, status=view.status, lora_config=view.lora_config,
            resume_from=view.resume_from_checkpoint_id, display_name=view.display_name, metadata=view.metadata,
            final=view, error=view.error,
        )  # fmt: skip


@dataclass
class CheckpointRecord:
    info: wire.Checkpoint
    path: Path
    """Its file (training) or folder (inference): it outlives the session and its backend."""


T = TypeVar("T")


def page(
    items: Iterable[T],
    after: str | None,
    limit: int,
    keep: Callable[[T], bool],
    ident: Callable[[T], str],
    created: Callable[[T], datetime],
) -> tuple[list[T], wire.ListMeta]:
    """Newest first, one page after the cursor ``after`` (the last id of the previous page).

    The cursor is found in the *unfiltered* order, so it stays valid when its object stops matching the
    filters between two pages (a session that stopped during a ``status=RUNNING`` listing); objects are
    never deleted, so a cursor never dangles.
    """
    ordered = sorted(items, key=lambda i: (created(i), ident(i)), reverse=True)
    if after is not None:
        ids = [ident(i) for i in ordered]
        if after not in ids:
            raise ServerError(400, f"unknown cursor {wire.shown(after, SHOWN)}", param="after")
        ordered = ordered[ids.index(after) + 1 :]
    matching = [i for i in ordered if keep(i)]
    chunk, more = matching[:limit], len(matching) > limit
    return chunk, wire.ListMeta(limit=limit, has_more=more, next_cursor=ident(chunk[-1]) if more and chunk else "")


def status_filter(status: list[str] | None, catalogue: type[StrEnum]) -> Callable[[Any], bool]:
    """``status`` is each ``status`` of the query, comma-joined as the SDK sends a list or repeated as other
    clients do (``?status=A&status=B``: every value counts); None keeps everything. A value that is not one
    of ``catalogue`` (a typo, an empty item), or is its UNSPECIFIED (which the reference's filter omits), is a
    400 naming ``status``: it would match nothing, silently."""
    choices = wire.filterable(catalogue)
    wanted = {value for item in status for value in item.split(",")} if status else None
    unknown = sorted(wanted - set(choices)) if wanted is not None else []
    if unknown:
        named = wire.shown(unknown[0], SHOWN)
        said = f"status {named} is not a {catalogue.__name__}: one of {', '.join(choices)}"
        raise ServerError(400, said, param="status")
    return lambda item: wanted is None or item.status in wanted

"""The large-payload side channel, as SDK 3.1.1 speaks it.

Upload: ``POST .../training-sessions/{sid}/payloads/upload-url`` gives a payload id and a presigned URL;
the client PUTs the whole JSON body there (no Authorization header), then submits the operation with a
small stand-in body plus ``payload_id``: the uploaded object replaces the stand-in's members.

Download: a result too large to inline (``ServerSettings.result_offload_bytes``) keeps its small members
and gains ``payload_id``; ``POST .../payloads/{id}/download-url`` gives a presigned URL of the rest.

Payloads live in memory and belong to one session. Uploads are a client's bytes, so they are bounded:
each byte is counted as it arrives against ``max_session_payload_bytes`` and ``max_total_payload_bytes``
(429 past either, before the bytes are kept), and freed when the operation naming the upload is
submitted, when the upload expires unused (``payload_ttl``) or when its session stops. An upload URL
stores one body: the same bytes again (a retry whose answer was lost) are a 200, other bytes a 409.
Offloaded results are copies of results the session keeps anyway; they go when the session stops.
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlnb import wire
from rlnb.server.errors import ServerError, not_found
from rlnb.server.json_body import read_json
from rlnb.server.records import SessionRecord
from rlnb.server.settings import ServerSettings


@dataclass
class Payload:
    id: str
    session_id: str
    upload: bool
    """Made by upload-url (a client's bytes, counted against the caps), else an offloaded result."""
    expires: float
    """An upload still unused at this time (seconds since the epoch) is dropped."""
    data: bytes | bytearray | None = None
    """The JSON object's bytes; None until uploaded, and again once used."""
    digest: str = ""
    receiving: bool = False
    """A PUT is reading its body now."""
    used: bool = False
    """An operation was submitted with it: its bytes are freed and it takes no other upload."""
    held: int = 0
    """Bytes counted against the caps for it (stored, or arriving)."""


class PayloadStore:
    """Payloads by id. Shares the registry's lock (one locking rule for all server state)."""

    def __init__(self, lock: threading.RLock, settings: ServerSettings, clock: Callable[[], float]):
        self._lock, self.settings, self._clock = lock, settings, clock
        self._payloads: dict[str, Payload] = {}
        self._held: defaultdict[str, int] = defaultdict(int)
        self.total = 0
        """Uploaded bytes held now, all sessions together."""
        self._unused: defaultdict[str, int] = defaultdict(int)
        """Uploads not used yet, per session (``max_session_uploads``)."""

    def new_upload(self, session: SessionRecord) -> Payload:
        """A payload to upload to; only an active session takes uploads (409). Under the lock a stop takes
        to drop the session's payloads, so none is made after it."""
        expires = self._clock() + self.settings.payload_ttl
        p = Payload(f"pl-{uuid.uuid4()}", session.id, upload=True, expires=expires)
        with self._lock:
            if session.status not in wire.SESSION_ACTIVE:
                why = f"session {session.id} is {session.status}: it takes no uploads"
                raise ServerError(409, why, param="session_id")
            cap = self.settings.max_session_uploads
            if self._unused[session.id] >= cap:
                raise ServerError(
                    429, f"session {session.id} holds {cap} upload URLs not used yet (max_session_uploads): submit "
                    "the operations that use them, or let them expire",
                )  # fmt: skip
            self._unused[session.id] += 1
            self._payloads[p.id] = p
        return p

    def new_result(self, session_id: str, data: bytes) -> Payload:
        p = Payload(f"pl-{uuid.uuid4()}", session_id, upload=False, expires=float("inf"), data=data)
        with self._lock:
            self._payloads[p.id] = p
        return p

    def held(self, session_id: str) -> int:
        """Uploaded bytes one session holds now."""
        with self._lock:
            return self._held.get(session_id, 0)

    # -- uploads (the presigned PUT) ---------------------------------------------------------------

    def begin_upload(self, payload_id: str, declared: int | None) -> Payload:
        """Start reading a PUT's body into the payload (its URL's signature is checked already); a
        declared length that cannot fit the caps is refused before any byte is read."""
        with self._lock:
            p = self._payloads.get(payload_id)
            if p is None or not p.upload:
                raise ServerError(404, f"payload {payload_id} is gone (its session stopped, or it expired unused)")
            if p.used:
                raise ServerError(409, f"payload {payload_id} was already used by an operation: get a new upload URL")
            if p.receiving:
                raise ServerError(409, f"payload {payload_id} is being uploaded by another request", retry=True)
            if declared is not None:
                self._check_room(p, declared)
            p.receiving = True
            return p

    def reserve(self, p: Payload, n: int) -> None:
        """Count ``n`` more bytes of an upload against the caps before they are kept (429 past one)."""
        with self._lock:
            if self._payloads.get(p.id) is not p:
                raise ServerError(409, f"payload {p.id} was dropped while it was uploaded (its session stopped)")
            self._check_room(p, n)
            p.held += n
            self._held[p.session_id] += n
            self.total += n

    def _check_room(self, p: Payload, n: int) -> None:
        s = self.settings
        session = self._held.get(p.session_id, 0)
        if session + n > s.max_session_payload_bytes:
            raise ServerError(
                429, f"session {p.session_id} holds {session} bytes of uploads and this needs {n} more; the limit "
                f"is {s.max_session_payload_bytes} (max_session_payload_bytes): submit the operations that use "
                "them first",
            )  # fmt: skip
        if self.total + n > s.max_total_payload_bytes:
            raise ServerError(
                429, f"this server holds {self.total} bytes of uploads and this needs {n} more; the limit is "
                f"{s.max_total_payload_bytes} (max_total_payload_bytes): try again later",
            )  # fmt: skip

    def finish_upload(self, p: Payload, data: bytearray) -> None:
        """Keep the body that arrived (its bytes were reserved); a second PUT must send the same bytes."""
        digest = hashlib.sha256(data).hexdigest()
        with self._lock:
            p.receiving = False
            if self._payloads.get(p.id) is not p:
                raise ServerError(409, f"payload {p.id} was dropped while it was uploaded (its session stopped)")
            if p.data is None:
                p.data, p.digest, p.expires = data, digest, self._clock() + self.settings.payload_ttl
                return
            self._release(p, len(data))  # a retry: the first copy is kept
            if digest != p.digest:
                raise ServerError(409, f"payload {p.id} was already uploaded with other bytes: a URL takes one body")

    def abort_upload(self, p: Payload, arrived: int) -> None:
        """A PUT failed part-way: free what it reserved; the URL may be used again."""
        with self._lock:
            if p.receiving:
                p.receiving = False
                self._release(p, arrived)

    def _release(self, p: Payload, n: int) -> None:
        n = min(n, p.held)
        p.held -= n
        self._held[p.session_id] -= n
        self.total -= n
        if not self._held[p.session_id]:
            del self._held[p.session_id]

    # -- reading ---------------------------------------------------------------------------------

    def get(self, payload_id: str) -> bytes | bytearray:
        """A stored payload's bytes (the presigned GET; its signature is checked already)."""
        with self._lock:
            p = self._payloads.get(payload_id)
        if p is None:
            raise ServerError(404, f"payload {payload_id} is gone (its session stopped, or it expired unused)")
        if p.data is None:
            raise ServerError(404, f"payload {payload_id} has no bytes (never uploaded, or already used)")
        return p.data

    def owned(self, session_id: str, payload_id: str) -> Payload:
        with self._lock:
            p = self._payloads.get(payload_id)
        if p is None or p.session_id != session_id:
            raise not_found("payload", payload_id, "payload_id")
        return p

    def body(self, session_id: str, payload_id: str) -> dict[str, Any]:
        """The uploaded JSON object an operation body refers to."""
        p = self.owned(session_id, payload_id)
        if p.used:
            raise ServerError(
                409, f"payload {payload_id} was already used by an operation: upload the body again", param="payload_id"
            )
        data = p.data
        if data is None or p.receiving:
            raise ServerError(
                409, f"payload {payload_id} was never uploaded (PUT its upload_url first)", param="payload_id"
            )
        try:
            obj = read_json(data, "payload")  # a too-long integer: 400 naming it
        except ValueError as exc:
            raise ServerError(400, f"payload {payload_id} is not JSON: {exc}", param="payload_id") from None
        except RecursionError:
            raise ServerError(400, f"payload {payload_id} nests JSON too deeply", param="payload_id") from None
        if not isinstance(obj, dict):
            raise ServerError(400, f"payload {payload_id} must be a JSON object", param="payload_id")
        return obj

    def size(self, session_id: str, payload_id: str) -> int:
        """The bytes of an upload of ``session_id`` (0 before they arrived, or once used: ``body`` says why)."""
        data = self.owned(session_id, payload_id).data
        return 0 if data is None else len(data)

    def claim(self, session_id: str, payload_id: str) -> None:
        """An operation is being submitted with this upload: free its bytes; it takes no other. Called under the
        lock that queues the operation, so two submissions naming one upload cannot both run it (read first, outside
        it, both would find it unclaimed and run)."""
        with self._lock:
            p = self.owned(session_id, payload_id)
            if p.used:
                raise ServerError(
                    409, f"payload {payload_id} was already used by an operation: upload the body again",
                    param="payload_id",
                )  # fmt: skip
            if p.upload:
                p.used, p.data = True, None
                self._release(p, p.held)
                self._forget_unused(p)

    # -- dropping --------------------------------------------------------------------------------

    def drop(self, payload_id: str) -> None:
        """Free one payload now (a result whose operation was let go); one already gone is no error."""
        with self._lock:
            p = self._payloads.get(payload_id)
            if p is not None:
                self._drop(p)

    def drop_session(self, session_id: str) -> None:
        with self._lock:
            for p in [p for p in self._payloads.values() if p.session_id == session_id]:
                self._drop(p)

    def sweep(self) -> int:
        """Drop uploads unused past their expiry (not one being received: the body deadline ends that);
        returns how many."""
        now = self._clock()
        with self._lock:
            stale = [p for p in self._payloads.values() if p.expires < now and not p.receiving]
            for p in stale:
                self._drop(p)
        return len(stale)

    def _drop(self, p: Payload) -> None:
        del self._payloads[p.id]
        p.data, p.receiving = None, False
        self._release(p, p.held)
        if p.upload and not p.used:
            self._forget_unused(p)

    def _forget_unused(self, p: Payload) -> None:
        self._unused[p.session_id] -= 1
        if not self._unused[p.session_id]:
            del self._unused[p.session_id]

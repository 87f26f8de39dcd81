"""The large-payload side channel, as SDK 3.1.1 speaks it.

Upload: ``POST .../training-sessions/{sid}/payloads/upload-url`` gives a payload id and a presigned URL;
the client PUTs the whole JSON body there (no Authorization header), then submits the operation with a
small stand-in body plus ``payload_id``: the uploaded object replaces the stand-in's members.

Download: a result too large to inline (``ServerSettings.result_offload_bytes``) keeps its small members
and gains ``payload_id``; ``POST .../payloads/{id}/download-url`` gives a presigned URL of the rest.

Payloads live in memory, belong to one session and are dropped when it stops.
"""

from __future__ import annotations

import hmac
import json
import secrets
import threading
import uuid
from dataclasses import dataclass
from typing import Any

from rlnb.server.errors import ServerError, not_found


@dataclass
class Payload:
    id: str
    session_id: str
    secret: str
    data: bytes | None = None
    """The JSON object's bytes; None until uploaded."""


class PayloadStore:
    """Payloads by id. Shares the registry's lock (one locking rule for all server state)."""

    def __init__(self, lock: threading.RLock, max_bytes: int):
        self._lock, self.max_bytes = lock, max_bytes
        self._payloads: dict[str, Payload] = {}

    def new(self, session_id: str, data: bytes | None = None) -> Payload:
        p = Payload(f"pl-{uuid.uuid4()}", session_id, secrets.token_urlsafe(16), data)
        with self._lock:
            self._payloads[p.id] = p
        return p

    def signed(self, payload_id: str, sig: str) -> Payload:
        """The payload, if ``sig`` is its signature (403 otherwise)."""
        with self._lock:
            p = self._payloads.get(payload_id)
        if p is None or not hmac.compare_digest(sig.encode(), p.secret.encode()):
            raise ServerError(403, "bad or missing payload signature")
        return p

    def put(self, payload_id: str, sig: str, data: bytes) -> None:
        """Store an upload (the presigned PUT)."""
        p = self.signed(payload_id, sig)
        if len(data) > self.max_bytes:
            raise ServerError(413, f"payload is {len(data)} bytes; the limit is {self.max_bytes}")
        with self._lock:
            p.data = data

    def get(self, payload_id: str, sig: str) -> bytes:
        """A stored payload's bytes (the presigned GET)."""
        p = self.signed(payload_id, sig)
        if p.data is None:
            raise ServerError(404, f"payload {payload_id} has not been uploaded")
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
        if p.data is None:
            raise ServerError(
                409, f"payload {payload_id} was never uploaded (PUT its upload_url first)", param="payload_id"
            )
        try:
            obj = json.loads(p.data)
        except ValueError as exc:
            raise ServerError(400, f"payload {payload_id} is not JSON: {exc}", param="payload_id") from None
        if not isinstance(obj, dict):
            raise ServerError(400, f"payload {payload_id} must be a JSON object", param="payload_id")
        return obj

    def drop_session(self, session_id: str) -> None:
        with self._lock:
            for pid in [pid for pid, p in self._payloads.items() if p.session_id == session_id]:
                del self._payloads[pid]

"""Presigned URLs: built on the server's configured address, signed for exactly what they fetch.

A checkpoint file URL is signed (HMAC-SHA256 with the server's key) for one checkpoint, one variant, one
file and an expiry time, so it cannot fetch another file or variant, and stops working after
``download_ttl`` seconds. A payload URL is signed the same way for one payload, one direction (an upload
URL cannot download, nor a download URL upload) and an expiry (``payload_ttl``). Checkpoints outlive
their session and resource in the API (they are listed, downloaded and resumed on their own), so a link
keeps working after both are stopped, until it expires.
URLs never take their host from a request's Host header (``ServerSettings.public_url``).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from typing import Literal
from urllib.parse import quote, urlencode

from rlnb.server.errors import ServerError
from rlnb.wire.paths import API_PREFIX

CHECKPOINT_FILES = f"{API_PREFIX}/checkpoints/{{cid}}/files/{{kind}}/{{name}}"
PAYLOADS = f"{API_PREFIX}/payloads/{{pid}}"
Direction = Literal["upload", "download"]


class Signer:
    def __init__(self, key: bytes, public_url: str, clock: Callable[[], float]):
        self._key, self.public_url, self._clock = key, public_url.rstrip("/"), clock

    def url(self, path: str, **query: str) -> str:
        """An absolute URL on the configured address."""
        return f"{self.public_url}{path}" + (f"?{urlencode(query)}" if query else "")

    def user(self, token: str) -> str:
        """The creator id of a caller holding ``token`` (``created_by``), keyed with the server's key: the token's plain
        SHA-256 (its first 12 digits) was in every answer and in the state journal, an offline check of guessed tokens.
        The key is kept with ``--state-dir``: the id stays the same across restarts."""
        return "user-" + self._sign("user", token)[:12]

    def _sign(self, *parts: str) -> str:
        return hmac.new(self._key, "\n".join(parts).encode(), hashlib.sha256).hexdigest()

    def checkpoint_file(self, cid: str, kind: str, name: str, ttl: int) -> str:
        """The presigned URL of one file of one variant of a checkpoint, valid for ``ttl`` seconds."""
        expires = str(int(self._clock()) + ttl)
        path = CHECKPOINT_FILES.format(cid=quote(cid, safe=""), kind=kind, name=quote(name, safe=""))
        return self.url(path, expires=expires, sig=self._sign("checkpoint", cid, kind, name, expires))

    def check_checkpoint_file(self, cid: str, kind: str, name: str, expires: str, sig: str) -> None:
        """403 unless ``sig`` signs exactly this file and ``expires`` has not passed."""
        self._check(
            ("checkpoint", cid, kind, name), expires, sig,
            bad="bad or missing download signature (a URL is signed for one file of one variant)",
            again="ask for a new one (GET .../download)",
        )  # fmt: skip

    def payload(self, pid: str, direction: Direction, ttl: int) -> str:
        """The presigned URL that uploads (PUT) or downloads (GET) one payload, valid for ``ttl`` seconds."""
        expires = str(int(self._clock()) + ttl)
        path = PAYLOADS.format(pid=quote(pid, safe=""))
        return self.url(path, expires=expires, sig=self._sign("payload", direction, pid, expires))

    def check_payload(self, pid: str, direction: Direction, expires: str, sig: str) -> None:
        """403 unless ``sig`` signs this payload for this direction and ``expires`` has not passed."""
        route = "upload-url" if direction == "upload" else f"{pid}/download-url"
        self._check(
            ("payload", direction, pid), expires, sig,
            bad=f"bad or missing payload signature (this URL is not the {direction} URL of payload {pid})",
            again=f"ask for a new one (POST .../payloads/{route})",
        )  # fmt: skip

    def _check(self, parts: tuple[str, ...], expires: str, sig: str, *, bad: str, again: str) -> None:
        good = self._sign(*parts, expires)
        if not hmac.compare_digest(sig.encode(), good.encode()):
            raise ServerError(403, bad)
        if not expires.isdigit() or int(expires) < self._clock():
            raise ServerError(403, f"this URL has expired: {again}")

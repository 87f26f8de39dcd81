"""The client side of the payload side channel: what SDK 3.1.1 uploads and what it sends inline.

A forward-backward, custom-forward-backward or sample body over ``wire.LARGE_PAYLOAD_BYTES`` of compact
JSON is uploaded whole (``split``'s first part) and the operation is submitted with a small stand-in
that passes validation (the second part, plus ``payload_id``): every numeric list cut to
``VALIDATION_LEN`` items, ``shape`` and the sparse keys dropped, and the model inputs' tokens cut to one
shared budget of ``VALIDATION_LEN`` tokens. The server trains on the upload, never on the stand-in.
The presigned URLs the API hands out are followed only when absolute, and never from https down to http
(``presigned``).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

from rlnb import wire
from rlnb.errors import APIError

VALIDATION_LEN = 8
"""Items kept per numeric list in the stand-in body (the SDK's ``_VALIDATION_MAX_SEQ_LEN``)."""
OMITTED_KEYS = frozenset({"shape", "sparse_crow_indices", "sparse_col_indices"})


def presigned(url: str, base_url: str, name: str) -> str:
    """``url``, the API's ``upload_url`` / ``download_url`` (``name``), or ``APIError`` naming it (never its
    signature): it must be absolute (a relative one would be joined to ``base_url`` and go to the API server, a path
    it does not have), and http only under an http ``base_url`` (else the training data crosses in clear text)."""
    parts = urlsplit(url)
    shown = parts._replace(query="", fragment="").geturl()
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise APIError(f"the server's {name} {shown!r} is not an absolute http(s) URL, as the API's presigned URLs "
                       "are: nothing was sent to it")  # fmt: skip
    if parts.scheme == "http" and urlsplit(base_url).scheme == "https":
        raise APIError(f"the server's {name} {shown} is http:// under an https base_url: rlnb sends and fetches "
                       "payloads over https only there, and sent nothing to it (rlnb serve behind an https proxy: "
                       "give it --public-url https://...)")  # fmt: skip
    return url


def compact(data: Any) -> bytes:
    """JSON as the SDK measures and sends it: no spaces, ASCII, NaN refused."""
    return json.dumps(data, separators=(",", ":"), allow_nan=False).encode()


def split(kind: wire.OperationKind, body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(what to upload, the inline stand-in without ``payload_id``) for one operation body of one of
    ``wire.UPLOADED_MEMBERS``' kinds."""
    keys = wire.UPLOADED_MEMBERS[kind]
    upload = dict(body) if keys is None else {k: body[k] for k in keys if k in body}
    return upload, shrink(body)


def shrink(value: Any, max_len: int = VALIDATION_LEN) -> Any:
    """The stand-in of ``value``: numeric lists cut to ``max_len``, reserved tensor keys dropped at every
    depth, and a model input's ``chunks`` sharing one budget of ``max_len`` tokens in order."""
    if isinstance(value, dict):
        return {
            key: _chunks(item, max_len) if key == "chunks" and isinstance(item, list) else shrink(item, max_len)
            for key, item in value.items()
            if key not in OMITTED_KEYS
        }
    if isinstance(value, list):
        if value and isinstance(value[0], int | float):
            return value[:max_len]
        return [shrink(v, max_len) for v in value]
    return value


def _chunks(chunks: list[Any], max_len: int) -> list[Any]:
    budget, kept = max_len, []
    for chunk in chunks:
        if budget <= 0:
            break
        kept.append(shrink(chunk, budget))
        tokens = chunk.get("encoded_text", {}).get("tokens") if isinstance(chunk, dict) else None
        if isinstance(tokens, list):
            budget -= min(len(tokens), budget)
    return kept

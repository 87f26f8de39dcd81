"""What a server sends back: read under a size cap, decoded, scrubbed of API keys, parsed into wire models.

Every body the client reads passes through here, successful or not, because a hostile server (or a proxy)
may echo the ``Authorization`` header into any field — a session's ``display_name``, an operation's
metrics, an error message — and what is parsed ends up in ``session.info()``, the history and the run
folder. Keys are masked *after* JSON decoding, so ``\\u``-escaped ones are caught too. A decoded body whose
text holds neither a backslash nor a key cannot hide one, and is parsed straight from JSON (the fast path).

A body is read in chunks up to ``max_bytes``: a server that streams without end cannot fill the memory.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from rlnb import _secrets, wire
from rlnb.errors import APIError, APIStatusError, status_error_class

M = TypeVar("M", bound=BaseModel)

MAX_RESPONSE_BYTES = 256 << 20
"""Largest response body read (decoded bytes). Results too large for it come through the payload side
channel; rlnb serve accepts payloads up to the same size, and the largest inline result it can send (a
forward-backward's ``loss_fn_outputs`` over its biggest batch) fits well under it."""


def read(response: httpx.Response, max_bytes: int) -> None:
    """Read a streamed response's body into ``response.content``, or raise ``APIError`` past ``max_bytes``
    decoded bytes (a declared ``Content-Length`` past it is refused before reading)."""
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise _too_large(response, max_bytes)
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_bytes():
        size += len(chunk)
        if size > max_bytes:
            raise _too_large(response, max_bytes)
        chunks.append(chunk)
    response._content = b"".join(chunks)


def _too_large(response: httpx.Response, max_bytes: int) -> APIError:
    request = response.request
    return APIError(
        f"{response.status_code} response body is larger than max_response_bytes ({max_bytes} bytes); rlnb "
        "stopped reading it",
        method=request.method,
        url=str(request.url.copy_with(query=None)),
    )


def _text(content: bytes) -> str:
    """JSON bytes as text, in whichever UTF encoding they came (as ``json.loads`` would detect it)."""
    return content.decode(json.detect_encoding(content), "surrogatepass")


class Scrubber:
    """Masks the client's own key (whatever its length) and every key ``rlnb._secrets`` knows."""

    def __init__(self, own_key: str | None):
        self._own = own_key

    def _keys(self) -> list[str]:
        keys = _secrets.known()
        if self._own and self._own not in keys:
            keys.append(self._own)
        return sorted(keys, key=len, reverse=True)

    def redact(self, text: str) -> str:
        return _secrets.redact_keys(text, self._keys())

    def scrub(self, data: Any) -> Any:
        """Decoded JSON with every string (keys of objects too) redacted."""
        if isinstance(data, str):
            return self.redact(data)
        if isinstance(data, dict):
            return {self.redact(str(k)): self.scrub(v) for k, v in data.items()}
        if isinstance(data, list):
            return [self.scrub(v) for v in data]
        return data

    def _clean(self, text: str) -> bool:
        """Whether no decoded string of this JSON text can hold a key (no escapes, no key as written)."""
        return "\\" not in text and not _secrets.holds(text, self._keys())

    def decode(self, response: httpx.Response, what: str) -> Any:
        """The body as JSON, every string scrubbed; ``APIError`` (no raw text chained) if it is not JSON."""
        try:
            text = _text(response.content)
            data = json.loads(text)
            return data if self._clean(text) else self.scrub(data)
        except (ValueError, RecursionError) as exc:  # RecursionError: JSON nested past Python's stack
            detail = f"not JSON ({type(exc).__name__})"
        raise invalid(response, what, detail)

    def parse(self, response: httpx.Response, model: type[M]) -> M:
        """The body as ``model``: straight from JSON when it cannot hold a key, else decoded and scrubbed."""
        try:
            text = _text(response.content)
            clean = self._clean(text)
        except ValueError:
            clean = False
        if not clean:
            return self.validate(response, self.decode(response, model.__name__), model)
        try:
            return model.model_validate_json(text)
        except ValidationError as exc:
            detail = self.redact(str(exc))
        raise invalid(response, model.__name__, detail)  # outside ``except``: no __context__ keeps the body

    def validate(self, response: httpx.Response, data: Any, model: type[M]) -> M:
        """Scrubbed ``data`` as ``model``, or ``APIError`` with no chained pydantic error (it quotes the body)."""
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            detail = self.redact(str(exc))
        raise invalid(response, model.__name__, detail)

    def status_error(self, request: httpx.Request, response: httpx.Response) -> APIStatusError:
        """The exception for an error status, with the server's message and decoded body, both scrubbed."""
        body: Any
        try:
            decoded = json.loads(_text(response.content))
        except (ValueError, RecursionError):
            text = self.redact(response.content.decode("utf-8", "replace"))
            message, body = (text.strip()[:500] or response.reason_phrase), text or None
        else:
            body = self.scrub(decoded)
            try:
                message = wire.ErrorData.model_validate(body).error.message
            except ValidationError:
                message = json.dumps(body, ensure_ascii=False)[:500]
        cls = status_error_class(response.status_code)
        url = str(request.url.copy_with(query=None))  # presigned URLs carry a signature in the query
        return cls(message, method=request.method, url=url, status_code=response.status_code, body=body)


def invalid(response: httpx.Response, what: str, detail: str) -> APIError:
    request = response.request
    return APIError(
        f"{response.status_code} response is not a valid {what}: {detail}",
        method=request.method,
        url=str(request.url.copy_with(query=None)),
    )

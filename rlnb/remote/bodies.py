"""What a server sends back: read under a size cap, decoded, scrubbed of API keys, parsed into wire models.

Every body the client reads passes through here, successful or not, because a hostile server (or a proxy)
may echo the ``Authorization`` header into any field — a session's ``display_name``, an operation's
metrics, an error message — and what is parsed ends up in ``session.info()``, the history and the run
folder. Keys are masked *after* JSON decoding, so ``\\u``-escaped ones are caught too. A decoded body whose
text holds neither a backslash nor a key cannot hide one, and is parsed straight from JSON (the fast path).

A body is read in chunks up to ``max_bytes``: a server that streams without end cannot fill the memory. The
client asks for gzip or deflate only and decodes them itself, ``max_bytes`` at most per chunk: httpx decodes
each chunk whole, so a few kilobytes of stacked gzip (``Content-Encoding: gzip, gzip``) or brotli would take 4 GB.
"""

from __future__ import annotations

import json
import zlib
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, SecretStr, ValidationError

from rlnb import wire
from rlnb._input.shown import printable
from rlnb.errors import APIError, APIStatusError, status_error_class
from rlnb.remote import masking, redirects
from rlnb.remote.masking import chain, forget_locals, reachable
from rlnb.secrets import redaction

M = TypeVar("M", bound=BaseModel)

MAX_RESPONSE_BYTES = 256 << 20
"""Largest response body read (decoded bytes). Results too large for it come through the payload side
channel; rlnb serve accepts payloads up to the same size, and the largest inline result it can send (a
forward-backward's ``loss_fn_outputs`` over its biggest batch) fits well under it."""


ACCEPT_ENCODING = "gzip, deflate"
"""The codings the client asks for (``Accept-Encoding``): those it decodes under the size cap."""
_ZLIB_BITS = {"gzip": zlib.MAX_WBITS | 16, "x-gzip": zlib.MAX_WBITS | 16, "deflate": zlib.MAX_WBITS}
_COMPRESSIONS = {"br", "zstd", "compress", "x-compress", "bzip2", "xz", "lzma", "exi", "pack200-gzip", "aes128gcm"}
"""Codings that change the bytes and that rlnb does not decode: refused. Any other token (``none``, ``utf-8``,
``binary`` from a misconfigured proxy) names no coding; it is read as identity, as httpx reads it."""


class _Inflater:
    """One gzip or deflate coding, decoded at most ``limit`` bytes per chunk (what is left of the cap, plus one)."""

    def __init__(self, coding: str):
        self._bits, self._first = _ZLIB_BITS[coding], True
        self._z = zlib.decompressobj(self._bits)

    def __call__(self, data: bytes, limit: int) -> bytes:
        first, self._first = self._first, False
        try:
            return self._z.decompress(data, limit)
        except zlib.error as exc:
            if first and self._bits == zlib.MAX_WBITS:  # deflate sent raw, without its zlib header (as httpx takes it)
                self._bits, self._z = -zlib.MAX_WBITS, zlib.decompressobj(-zlib.MAX_WBITS)
                return self(data, limit)
            raise httpx.DecodingError(f"the body is not valid gzip or deflate: {exc}") from None


def _inflaters(response: httpx.Response) -> list[_Inflater]:
    """The decoders of the response's ``Content-Encoding``, outermost first; ``APIError`` for a coding not asked for."""
    codings = [c.strip().lower() for c in response.headers.get("content-encoding", "").split(",")]
    codings = [c for c in codings if c in _ZLIB_BITS or c in _COMPRESSIONS]
    other = [c for c in codings if c not in _ZLIB_BITS]
    if other:
        request = response.request
        raise APIError(
            f"{response.status_code} response has Content-Encoding {', '.join(other)}, which rlnb did not ask for "
            f"(it asks for {ACCEPT_ENCODING}) and does not decode",
            method=request.method,
            url=str(request.url.copy_with(query=None)),
        )
    return [_Inflater(c) for c in reversed(codings)]


def read(response: httpx.Response, max_bytes: int) -> None:
    """Read a streamed response's body into ``response.content``, or raise ``APIError`` past ``max_bytes``
    decoded bytes (a declared ``Content-Length`` past it is refused before reading)."""
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise _too_large(response, max_bytes)
    if response.is_stream_consumed:  # read when it was made (an ``httpx.Response`` of bytes, as mocks answer)
        if len(response.content) > max_bytes:
            raise _too_large(response, max_bytes)
        return
    inflaters = _inflaters(response)
    chunks: list[bytes] = []
    size = 0
    for raw in response.iter_raw():
        chunk = raw
        for inflate in inflaters:  # each layer bounded by what is left of the cap: no layer holds more
            chunk = inflate(chunk, max_bytes - size + 1)
            if len(chunk) > max_bytes - size:
                raise _too_large(response, max_bytes)
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


MAX_ID = 200
"""The longest ``id`` of an unreadable answer kept to name what was made (the API's are tens of characters)."""


class Scrubber:
    """Masks the client's own key (whatever its length) and every key ``rlnb.secrets.redaction`` knows."""

    def __init__(self, own_key: SecretStr | None):
        self._own = own_key
        self._own_key = own_key.get_secret_value() if own_key else None  # one masker for every string (matcher)

    def _keys(self) -> list[str]:
        keys = redaction.known()
        if self._own and self._own.get_secret_value() not in keys:
            keys.append(self._own.get_secret_value())
        return sorted(keys, key=len, reverse=True)

    def cause(self, error: Exception | None) -> Exception | None:
        """``error`` to chain, unless its text, or a chained error's, quotes a key (then nothing is chained). The
        frames they passed through keep their lines but lose their locals (``traceback.clear_frames``; the frame that
        caught ``error`` still runs and keeps its own): httpcore's hold the request's headers, as h11's ``Request``
        event and the bytes written, which a traceback with locals (``--showlocals``, IPython, rich) printed."""
        if any(self.redact(str(each)) != str(each) for each in chain(error)) or reachable(error, self._keys()):
            return None  # reachable: an attribute of a transport's own httpx error (a copy of the headers)
        forget_locals(error)
        return error

    def mask(self, error: BaseException) -> bool:
        """``masking.mask`` with the client's key and every key rlnb knows."""
        return masking.mask(error, self._keys())

    def redact(self, text: str) -> str:
        return redaction.redact(text, self._own_key)

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
        return "\\" not in text and not redaction.matcher(self._own_key).search(text)

    def decode(self, response: httpx.Response, what: str) -> Any:
        """The body as JSON, every string scrubbed; ``APIError`` (no raw text chained) if it is not JSON."""
        data, detail = self._decoded(response)
        if detail:  # raised where no local holds the body's text (a traceback with locals would print an echoed key)
            raise invalid(response, what, detail)
        return data

    def parse(self, response: httpx.Response, model: type[M]) -> M:
        """The body as ``model``: straight from JSON when it cannot hold a key, else decoded and scrubbed."""
        parsed, detail = self._parsed(response, model)
        if parsed is None:  # as ``decode``: this frame holds no body text
            raise invalid(response, model.__name__, detail)
        return parsed

    def validate(self, response: httpx.Response, data: Any, model: type[M]) -> M:
        """Scrubbed ``data`` as ``model``, or ``APIError`` with no chained pydantic error (it quotes the body)."""
        parsed, detail = self._validated(data, model)
        if parsed is None:
            raise invalid(response, model.__name__, detail)
        return parsed

    def _decoded(self, response: httpx.Response) -> tuple[Any, str]:
        """The scrubbed JSON and "", or None and why the body is not JSON; its text stays in this frame, which has
        returned before anything is raised."""
        try:
            text = _text(response.content)
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:  # RecursionError: JSON nested past Python's stack
            return None, f"not JSON ({type(exc).__name__})"
        return (data if self._clean(text) else self.scrub(data)), ""

    def _parsed(self, response: httpx.Response, model: type[M]) -> tuple[M | None, str]:
        """``parse``'s answer, or None and what is wrong (masked)."""
        try:
            text = _text(response.content)
            clean = self._clean(text)
        except ValueError:
            clean = False
        if not clean:
            data, detail = self._decoded(response)
            return (None, detail) if detail else self._validated(data, model)
        try:
            return model.model_validate_json(text, context=wire.FROM_SERVER), ""
        except ValidationError as exc:  # not raised from here: no __context__ keeps the body
            return None, self.redact(str(exc))

    def _validated(self, data: Any, model: type[M]) -> tuple[M | None, str]:
        """``data`` as ``model``, or None and pydantic's error (masked; it quotes the body)."""
        try:
            return model.model_validate(data, context=wire.FROM_SERVER), ""
        except ValidationError as exc:
            return None, self.redact(str(exc))

    def status_error(
        self, request: httpx.Request, response: httpx.Response, base_url: str, note: str = ""
    ) -> APIStatusError:
        """The exception for an error status, with the server's message and decoded body, both scrubbed (a
        redirect: where to, and the ``base_url`` to use instead of ``base_url`` when the API is what moved), and
        ``note`` after the message."""
        body: Any
        try:
            decoded = json.loads(_text(response.content))
        except (ValueError, RecursionError):
            text = self.redact(response.content.decode("utf-8", "replace"))
            message, body = (text.strip()[:500] or response.reason_phrase), text or None
        else:
            body = self.scrub(decoded)
            message = _said(body) or json.dumps(body, ensure_ascii=False)[:500]
        if response.has_redirect_location:  # a 302 or 304 without one (a proxy's) would raise a bare KeyError
            message = self._redirect(request, response, base_url)
        cls = status_error_class(response.status_code)
        url = str(request.url.copy_with(query=None))  # presigned URLs carry a signature in the query
        message = printable(message.replace("\r\n", "\n"), keep="\n\t")  # no ANSI escape of a server clears a terminal
        return cls(message + note, method=request.method, url=url, status_code=response.status_code, body=body)

    def _redirect(self, request: httpx.Request, response: httpx.Response, base_url: str) -> str:
        """Where a redirect points and why it is not followed (more than "301 <html>Moved</html>": http:// for
        https:// or an old host name is an easy mistake, whose fix is the address the server names)."""
        location = response.headers["location"]
        why = redirects.fault(location)
        presigned = bool(request.extensions.get(redirects.PRESIGNED))
        if why:  # a relative path to httpx (``ht!tp://x``): the address it joins is no address the server named
            then = "it cannot be followed" if presigned else "rlnb follows no redirect"
            return self.redact(f"{response.reason_phrase}: the server redirects to {location[:200]!r}, which is no URL "
                               f"({why}); {then}")  # fmt: skip
        if presigned:  # its redirects are followed, but this one: no key would go along (it carries none)
            hops = len(response.history)
            hop = response.request if hops else request  # the request this one answered
            where = hop.url.join(location).copy_with(query=None)
            after = f" (after {hops} redirect{'s' * (hops > 1)})" if hops else ""
            return self.redact(f"{response.reason_phrase}: the presigned URL redirects to {where}{after}, which is not "
                               f"followed: {redirects.unfollowed(hop, response, hops)}")  # fmt: skip
        where = request.url.join(location).copy_with(query=None)
        base, asked = httpx.URL(base_url), request.url
        fix = "use the address it names"
        if asked.host == base.host and asked.path.startswith(base.path.rstrip("/") + "/"):  # a call of the API
            tail = asked.path[len(base.path.rstrip("/")) :]
            if where.path.endswith(tail):
                fix = f"pass base_url={str(where.copy_with(path=where.path.removesuffix(tail) or '/')).rstrip('/')!r}"
        return self.redact(
            f"{response.reason_phrase}: the server redirects to {where}; rlnb follows no redirect (the API key would "
            f"go with it): {fix}"
        )


def _said(body: Any) -> str | None:
    """The message of an error body: the API's ``{"error": {"message", ...}}`` (its ``type`` left out too), a
    gateway's ``{"error": "..."}``, or a gRPC gateway's ``{"code": 3, "message": "...", "details": []}`` (which the
    service may send instead); None for any other body, so that a body without the API's ``type`` is not shown
    whole as the message."""
    err = body.get("error") if isinstance(body, dict) else None
    for said in (err.get("message") if isinstance(err, dict) else err, body.get("message") if err is None else None):
        if isinstance(said, str) and said.strip():
            return said
    return None


def invalid(response: httpx.Response, what: str, detail: str) -> APIError:
    """The error for an answer that is not a valid ``what``, with the answer's ``id`` where it has a readable one."""
    request = response.request
    error = APIError(
        f"{response.status_code} response is not a valid {what}: {detail}",
        method=request.method,
        url=str(request.url.copy_with(query=None)),
    )
    try:
        answer = json.loads(_text(response.content))
    except (ValueError, RecursionError):
        return error
    said = answer.get("id") if isinstance(answer, dict) else None
    if isinstance(said, str) and said.strip() and len(said) <= MAX_ID and redaction.redact(said) == said:
        error.answer_id = said  # an id that quotes a key is no id: not kept
    return error

"""The answer to a presigned checkpoint download: the bytes of a file the route opened itself (``locks.regular``: a
pipe or a device there is refused), one byte range of it when asked. Starlette's ``FileResponse`` opens the file
again by name: a pipe put there in between would be waited on for ever (a worker thread and the response held), and
an ASGI server offering ``http.response.pathsend`` is sent the name to open. Serving the opened descriptor through
it takes a private hook (``_open_file``) that another Starlette need not call; this response uses public APIs only."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from email.utils import formatdate
from typing import BinaryIO
from urllib.parse import quote

from starlette.datastructures import Headers
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

CHUNK = 64 * 1024
"""Bytes read and sent at a time (Starlette's ``FileResponse.chunk_size``)."""

_RANGE = re.compile(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*", re.ASCII | re.IGNORECASE)
"""One byte range, ``bytes=first-last``, ``bytes=first-`` or ``bytes=-suffix`` (RFC 9110 section 14.1.2)."""


class Unsatisfiable(Exception):
    """A range that starts past the file's end (or asks for its last 0 bytes): a 416."""


def _number(digits: str) -> int:
    """A range bound; past 20 digits, a number larger than any file (``int`` refuses 4,300 digits: a 500)."""
    return int(digits) if len(digits) <= 20 else 10**20


def byte_span(given: str | None, size: int) -> tuple[int, int] | None:
    """``(start, end)`` of the one byte range ``given`` (a Range header) asks of a file of ``size`` bytes; None for the
    whole file: no Range, several ranges or a form this server does not read (RFC 9110 lets a server ignore a Range
    header; Starlette answered a malformed one with a plain-text 400). ``Unsatisfiable`` for a range past the end."""
    match = _RANGE.fullmatch(given) if given is not None else None
    if match is None or not any(match.groups()):
        return None
    first, last = match.groups()
    if not first:  # the last ``last`` bytes
        suffix = _number(last)
        if suffix == 0:
            raise Unsatisfiable
        return (size - suffix, size) if suffix < size else None
    start = _number(first)
    if start >= size:
        raise Unsatisfiable
    end = min(_number(last) + 1, size) if last else size
    return (start, end) if start < end else None  # ``5-3`` is no range: ignored, as RFC 9110 says


class OpenedFileResponse(StreamingResponse):
    """``fh`` (opened by the route, closed here) as an attachment named ``filename``, with the headers a
    ``FileResponse`` sends (length, Last-Modified, ETag, Accept-Ranges); a Range of one span is a 206 of that span
    (If-Range honoured), one past the end a 416, any other Range the whole file."""

    def __init__(self, fh: BinaryIO, filename: str, request_headers: Headers) -> None:
        self._fh = fh
        stat_result = os.fstat(fh.fileno())  # the headers are the opened file's
        size = stat_result.st_size
        last_modified = formatdate(stat_result.st_mtime, usegmt=True)
        tag = hashlib.md5(f"{stat_result.st_mtime}-{size}".encode(), usedforsecurity=False).hexdigest()
        etag = f'"{tag}"'
        quoted = quote(filename)
        shown = f"filename*=utf-8''{quoted}" if quoted != filename else f'filename="{filename}"'
        headers = {
            "accept-ranges": "bytes",
            "content-disposition": f"attachment; {shown}",
            "last-modified": last_modified,
            "etag": etag,
        }
        if_range = request_headers.get("if-range")
        given = request_headers.get("range") if if_range is None or if_range in (etag, last_modified) else None
        status, span = 200, (0, size)
        try:
            asked = byte_span(given, size)
        except Unsatisfiable:
            status, span = 416, (0, 0)
            headers["content-range"] = f"bytes */{size}"
        else:
            if asked is not None:
                status, span = 206, asked
                headers["content-range"] = f"bytes {asked[0]}-{asked[1] - 1}/{size}"
        headers["content-length"] = str(span[1] - span[0])
        super().__init__(self._read(*span), status, headers, media_type="application/octet-stream")

    def _read(self, start: int, end: int) -> Iterator[bytes]:
        """The bytes from ``start`` to ``end``, a chunk at a time (each read in a worker thread)."""
        self._fh.seek(start)
        while start < end:
            chunk = self._fh.read(min(CHUNK, end - start))
            if not chunk:
                raise RuntimeError(f"the file was cut while it was sent ({end - start} bytes short)")
            start += len(chunk)
            yield chunk

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._fh.close()

"""A presigned URL's query is a credential: its signature lets whoever reads it fetch or replace the data until it
expires. rlnb's own log lines and errors leave it out, but httpx logs each request's URL whole (its INFO line
"HTTP Request: GET https://storage/...?sig=..."), and httpcore's and HTTP/2's DEBUG lines quote a redirect's
``Location`` and the request's path.

While this thread (or task) sends a presigned request (``sending``, which the remote client enters around each
one), ``QueryFilter``, on each of those loggers (``redaction.HTTP_LOGGERS``), masks the query of every URL or path
in the records they make: it sits on the loggers, so the line is masked whatever handler prints it (the root
logger's, ``configure_logging``'s, a user's). The API's own requests, sent outside ``sending``, log as they are.
"""

from __future__ import annotations

import contextvars
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager

from rlnb.secrets.masks import MASK
from rlnb.secrets.redaction import HTTP_LOGGERS

_SENDING: contextvars.ContextVar[bool] = contextvars.ContextVar("rlnb_presigned_send", default=False)

_QUERY = re.compile(r"(?<=[^\s\"'?])\?[^\s\"'<>#]+")
"""A query after a URL or a path (``/pl-3?sig=...``), up to a space, a quote (a header's bytes repr) or a
fragment."""


@contextmanager
def sending() -> Iterator[None]:
    """While in it, this thread sends a presigned request: its HTTP log records have their queries masked."""
    token = _SENDING.set(True)
    try:
        yield
    finally:
        _SENDING.reset(token)


def active() -> bool:
    """Whether this thread is sending a presigned request (``sending``)."""
    return _SENDING.get()


def mask(text: str) -> str:
    """``text`` with the query of each URL or path in it replaced by ``***``."""
    return _QUERY.sub(f"?{MASK}", text)


class QueryFilter(logging.Filter):
    """Masks the queries in a record made while ``sending``; never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not _SENDING.get():
            return True
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed log call: what it gave, masked, as its text
            record.msg, record.args = mask(f"{record.msg} % {record.args!r}"), None
            return True
        masked = mask(message)
        if masked != message:
            record.msg, record.args = masked, None
        return True


_FILTER = QueryFilter()
for _name in HTTP_LOGGERS:
    logging.getLogger(_name).addFilter(_FILTER)

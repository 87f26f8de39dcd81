"""API keys never leave rlnb: every text rlnb shows, raises or logs can be scrubbed of them.

``register(key)`` remembers a key (the remote client does, for its own); ``redact(text)`` replaces each
remembered key with ``***``. The client redacts what a server sends after JSON decoding, so a server
that echoes the key with ``\\u`` escapes is caught too.

httpcore's DEBUG log prints every response header, so a server or proxy that echoes the Authorization
header puts the key in it. ``RedactingFilter`` scrubs log records; ``configure_logging`` installs a handler
with it for rlnb, httpx and httpcore.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import IO

MASK = "***"
MIN_LENGTH = 8
"""Shorter strings are not treated as secrets (masking "a" everywhere would garble every message)."""

_keys: set[str] = set()
_lock = threading.Lock()


def register(key: str) -> None:
    """Remember ``key`` so that ``redact`` hides it from now on (for the life of the process)."""
    if len(key) >= MIN_LENGTH:
        with _lock:
            _keys.add(key)


def redact(text: str) -> str:
    """``text`` with every registered key replaced by ``***``."""
    for key in sorted(_keys, key=len, reverse=True):  # a key that contains another goes first
        if key in text:
            text = text.replace(key, MASK)
    return text


class RedactingFilter(logging.Filter):
    """A logging filter that replaces registered keys in each record's message (arguments included)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Mask every key rlnb has seen in the record's message and arguments; never drops a record."""
        message = record.getMessage()
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True


def configure_logging(
    level: int | str = logging.INFO, *, stream: IO[str] | None = None, http_level: int | str | None = None
) -> logging.Handler:
    """Log rlnb (and httpx / httpcore, at ``http_level``, default ``level``) to ``stream`` (stderr) through a
    ``RedactingFilter``, so that a key echoed by a server never reaches the log. The three loggers stop
    propagating to the root logger (whose handlers would print the records unfiltered). Returns the
    handler; to keep your own logging setup, add ``RedactingFilter()`` to your handlers instead."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    handler.addFilter(RedactingFilter())
    for name, lvl in (("rlnb", level), ("httpx", http_level or level), ("httpcore", http_level or level)):
        logger = logging.getLogger(name)
        logger.setLevel(lvl)
        logger.addHandler(handler)
        logger.propagate = False
    return handler

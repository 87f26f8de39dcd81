"""Secrets kept out of what a sink shows: its errors (a library quotes its server's URI whole) and its place (the
arguments a refusal of two sinks of one place names)."""

from __future__ import annotations

import re

from rlnb.secrets.redaction import redact

_PASSWORD = re.compile(r"(\b[a-zA-Z][\w+.-]*://[^/\s:]*:)[^\s/]*@")
"""A URL's password: up to the authority's last ``@``, as Python's ``urlsplit`` reads it (and the libraries send it): a
user named by an e-mail address (``http://bob@corp.com:pw@host``) would show the password whole, one with an ``@`` in
it (``p@ss``) its end."""
_QUERY_SECRET = re.compile(r"([?&;][\w.-]*(?:token|key|secret|password|passwd|pwd|sig|signature|auth)[\w.-]*=)"
                           r"[^&;#\s'\"]+", re.IGNORECASE)  # fmt: skip
"""A URL query parameter that carries a secret: Trackio's ``server_url`` holds ``?write_token=...``."""


def scrub(text: str) -> str:
    """``text`` without secrets: a URL's password (``http://bob:***@host``: MLflow's errors quote its tracking URI
    whole), a URL query's token (``?write_token=***``), and every key rlnb knows (``rlnb.secrets.redaction``)."""
    return redact(_QUERY_SECRET.sub(r"\1***", _PASSWORD.sub(r"\1***@", text)))


def scrubbed(exc: BaseException) -> BaseException:
    """``exc``, or a stand-in with its text scrubbed when that text held a secret (it is kept, shown and chained)."""
    text = str(exc)
    if scrub(text) == text:
        return exc
    return RuntimeError(f"{type(exc).__name__}: {scrub(text)}")

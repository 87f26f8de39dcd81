"""What one call of the API is (``Call``: what ``calls.Caller._send`` needs besides the client's settings), the
defaults every client starts from (base URL, timeouts, deadline), and which failures say a request did not act: apart
from the send path, which reads them, so that a call can be described by the endpoints without it."""

from __future__ import annotations

from typing import NamedTuple

import httpx

from rlnb._input.checks import check_bool, check_int, check_seconds
from rlnb.wire.paths import API_PREFIX

DEFAULT_BASE_URL = "https://api.together.ai"
"""Used when neither ``base_url`` nor ``$TOGETHER_BASE_URL`` is given (the SDK's default)."""
ENV_BASE_URL = "TOGETHER_BASE_URL"
ENV_API_KEY = "TOGETHER_API_KEY"
USER_AGENT = "rlnb"
DEFAULT_TIMEOUT = httpx.Timeout(60.0, connect=5.0)
"""Per socket operation (the SDK's): operations are asynchronous, so no request should take long."""
DEFAULT_DEADLINE = 120.0
"""Seconds one API call may take in all — every attempt, retry backoff and byte of the answer (plus a
long-poll's wait): a server that drips its answer, or keeps failing, cannot hold a call longer."""


REFUSED = frozenset({408, 409, 429})
"""Statuses that say the server did not act on the request (a create may be sent again after them)."""
UNSENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol)
"""Failures before a request's first byte left: a create may be sent again after them."""
HOPELESS = (httpx.LocalProtocolError, httpx.UnsupportedProtocol)
"""Failures that the same request meets every time (it cannot be built; a scheme the transport cannot send): never
retried (an ``UnsupportedProtocol`` retried would take 6 tries over 14 s, and count as a create that may have acted)."""


class Settings(NamedTuple):
    """A client's settings as checked: plain floats, ints and a bool (numpy's become Python's)."""

    deadline: float
    timeout: float | httpx.Timeout
    max_retries: int | None
    server_extensions: bool
    max_response_bytes: int | None


def check_settings(
    deadline: object, timeout: object, max_retries: object, server_extensions: object, max_response_bytes: object
) -> Settings:
    """The settings ``ClientOptions`` checks when it is built and ``APIClient`` when it is made, each a
    ``ValueError`` naming its field, with one message for one field wherever it is given: ``server_extensions="no"``
    is truthy (the extensions would stay on), and a group kept for reuse would carry a bad ``deadline`` to each
    connect."""
    return Settings(
        deadline=check_seconds("deadline", deadline, positive=True),
        timeout=check_timeout(timeout),
        max_retries=check_int("max_retries", max_retries, 0, optional=True),
        server_extensions=check_bool("server_extensions", server_extensions),
        max_response_bytes=check_int("max_response_bytes", max_response_bytes, 1, optional=True),  # 2.5 too
    )


def check_timeout(timeout: object) -> float | httpx.Timeout:
    """``ValueError`` naming the field unless ``timeout`` is a finite number of seconds in (0, a day] or an
    ``httpx.Timeout`` whose every field is one or None (no per-socket limit; the call's deadline still holds). Taken,
    a ``Timeout(-1)`` or NaN would make every request raise the socket's bare "Timeout value out of range", and a
    ``Timeout(0)`` would fail every connect, retried, as "Operation now in progress"."""
    if not isinstance(timeout, httpx.Timeout):
        return check_seconds("timeout", timeout, positive=True)
    for name, value in timeout.as_dict().items():
        if value is not None:
            try:
                check_seconds(f"timeout.{name}", value, positive=True)
            except ValueError as exc:
                raise ValueError(
                    f"{exc} (None: no limit per socket operation, the call's deadline still ends it)"
                ) from None
    return timeout


def doubled_prefix(base_url: str) -> str:
    """Words for a 404 when ``base_url`` already ends in the API's ``/v1`` or ``/v1/rl`` (the server URL of the API
    reference, ``https://api.together.ai/v1``), which rlnb adds itself: every call goes to ``/v1/v1/rl/...``, and
    a bare "404 no route" would name neither; else ""."""
    base = base_url.rstrip("/")
    for tail in (API_PREFIX, "/v1"):
        if base.lower().endswith(tail) and "/" in base.split("://", 1)[-1]:
            return (
                f" (base_url ends in {tail}, and rlnb adds {API_PREFIX} itself: pass base_url={base[: -len(tail)]!r})"
            )
    return ""


class Call(NamedTuple):
    """One request to send: what ``Caller._send`` needs besides the client's own settings."""

    method: str
    url: str
    """Absolute, or a path under ``API_PREFIX``."""
    content: bytes | None = None
    params: dict[str, str] | None = None
    idempotency_key: str | None = None
    auth: bool = True
    """False for presigned URLs: they must not see the key."""
    wait: float = 0.0
    """Seconds the server may hold the answer (long-poll): added to the read timeout."""
    idempotent: bool = True
    """False for a create that takes no Idempotency-Key: once it may have reached the server it is not
    sent again (retried only when no connection was made, or on 408 / 409 / 429, which refuse it)."""
    until: float | None = None
    """A ``time.monotonic()`` by which the call ends, if sooner than its deadline (a poll within its failure
    window)."""
    reconnect_until: float | None = None
    """A ``time.monotonic()`` after which a connection that cannot be made is not tried again, and by which a retry
    ends connecting (the stops that clean up, ``start.STOP_RECONNECT``: a dead server held them through every
    retry's backoff, 14 s); None: retried as any failure, within the deadline."""

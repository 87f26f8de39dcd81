"""``RetryPolicy``: the one rule for retrying a request and how long to wait first (Stainless' rule, as the
official SDK applies it): no response, 408, 409, 429, >= 500, or whatever ``x-should-retry`` says; jittered
exponential backoff that honours ``retry-after-ms`` / ``Retry-After``."""

from __future__ import annotations

import email.utils
import random
import re
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field

import httpx

from rlnb._input.checks import check_seconds, set_int
from rlnb.remote.waiting import called_off, check_pause

RETRYING: ContextVar[int | None] = ContextVar("RETRYING", default=None)
"""While ``RetryPolicy.pause`` is asked to wait: the HTTP status whose retry it waits for (None: no response came).
A sweep's trial bounds its 429 waits (a session cap) by its ``slot_timeout``, and leaves a 503's to the policy."""


@dataclass(frozen=True)
class RetryPolicy:
    """When to retry a request and how long to wait first: the one policy every request follows."""

    max_retries: int = 5
    """Retries after the first attempt (0 = never retry)."""
    initial_delay: float = 0.5
    """Backoff before retry n (0-based) is min(initial_delay * 2**n, max_delay) * a factor in (1 - jitter, 1]."""
    max_delay: float = 8.0
    jitter: float = 0.25
    max_retry_after: float = 60.0
    """A server's ``Retry-After`` is obeyed when 0 < value <= this; otherwise the backoff applies."""
    statuses: frozenset[int] = frozenset({408, 409, 429})
    """Retried besides every status >= 500: request timeout, lock conflict, rate limit / session cap."""
    reconnect_max_delay: float = 1.0
    """The backoff's cap between the connection attempts of a call that may reconnect for a short window only (the
    stops that clean up: ``rlnb.remote.start.STOP_RECONNECT``)."""
    pause: Callable[[float], bool] | None = field(default=None, compare=False)
    """How the client waits the seconds before a retry (``RETRYING`` says for which status): its True calls the retry
    off, and the call raises its last error at once; False or None goes on (``waiting.called_off``). A sweep's trial:
    its ``slot_timeout`` ends a 429's ``Retry-After`` wait (which slept up to 60 s a retry, 5 retries a try), and its
    sweep's stop any wait. None: ``time.sleep``. The stops that clean up after a failed start always sleep: they must
    go on."""

    def __post_init__(self) -> None:
        set_int(self, "max_retries", 0)
        for name in ("initial_delay", "max_delay", "max_retry_after", "reconnect_max_delay"):  # NaN: time.sleep(nan)
            object.__setattr__(self, name, check_seconds(name, getattr(self, name)))
        check_pause(self.pause)

    def called_off(self, seconds: float, status: int | None) -> bool:
        """Ask ``pause`` (set) to wait ``seconds`` before a retry of ``status`` (``RETRYING``): whether it called it
        off."""
        assert self.pause is not None
        token = RETRYING.set(status)
        try:
            return called_off(self.pause, seconds)
        finally:
            RETRYING.reset(token)

    def retryable(self, status_code: int) -> bool:
        """Whether an error status is worth retrying when the server does not say (``x-should-retry``)."""
        return status_code in self.statuses or status_code >= 500

    def should_retry(self, response: httpx.Response) -> bool:
        header = response.headers.get("x-should-retry")
        if header in ("true", "false"):
            return header == "true"
        return self.retryable(response.status_code)

    def delay(self, attempt: int, headers: httpx.Headers | None) -> float:
        """Seconds before retry number ``attempt`` (0-based): ``retry-after-ms`` / ``Retry-After``
        (seconds, or an HTTP date measured from the answer's ``Date``, else this machine's clock) when
        0 < value <= max_retry_after, else jittered backoff."""
        asked = _retry_after(headers) if headers is not None else None
        if asked is not None and 0 < asked <= self.max_retry_after:
            return asked
        return min(self.initial_delay * 2.0**attempt, self.max_delay) * (1 - self.jitter * random.random())

    def unheeded(self, headers: httpx.Headers) -> str:
        """Words for the final error when the server asked for a longer wait than ``max_retry_after``, else "": its
        ``Retry-After`` gives way to backoff, and a 429 "come back in an hour" would read as a plain failure."""
        asked = _retry_after(headers)
        if asked is None or not self.max_retry_after < asked < float("inf"):
            return ""
        most, wait = self.max_retry_after, f"{asked:.0f} s" if asked < WEEK else "more than a week"  # not 10**26 s
        return f" (the server asked to wait {wait} before a retry, past max_retry_after, {most:g} s)"


WEEK = 7 * 86400
"""A longer wait the server asks for is named as "more than a week" in the final error."""

_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]+)?")
"""RFC 9110's delay-seconds (``1*DIGIT``), with a decimal fraction as the SDK takes it: ASCII digits only. Python's
``float`` also took ``1_0`` (10), ``+3``, ``1e1``, ``٥`` and spaces of any kind: a wait no server meant."""


def delay_seconds(value: str) -> float | None:
    """``value`` as ``_DECIMAL``'s seconds, HTTP's optional whitespace around a field value allowed (no other); None
    when it is none (a ``Retry-After``, a long-poll wait)."""
    value = value.strip(" \t")
    return float(value) if _DECIMAL.fullmatch(value) else None


def _retry_after(headers: httpx.Headers) -> float | None:
    """Seconds the server asked to wait, or None when it did not (or said nothing parsable)."""
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        if (seconds := delay_seconds(value)) is not None:
            return seconds * scale
        if name == "retry-after" and (when := http_date(value.strip(" \t"))) is not None:
            said = headers.get("date")  # the server's now: a date it names is on its clock, which may be minutes off
            now = http_date(said.strip(" \t")) if said is not None else None
            return when - (time.time() if now is None else now)
    return None


def http_date(value: str) -> float | None:
    """An HTTP date (``Retry-After``, ``Date``) as a ``time.time()``; None when it is none, or names a time no
    datetime holds (a year 99999: the stdlib raises ``ValueError`` / ``OverflowError``, which escaped the send
    path and killed the poll thread, so the session's operations waited for ever)."""
    when = email.utils.parsedate_tz(value)
    if when is None:
        return None
    try:
        return float(email.utils.mktime_tz(when))
    except (ValueError, OverflowError):
        return None

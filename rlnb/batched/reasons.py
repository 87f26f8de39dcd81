"""The ``reason`` a sweep row gives for an operation that FAILED: a trial on a session and a member of a batched
ensemble write it alike, and a trial reads it back. Row text, not API schema, so not in ``wire``."""

from __future__ import annotations

from rlnb.errors import SUBMIT_AGAIN
from rlnb.wire import OperationErrorCode


def failure_reason(code: str | None, message: str | None) -> str:
    """A sweep row's ``reason`` for an operation that FAILED with ``code``: ``"CODE: message"``, the one spelling every
    executor writes and ``failed_with`` reads back; without a session's ``SUBMIT_AGAIN``, which the trial, ended,
    cannot follow."""
    return f"{code}: {message.removesuffix(SUBMIT_AGAIN) if message else message}"


def failed_with(reason: str | None, code: OperationErrorCode) -> bool:
    """Whether a row's ``reason`` (``failure_reason``'s) says its operation FAILED with ``code``."""
    return reason is not None and reason.startswith(f"{code.value}: ")

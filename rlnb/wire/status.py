"""Statuses and error codes: the spec's strings as ``StrEnum``s, and the groups rlnb reasons about.

A member is the spec's string itself (``OperationStatus.FAILED == "TRAINING_OPERATION_STATUS_FAILED"``),
so it compares, hashes, serialises and prints as the plain string the API sends; its name is the short
form rlnb shows (``FAILED``, ``NON_FINITE_LOSS``). Code outside ``wire`` names members, never the strings. The
API's error objects read a code newer than their catalogue as its fallback (``_CodedError``, ``unknown_code``).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, ClassVar, Final

from pydantic import model_validator

from rlnb.wire.base import _Model

__all__ = [
    "RESOURCE_ACTIVE",
    "RESOURCE_ENDED",
    "SESSION_ACTIVE",
    "SESSION_ENDED",
    "SESSION_HOLDS_SLOT",
    "TERMINAL_STATUSES",
    "ModelResourcesErrorCode",
    "ModelResourcesStatus",
    "OperationErrorCode",
    "OperationStatus",
    "SessionErrorCode",
    "SessionStatus",
    "TrialStatus",
    "error_code",
    "filterable",
    "short_name",
    "unknown_code",
]


class OperationStatus(StrEnum):
    """An operation's status: PENDING → RUNNING → COMPLETED or FAILED."""

    UNSPECIFIED = "TRAINING_OPERATION_STATUS_UNSPECIFIED"
    PENDING = "TRAINING_OPERATION_STATUS_PENDING"
    RUNNING = "TRAINING_OPERATION_STATUS_RUNNING"
    COMPLETED = "TRAINING_OPERATION_STATUS_COMPLETED"
    FAILED = "TRAINING_OPERATION_STATUS_FAILED"


class TrialStatus(StrEnum):
    """How a sweep's trial (or a batched member) ended: rlnb's own, not the API's; its rows and tables spell these."""

    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    PRUNED = "PRUNED"
    STOPPED = "STOPPED"


class OperationErrorCode(StrEnum):
    """Why an operation FAILED (``OperationFailed.code``); ``short_name`` drops the prefix."""

    UNSPECIFIED = "TRAINING_OPERATION_ERROR_CODE_UNSPECIFIED"
    RESOURCE_EXHAUSTED = "TRAINING_OPERATION_ERROR_CODE_RESOURCE_EXHAUSTED"
    TIMEOUT = "TRAINING_OPERATION_ERROR_CODE_TIMEOUT"
    INTERNAL_ERROR = "TRAINING_OPERATION_ERROR_CODE_INTERNAL_ERROR"
    SESSION_NOT_ACTIVE = "TRAINING_OPERATION_ERROR_CODE_SESSION_NOT_ACTIVE"
    INVALID_INPUT = "TRAINING_OPERATION_ERROR_CODE_INVALID_INPUT"
    NON_FINITE_LOSS = "TRAINING_OPERATION_ERROR_CODE_NON_FINITE_LOSS"


class SessionStatus(StrEnum):
    """A training session's status; a STOPPED, STOPPING, ERROR or EXPIRED one takes no more operations."""

    UNSPECIFIED = "TRAINING_SESSION_STATUS_UNSPECIFIED"
    CREATING = "TRAINING_SESSION_STATUS_CREATING"
    RUNNING = "TRAINING_SESSION_STATUS_RUNNING"
    STOPPED = "TRAINING_SESSION_STATUS_STOPPED"
    STOPPING = "TRAINING_SESSION_STATUS_STOPPING"
    ERROR = "TRAINING_SESSION_STATUS_ERROR"
    EXPIRED = "TRAINING_SESSION_STATUS_EXPIRED"


class SessionErrorCode(StrEnum):
    """Why a training session is in ERROR."""

    RESOURCE_UNAVAILABLE = "TRAINING_SESSION_ERROR_CODE_RESOURCE_UNAVAILABLE"
    RESOURCE_AT_CAPACITY = "TRAINING_SESSION_ERROR_CODE_RESOURCE_AT_CAPACITY"
    TIMED_OUT = "TRAINING_SESSION_ERROR_CODE_TIMED_OUT"
    SESSION_FAILED = "TRAINING_SESSION_ERROR_CODE_SESSION_FAILED"


class ModelResourcesStatus(StrEnum):
    """A model resource's status; sessions start only on a READY one."""

    PENDING = "MODEL_RESOURCES_STATUS_PENDING"
    CREATING = "MODEL_RESOURCES_STATUS_CREATING"
    READY = "MODEL_RESOURCES_STATUS_READY"
    ERROR = "MODEL_RESOURCES_STATUS_ERROR"
    STOPPED = "MODEL_RESOURCES_STATUS_STOPPED"
    STOPPING = "MODEL_RESOURCES_STATUS_STOPPING"


class ModelResourcesErrorCode(StrEnum):
    """Why a model resource is in ERROR."""

    CAPACITY_WAIT_TIMEOUT = "MODEL_RESOURCES_ERROR_CODE_CAPACITY_WAIT_TIMEOUT"
    PROVISIONING_FAILED = "MODEL_RESOURCES_ERROR_CODE_PROVISIONING_FAILED"
    RESOURCE_UNAVAILABLE = "MODEL_RESOURCES_ERROR_CODE_RESOURCE_UNAVAILABLE"


# -- the groups everyone uses (operation, session, model resource) ---------------------------------

TERMINAL_STATUSES: Final = frozenset({OperationStatus.COMPLETED, OperationStatus.FAILED})
"""An operation in one of these never changes again."""

SESSION_ACTIVE: Final = frozenset({SessionStatus.CREATING, SessionStatus.RUNNING})
"""A session in one of these takes operations."""
SESSION_HOLDS_SLOT: Final = SESSION_ACTIVE | {SessionStatus.STOPPING}
"""A session in one of these holds a slot of its model resource's session cap (and of ``rlnb serve``'s
``max_live_sessions``): a STOPPING one still finishes the operation it was running, on its model."""
SESSION_ENDED: Final = frozenset(
    {SessionStatus.STOPPED, SessionStatus.STOPPING, SessionStatus.ERROR, SessionStatus.EXPIRED}
)
"""A session in one of these takes no more operations (a client waiting for RUNNING gives up)."""

RESOURCE_ACTIVE: Final = frozenset(
    {ModelResourcesStatus.PENDING, ModelResourcesStatus.CREATING, ModelResourcesStatus.READY}
)
"""A resource in one of these is live: it counts against ``rlnb serve``'s ``max_live_resources``."""
RESOURCE_ENDED: Final = frozenset(
    {ModelResourcesStatus.ERROR, ModelResourcesStatus.STOPPED, ModelResourcesStatus.STOPPING}
)
"""A resource in one of these starts no more sessions."""

_CATALOGUES: tuple[type[StrEnum], ...] = (
    OperationStatus,
    OperationErrorCode,
    SessionStatus,
    SessionErrorCode,
    ModelResourcesStatus,
    ModelResourcesErrorCode,
)
_PREFIXES = tuple(next(iter(c)).value.removesuffix(next(iter(c)).name) for c in _CATALOGUES)
"""Each catalogue's common prefix (``TRAINING_OPERATION_STATUS_``, ...): a code a newer server added
loses it too."""


def unknown_code(data: object, catalogue: type[StrEnum], fallback: StrEnum) -> object:
    """An error object (decoded JSON) whose ``code`` is newer than ``catalogue`` (as ``NON_FINITE_LOSS`` and
    ``RESOURCE_UNAVAILABLE`` once were) with ``fallback`` as its code, its message starting with the code the
    server sent: refusing the whole answer would lose the server's reason with it."""
    code = data.get("code") if isinstance(data, dict) else None
    if not isinstance(code, str) or code in set(catalogue):
        return data
    assert isinstance(data, dict)
    said = data.get("message")
    message = f"{code} (a code rlnb does not know)" + (f": {said}" if isinstance(said, str) else "")
    return {**data, "code": fallback, "message": message}


class _CodedError(_Model):
    """An API error object whose ``code`` is in a catalogue that a newer server may have added to: such a code reads as
    the subclass's ``FALLBACK`` (a member of that catalogue), the message keeping it (``unknown_code``)."""

    FALLBACK: ClassVar[StrEnum]

    @model_validator(mode="before")
    @classmethod
    def _unknown_code(cls, data: Any) -> Any:
        return unknown_code(data, type(cls.FALLBACK), cls.FALLBACK)


def filterable(catalogue: type[StrEnum]) -> list[StrEnum]:
    """The statuses a list's ``status`` filter takes: the catalogue without its UNSPECIFIED, which the
    reference's filters omit (no object is ever in it)."""
    return [member for member in catalogue if member.name != "UNSPECIFIED"]


def error_code(code: str) -> OperationErrorCode:
    """An operation error code from its short name (``"INVALID_INPUT"``, as users write it) or its full
    string; ``ValueError`` listing the short names otherwise."""
    if isinstance(code, OperationErrorCode):
        return code
    if code in OperationErrorCode.__members__:
        return OperationErrorCode[code]
    try:
        return OperationErrorCode(code)
    except ValueError:
        names = ", ".join(OperationErrorCode.__members__)
        raise ValueError(f"unknown operation error code {code!r}: one of {names}") from None


def short_name(value: object) -> str:
    """A status or error code without its enum prefix: ``..._NON_FINITE_LOSS`` → ``NON_FINITE_LOSS``."""
    text = str(value)
    for prefix in _PREFIXES:
        if text.startswith(prefix):
            return text.removeprefix(prefix)
    return text

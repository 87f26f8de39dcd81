"""Statuses and error codes: the spec's strings, and the one catalogue of the groups rlnb reasons about."""

from __future__ import annotations

from typing import Final, Literal, TypeAlias, get_args

__all__ = [
    "ERROR_CODE_PREFIX",
    "OPERATION_ERROR_CODES",
    "OPERATION_STATUSES",
    "RESOURCE_ACTIVE",
    "RESOURCE_ENDED",
    "RESOURCE_READY",
    "RESOURCE_STOPPED",
    "SESSION_ACTIVE",
    "SESSION_CREATING",
    "SESSION_ENDED",
    "SESSION_EXPIRED",
    "SESSION_RUNNING",
    "SESSION_STOPPED",
    "STATUS_COMPLETED",
    "STATUS_FAILED",
    "STATUS_PENDING",
    "STATUS_RUNNING",
    "TERMINAL_STATUSES",
    "ModelResourcesErrorCode",
    "ModelResourcesStatus",
    "OperationErrorCode",
    "OperationStatus",
    "SessionErrorCode",
    "SessionStatus",
    "error_code",
    "short_name",
]

OperationStatus: TypeAlias = Literal[
    "TRAINING_OPERATION_STATUS_UNSPECIFIED",
    "TRAINING_OPERATION_STATUS_PENDING",
    "TRAINING_OPERATION_STATUS_RUNNING",
    "TRAINING_OPERATION_STATUS_COMPLETED",
    "TRAINING_OPERATION_STATUS_FAILED",
]
"""An operation's status: PENDING → RUNNING → COMPLETED or FAILED."""
OperationErrorCode: TypeAlias = Literal[
    "TRAINING_OPERATION_ERROR_CODE_UNSPECIFIED",
    "TRAINING_OPERATION_ERROR_CODE_RESOURCE_EXHAUSTED",
    "TRAINING_OPERATION_ERROR_CODE_TIMEOUT",
    "TRAINING_OPERATION_ERROR_CODE_INTERNAL_ERROR",
    "TRAINING_OPERATION_ERROR_CODE_SESSION_NOT_ACTIVE",
    "TRAINING_OPERATION_ERROR_CODE_INVALID_INPUT",
    "TRAINING_OPERATION_ERROR_CODE_NON_FINITE_LOSS",
]
"""Why an operation FAILED (``OperationFailed.code``); ``short_name`` drops the prefix."""
SessionStatus: TypeAlias = Literal[
    "TRAINING_SESSION_STATUS_UNSPECIFIED",
    "TRAINING_SESSION_STATUS_CREATING",
    "TRAINING_SESSION_STATUS_RUNNING",
    "TRAINING_SESSION_STATUS_STOPPED",
    "TRAINING_SESSION_STATUS_STOPPING",
    "TRAINING_SESSION_STATUS_ERROR",
    "TRAINING_SESSION_STATUS_EXPIRED",
]
"""A training session's status; a STOPPED, STOPPING, ERROR or EXPIRED one takes no more operations."""
SessionErrorCode: TypeAlias = Literal[
    "TRAINING_SESSION_ERROR_CODE_RESOURCE_UNAVAILABLE",
    "TRAINING_SESSION_ERROR_CODE_RESOURCE_AT_CAPACITY",
    "TRAINING_SESSION_ERROR_CODE_TIMED_OUT",
    "TRAINING_SESSION_ERROR_CODE_SESSION_FAILED",
]
"""Why a training session is in ERROR."""
ModelResourcesStatus: TypeAlias = Literal[
    "MODEL_RESOURCES_STATUS_PENDING",
    "MODEL_RESOURCES_STATUS_CREATING",
    "MODEL_RESOURCES_STATUS_READY",
    "MODEL_RESOURCES_STATUS_ERROR",
    "MODEL_RESOURCES_STATUS_STOPPED",
    "MODEL_RESOURCES_STATUS_STOPPING",
]
"""A model resource's status; sessions start only on a READY one."""
ModelResourcesErrorCode: TypeAlias = Literal[
    "MODEL_RESOURCES_ERROR_CODE_CAPACITY_WAIT_TIMEOUT",
    "MODEL_RESOURCES_ERROR_CODE_PROVISIONING_FAILED",
    "MODEL_RESOURCES_ERROR_CODE_RESOURCE_UNAVAILABLE",
]
"""Why a model resource is in ERROR."""

OPERATION_STATUSES: tuple[OperationStatus, ...] = get_args(OperationStatus)
"""Every ``OperationStatus``, in the spec's order."""
OPERATION_ERROR_CODES: tuple[OperationErrorCode, ...] = get_args(OperationErrorCode)
"""Every ``OperationErrorCode``, in the spec's order: what ``error_code`` accepts."""

# -- the groups everyone uses (operation, session, model resource) ---------------------------------

STATUS_PENDING: Final = "TRAINING_OPERATION_STATUS_PENDING"
"""Submitted, not started: the in-process engine runs operations in submission order."""
STATUS_RUNNING: Final = "TRAINING_OPERATION_STATUS_RUNNING"
"""Started; it will end COMPLETED or FAILED."""
STATUS_COMPLETED: Final = "TRAINING_OPERATION_STATUS_COMPLETED"
"""Ended with an output."""
STATUS_FAILED: Final = "TRAINING_OPERATION_STATUS_FAILED"
"""Ended with an error code and message; ``Operation.result()`` raises ``OperationFailed``."""
TERMINAL_STATUSES: frozenset[str] = frozenset({STATUS_COMPLETED, STATUS_FAILED})
"""An operation in one of these never changes again."""

SESSION_CREATING: Final = "TRAINING_SESSION_STATUS_CREATING"
"""The session's model is being built; it already holds a slot of its resource's session cap."""
SESSION_RUNNING: Final = "TRAINING_SESSION_STATUS_RUNNING"
"""The session runs operations."""
SESSION_STOPPED: Final = "TRAINING_SESSION_STATUS_STOPPED"
"""Stopped by ``close()`` or a stop request; it runs nothing more."""
SESSION_EXPIRED: Final = "TRAINING_SESSION_STATUS_EXPIRED"
"""Stopped because its model resource stopped for inactivity."""
SESSION_ACTIVE: frozenset[str] = frozenset({SESSION_CREATING, SESSION_RUNNING})
"""A session in one of these holds a slot of its model resource's session cap."""
SESSION_ENDED: frozenset[str] = frozenset(
    {SESSION_STOPPED, "TRAINING_SESSION_STATUS_STOPPING", "TRAINING_SESSION_STATUS_ERROR", SESSION_EXPIRED}
)
"""A session in one of these takes no more operations (a client waiting for RUNNING gives up)."""

RESOURCE_READY: Final = "MODEL_RESOURCES_STATUS_READY"
"""The resource can start sessions."""
RESOURCE_STOPPED: Final = "MODEL_RESOURCES_STATUS_STOPPED"
"""The resource was stopped, by request or after ``inactive_timeout`` seconds without activity."""
RESOURCE_ACTIVE: frozenset[str] = frozenset(
    {"MODEL_RESOURCES_STATUS_PENDING", "MODEL_RESOURCES_STATUS_CREATING", RESOURCE_READY}
)
"""A resource in one of these is live: it counts against ``rlnb serve``'s ``max_live_resources``."""
RESOURCE_ENDED: frozenset[str] = frozenset(
    {"MODEL_RESOURCES_STATUS_ERROR", RESOURCE_STOPPED, "MODEL_RESOURCES_STATUS_STOPPING"}
)
"""A resource in one of these starts no more sessions."""

ERROR_CODE_PREFIX: Final = "TRAINING_OPERATION_ERROR_CODE_"
"""The prefix of every ``OperationErrorCode``; rlnb's messages show codes without it."""
_PREFIXES = (
    ERROR_CODE_PREFIX,
    "TRAINING_OPERATION_STATUS_",
    "TRAINING_SESSION_STATUS_",
    "TRAINING_SESSION_ERROR_CODE_",
    "MODEL_RESOURCES_STATUS_",
    "MODEL_RESOURCES_ERROR_CODE_",
)


def error_code(short: str) -> OperationErrorCode:
    """``"INVALID_INPUT"`` → ``"TRAINING_OPERATION_ERROR_CODE_INVALID_INPUT"`` (the full string is accepted too)."""
    full = short if short.startswith(ERROR_CODE_PREFIX) else ERROR_CODE_PREFIX + short
    for code in OPERATION_ERROR_CODES:
        if code == full:
            return code
    raise ValueError(f"unknown operation error code {short!r}: one of {', '.join(OPERATION_ERROR_CODES)}")


def short_name(value: object) -> str:
    """A status or error code without its enum prefix: ``..._NON_FINITE_LOSS`` → ``NON_FINITE_LOSS``."""
    text = str(value)
    for prefix in _PREFIXES:
        if text.startswith(prefix):
            return text.removeprefix(prefix)
    return text

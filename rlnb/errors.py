"""rlnb's one exception tree.

    RlnbError
    ├── InvalidParams (also ValueError)   an optimizer config is out of range; nothing was sent
    ├── OperationFailed                   an operation ended FAILED (.code, .message)
    ├── OperationTimeout (also TimeoutError)  waiting for an operation took longer than asked
    ├── SessionClosed                     the session was closed; nothing more can be submitted
    ├── RunLocked                         another session is writing to this run folder
    ├── APIError                          talking to a remote training-session API went wrong
        ├── APIConnectionError            no response (refused, reset, DNS)
        │   └── APITimeoutError           no response in time
        └── APIStatusError                an HTTP error status (.status_code, .body, .code, .param)
            ├── BadRequestError           400
            ├── AuthenticationError       401
            ├── PermissionDeniedError     403
            ├── NotFoundError             404
            ├── ConflictError             409
            ├── UnprocessableEntityError  422
            ├── RateLimitError            429
            └── InternalServerError       >= 500

    OperationError                        raised inside the engine to end an operation FAILED with a code
    └── Cancelled                         the session stopped while the operation ran

``CleartextKeyWarning`` (a ``UserWarning``) is the one warning here: a key sent unencrypted (``rlnb.remote.urls``).

Messages carry the method, URL, status and the server's message — never an API key.
"""

from __future__ import annotations

import sys
from typing import Any

from rlnb import wire


class RlnbError(Exception):
    """Base of every error rlnb raises on purpose."""


SHOWN_VALUE = 300
"""The most characters of a refused value an ``InvalidParams`` shows (``wire.shown``; ``errors`` keeps it whole): a
list of 10,000 learning rates would give a 70 KB message, its rule at the very end."""


class InvalidParams(RlnbError, ValueError):
    """An optimizer field is out of range, of the wrong type, or unknown.

    ``errors`` lists ``(field, value, allowed)`` for every problem found.
    """

    def __init__(self, owner: str, errors: list[tuple[str, Any, str]]):
        self.errors = errors
        lines = [f"{owner}.{field} = {wire.shown(value, SHOWN_VALUE)} is invalid: {allowed}"
                 for field, value, allowed in errors]  # fmt: skip
        super().__init__("\n".join(lines))


class OptionRefused(RlnbError, ValueError):
    """The engine's refusal of one of a session's options, raised before the session starts: ``field`` is the option's
    keyword (``device``, ``lora``, ``model``), so a front end names its own spelling of it (``rlnb demo --device``)
    from the field, not from the message's words."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class OperationFailed(RlnbError):
    """An operation finished FAILED. ``code`` is the API's ``TRAINING_OPERATION_ERROR_CODE_*``."""

    def __init__(self, code: str | None, message: str | None, *, operation_id: str = "", kind: str = ""):
        self.code = code
        self.message = message
        self.operation_id = operation_id
        self.kind = kind
        said = ": ".join(part for part in (code, message) if part) or "no error code and no message were given"
        which = operation_id or "(never given an id)"  # "optim-step  failed": an empty slot; the message says why
        super().__init__(f"{kind} {which} failed: {said}")


class OperationError(Exception):
    """Raised inside an engine handler to end the operation FAILED with ``TRAINING_OPERATION_ERROR_CODE_<code>``.

    Internal: the user sees it as the operation's error (and ``OperationFailed`` from ``result()``)."""

    def __init__(self, code: wire.OperationErrorCode, message: str):
        self.code = code
        super().__init__(message)


GRADIENTS_KEPT = (
    "; nothing changed: the gradients accumulated since the last optim-step are kept for the next one, which applies "
    "them with its own"
)
"""The end of a refused optim-step's message: the engine's and the fake's ``INVALID_INPUT`` where its params are
refused, and a remote one refused at its POST (``rlnb.remote.sender``), so that no next step silently applies them; a
batched member's record says it too, as its session would."""

SUBMIT_AGAIN = ": submit an optim-step again to take this step on them (the API has no call that drops them)"
"""What a session says to do after ``GRADIENTS_KEPT``; a sweep row's reason leaves it out (``failure_reason``): its
trial, and the trial's session, have ended."""

NOT_RUN = "the session was stopped before this ran"
"""Why an operation still queued when its session stopped FAILED (``SESSION_NOT_ACTIVE``), never run."""


class Cancelled(OperationError):
    """A running operation stopped early because its session was stopped."""

    def __init__(self) -> None:
        super().__init__(wire.OperationErrorCode.SESSION_NOT_ACTIVE, "the session was stopped while this operation ran")


def describe(exc: BaseException) -> str:
    """``"Type: message"`` of ``exc`` for a row or a log, then its notes (``add_note``: a task's reward names the
    task, prompt and completion there); its type alone when ``str(exc)`` itself raises (a user's exception class):
    else a sweep's row would be lost to one, and the sweep with it."""
    try:
        said = f"{type(exc).__name__}: {exc}"
    except Exception:  # noqa: BLE001 - whatever its __str__ raised, the failure is still said
        said = f"{type(exc).__name__} (its message could not be made)"
    notes = [note for note in getattr(exc, "__notes__", ()) if isinstance(note, str)]
    return "; ".join([said, *notes])


class CleartextKeyWarning(UserWarning):
    """An API key is about to be sent over plain http:// to a host other than this machine (``rlnb.connect``,
    ``APIClient``): it crosses the network unencrypted. Given once per client, naming the host, never the key."""


class ResourceEnded(RlnbError):
    """A model resource waited for is in an ended or failed status (stopped, expired, failed): a session cannot start
    on it."""


class OperationTimeout(RlnbError, TimeoutError):
    """The operation did not finish within the time asked for; it may still finish later."""


class SessionClosed(RlnbError):
    """The session is closed (or stopped) and takes no more operations."""


class SessionBusy(RlnbError, TimeoutError):
    """Another thread is in the middle of a step on this session (``Session.stepping``), still after the wait's
    deadline; the message names that thread."""


class RunLocked(RlnbError):
    """Another session (in this process or another) is writing to the run folder: one writer at a time.
    ``holder`` is the writer's process id as it wrote it in ``run.lock`` (``"unknown"`` if it wrote none)."""

    def __init__(self, message: str, *, holder: str = "unknown"):
        super().__init__(message)
        self.holder = holder


class APIError(RlnbError):
    """A remote API call failed. ``method`` and ``url`` say which; ``answer_id``, the ``id`` of an answer that came but
    could not be read (a create's: what the server made, which the caller cannot stop unless it is named). ``sent``:
    False when the request surely did not reach the server (no connection made, a closed client, an operation whose
    payload's upload failed before its POST)."""

    answer_id: str | None = None
    earlier_may_have_acted = False
    """An earlier try of this call got no answer, a 5xx or a 2xx that could not be read, and was retried: the server
    may have acted on it, whatever this try's error says (set by the client that retried it)."""

    def __init__(self, message: str, *, method: str = "", url: str = "", sent: bool = True):
        self.method = method
        self.url = url
        self.sent = sent
        super().__init__(f"{method} {url}: {message}" if method else message)


class APIConnectionError(APIError):
    """No response: the connection was refused, reset or could not be made (``sent``: False for refused, or a connect
    timeout)."""


class APITimeoutError(APIConnectionError):
    """No response in time."""


class APIStatusError(APIError):
    """The server answered with an error status; ``body`` is the decoded error body."""

    def __init__(self, message: str, *, method: str, url: str, status_code: int, body: Any = None):
        self.status_code = status_code
        self.body = body
        err = body.get("error") if isinstance(body, dict) else None
        err = err if isinstance(err, dict) else {}
        self.code: str | None = err.get("code")
        self.param: str | None = err.get("param")
        self.type: str | None = err.get("type")
        super().__init__(f"{status_code} {message}", method=method, url=url)


class BadRequestError(APIStatusError):
    """400: the request body or query is invalid (``param`` names the field)."""


class AuthenticationError(APIStatusError):
    """401: the API key is missing or wrong."""


class PermissionDeniedError(APIStatusError):
    """403: the key may not do this."""


class NotFoundError(APIStatusError):
    """404: no such session, operation, resource or checkpoint."""


class ConflictError(APIStatusError):
    """409: the request conflicts with the current state."""


class UnprocessableEntityError(APIStatusError):
    """422: the request is well-formed but cannot be processed."""


class RateLimitError(APIStatusError):
    """429: too many requests, or a resource's session cap is reached."""

    model_resources_id: str | None = None
    """The model resource a ``connect(..., keep_resource=True)`` created and kept running when its session was refused
    (a session cap): retry with ``model_resources_id=`` it, and stop it when done. None: nothing was kept."""


class InternalServerError(APIStatusError):
    """500 or above: the server failed."""


_STATUS_ERRORS: dict[int, type[APIStatusError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    422: UnprocessableEntityError,
    429: RateLimitError,
}


def may_have_acted(error: APIError) -> bool:
    """Whether the server may have acted on a POST that failed with ``error``: it was sent and got no answer, a 5xx,
    an answer rlnb could not read (a 2xx: the server took it), or a try before the final answer did. A status that
    refuses it (4xx), or a request that never reached the server, took nothing, unless a try before it may have."""
    if error.earlier_may_have_acted:
        return True
    if not error.sent:
        return False
    if isinstance(error, APIStatusError):
        return error.status_code >= 500
    return True


def status_error_class(status_code: int) -> type[APIStatusError]:
    """The exception class for an HTTP error status (the one place that mapping lives)."""
    if status_code >= 500:
        return InternalServerError
    return _STATUS_ERRORS.get(status_code, APIStatusError)


def user_stacklevel() -> int:
    """The ``stacklevel`` that points a warning its caller gives at the user's line: the first frame outside rlnb,
    however deep in rlnb the warning is given (a session that starts a run, a log, a close, a plot)."""
    frame, level = sys._getframe(1), 1  # 1 is the caller, which calls ``warnings.warn``
    while frame.f_back is not None and frame.f_globals.get("__name__", "").partition(".")[0] == "rlnb":
        frame, level = frame.f_back, level + 1
    return level

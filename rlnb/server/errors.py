"""The server's one error type and its one body, ``{"error": {"message", "type", "param", "code"}}``.

``ServerError`` (not ``rlnb.APIError``, the *client's* exception) carries the HTTP status; the handlers for it, for
request validation and for Starlette's own errors (``error_handlers``) all answer with the same body.
"""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse

from rlnb import wire

SHOWN = 100
"""The most characters of an id, key, cursor or name a message quotes (``wire.shown``): an id (~45) is quoted whole,
an 8 KB one came back whole in its 404."""
ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found",
    409: "conflict",
    413: "invalid_request_error",
    429: "rate_limit_error",
}
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"model": wire.ErrorData, "description": "Invalid request: `param` names the field"},
    401: {"model": wire.ErrorData, "description": "Missing or wrong API key"},
    403: {"model": wire.ErrorData, "description": "Bad or missing download signature"},
    404: {"model": wire.ErrorData, "description": "No such object"},
    409: {
        "model": wire.ErrorData,
        "description": "Conflicts with the object's state; `x-should-retry` says whether a retry can cure it",
    },
    429: {"model": wire.ErrorData, "description": "A model resource's session cap is reached"},
}
"""What every ``/v1`` route may answer besides 200 (declared in ``/openapi.json``)."""


class ServerError(Exception):
    """A domain error that becomes the API's error body with ``status``. A 409 says ``x-should-retry: false`` (the
    SDKs retry every 409 for ~15 s of backoff, and most states will not change by it) unless ``retry``: a state that
    ends by itself (a session still being created)."""

    def __init__(
        self, status: int, message: str, *, param: str | None = None, type: str | None = None, retry: bool = False,
        retry_after: int | None = None,
    ):  # fmt: skip
        self.status, self.message, self.param, self.retry = status, message, param, retry
        self.retry_after = retry_after
        """Seconds the client is asked to wait before it tries again (``Retry-After``)."""
        self.type = type or error_type(status)
        super().__init__(message)


def error_type(status: int) -> str:
    return ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "server_error")


def not_found(what: str, ident: str, param: str) -> ServerError:
    return ServerError(404, f"{what} {wire.shown(ident, SHOWN)} not found", param=param)


def error_response(
    status: int, message: str, type: str, param: str | None = None, retry: bool = False, after: int | None = None
) -> JSONResponse:
    body = wire.ErrorData(error=wire.ErrorDetail(message=message, type=type, param=param, code=None))
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else {}
    if after is not None:
        headers["retry-after"] = str(after)
    if status == 409:  # SDKs retry a 409 unless told: say whether the state it conflicts with can end by itself
        headers["x-should-retry"] = "true" if retry else "false"
    return JSONResponse(body.model_dump(mode="json"), status_code=status, headers=headers)


def named(name: str) -> str:
    """A field's or query parameter's name for an error's ``param`` and message: as given up to ``SHOWN`` characters,
    else cut as a quoted value is (``wire.shown``): an 8 KB unknown name came back whole in both."""
    return name if len(name) <= SHOWN else wire.shown(name, SHOWN)

"""Every error the app raises leaves as the API's error body (``errors.error_response``): ``ServerError``, request
validation, Starlette's own 404 / 405 / unreadable bodies, a client gone mid-body and a bug; a path holding an encoded
slash (``EncodedSlash``) is a 404 naming the id. Apart from ``errors`` so that ``json_body``, which raises
``ServerError``, is read here without a cycle.
"""

from __future__ import annotations

import math
import re
from typing import Any
from urllib.parse import unquote

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from rlnb import wire
from rlnb.server.errors import ERROR_TYPES, SHOWN, ServerError, error_response, error_type, named
from rlnb.server.json_body import read_json
from rlnb.server.limits import tighter_range
from rlnb.server.openapi import declared_range
from rlnb.wire.paths import API_PREFIX


def install_error_handlers(app: FastAPI) -> None:
    """Every error the app raises leaves as the API's error body."""

    @app.exception_handler(ServerError)
    def _server_error(request: Request, exc: ServerError) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.type, exc.param, exc.retry, exc.retry_after)

    @app.exception_handler(ClientDisconnect)
    def _client_gone(request: Request, exc: ClientDisconnect) -> JSONResponse:
        """The client went away before its body arrived in full (a notebook interrupted mid-upload): no bug of the
        server's, which uvicorn logged as one ("Exception in ASGI application", a 60-line traceback) at each. What the
        request held is let go by its route (an upload's reservation); the answer goes to nobody."""
        return error_response(
            400, "the client disconnected before its request's body arrived in full", ERROR_TYPES[400]
        )

    @app.exception_handler(Exception)
    def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        """A bug: the API's error body, not Starlette's plain text; its type only (its text may hold a path). The
        exception is raised again after this answer, so the server's log has its traceback."""
        said = f"internal server error ({type(exc).__name__}); the server's log has the details"
        return error_response(500, said, error_type(500))

    @app.exception_handler(RequestValidationError)
    def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0]
        if first.get("type") == "json_invalid":  # loc is ("body", offset): no field to name
            why = first.get("ctx", {}).get("error")
            return error_response(400, "the body is not valid JSON" + (f" ({why})" if why else ""), ERROR_TYPES[400])
        if tuple(first.get("loc", ())) == ("body",):  # the body as a whole: there was none, or it was not read as JSON
            return error_response(400, _body_error(request, first.get("type")), ERROR_TYPES[400])
        loc = [named(str(p)) for p in first.get("loc", ()) if p not in ("body", "query", "path", "header")]
        param = ".".join(loc) or None
        if tuple(first.get("loc", ()))[:2] == ("body", "loss") and (said := _loss_said(exc.body)) is not None:
            return error_response(400, said, ERROR_TYPES[400], param)
        why = str(first.get("msg", "invalid")).removeprefix("Value error, ")  # pydantic's prefix of a validator's own
        said = why if param and why.startswith(param) else f"{param or 'request'}: {why}"  # words, which name the field
        if first.get("type") in _BOUND_BROKEN and (span := _span(request, param, tuple(first["loc"]))) is not None:
            got = str(first.get("input"))  # pydantic names the one bound it broke
            if isinstance(first.get("input"), float) and math.isnan(first["input"]):  # it broke every comparison
                said, got = f"{param}: NaN is not allowed", ""  # pydantic names the one bound it tried first
            said += f" (allowed: {span}" + (f"; got {got})" if got and len(got) <= MAX_SHOWN_DIGITS else ")")
        return error_response(400, said, ERROR_TYPES[400], param)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400 and isinstance(exc.__cause__, (ValueError, RecursionError)):  # FastAPI's json.loads
            return _unreadable_body(await request.body(), exc.__cause__)  # (read already: this is the cached copy)
        if exc.status_code == 405 and (allowed := _allowed(request) or (exc.headers or {}).get("Allow")):
            said = f"{request.method} is not a method of this path: it takes {allowed}"  # HTTP requires the header
            answer = error_response(405, said, ERROR_TYPES[400])
            answer.headers["Allow"] = allowed
            return answer
        if exc.status_code == 404 and "endpoint" not in request.scope:  # no route matched: more than a bare "Not Found"
            return error_response(404, _route_miss(request.method, request.url.path), ERROR_TYPES[404])
        return error_response(exc.status_code, str(exc.detail), error_type(exc.status_code))


API_ROOT = f"{API_PREFIX}/"
"""Where the API's paths start."""


def _route_miss(method: str, path: str) -> str:
    """Why no route matched: a doubled ``/`` (a base URL ending in one), a path outside the API, else a typo."""
    said = f"no route {method} {wire.shown(path, SHOWN)}"
    if "//" in path:
        said += " (it holds '//': a base URL ending in '/' joined to a path starting with one?)"
    elif not path.startswith(API_ROOT):
        said += f": the API's paths start with {API_ROOT}"
    return said + "; /openapi.json lists every path"


MAX_SHOWN_DIGITS = 40
"""A number out of range longer than this is not echoed in the 400 (a 5,000-digit one filled the message)."""
_BOUND_BROKEN = frozenset({"greater_than_equal", "less_than_equal", "greater_than", "less_than", "finite_number"})
"""pydantic's error types for a number past one of its field's bounds, or past every bound (inf, nan)."""


def _span(request: Request, param: str | None, loc: tuple[Any, ...]) -> str | None:
    """The range of the field at ``loc``: the server's own where it is tighter than the wire's (``tighter_range``),
    else the one ``/openapi.json`` declares."""
    return tighter_range(request.app.state.registry.settings, param) or _range(request, loc)


def _range(request: Request, loc: tuple[Any, ...]) -> str | None:
    """The range ``/openapi.json`` declares for the field at ``loc`` of the request's route, if it declares one."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute):
        return None
    return declared_range(request.app.openapi(), request.method, route.path_format, loc)


def _allowed(request: Request) -> str:
    """The methods ``/openapi.json`` declares for the request's path, comma-joined. Starlette's 405 named those of the
    first route that matched the path alone (``GET`` of ``/training-sessions/{session_id}``, not its ``PATCH``)."""
    methods: set[str] = set()
    for template, operations in request.app.openapi()["paths"].items():
        pattern = re.sub(r"\\\{\w+\\\}", "[^/]+", re.escape(template))
        if re.fullmatch(pattern, request.url.path):
            methods.update(method.upper() for method in operations)
    return ", ".join(sorted(methods))


_SLASH = "\x00"
"""Stands for a ``%2F`` while the raw path is matched against the routes (no path segment holds a NUL)."""


class EncodedSlash:
    """ASGI middleware: a path holding ``%2F`` (an encoded ``/``) is a 404 naming the id that holds it, before any route
    is reached. The ASGI server decodes ``%2F`` before routing: ``/training-sessions/ID%2Fstop`` stopped session ID,
    ``/training-sessions/%2F`` reached the list (a POST: the create) by a redirect; no id has a ``/``."""

    def __init__(self, app: ASGIApp, templates: list[str]):
        self.app, self.templates = app, templates
        """The routes' paths, with ``{session_id}`` and the like, in the order they are matched."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and b"%2f" in scope.get("raw_path", b"").lower():
            param, message = _encoded_slash(scope["raw_path"].decode("latin-1"), self.templates)
            await error_response(404, message, ERROR_TYPES[404], param)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _encoded_slash(raw: str, templates: list[str]) -> tuple[str | None, str]:
    """``param`` and message for a raw path holding a ``%2F``: the first of ``templates`` it matches with the ``/``
    inside an id names that id."""
    path = unquote(raw.replace("%2F", _SLASH).replace("%2f", _SLASH))
    for template in templates:
        parts = re.split(r"\{(\w+)\}", template)  # text, name, text, name, ..., text
        pattern = "".join(f"(?P<{part}>[^/]+)" if i % 2 else re.escape(part) for i, part in enumerate(parts))
        match = re.fullmatch(pattern, path)
        for name, value in (match.groupdict() if match else {}).items():
            if _SLASH in value:
                said = wire.shown(value.replace(_SLASH, "/"), SHOWN)
                return name, f"{name} {said} holds a '/' (sent as %2F): no {name} has one"
    return None, "the path holds a '/' sent as %2F, and no route of this API matches it: no id has a '/'"


def _unreadable_body(body: bytes, cause: ValueError | RecursionError) -> JSONResponse:
    """Why FastAPI's ``json.loads`` failed, beyond its "There was an error parsing the body": JSON nested past
    Python's stack, an integer too long to read (named), or bytes that are not UTF-8/16/32 text."""
    if isinstance(cause, RecursionError):
        return error_response(400, "the body nests JSON too deeply to read", ERROR_TYPES[400])
    try:
        read_json(body)
    except ServerError as exc:
        return error_response(exc.status, exc.message, exc.type, exc.param)
    except ValueError:
        pass
    why = "it is not UTF-8 text" if isinstance(cause, UnicodeDecodeError) else type(cause).__name__
    return error_response(400, f"the body is not valid JSON ({why})", ERROR_TYPES[400])


def _loss_said(body: Any) -> str | None:
    """A bad ``loss`` in the words rlnb's client and engine say it (``wire.validated``, as ``wire.loss_config`` checks
    it before sending: each bad field, its value and its rule), where pydantic's names the first alone, in its own."""
    loss = body.get("loss") if isinstance(body, dict) else None
    if not isinstance(loss, dict):
        return None
    try:
        wire.validated(wire.LossConfig, loss, "loss")
    except ValueError as exc:
        return str(exc)
    return None


def _body_error(request: Request, kind: object) -> str:
    """Why a body as a whole was refused: missing (``curl`` without ``-d``: "request: Field required"), or sent without
    ``Content-Type: application/json`` (``curl -d`` sends a form's type, and the body would be read as bytes: "Input
    should be a valid dictionary"), or JSON that is not an object."""
    given = request.headers.get("content-type")
    media = (given or "").split(";", 1)[0].strip().lower()
    if kind == "missing":
        return "the request has no JSON body: this endpoint takes a JSON object (Content-Type: application/json)"
    if media != "application/json" and not media.endswith("+json"):
        got = f"got {wire.shown(given, SHOWN)}" if given else "none was sent"
        return f"the body must be JSON sent with Content-Type: application/json ({got})"
    return "the body must be a JSON object"

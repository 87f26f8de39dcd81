"""Dependencies every router shares: the registry, the settings and the caller (bearer token)."""

from __future__ import annotations

import hmac
import json
from collections import Counter
from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from typing import Annotated, Any

import anyio.to_thread
from fastapi import Body, Depends, Request, Response
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rlnb import wire
from rlnb.server.counts import check_counts
from rlnb.server.errors import ERROR_RESPONSES, SHOWN, ServerError, named
from rlnb.server.json_body import read_json
from rlnb.server.registry import Registry
from rlnb.server.settings import ServerSettings

_bearer = HTTPBearer(auto_error=False)


def get_registry(request: Request) -> Registry:
    registry: Registry = request.app.state.registry
    return registry


def current_user(
    request: Request,
    registry: Annotated[Registry, Depends(get_registry)],
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> str:
    """The caller's id; 401 without the right token when the server has one (compared in constant time). Two
    ``Authorization`` headers that differ are a 400 naming it: the first was compared, so a valid key then a wrong one
    passed. One key given twice is that key: the together SDK sends its own ``Authorization`` and a
    ``default_headers={"authorization": ...}`` both (its merge is case-sensitive)."""
    given = request.headers.getlist("authorization")
    if len(set(given)) > 1:
        said = f"Authorization is given {len(given)} times, with different values: give one API key"
        raise ServerError(400, said, param="Authorization")
    token = registry.settings.token
    if token is None:
        return "local-user"
    if creds is None or not hmac.compare_digest(creds.credentials.encode(), token.encode()):
        raise ServerError(401, "missing or invalid API key")
    return registry.signer.user(token)


REPEATABLE = frozenset({"status"})
"""Query parameters that take several values (``?status=A&status=B``); any other is given once."""


def _declared(dependant: Dependant) -> set[str]:
    """The query parameters a route (and its dependencies) reads."""
    names = {f.alias for f in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _declared(sub)
    return names


def _route_params(route: APIRoute) -> frozenset[str]:
    """``_declared`` once per route, kept on the route (which cannot be a dict key), not worked out per request."""
    known: frozenset[str] | None = getattr(route, "_rlnb_query", None)
    if known is None:
        known = frozenset(_declared(route.dependant))
        route._rlnb_query = known  # type: ignore[attr-defined]
    return known


def check_request(request: Request) -> None:
    """A query parameter the route does not read, one given twice or one left empty, and two Idempotency-Key headers,
    are each a 400 naming it, as an unknown body field is. FastAPI ignored the first (a misspelt ``model_resource_id``
    filter listed every session), kept the last value of the second (``limit=1&limit=50`` listed 50), matched
    nothing with the third (``?created_by=``, an unset variable: an empty list) and joined the headers into one key,
    ``"a, b"``, that no retry sending ``a`` would match."""
    route = request.scope.get("route")
    known = _route_params(route) if isinstance(route, APIRoute) else None
    counts = Counter(name for name, _ in request.query_params.multi_items())
    for name, n in counts.items():
        if known is not None and name not in known:
            listed = ", ".join(sorted(known)) or "none"
            said = f"unknown query parameter {wire.shown(name, SHOWN)} (this route reads {listed})"
            raise ServerError(400, said, param=named(name))
        if n > 1 and name not in REPEATABLE:
            said = f"query parameter {wire.shown(name, SHOWN)} is given {n} times: give it once"
            raise ServerError(400, said, param=named(name))
    keys = request.headers.getlist("idempotency-key")
    if len(keys) > 1:
        raise ServerError(400, f"Idempotency-Key is given {len(keys)} times: give one key", param="Idempotency-Key")
    for name, value in request.query_params.multi_items():
        if not value.strip():
            said = f"query parameter {wire.shown(name, SHOWN)} is empty: give a value or leave it out"
            raise ServerError(400, said, param=named(name))


class CheckedJsonRequest(Request):
    """The request FastAPI is handed once ``read_json`` has parsed and checked its body: the public ``json()`` returns
    that parse, and the body is replayed to whatever reads it again. Setting Starlette's private cache
    (``request._json``) would do the same until a Starlette that names it otherwise: then every body would be parsed
    twice."""

    def __init__(self, request: Request, body: bytes, parsed: Any) -> None:
        super().__init__(request.scope, _replayed(body, request.receive))
        self.parsed = parsed

    async def json(self) -> Any:
        return self.parsed


def _replayed(body: bytes, receive: Receive) -> Receive:
    """``receive`` with the body, read already, given again first (the ASGI message it came in)."""
    given = False

    async def replay() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


PARSED_ON_LOOP = 1 << 12
"""Bytes of the largest body read and validated on the event loop (0.3 ms at most: 89 one-token prompts); a larger one
is read in a worker thread, and other clients are answered meanwhile. Validation costs by item more than by byte: 256
one-token samples (43 KB) took 2.9-7.5 ms, 1,455 one-token prompts (64 KB) 8.6-16 ms (``bench/bench_server_loop.py``), a
29.7 MB body 5.2 s."""
_NO_BODY = object()
"""What FastAPI is handed for a body whose validation failed already: it fails again at once, and its error is
replaced by the real ones (``JsonRoute``)."""


def _not_json(exc: json.JSONDecodeError) -> RequestValidationError:
    """FastAPI's own error for a body that is not JSON, which it raises as it reads the body (before any dependency)."""
    said = {"type": "json_invalid", "loc": ("body", exc.pos), "msg": "JSON decode error", "input": {}}
    return RequestValidationError([{**said, "ctx": {"error": exc.msg}}], body=exc.doc)


class JsonRoute(APIRoute):
    """A route whose JSON body is read by ``read_json`` before FastAPI reads it: a key given twice in one object is a
    400 naming it (``json.loads`` keeps the last value: ``{"base_model": "a", "base_model": "b"}`` would make a
    resource of ``b``). A body it cannot read is left to FastAPI, whose errors say why (``install_error_handlers``).
    The body is also validated here, as FastAPI would (its field, its errors), in a worker thread past
    ``PARSED_ON_LOOP`` bytes: FastAPI is handed the model, which it takes as it is. The token is checked first."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()
        if self.body_field is None:
            return handle
        whole = len(self.dependant.body_params) == 1 and not self._embed_body_fields
        field = self.body_field if whole else None  # else FastAPI picks each field out of the body: left to it
        guarded = any(d.dependency is current_user for d in self.dependencies)
        model = self.body_field.field_info.annotation

        async def check_caller(request: Request) -> None:
            """``current_user`` before the body is read: a wrong key's 401 costs no parse nor validation (a 29.7 MB
            body took 5 s of them), and says nothing of the body. An app's override of it runs as the dependency."""
            overrides = getattr(self.dependency_overrides_provider, "dependency_overrides", {})
            if guarded and not overrides.keys() & {current_user, get_registry, _bearer}:  # else as the dependency
                current_user(request, get_registry(request), await _bearer(request))

        def read(body: bytes, validate: bool, settings: ServerSettings) -> tuple[Any, list[Any]]:
            parsed = read_json(body)  # a key given twice: its ServerError, raised here
            check_counts(settings, model, parsed)  # before any validation: its cost grows with the items
            if field is None or not validate:
                return parsed, []
            value, errors = field.validate(parsed, {}, loc=("body",))
            return (parsed, errors) if errors else (value, [])

        async def read_then_handle(request: Request) -> Response:
            media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
            # no Content-Type at all too: a FastAPI before 0.132 parses such a body as JSON (``strict_content_type``)
            if media and media != "application/json" and not media.endswith("+json"):
                return await handle(request)
            body = await request.body()  # kept by ``request``, which the error handlers are given
            if not body:
                return await handle(request)
            await check_caller(request)
            settings = get_registry(request).settings
            try:  # validated only where FastAPI reads JSON: one without a Content-Type is bytes to a strict one
                if len(body) > PARSED_ON_LOOP:
                    parsed, errors = await anyio.to_thread.run_sync(read, body, bool(media), settings)
                else:
                    parsed, errors = read(body, bool(media), settings)
            except json.JSONDecodeError as exc:
                if not media:  # a strict FastAPI's error says why: no Content-Type was sent
                    return await handle(request)
                raise _not_json(exc) from None
            except (ValueError, RecursionError):  # not text, or nested too deep: FastAPI decodes it again, says why
                return await handle(request)
            if not errors:
                return await handle(CheckedJsonRequest(request, body, parsed))
            try:  # the query, the headers and the token checked as ever, and their errors first
                return await handle(CheckedJsonRequest(request, body, _NO_BODY))
            except RequestValidationError as exc:
                others = [e for e in exc.errors() if tuple(e.get("loc", ()))[:1] != ("body",)]
                raise RequestValidationError([*others, *errors], body=parsed, endpoint_ctx=exc.endpoint_ctx) from None

        return read_then_handle


async def body_bytes(request: Request) -> int:
    """The bytes of the request's body (read already: ``JsonRoute`` replays them), for ``max_pending_bytes``."""
    return len(await request.body())


RegistryDep = Annotated[Registry, Depends(get_registry)]
BodyBytes = Annotated[int, Depends(body_bytes)]
User = Annotated[str, Depends(current_user)]
NoBody = Annotated[wire.NoBody | None, Body()]
"""The body of a POST that takes none (a stop, a payload URL, a checkpoint operation): absent, ``{}`` or ``null``; a
field is a 400 naming it, as in every other body (``{"force": true}`` as a resource stop's body is not ignored)."""
_SERVING: ContextVar[Any] = ContextVar("rlnb_serving_app", default=None)


class AppOverrides:
    """FastAPI's ``dependency_overrides`` of the app serving the request: the routes are built once and shared by every
    app ``create_app`` makes, so their overrides provider is this object, not the app that included them, and it reads
    the app from the request's context (``ServingApp``)."""

    @property
    def dependency_overrides(self) -> dict[Callable[..., Any], Callable[..., Any]]:
        app = _SERVING.get()
        return app.dependency_overrides if app is not None else {}


OVERRIDES = AppOverrides()


class ServingApp:
    """ASGI middleware naming the app that serves a request for ``AppOverrides`` (FastAPI puts it in the scope)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = _SERVING.set(scope.get("app"))
        try:
            await self.app(scope, receive, send)
        finally:
            _SERVING.reset(token)


AUTHENTICATED: dict[str, Any] = {
    "dependency_overrides_provider": OVERRIDES,
    "dependencies": [Depends(current_user), Depends(check_request)],
    "responses": ERROR_RESPONSES,
    "route_class": JsonRoute,
}
"""``APIRouter(**AUTHENTICATED)``: every route checks the token and the query (``check_request``), reads its JSON body
with ``read_json`` (``JsonRoute``), and declares the error responses."""

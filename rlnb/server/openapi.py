"""``/openapi.json`` that tells the truth about what the server sends and accepts.

FastAPI's default declares a 422 ``HTTPValidationError`` on every route with parameters; this server never
sends one (a bad request is a 400 with the API's error body, declared on every route by the routers).
Everything else comes from the wire models: int64 fields accept integers or decimal strings and are sent
as strings, every response field is required (``null`` where its type allows), the GPU type is an enum.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

UNUSED_SCHEMAS = ("HTTPValidationError", "ValidationError")


def truthful_openapi(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """A replacement for ``app.openapi``: FastAPI's schema without the 422s it never sends, built once."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
            for path in schema["paths"].values():
                for operation in path.values():
                    operation.get("responses", {}).pop("422", None)
            for name in UNUSED_SCHEMAS:
                schema.get("components", {}).get("schemas", {}).pop(name, None)
            app.openapi_schema = schema
        return app.openapi_schema

    return openapi

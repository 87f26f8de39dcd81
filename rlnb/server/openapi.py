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


def declared_range(spec: dict[str, Any], method: str, path: str, loc: tuple[Any, ...]) -> str | None:
    """``LOW..HIGH`` of the field at ``loc`` (as pydantic's errors name it: ``("body", "seconds")``, ``("query",
    "limit")``) of the route ``method path``, as ``spec`` declares it; None where it declares no two bounds."""
    operation = spec["paths"].get(path, {}).get(method.lower(), {})
    where, *names = loc
    if where == "body":
        node = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
    else:
        params = [p for p in operation.get("parameters", []) if p["in"] == where and names and p["name"] == names[0]]
        node, names = (params[0]["schema"] if params else {}), names[1:]
    for name in names:
        node = _member(spec, node, name)
    for option in [node, *node.get("anyOf", [])]:
        option = _resolved(spec, option)
        if "minimum" in option and "maximum" in option:
            return f"{_number(option['minimum'])}..{_number(option['maximum'])}"
    return None


def _resolved(spec: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    return spec["components"]["schemas"][ref.rsplit("/", 1)[-1]] if isinstance(ref, str) else node


def _member(spec: dict[str, Any], node: dict[str, Any], name: Any) -> dict[str, Any]:
    """The schema of ``node``'s property or item ``name`` (through ``$ref`` and ``anyOf``); ``{}`` if it has none."""
    for option in [node, *node.get("anyOf", [])]:
        option = _resolved(spec, option)
        if isinstance(name, str) and name in option.get("properties", {}):
            return option["properties"][name]
        if isinstance(name, int) and isinstance(option.get("items"), dict):
            return option["items"]
    return {}


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value

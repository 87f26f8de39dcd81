"""``/openapi.json`` that tells the truth about what the server sends and accepts.

FastAPI's default declares a 422 ``HTTPValidationError`` on every route with parameters; this server never
sends one (a bad request is a 400 with the API's error body, declared on every route by the routers).
Everything else comes from the wire models: int64 fields accept integers or decimal strings and are sent
as strings, every response field is required (``null`` where its type allows), the GPU type is an enum.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

from annotated_types import Ge, Gt, Le, Lt
from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from starlette.routing import BaseRoute

from rlnb import wire
from rlnb.wire.rules import bound_text

UNUSED_SCHEMAS = ("HTTPValidationError", "ValidationError")
_BOUNDS = {"minimum": Ge, "exclusiveMinimum": Gt, "maximum": Le, "exclusiveMaximum": Lt}
"""JSON Schema's bounds as ``annotated_types``' (pydantic's), which ``bound_text`` words."""


def shared_openapi(app: FastAPI, document: Callable[[], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
    """A replacement for ``app.openapi`` that gives ``app`` a copy of its own of ``document()`` at the first call:
    ``document`` may return one schema that every app serving the same routes takes (its build, about 0.2 s of CPU,
    is paid once), and a change to one app's copy reaches no other app."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = copy.deepcopy(document())
        return app.openapi_schema

    return openapi


def truthful_schema(title: str, version: str, routes: Sequence[BaseRoute]) -> dict[str, Any]:
    """FastAPI's schema of ``routes`` without the 422s the server never sends."""
    schema = get_openapi(title=title, version=version, routes=routes)
    for path in schema["paths"].values():
        for operation in path.values():
            operation.get("responses", {}).pop("422", None)
    for name in UNUSED_SCHEMAS:
        schema.get("components", {}).get("schemas", {}).pop(name, None)
    return schema


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
    return _span(spec, node)


def _span(spec: dict[str, Any], node: dict[str, Any]) -> str | None:
    """``LOW..HIGH``, or ``[LOW, HIGH)`` and the like where a bound is exclusive, or one bound as ``rlnb.wire`` words
    it (``>= 0``: a temperature), of ``node`` or of one of its options (``anyOf``, nested: an int64 field also takes
    a decimal string, and may be null); None where none has a bound."""
    node = _resolved(spec, node)
    low = node.get("minimum", node.get("exclusiveMinimum"))
    high = node.get("maximum", node.get("exclusiveMaximum"))
    if low is not None and high is not None:
        if "minimum" in node and "maximum" in node:
            return f"{_number(low)}..{_number(high)}"
        return f"{'[' if 'minimum' in node else '('}{_number(low)}, {_number(high)}{']' if 'maximum' in node else ')'}"
    if low is not None or high is not None:
        key = next(k for k in _BOUNDS if k in node)
        return bound_text(_BOUNDS[key](_number(node[key])))
    for option in node.get("anyOf", []):
        if (span := _span(spec, option)) is not None:
            return span
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
    """``1.0`` as ``1``; int64's bounds exactly: FastAPI's schema holds them as floats, and the high one read
    9223372036854775808 (past int64)."""
    for bound in (wire.INT64_MAX, -wire.INT64_MAX - 1):
        if value == float(bound):
            return bound
    return value if isinstance(value, int) or not float(value).is_integer() else int(value)

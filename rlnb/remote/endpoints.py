"""The parts every endpoint of ``APIClient`` builds a call from (path segments, list queries, JSON bodies), and the
check that an answer is about the object asked for. Shared by its halves (``client``, ``resources``,
``checkpoints``)."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import TypeVar
from urllib.parse import quote

import httpx

from rlnb import wire
from rlnb._input.checks import check_int
from rlnb.remote import payloads
from rlnb.remote.bodies import invalid
from rlnb.remote.calls import Caller

_Object = TypeVar("_Object", wire.ModelResources, wire.Session, wire.Checkpoint)


def seg(value: str, name: str) -> str:
    """One path segment, escaped; an empty id would silently address a different endpoint, and so would ``.`` and
    ``..``, which httpx resolves as dot segments (``/training-sessions/../stop`` is ``/stop``): their dots escaped."""
    if not value:
        raise ValueError(f"expected a non-empty {name}, got {value!r}")
    escaped = quote(str(value), safe="")
    return escaped.replace(".", "%2E") if escaped in (".", "..") else escaped


def at(template: str, **ids: str) -> str:
    """A ``wire.paths`` template with each id filled in as one path segment (``seg``, naming it)."""
    return template.format(**{name: seg(value, name) for name, value in ids.items()})


def list_params(limit: object, **params: str | None) -> dict[str, str]:
    """One page's query: ``limit`` checked against the API's 1..100 (``limit=500``, sent, would be refused by the
    server as a 422 naming no field of the call), without the unset (None or empty) filters."""
    count = check_int("limit", limit, 1, wire.LIST_LIMIT_MAX, why="the API's page size")
    return {"limit": str(count), **{name: value for name, value in params.items() if value}}


def status_filter(status: str | Iterable[str] | None, catalogue: type[StrEnum]) -> str:
    """A list's ``status`` query: None is no filter, one string one status, an iterable several (comma-joined, as the
    SDK sends a list); each must be one of ``catalogue``'s filterable statuses, else a ``ValueError`` naming
    ``status`` before anything is sent: a typo (or one string read as its characters) would match nothing, silently."""
    choices = wire.filterable(catalogue)
    if status is None:
        return ""
    if not isinstance(status, str | Iterable):
        raise ValueError(f"status must be one or a list of {', '.join(choices)}; got {wire.shown(status)}")
    values = [status] if isinstance(status, str) else list(status)
    bad = [v for v in values if not isinstance(v, str) or v not in choices]
    if bad:
        raise ValueError(f"status must be one or a list of {', '.join(choices)}; got {wire.shown(bad[0])}")
    return ",".join(sorted(set(values)))


def json_body(model: wire._Model) -> bytes:
    return payloads.compact(model.to_json_dict())


class Endpoints(Caller):
    """The send path, with the check of an answer about one object."""

    def _one(self, response: httpx.Response, model: type[_Object], asked: str) -> _Object:
        """The object asked for by id, or ``APIError``: an answer about another one (a proxy's cache) made
        ``connect`` run, and ``close()`` stop, someone else's session, leaving its own running."""
        obj = self._parse(response, model)
        if obj.id != asked:
            raise invalid(response, model.__name__, f"its id is {obj.id!r}, for {asked!r}")
        return obj

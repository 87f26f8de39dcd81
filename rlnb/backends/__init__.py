"""Backends run operations for a Session: ``local`` (in-process torch) and ``remote`` (httpx).

A backend is anything with the small ``Backend`` protocol below. It takes a request body, returns
at once, and reports every status change of the operation to the listener it was given.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from rlnb import wire

Listener = Callable[[wire.Operation[Any]], None]
OptimizerKind = wire.OptimizerKind


class Backend(Protocol):
    optimizer: OptimizerKind
    """Fixed when the session is created, as in the API."""

    def submit(self, kind: str, body: wire._Model | None, listener: Listener) -> None:
        """Queue one operation; call ``listener`` with its envelope now (PENDING) and on every change."""
        ...

    def session(self) -> wire.Session:
        """The session object as the API's GET returns it."""
        ...

    def config(self) -> dict[str, Any]:
        """What a run's ``config.json`` records about this session (backend, model, optimizer, seed,
        ...). Never secrets."""
        ...

    def close(self) -> None:
        """Stop the session; operations not yet finished end FAILED (SESSION_NOT_ACTIVE)."""
        ...

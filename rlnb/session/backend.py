"""What a Session needs of whatever runs its operations: ``rlnb.engine`` (in-process torch) or
``rlnb.remote`` (httpx).

A backend is anything with the small ``Backend`` protocol below. It takes a request body, returns
at once, and reports every status change of the operation to the listener it was given. One that holds the weights
here (the engine, ``FakeBackend``) also has ``check_optim_step(hp)``, which ``Session.check_params`` asks before
anything is sent: a remote server's limits are its own, said as the optim-step operation's INVALID_INPUT.
"""

from __future__ import annotations

from typing import Any, Protocol

from rlnb import wire


class Backend(Protocol):
    optimizer: wire.OptimizerKind
    """Fixed when the session is created, as in the API."""

    def submit(self, kind: wire.OperationKind, body: wire._Model | None, listener: wire.Listener) -> None:
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

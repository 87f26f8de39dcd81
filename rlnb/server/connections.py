"""uvicorn's HTTP protocol with what ``rlnb serve`` adds to each connection: a deadline for a request's headers
(``header_timeout``), and the API's 503 past ``max_connections`` requests in flight.

uvicorn times out neither a connection that never finishes its headers (its keep-alive timer ends at the first byte
of the next request) nor one that sends nothing: 1,100 such connections held every descriptor of a server limited to
1,024, and every other client's connection was reset. Its ``limit_concurrency`` answers a plain-text 503."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from rlnb.server.errors import error_response


def protocol(header_timeout: float, max_connections: int, base: Any = None) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol class ``base`` (by default httptools', else h11's, as uvicorn picks) with these
    limits."""
    if base is None:
        from uvicorn.protocols.http.auto import AutoHTTPProtocol

        base = AutoHTTPProtocol

    class Protocol(base):
        """Closes a connection whose request headers are not in full ``header_timeout`` seconds after it opened or
        its last answer ended; answers a request past ``max_connections`` requests in flight with the API's 503
        (``busy``)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.app: ASGIApp = busy(self.app, self.tasks, max_connections)
            self._headers_due: asyncio.TimerHandle | None = None
            self._awaited: object = None  # the cycle (request) that was the last when the deadline was set

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def on_response_complete(self) -> None:
            super().on_response_complete()  # starts a pipelined request whose headers are in (both protocols)
            if self.cycle is None or self.cycle.response_complete:  # none is: the next request's headers are due
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            if not self.transport.is_closing():
                self._awaited = self.cycle
                self._headers_due = self.loop.call_later(header_timeout, self._headers_late)

        def _disarm(self) -> None:
            if self._headers_due is not None:
                self._headers_due.cancel()
                self._headers_due = None

        def _headers_late(self) -> None:
            """Close the connection unless a request's headers came in full since the deadline was set (a new
            cycle): the deadline is not cancelled then, which would cost a check on every read of every body."""
            self._headers_due = None
            if self.cycle is self._awaited and not self.transport.is_closing():
                self.transport.close()

    return Protocol


def busy(app: ASGIApp, tasks: set[Any], limit: int) -> ASGIApp:
    """``app``, answering the API's 503 (``Connection: close``) to a request made while ``limit`` requests are in
    flight (``tasks``, uvicorn's). Connections that have sent nothing are not counted: a 503 frees no descriptor (the
    connection is accepted already), so counting them only refused every other client; ``header_timeout`` closes
    them."""

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and len(tasks) > limit:  # this request is one of them
            response = error_response(
                503, f"this server has {len(tasks)} requests in flight with this one; the limit is {limit} "
                "(max_connections): try again shortly", "server_error", after=1,
            )  # fmt: skip
            response.headers["connection"] = "close"
            await response(scope, receive, send)
            return
        await app(scope, receive, send)

    return guarded

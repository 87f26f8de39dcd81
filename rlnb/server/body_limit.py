"""How a request body is read: its size limit, its deadlines, its coding, and its end when the server stops
(``BodyLimit``).

A body past a limit gets the API's error body (413, 408), as does one still arriving when the server stops (503): the
stop no longer waits for it until uvicorn cuts it (``SHUTDOWN_GRACE``), which answered a plain-text 500 and logged a
``CancelledError`` traceback.
"""

from __future__ import annotations

import asyncio
import threading
import time

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rlnb import wire
from rlnb.server.errors import SHOWN, error_response
from rlnb.server.settings import ServerSettings
from rlnb.wire.paths import API_PREFIX

PRESIGNED_UPLOADS = f"{API_PREFIX}/payloads/"
"""Presigned payload uploads: their limit is ``max_payload_bytes`` (the side channel is for big bodies)."""
STOP_BODY_GRACE = 0.5
"""Seconds a body goes on being read once the server stops, counted from the stop, once per body (not per chunk, which
a steady trickle renews): a body already in the server's buffers is still read whole."""


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int, setting: str):
        super().__init__(413, f"request body is larger than {limit} bytes ({setting})")


class BodyTooSlow(HTTPException):
    def __init__(self, why: str):
        super().__init__(408, f"request body {why}: send it again in full")


class BodyCut(HTTPException):
    def __init__(self) -> None:
        super().__init__(503, "the server is stopping: its request body had not arrived in full; send the request "
                         "again once the server is back")  # fmt: skip


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class ServerStop:
    """Set once, from any thread, when the server begins to stop; the body reads waiting on it (``wait``) end."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._set = False
        self.at: float | None = None
        """When it was set (``time.monotonic``): the body reads still going end ``STOP_BODY_GRACE`` after it."""
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = set()

    def set(self) -> None:
        with self._lock:
            if not self._set:
                self.at = time.monotonic()
            self._set, waiters = True, list(self._waiters)
        for loop, fut in waiters:
            loop.call_soon_threadsafe(_wake, fut)

    async def wait(self) -> None:
        loop = asyncio.get_running_loop()
        waiter = (loop, loop.create_future())
        with self._lock:
            if self._set:
                return
            self._waiters.add(waiter)
        try:
            await waiter[1]
        finally:
            with self._lock:
                self._waiters.discard(waiter)


def _coding(headers: Headers) -> str | None:
    """The first content coding other than ``identity`` the request's ``Content-Encoding`` headers give, quoted as
    sent (cut: it is echoed), else None."""
    for given in headers.getlist("content-encoding"):
        for coding in given.split(","):
            if coding.strip() and coding.strip().lower() != "identity":
                return wire.shown(coding.strip(), SHOWN)
    return None


class BodyLimit:
    """ASGI middleware: a body over the limit is refused with 413 and the error body — at once when its
    ``Content-Length`` says so, else as soon as the bytes read pass the limit. A body that stalls gets a
    408: no byte for ``body_idle_timeout`` seconds, or not all of it within ``body_timeout``; one still arriving when
    the server stops (``stop``), a 503. A ``Content-Encoding`` other than ``identity`` is a 415 naming it, before the
    body is read: the server reads a body as sent, so a gzip one would be refused as no JSON and a plain one labelled
    ``br`` run. Any answer sent before its request's body arrived in full says ``Connection: close``, so that uvicorn
    closes the connection instead of waiting for the rest: a half-sent body never holds memory or a connection."""

    def __init__(self, app: ASGIApp, settings: ServerSettings, stop: ServerStop):
        self.app, self.settings, self.stop = app, settings, stop

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"].startswith(PRESIGNED_UPLOADS):
            limit, setting = self.settings.max_payload_bytes, "max_payload_bytes"
        else:
            limit, setting = self.settings.max_body_bytes, "max_body_bytes"
        headers = Headers(scope=scope)
        coded = _coding(headers)
        if coded is not None:
            said = f"Content-Encoding {coded} is not taken: send the body as it is (identity), uncompressed"
            response = error_response(415, said, "invalid_request_error", "Content-Encoding")
            response.headers["accept-encoding"] = "identity"  # RFC 9110 15.5.16: the codings that are taken
            response.headers["connection"] = "close"
            await response(scope, receive, send)
            return
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            response = error_response(413, BodyTooLarge(limit, setting).detail, "invalid_request_error")
            response.headers["connection"] = "close"
            await response(scope, receive, send)
            return
        total = 0
        done = not (int(declared) if declared.isdigit() else "chunked" in headers.get("transfer-encoding", ""))
        deadline = asyncio.get_running_loop().time() + self.settings.body_timeout

        async def closing(message: Message) -> None:
            if message["type"] == "http.response.start" and not done:
                message["headers"] = [*message.get("headers", []), (b"connection", b"close")]
            await send(message)

        async def limited() -> Message:
            nonlocal total, done
            if done:  # the body is in: what follows is a wait for the client to disconnect
                return await receive()
            message = await self._within(receive, deadline)
            if message["type"] == "http.request":
                total += len(message.get("body", b""))
                done = not message.get("more_body", False)
                if total > limit:
                    raise BodyTooLarge(limit, setting)  # FastAPI re-raises it; the error handler answers
            return message

        await self.app(scope, limited, closing)

    async def _within(self, receive: Receive, deadline: float) -> Message:
        """The next message of the body, within its deadlines, or until the server stops."""
        left = deadline - asyncio.get_running_loop().time()
        idle = self.settings.body_idle_timeout
        receiving, stopping = asyncio.ensure_future(receive()), asyncio.ensure_future(self.stop.wait())
        try:
            await asyncio.wait((receiving, stopping), timeout=min(idle, max(left, 0.0)), return_when="FIRST_COMPLETED")
            if stopping.done() and not receiving.done() and self.stop.at is not None:
                cut = self.stop.at + STOP_BODY_GRACE - time.monotonic()
                await asyncio.wait((receiving,), timeout=max(cut, 0.0))
        finally:
            stopping.cancel()
            receiving.cancel()  # waiting for bytes: none is lost (a no-op once it returned)
        if receiving.done():
            return receiving.result()
        if stopping.done():
            raise BodyCut()
        if left <= idle:
            raise BodyTooSlow(f"not in full within {self.settings.body_timeout} s (body_timeout)")
        raise BodyTooSlow(f"stalled: no byte in {idle} s (body_idle_timeout)")

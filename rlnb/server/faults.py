"""``rlnb serve --fail-rate``: lose a share of answers *after* the app acted — the case idempotency keys
exist for, so clients can be tested against it."""

from __future__ import annotations

import random

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class FaultInjector:
    """ASGI middleware: lets the app act, then replaces a fraction of ``/v1`` responses with a 503."""

    def __init__(self, app: ASGIApp, rate: float, seed: int = 0):
        self.app, self.rate, self.rng = app, rate, random.Random(seed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1/") or self.rng.random() >= self.rate:
            await self.app(scope, receive, send)
            return

        async def swallow(message: Message) -> None:
            pass

        await self.app(scope, receive, swallow)  # the app acts; its answer is lost
        body = b'{"error": {"message": "injected fault", "type": "server_error", "param": null, "code": null}}'
        await send({"type": "http.response.start", "status": 503, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})

"""The ``Host`` a request may name. ``rlnb serve`` on this machine's loopback without ``--token`` (its default) answered
every request, whatever name it was sent to: a web page whose name is rebound to 127.0.0.1 (DNS rebinding) reaches it
as its own origin, and its script could list the sessions, sample, train and download every checkpoint from the browser
of whoever runs the server. Such a server answers only its loopback names and its ``--public-url``'s (``OwnNames``)."""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from rlnb import wire
from rlnb._hosts import loopback
from rlnb.server.errors import SHOWN, error_response


def host_name(header: str) -> str:
    """The name a ``Host`` header gives, lowercased, without its port (``[::1]:8000`` is ``::1``)."""
    try:
        return urlsplit(f"//{header}").hostname or ""
    except ValueError:  # a bracket left open: no name this server has
        return header


class OwnNames:
    """ASGI middleware: a request whose ``Host`` is neither a loopback name nor one of ``names`` is a 403 saying why,
    before anything reads it. A request without a ``Host`` (HTTP/1.0) is let in: a browser always sends one."""

    def __init__(self, app: ASGIApp, names: frozenset[str]):
        self.app, self.names = app, names

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        given = Headers(scope=scope).get("host", "") if scope["type"] == "http" else ""
        name = host_name(given)
        if given and not (loopback(name) or name in self.names):
            also = "".join(f", {n}" for n in sorted(self.names) if not loopback(n))
            said = (f"Host {wire.shown(given, SHOWN)} is not a name of this server: rlnb serve on this machine's "
                    f"loopback without --token answers only requests to localhost, 127.0.0.1, ::1{also} (a web page "
                    "whose name is rebound to 127.0.0.1 could drive it from your browser); give --token to take "
                    "requests to other names")  # fmt: skip
            await error_response(403, said, "permission_error")(scope, receive, send)
            return
        await self.app(scope, receive, send)

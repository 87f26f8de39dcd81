"""The ``Host`` a request may name. ``rlnb serve`` on this machine's loopback without ``--token`` (its default) that
answered every request, whatever name it is sent to, would be reached by a web page whose name is rebound to 127.0.0.1
(DNS rebinding) as its own origin, and its script could list the sessions, sample, train and download every checkpoint
from the browser of whoever runs the server. Such a server answers only its loopback names and its ``--public-url``'s
(``OwnNames``)."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from rlnb import wire
from rlnb._hosts import loopback
from rlnb.server.errors import ERROR_TYPES, SHOWN, error_response

HOST = re.compile(r"(\[[0-9a-fA-F:.]+\]|[^][@/?#:\s\x00-\x1f\x7f]*)(:[0-9]*)?")
"""What a ``Host`` header holds (RFC 9110 7.2): a name or an IPv4 address, or an IPv6 one in brackets, and a port;
no control character (a NUL would raise out of the loopback check: a 500)."""


def host_name(header: str) -> str:
    """The name a ``Host`` header gives, lowercased, without its port (``[::1]:8000`` is ``::1``); ``""`` for one that
    is no ``host[:port]`` (a bracket left open, text after it, a port that is no number up to 65535, a path or a user
    beside the name: ``[::1``, ``127.0.0.1:80x`` would read as loopback names)."""
    if not HOST.fullmatch(header):
        return ""
    try:
        parts = urlsplit(f"//{header}")
        parts.port  # noqa: B018 - read for its ValueError: a port over 65535
    except ValueError:
        return ""
    return parts.hostname or ""


class OwnNames:
    """ASGI middleware: a request whose ``Host`` is neither a loopback name nor one of ``names`` (None: any name) is a
    403 saying why, in the API's error shape, before anything reads it; one that gives ``Host`` twice is a 400 naming
    it, whatever ``names`` (RFC 9112 3.2; the first was read: ``127.0.0.1`` then ``evil.example`` passed). A request
    without a ``Host`` (HTTP/1.0) is let in: a browser always sends one. Starlette's ``TrustedHostMiddleware`` is no
    substitute: it takes exact names, so another address of 127.0.0.0/8 (``127.0.0.2``, ``127.1``) or spelling of
    ``::1`` (``[0:0:0:0:0:0:0:1]``) is refused, and so is a request without a ``Host``, each with a plain-text 400
    ``Invalid host header`` the SDK shows as no reason."""

    def __init__(self, app: ASGIApp, names: frozenset[str] | None):
        self.app, self.names = app, names

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        hosts = Headers(scope=scope).getlist("host") if scope["type"] == "http" else []
        if len(hosts) > 1:
            said = f"Host is given {len(hosts)} times: a request names one host"
            await error_response(400, said, ERROR_TYPES[400], "Host")(scope, receive, send)
            return
        given = hosts[0] if hosts else ""
        name = host_name(given)
        if self.names is not None and given and not (name and (loopback(name) or name in self.names)):
            also = "".join(f", {n}" for n in sorted(self.names) if not loopback(n))
            said = (f"Host {wire.shown(given, SHOWN)} is not a name of this server: rlnb serve on this machine's "
                    f"loopback without --token answers only requests to localhost, 127.0.0.1, ::1{also} (a web page "
                    "whose name is rebound to 127.0.0.1 could drive it from your browser); give --token to take "
                    "requests to other names")  # fmt: skip
            await error_response(403, said, "permission_error")(scope, receive, send)
            return
        await self.app(scope, receive, send)

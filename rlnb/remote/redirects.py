"""A redirect whose ``Location`` is no URL: one error naming the status and the header, never a transient failure.

httpx reads ``Location`` inside ``send`` even when it follows no redirect: one it cannot parse (``http://[::1``) raised
its ``RemoteProtocolError``, which the client retried as a dropped connection, naming neither; one it can
(``ht!tp://x``, a relative path to httpx) read as a redirect to ``<the API>/ht!tp:/x``. ``check`` is a response hook
on the client's ``httpx.Client`` (a given one too) that sees the answer before httpx does, for rlnb's requests only
(``MARK``)."""

from __future__ import annotations

import re

import httpx

MARK = "rlnb_request"
"""The request extension rlnb sets on each request it sends: ``check`` leaves an ``http_client``'s other uses alone."""

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")
_SPACE = re.compile(r"[\x00-\x20\x7f]")


def fault(location: str) -> str:
    """Why ``location`` is no URL (RFC 3986's URI-reference, as a ``Location`` must be), "" when it is one."""
    if _SPACE.search(location):
        return "it holds a space or a control character"
    head = re.split(r"[/?#]", location, maxsplit=1)[0]
    if ":" in head and not _SCHEME.fullmatch(scheme := head.split(":", 1)[0]):
        return f"{scheme!r} is no URL scheme"
    try:
        url = httpx.URL(location)
    except httpx.InvalidURL as exc:
        return str(exc).rstrip(".")
    if url.port is not None and url.port > 65535:
        return f"port {url.port} is past 65535"
    return ""


class BadLocation(httpx.RemoteProtocolError):
    """A redirect to no URL, raised by ``check`` in place of httpx's own error; ``answer`` is the status and headers
    it came with, for the status error the client raises."""

    def __init__(self, response: httpx.Response, why: str) -> None:
        super().__init__(f"{response.status_code} with an invalid Location: {why}", request=response.request)
        self.status_code, self.headers = response.status_code, response.headers

    def answer(self) -> httpx.Response:
        """The redirect without its body (httpx closed it unread)."""
        return httpx.Response(self.status_code, headers=self.headers, request=self.request)


def check(response: httpx.Response) -> None:
    """A response hook: a redirect of rlnb's request whose ``Location`` is no URL raises ``BadLocation``."""
    if response.request.extensions.get(MARK) and response.has_redirect_location:
        why = fault(response.headers["location"])
        if why:
            raise BadLocation(response, why)


def install(http: httpx.Client) -> None:
    """``check`` among ``http``'s response hooks, once."""
    hooks = http.event_hooks["response"]
    if check not in hooks:
        hooks.append(check)

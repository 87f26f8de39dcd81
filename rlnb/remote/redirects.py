"""Redirects: none of the API's is followed; a presigned (storage) URL's are, a few (``follow``); a ``Location`` that
is no URL is one error naming the status and the header, never a transient failure.

A presigned request carries no credential (``Caller._build``'s bare request), so its storage may move the data
behind a CDN without a key going along: ``follow`` takes up to ``MAX_HOPS`` redirects of it, within the call's
deadline (the hops run inside it), never from https to http, and of a method other than GET only a 307 or 308 (a
302 turns a request into a GET: an upload's PUT answered 200 read as stored). The one not followed is the error's,
which says why (``unfollowed``).

httpx reads ``Location`` inside ``send`` even when it follows no redirect: one it cannot parse (``http://[::1``) raised
its ``RemoteProtocolError``, which the client retried as a dropped connection, naming neither; one it can
(``ht!tp://x``, a relative path to httpx) read as a redirect to ``<the API>/ht!tp:/x``. ``check`` is a response hook
on the client's ``httpx.Client`` (a given one too) that sees the answer before httpx does, for rlnb's requests only
(``MARK``)."""

from __future__ import annotations

import re
from collections.abc import Callable

import httpx

MARK = "rlnb_request"
"""The request extension rlnb sets on each request it sends: ``check`` leaves an ``http_client``'s other uses alone."""

PRESIGNED = "rlnb_presigned"
"""The request extension of a presigned request (``Caller._build``): its redirects are ``follow``'s."""
MAX_HOPS = 5
"""Redirects of a presigned request followed, at most (httpx's default is 20: a loop would use the deadline up)."""
_KEEP_METHOD = frozenset({307, 308})
"""The redirects that keep the method and the body (RFC 9110): the only ones a PUT follows."""

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


def follow(send: Callable[[httpx.Request], httpx.Response], request: httpx.Request) -> httpx.Response:
    """``request`` sent by ``send`` (which follows none), then each redirect ``_target`` allows, as a request with
    its method, headers and body (no credential: it carried none), each answer closed before the next; the answer
    not followed, with the ones before it as its ``history``."""
    history: list[httpx.Response] = []
    while True:
        response = send(request)
        target = _target(request, response, len(history))
        if target is None:
            response.history = history
            return response
        response.close()
        history.append(response)
        headers = [(k, v) for k, v in request.headers.multi_items() if k.lower() not in ("host", "content-length")]
        request = type(request)(request.method, target, headers=headers, content=request.content or None,
                                extensions=request.extensions)  # fmt: skip


def _target(request: httpx.Request, response: httpx.Response, hops: int) -> httpx.URL | None:
    """Where ``response`` redirects ``request`` to, if it is followed (``unfollowed`` says why not otherwise)."""
    if not response.has_redirect_location or unfollowed(request, response, hops):
        return None
    return request.url.join(response.headers["location"]).copy_with(fragment=None)


def unfollowed(request: httpx.Request, response: httpx.Response, hops: int) -> str:
    """Why the redirect ``response`` of a presigned ``request`` (after ``hops`` others) is not followed; "" when it
    is."""
    where = request.url.join(response.headers["location"])
    if hops >= MAX_HOPS:
        return f"rlnb follows at most {MAX_HOPS} redirects of a presigned URL"
    if where.scheme not in ("http", "https"):
        return f"its scheme is {where.scheme!r}, not http(s)"
    if request.url.scheme == "https" and where.scheme != "https":
        return "rlnb follows none from https to http (the data would cross in clear text)"
    if request.method not in ("GET", "HEAD") and response.status_code not in _KEEP_METHOD:
        return f"it would turn the {request.method} into a GET; rlnb follows a 307 or 308 of a {request.method} only"
    return ""

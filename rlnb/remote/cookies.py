"""A presigned (storage) host's cookies stay out of the http client's jar, which sends its cookies to the API.

httpx keeps every ``Set-Cookie`` a client's responses carry, presigned ones included, and sends each to any host its
domain matches: a storage host on the API's host name (another port: rlnb serve on loopback) or under its parent
domain (``Domain=``) could set, replace or delete the cookies the API gets. rlnb sends a presigned request through
the same client (its proxies, TLS settings and transport apply to storage too) and then undoes what its answer did to
the jar (``send_apart``). The other half, no cookie of the jar going to a presigned host, is ``Caller._build``'s
bare request.
"""

from __future__ import annotations

from http.cookiejar import Cookie, CookieJar

import httpx

Key = tuple[str, str, str]
"""A cookie's place in a jar: domain, path, name."""


def send_apart(http: httpx.Client, request: httpx.Request) -> httpx.Response:
    """``request`` sent by ``http``, its answer streamed, without the client's ``auth=`` (off the API) and leaving the
    client's cookie jar as it was for every cookie the answer names (httpx2's jar, a TestClient's, is one too)."""
    jar = http.cookies.jar
    before = _cookies(jar)
    response: httpx.Response | None = None
    try:
        response = http.send(request, stream=True, auth=None)
        return response
    finally:  # a response hook that raised leaves no response: every change is undone then
        _undo(jar, before, None if response is None else _names(response))


def _cookies(jar: CookieJar) -> dict[Key, Cookie]:
    """The jar's cookies by place (a cookie removed by another thread while listed is left out)."""
    return {(c.domain, c.path, c.name): c for c in list(jar) if isinstance(c, Cookie)}


def _names(response: httpx.Response) -> set[str]:
    """The names of the cookies ``response`` sets or deletes (as ``http.cookiejar`` reads a ``Set-Cookie``), and the
    redirects before it (a client that follows them kept a 307's cookies too)."""
    return {
        header.split(";", 1)[0].partition("=")[0].strip()
        for each in (*response.history, response)
        for header in each.headers.get_list("set-cookie")
    }


def _undo(jar: CookieJar, before: dict[Key, Cookie], names: set[str] | None) -> None:
    """Each cookie of ``jar`` named in ``names`` (None: any) put back as ``before`` had it: one the answer added is
    removed, one it replaced or deleted comes back. Limited to those names, an API answer that set another cookie
    meanwhile (the poller's, in its own thread) keeps it."""
    if names == set():
        return
    after = _cookies(jar)
    for key in before.keys() | after.keys():
        if before.get(key) is after.get(key) or (names is not None and key[2] not in names):
            continue
        if key in after:
            jar.clear(*key)
        if key in before:
            jar.set_cookie(before[key])

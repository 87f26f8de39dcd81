"""A presigned (storage) host's cookies stay out of the http client's jar, which sends its cookies to the API.

httpx keeps every ``Set-Cookie`` a client's responses carry, presigned ones included, and sends each to any host its
domain matches: a storage host on the API's host name (another port: rlnb serve on loopback) or under its parent
domain (``Domain=``) could set, replace or delete the cookies the API gets. rlnb sends a presigned request through
the same client (its proxies, TLS settings and transport apply to storage too), with the jar's policy wrapped in
``Apart``: while this thread sends a presigned request (``send_apart``, inside ``presigned.sending``, which also
masks its query in httpx's log lines), the jar takes no cookie from its answers (a redirect's included); every other
request's answer, another thread's (the poller's) too, is the policy's own. Putting the jar back as it was after the
answer would revert a cookie the API set meanwhile in another thread. The other
half, no cookie of the jar going to a presigned host, is ``Caller._build``'s bare request.
"""

from __future__ import annotations

from http.cookiejar import Cookie, CookieJar, CookiePolicy
from typing import Any

import httpx

from rlnb.remote import redirects
from rlnb.secrets import presigned


class Apart(CookiePolicy):
    """``inner`` (a jar's policy, read and set through this one), but taking neither cookie protocol while this thread
    is in ``send_apart``: the jar then makes no cookie of an answer, so it sets, replaces and deletes none."""

    def __init__(self, inner: CookiePolicy) -> None:
        object.__setattr__(self, "inner", inner)

    @property
    def netscape(self) -> bool:  # type: ignore[override]
        return not presigned.active() and self.inner.netscape

    @property
    def rfc2965(self) -> bool:  # type: ignore[override]
        return not presigned.active() and self.inner.rfc2965

    def set_ok(self, cookie: Cookie, request: Any) -> bool:  # CookiePolicy's own raise NotImplementedError
        return self.inner.set_ok(cookie, request)

    def return_ok(self, cookie: Cookie, request: Any) -> bool:
        return self.inner.return_ok(cookie, request)

    def domain_return_ok(self, domain: str, request: Any) -> bool:
        return self.inner.domain_return_ok(domain, request)

    def path_return_ok(self, path: str, request: Any) -> bool:
        return self.inner.path_return_ok(path, request)

    def __getattr__(self, name: str) -> Any:  # hide_cookie2, rfc2109_as_netscape, ...: the inner policy's
        return getattr(self.inner, name)

    def __setattr__(self, name: str, value: Any) -> None:  # the jar's clock (``_now``) and a user's settings
        setattr(self.inner, name, value)


def send_apart(http: httpx.Client, request: httpx.Request) -> httpx.Response:
    """``request`` sent by ``http``, its answer streamed, without the client's ``auth=`` (off the API), without a
    cookie taken from its answers (httpx2's jar, a TestClient's, is a ``CookieJar`` too), its redirects
    ``redirects.follow``'s (whatever the client's ``follow_redirects``)."""
    _wrap(http.cookies.jar)
    with presigned.sending():
        return redirects.follow(lambda hop: http.send(hop, stream=True, auth=None, follow_redirects=False), request)


def _wrap(jar: CookieJar) -> None:
    """``jar``'s policy wrapped in ``Apart``, once (again after a user's ``set_policy``)."""
    with jar._cookies_lock:  # type: ignore[attr-defined]  # no public getter: CookieJar keeps it as _policy
        policy = jar._policy  # type: ignore[attr-defined]
        if not isinstance(policy, Apart):
            jar.set_policy(Apart(policy))

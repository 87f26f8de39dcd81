"""An overall deadline for every HTTP request, whatever the server does.

httpx's timeouts apply to each socket operation: a server that sends one byte every 2 s never trips a
60 s read timeout and can hold a request for ever. ``DeadlineTransport`` is httpx's own transport over a
network backend whose every connect, read and write is also bounded by the time left before the
deadline of the request in progress (``deadline(at)``, set by the client around each request): past it,
the socket operation fails with httpcore's ``ReadTimeout`` (or ``WriteTimeout`` / ``ConnectTimeout``),
which httpx raises as its own timeout and rlnb as ``APITimeoutError``. Connecting (TCP and TLS) may be
bounded sooner (``deadline(at, connect_by)``): a stop's retries end with its reconnect window
(``call_spec.Call.reconnect_until``).

``Proxies`` are those the environment names (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, less ``NO_PROXY``, read
with ``urllib.request`` as httpx reads them), each a ``DeadlineTransport`` beside the client's own, which takes the
requests that go straight there (``route``): httpx mounts them only for a client it builds its own transport for.
A ``NO_PROXY`` network (``10.0.0.0/8``, ``fd00::/8``) keeps the addresses in it off the proxy, as curl, requests and
Go read one (neither urllib nor httpx does: httpx matches its first address only).
"""

from __future__ import annotations

import base64
import contextlib
import contextvars
import ipaddress
import ssl
import threading
import time
import typing
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from urllib.parse import urlsplit

import httpcore
import httpx

from rlnb._hosts import loopback
from rlnb.secrets import redaction

_DEADLINE: contextvars.ContextVar[tuple[float | None, float | None]] = contextvars.ContextVar(
    "rlnb_request_deadline", default=(None, None)
)


@contextlib.contextmanager
def deadline(at: float | None, connect_by: float | None = None) -> Iterator[None]:
    """Socket operations of this thread end by ``at`` (``time.monotonic()``; None: no deadline), and connecting
    by ``connect_by`` too, when given."""
    token = _DEADLINE.set((at, connect_by))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def _bounded(timeout: float | None, error: type[Exception], connecting: bool = False) -> float | None:
    """``timeout`` shortened to the time left before the deadline (or the connect one, when ``connecting``);
    ``error`` once it has passed."""
    at, connect_by = _DEADLINE.get()
    if connecting and connect_by is not None:
        at = connect_by if at is None else min(at, connect_by)
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:
        raise error("the request's deadline passed")
    return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream):
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _bounded(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _bounded(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        timeout = _bounded(timeout, httpcore.ConnectTimeout, connecting=True)
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> typing.Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    def __init__(self, inner: httpcore.NetworkBackend):
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        timeout = _bounded(timeout, httpcore.ConnectTimeout, connecting=True)
        return _Stream(self._inner.connect_tcp(host, port, timeout, local_address, socket_options))

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None
    ) -> httpcore.NetworkStream:
        timeout = _bounded(timeout, httpcore.ConnectTimeout, connecting=True)
        return _Stream(self._inner.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class DeadlineTransport(httpx.HTTPTransport):
    """``httpx.HTTPTransport`` (same arguments) whose socket operations end by the request's deadline."""

    def __init__(self, **kwargs: typing.Any):
        super().__init__(**kwargs)
        pool = self._pool  # httpcore's pools take a network_backend; httpx does not pass one through
        pool._network_backend = _Backend(pool._network_backend)


SCHEMES = ("http", "https", "all")
"""The environment's proxy variables (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``) httpx takes: the URL's scheme
picks its own, else ``all``'s."""


class Proxies:
    """The proxies the environment names, as httpx would take them (``NO_PROXY`` included), or none (``environment``
    False: a client given a transport or an ``http_client`` of the caller's). Given a transport of its own, httpx
    ignores them, so rlnb went straight past the proxy every other tool on the machine takes (the SDK too) and could
    not reach the API from behind one. ``route(direct)`` is the client's transport; ``said(url)`` names the proxy a
    request goes through, for its connection error ("Connection refused" read as the API server's own): both ask
    ``proxy_for``."""

    def __init__(self, environment: bool = True) -> None:
        found = urllib.request.getproxies() if environment else {}
        no = [host.strip() for host in found.get("no", "").split(",")]
        urls = {s: found[s] for s in SCHEMES if found.get(s) and "*" not in no}  # "*": for every host
        self._urls = {s: url if "://" in url else f"http://{url}" for s, url in urls.items()}
        self._networks = _networks(no)
        for url in self._urls.values():
            _register_user_info(url)

    def route(self, direct: httpx.BaseTransport, base_url: str | None = None) -> httpx.BaseTransport:
        """``direct`` for every request when the environment names no proxy; else a ``Route`` that sends a request
        through its proxy (a ``DeadlineTransport``: the same deadlines) or, as ``proxy_for`` says, by ``direct``. A
        proxy's transport is built when a request first needs it: ``ALL_PROXY=socks5://...`` without socksio broke even
        a loopback ``rlnb serve``. The one ``base_url`` needs is built now: its error comes before anything is sent."""
        if not self._urls:
            return direct
        route = Route(direct, self._transport, self.proxy_for)
        if base_url is not None:
            route.transport_for(httpx.URL(base_url))
        return route

    def _transport(self, scheme: str) -> httpx.BaseTransport:
        """The transport through ``scheme``'s proxy; a ``ValueError`` (a URL httpx cannot use) or an ``ImportError``
        (socks5:// without socksio) that names the variable it came from and the fix."""
        url, variable = self._urls[scheme], f"{scheme.upper()}_PROXY"
        try:
            return DeadlineTransport(proxy=url)
        except (ValueError, httpx.InvalidURL) as exc:  # an ftp:// one, or no URL: httpx says neither where from
            raise ValueError(
                f"the proxy the environment names for {scheme}:// ({variable} or {variable.lower()}), {shown(url)}, "
                f"cannot be used: {redaction.redact(str(exc))}; use an http(s):// or socks5:// proxy URL, or list the "
                "API's host in NO_PROXY"
            ) from None
        except ImportError:  # httpx's words name neither the variable nor which host needed it
            raise ImportError(
                f"the proxy the environment names for {scheme}:// ({variable} or {variable.lower()}), {shown(url)}, "
                "is a SOCKS proxy, and httpx needs the socksio package for one: pip install 'httpx[socks]', or list "
                "the API's host in NO_PROXY"
            ) from None

    def proxy_for(self, url: httpx.URL) -> str | None:
        """The scheme whose proxy a request to ``url`` goes through; None: straight there. A proxy's own loopback is
        not this machine's: ``rlnb serve`` here is reached directly, as Go does."""
        if not self._urls or loopback(url.host) or _within(url.host, self._networks):
            return None
        if any(urllib.request.proxy_bypass(host) for host in (url.host, url.netloc.decode())):
            return None  # NO_PROXY (read by urllib at each request): a name and its subdomains, an address, a :port
        return url.scheme if url.scheme in self._urls else "all" if "all" in self._urls else None

    def said(self, url: httpx.URL) -> str:
        """Words for an error of a request to ``url`` naming the proxy it went through (credentials masked), or ""."""
        scheme = self.proxy_for(url)
        return "" if scheme is None else f" (through the proxy {shown(self._urls[scheme])} that the environment names)"

    def answered(self, url: httpx.URL, status: int) -> str:
        """Words for an error status of a request to ``url`` that went through a proxy, or "": a 407 is the proxy's
        own, and a 502, 503 or 504 often is (read as the API's, it sent the user after the wrong server)."""
        scheme = self.proxy_for(url)
        if scheme is None:
            return ""
        proxy = f"the proxy {shown(self._urls[scheme])} that the environment names"
        if status == 407:
            return (f" ({proxy} answered this, not the API: it wants credentials (or refused those in its URL), given "
                    "as http://user:password@host:port)")  # fmt: skip
        if status in (502, 503, 504):
            return f" (through {proxy}: a {status} may be the proxy's own answer, not the API's)"
        return self.said(url)


class Route(httpx.BaseTransport):
    """Sends each request through the proxy ``choose`` names for its URL (a scheme: its transport made by ``build``
    when a request first needs it, then kept), else ``direct``."""

    def __init__(
        self, direct: httpx.BaseTransport, build: Callable[[str], httpx.BaseTransport],
        choose: Callable[[httpx.URL], str | None],
    ) -> None:  # fmt: skip
        self._direct, self._build, self._choose = direct, build, choose
        self._proxied: dict[str, httpx.BaseTransport] = {}
        self._lock = threading.Lock()

    def transport_for(self, url: httpx.URL) -> httpx.BaseTransport:
        scheme = self._choose(url)
        if scheme is None:
            return self._direct
        with self._lock:  # the poll and send threads: one transport (one pool) per proxy
            if scheme not in self._proxied:
                self._proxied[scheme] = self._build(scheme)
            return self._proxied[scheme]

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self.transport_for(request.url).handle_request(request)

    def close(self) -> None:
        with self._lock:
            proxied = list(self._proxied.values())
        for transport in (self._direct, *proxied):
            transport.close()


def _register_user_info(url: str) -> None:
    """A proxy URL's password, and the ``Proxy-Authorization`` token httpcore makes of its user info (past every hook
    of httpx's, so ``sent`` never sees it), masked as keys are: a proxy that quotes the request would show them."""
    with contextlib.suppress(httpx.InvalidURL):  # an unusable URL: ``route`` says so, naming the variable
        parts = httpx.URL(url)
        if parts.password:
            redaction.register(parts.password)
            redaction.register(base64.b64encode(f"{parts.username}:{parts.password}".encode()).decode())


def _networks(entries: list[str]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """The ``NO_PROXY`` entries that are networks (``10.0.0.0/8``); one that is not (``10.0.0.0/33``) matches nothing,
    as any name that names no host."""
    found = []
    for entry in entries:
        if "/" in entry:
            with contextlib.suppress(ValueError):
                found.append(ipaddress.ip_network(entry, strict=False))
    return found


def _within(host: str, networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network]) -> bool:
    """Whether ``host`` is an address in one of ``networks`` (a name is not resolved, as curl does not)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return any(address in network for network in networks)


def shown(url: str) -> str:
    """A proxy URL as a message may show it: no user or password (a proxy's own credentials)."""
    parts = urlsplit(url)
    return parts._replace(netloc=f"{redaction.MASK}@{parts.netloc.rpartition('@')[2]}").geturl() if "@" in url else url

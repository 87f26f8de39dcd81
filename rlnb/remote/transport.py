"""An overall deadline for every HTTP request, whatever the server does.

httpx's timeouts apply to each socket operation: a server that sends one byte every 2 s never trips a
60 s read timeout and can hold a request for ever. ``DeadlineTransport`` is httpx's own transport over a
network backend whose every connect, read and write is also bounded by the time left before the
deadline of the request in progress (``deadline(at)``, set by the client around each request): past it,
the socket operation fails with httpcore's ``ReadTimeout`` (or ``WriteTimeout`` / ``ConnectTimeout``),
which httpx raises as its own timeout and rlnb as ``APITimeoutError``. Connecting (TCP and TLS) may be
bounded sooner (``deadline(at, connect_by)``): a stop's retries end with its reconnect window
(``calls.Call.reconnect_until``).
"""

from __future__ import annotations

import contextlib
import contextvars
import ssl
import time
import typing
from collections.abc import Iterable, Iterator

import httpcore
import httpx

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

"""The app factory: settings → registry → routers, error handlers, a truthful ``/openapi.json``."""

from __future__ import annotations

import errno
import functools
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rlnb._hosts import loopback
from rlnb.server import stopping
from rlnb.server.body_limit import BodyLimit, ServerStop
from rlnb.server.connections import protocol
from rlnb.server.deps import OVERRIDES, ServingApp
from rlnb.server.error_handlers import EncodedSlash, install_error_handlers
from rlnb.server.faults import FaultInjector
from rlnb.server.hosts import OwnNames, host_name
from rlnb.server.openapi import shared_openapi, truthful_schema
from rlnb.server.registry import Registry
from rlnb.server.routes import checkpoints, operations, payloads, resources, sessions
from rlnb.server.settings import MAX_WAIT, ServerSettings, check_public_host

log = logging.getLogger("rlnb")

ADVERTISED = [(b"rlnb-long-poll-max-wait", str(MAX_WAIT).encode()), (b"rlnb-in-order", b"session")]
"""Response headers telling rlnb's client what this server offers beyond Together's API: the long-poll
extension (and its longest wait) and in-order execution of each session's operations."""

SHUTDOWN_GRACE = 10
"""Seconds a stopping server waits for the requests in flight before it cuts them: a client that stopped reading a
download (or never closes) held SIGTERM and Ctrl-C for ever. A long poll (at most ``MAX_WAIT``) is cut too."""


class Advertise:
    """ASGI middleware adding ``ADVERTISED`` to every ``/v1`` answer."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *ADVERTISED]
            await send(message)

        await self.app(scope, receive, send_with_headers)


ROUTERS = [module.router for module in (resources, sessions, operations, checkpoints, payloads)]
ROUTERS += [checkpoints.presigned, payloads.presigned]
"""The API's routers. ``create_app`` adds their routes, built once when their modules are imported, to each app as
they are (they find the app's registry on the request): ``include_router`` would build every route again for each app
at its first request (about 30 ms of CPU an app, its dependencies analysed and a pydantic adapter made per field),
serving the same API."""

TITLE, VERSION = "rlnb serve — Together-compatible RL training sessions", "R-new"

_health = APIRouter(dependency_overrides_provider=OVERRIDES)


@_health.api_route("/health", methods=["GET", "HEAD"], include_in_schema=False)  # HEAD: `wget --spider`, monitors
def health() -> dict[str, str]:
    return {"status": "ok"}


@functools.cache
def _document() -> dict[str, Any]:
    """The OpenAPI document of every app ``create_app`` builds (the same routes, title and version), built once: a
    405 and a 400 that names a field's range read it, each app its own copy (``shared_openapi``)."""
    return truthful_schema(TITLE, VERSION, [route for router in (_health, *ROUTERS) for route in router.routes])


def _lifespan(registry: Registry) -> Callable[[FastAPI], Any]:
    """Runs the inactivity reaper (which also mends a journal that failed) while the app serves; closes every session
    at shutdown, giving their running operations ``STOP_DEADLINE`` seconds, the reaper's turn in progress included,
    or until ``app.state.hurry`` is set (a second Ctrl-C)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        stop = threading.Event()

        def reap() -> None:
            while not stop.wait(registry.settings.reap_interval):
                try:
                    registry.reap()
                    registry.mend_journal()  # a journal that failed (a full disk) is written again without a change
                except Exception:  # the thread must live: no idle session would expire again, no journal be mended
                    log.exception(
                        "rlnb serve: the reaper's turn failed; it tries again in %s s", registry.settings.reap_interval
                    )

        reaper = threading.Thread(target=reap, name="rlnb-reaper", daemon=True)
        reaper.start()
        try:
            yield
        finally:
            stop.set()
            began = time.monotonic()  # one deadline for the reaper's turn and the operations, not one each
            reaper.join(stopping.STOP_DEADLINE)  # a turn stuck (a hung disk) must not hold the stop for ever
            if reaper.is_alive():
                log.warning("rlnb serve: the reaper's turn still runs after %s s; stopping without waiting for it",
                            stopping.STOP_DEADLINE)  # fmt: skip
            registry.close(stopping.STOP_DEADLINE, app.state.hurry, began=began)

    return lifespan


def create_app(
    settings: ServerSettings | None = None, *, clock: Callable[[], float] | None = None, **fields: Any
) -> FastAPI:
    """The FastAPI app of ``rlnb serve``. Pass ``settings``, or ``ServerSettings`` fields as keywords
    (``models``: API name → model spec; ``token`` turns on bearer auth; ``op_delay`` adds simulated compute
    seconds; ``fail_rate`` loses that share of answers *after* the server acted; ...). ``clock`` replaces
    ``time.time`` for the inactivity expiry (tests)."""
    if settings is None:
        for name in ("checkpoint_dir", "state_dir"):
            if isinstance(fields.get(name), str) and not fields[name].strip():  # Path("") is the working folder:
                # the registry and signing key were written there (an unset variable in --state-dir "$DIR")
                raise ValueError(f"{name} is empty (an unset variable?): give a folder, or None")
            if fields.get(name) is not None:
                fields[name] = Path(fields[name])
        settings = ServerSettings(**fields)
    elif fields:
        raise ValueError(f"pass settings or {', '.join(fields)}, not both")
    registry = Registry(settings, clock) if clock is not None else Registry(settings)
    app = FastAPI(title=TITLE, version=VERSION, lifespan=_lifespan(registry))
    app.state.registry, app.state.hurry, app.state.stop = registry, threading.Event(), ServerStop()
    install_error_handlers(app)

    app.router.routes.extend(route for router in (_health, *ROUTERS) for route in router.routes)
    app.openapi = shared_openapi(app, _document)  # type: ignore[method-assign]  # FastAPI's documented way to customise it
    paths = [route.path for router in ROUTERS for route in router.routes if isinstance(route, APIRoute)]
    app.add_middleware(EncodedSlash, templates=paths)  # inside Advertise: its 404 says what the server offers too
    app.add_middleware(Advertise)
    app.add_middleware(ServingApp)  # each request reads its own app's dependency_overrides (the routes are shared)
    if settings.fail_rate:
        app.add_middleware(FaultInjector, rate=settings.fail_rate, seed=settings.fail_seed)
    app.add_middleware(BodyLimit, settings=settings, stop=app.state.stop)  # before anything reads a body
    app.add_middleware(OwnNames, names=settings.host_names)  # outermost: a request to another name is read no further
    return app


def serve(host: str = "127.0.0.1", port: int = 8000, **options: Any) -> None:
    """Run the server with uvicorn (blocking); ``options`` go to ``create_app``. Presigned URLs are built
    on ``public_url``, by default ``http://{host}:{port}`` (loopback for a wildcard host)."""
    run(app_for(host, port, **options), bind(host, port))


def app_for(host: str, port: int, **options: Any) -> FastAPI:
    """``create_app(**options)`` as ``serve(host, port)`` builds it (on loopback without a token: answering its own
    names only, ``hosts``). Separate so that ``rlnb serve`` can
    report a bad option (``ValueError``) or state directory (``OSError``, ``StateDirError``) before it
    starts listening."""
    options.setdefault("public_url", f"http://{url_host(reachable(host))}:{port}")  # http://::1:8000 is no URL
    if options.get("token") is None and loopback(host):  # this machine's own: a rebound name is no name of it
        check_public_host(options["public_url"])  # read here before the settings check it: a ValueError naming it
        options.setdefault("host_names", frozenset({host.lower(), host_name(urlsplit(options["public_url"]).netloc)}))
    return create_app(**options)


def reachable(host: str) -> str:
    """The address a client on this machine takes to reach a server bound to ``host``: this machine's loopback for a
    wildcard (every interface)."""
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host  # noqa: S104 - naming it, not binding


def url_host(host: str) -> str:
    """``host`` as a URL writes it: an IPv6 address in brackets (``[::1]``)."""
    return f"[{host}]" if ":" in host else host


def bind(host: str, port: int) -> socket.socket:
    """The socket ``run`` listens on, bound before the server says where it listens: a port in use or a host
    that is not this machine's is a ``ValueError`` naming ``--port`` / ``--host`` (uvicorn's own error came
    after the announcement, naming neither). Bound as uvicorn binds: IPv6 when the host has a colon."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:  # "" is every interface, as uvicorn binds it (getaddrinfo cannot resolve it)
        address = (host, port) if host == "" else socket.getaddrinfo(host, port, family, socket.SOCK_STREAM)[0][4]
    except (socket.gaierror, ValueError) as exc:  # a NUL, an idna label past 63 characters: bare, naming no option
        raise ValueError(
            f"--host {host!r} is not an address of this machine: {getattr(exc, 'strerror', None) or exc}"
        ) from None
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ValueError(f"--port {port}: {host}:{port} is already in use; pick another --port") from None
        if exc.errno == errno.EADDRNOTAVAIL:
            raise ValueError(f"--host {host!r} is not an address of this machine: {exc.strerror}") from None
        raise ValueError(f"--host {host!r} --port {port}: cannot listen there: {exc.strerror}") from None
    sock.set_inheritable(True)
    return sock


def run(
    app: FastAPI,
    sock: socket.socket,
    *,
    watch: Callable[[], object] | None = None,
    on_stop: Callable[[int], object] | None = None,
) -> None:
    """Serve ``app`` with uvicorn on ``sock`` (from ``bind``) until interrupted. A stop answers the long-polls it
    holds at once (their status as it is), and a request body still arriving with a 503 (``ServerStop``), before uvicorn
    waits for the requests in flight. A second signal while it
    stops abandons the running operations at once (``app.state.hurry``); a stop that skipped the app's shutdown
    (uvicorn does on a second Ctrl-C during ``SHUTDOWN_GRACE``) closes the registry here, abandoning them too. A SIGINT
    ignored when it starts (a background job's, ``rlnb serve &``) stays ignored: uvicorn's handler would honour it.
    A stop before uvicorn's handlers are in (its import, its event loop's start) waits for them (``stopping.noted``);
    ``watch`` is called there, so that a stop it makes at once (``rlnb serve``'s reader gone) waits for them too.
    ``on_stop`` is called with the first stop signal as it comes (on a thread): ``rlnb serve`` says it stops then, not
    after the wait for the requests in flight and the running operations."""
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    with stopping.noted(ignored) as early:
        if watch is not None:
            watch()
        _run_uvicorn(app, sock, ignored, early, on_stop)


def _run_uvicorn(
    app: FastAPI, sock: socket.socket, ignored: bool, early: stopping.Noted, on_stop: Callable[[int], object] | None
) -> None:
    """``run``'s uvicorn, given the stop signals that came before its handlers went in (``early``)."""
    import uvicorn

    hurry: threading.Event = app.state.hurry
    registry: Registry = app.state.registry
    stop: ServerStop = app.state.stop

    def release(sig: int) -> None:
        registry.release_long_polls()
        stop.set()  # a body still arriving: a 503 now, not cut by SHUTDOWN_GRACE
        if on_stop is not None:  # after: a stderr that blocks holds no poll
            on_stop(sig)

    class Server(uvicorn.Server):
        @contextmanager
        def capture_signals(self) -> Iterator[None]:
            with super().capture_signals():
                if ignored and threading.current_thread() is threading.main_thread():  # only it sets handlers
                    signal.signal(signal.SIGINT, signal.SIG_IGN)
                for sig in early.handed():  # a stop as one while it listens
                    self.handle_exit(sig, None)
                yield

        def handle_exit(self, sig: int, frame: Any) -> None:
            if ignored and sig == signal.SIGINT:  # one between uvicorn's handler and SIG_IGN going in
                return
            if self.should_exit:
                hurry.set()
            else:  # on a thread: this handler may have interrupted the event loop's thread inside the registry's lock
                threading.Thread(target=release, args=(sig,), name="rlnb-release-polls", daemon=True).start()
            super().handle_exit(sig, frame)

    host, port = sock.getsockname()[:2]
    config = uvicorn_config(app, host, port, registry.settings)
    try:
        Server(config).run(sockets=[sock])
    finally:
        app.state.registry.close(0)


def uvicorn_config(app: ASGIApp, host: str, port: int, settings: ServerSettings) -> Any:
    """uvicorn's settings for ``app``: its HTTP protocol with ``settings``' ``header_timeout`` and
    ``max_connections``. Its log goes to stderr: coloured only where stderr is a terminal, ``$NO_COLOR`` is unset
    and ``$TERM`` is not dumb (uvicorn asked ``sys.stdout.isatty()``: ``rlnb serve 2>serve.log`` wrote escapes into
    the file; and where stdout is None, as under pythonw, the question raised)."""
    import uvicorn

    tty = sys.stderr is not None and sys.stderr.isatty()
    colours = tty and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
    http = protocol(settings.header_timeout, settings.max_connections)
    return uvicorn.Config(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=SHUTDOWN_GRACE,
                          use_colors=colours, http=http)  # fmt: skip

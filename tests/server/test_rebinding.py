"""``rlnb serve`` on this machine's loopback without ``--token`` (its default) answered a request whatever its ``Host``:
a web page whose name its owner rebinds to 127.0.0.1 (DNS rebinding) reaches it as its own origin, and its script
could list the sessions, sample, train and download every checkpoint from the browser of whoever runs the server.
Such a server answers only requests addressed to a loopback name or its ``--public-url``."""

import pytest
from fastapi.testclient import TestClient

from rlnb.cli import main
from rlnb.testing import free_port


def served(monkeypatch, *options: str):
    """The app ``rlnb serve`` would serve with these options (not listening)."""
    apps = []
    monkeypatch.setattr("rlnb.server.app.run", lambda app, sock, **_: apps.append(app) or sock.close())
    assert main(["serve", "--device", "cpu", "--port", str(free_port()), *options]) == 0
    return apps[0]


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1:8000", "localhost:8000", "LOCALHOST", "[::1]:8000", "127.0.0.1", "localhost.:8000", "localhost."],
)
def test_a_loopback_server_without_a_token_answers_its_own_names(monkeypatch, host):
    with TestClient(served(monkeypatch), base_url=f"http://{host}") as c:
        assert c.get("/v1/rl/training-sessions").status_code == 200


def test_a_loopback_server_without_a_token_refuses_another_name(monkeypatch):
    app = served(monkeypatch)
    with TestClient(app, base_url="http://rebound.example:8000") as c:
        r = c.get("/v1/rl/training-sessions")
        assert r.status_code == 403 and "rebound.example" in r.json()["error"]["message"]
        assert "--token" in r.json()["error"]["message"]
        assert c.post("/v1/rl/model-resources", json={"base_model": "rlnb/tiny"}).status_code == 403
    assert app.state.registry.resources == {}  # nothing was made


@pytest.mark.parametrize(
    "options, host",
    [
        (["--token", "a-long-enough-token"], "rebound.example:8000"),  # a page has no token to send
        (["--public-url", "http://rl.lan:8000"], "rl.lan:8000"),  # the name its links give
        (["--host", "0.0.0.0"], "workstation.lan:8000"),  # other machines reach it by any name (and are warned)
    ],
)
def test_a_token_a_public_url_or_another_host_lets_other_names_in(monkeypatch, options, host):
    with TestClient(served(monkeypatch, *options), base_url=f"http://{host}") as c:
        headers = {"Authorization": "Bearer a-long-enough-token"}
        assert c.get("/v1/rl/training-sessions", headers=headers).status_code == 200


@pytest.mark.parametrize(
    ("host", "answer"),
    [
        ("127.1", True),
        ("2130706433", True),
        ("127.0.0.1", True),
        ("::1", True),
        ("localhost", True),
        ("localhost.", True),  # the fully-qualified form of the same name
        ("LocalHost.", True),
        ("localhost..", False),
        ("evil.localhost", False),
        ("0", False),
        ("0.0.0.0", False),
        ("10.1", False),
    ],
)
def test_loopback_addresses_in_the_short_forms_the_socket_layer_takes_are_loopback(host, answer):
    """``--host 127.1`` binds this machine's loopback (the socket layer reads IPv4's short forms), yet it was warned as
    taking requests from other machines, and answered any Host."""
    from rlnb._hosts import loopback

    assert loopback(host) is answer


@pytest.mark.parametrize("host", ["[::1", "127.0.0.1:80x", "localhost:99999", "[::1]x", "127.0.0.1/x", "u@localhost"])
def test_a_garbled_host_is_refused_naming_it(monkeypatch, host):
    """``Host: [::1`` (a bracket left open) was read as ``::1`` and answered; ``127.0.0.1:80x`` (no port) as
    ``127.0.0.1``, and so were a path or a user beside the name: a header no client sends taken for a loopback name."""
    with TestClient(served(monkeypatch)) as c:
        r = c.get("/v1/rl/training-sessions", headers={"host": host})
    assert r.status_code == 403 and f"Host {host!r} is not a name of this server" in r.json()["error"]["message"]


def call(app, host: str | None) -> int:
    """The status ``app`` answers a GET with this ``Host`` header (``None``: none, as HTTP/1.0 sends)."""
    import asyncio

    sent = []

    async def receive():
        return {"type": "http.request", "body": b""}

    async def send(message):
        sent.append(message)

    headers = [] if host is None else [(b"host", host.encode())]
    scope = {"type": "http", "http_version": "1.0", "method": "GET", "path": "/v1/rl/training-sessions",
             "raw_path": b"/v1/rl/training-sessions", "query_string": b"", "headers": headers, "scheme": "http",
             "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 5000), "root_path": ""}  # fmt: skip
    asyncio.run(app(scope, receive, send))
    return sent[0]["status"]


@pytest.mark.parametrize("host", ["127.0.0.2:8000", "127.1:8000", "[0:0:0:0:0:0:0:1]:8000", None])
def test_what_starlettes_trusted_host_middleware_lacks_is_answered(monkeypatch, host):
    """Guard, and why ``OwnNames`` is no ``TrustedHostMiddleware``: Starlette's takes a list of exact names, so another
    address of 127.0.0.0/8, IPv4's short form or another spelling of ``::1`` is a 400 there, and so is a request
    without a ``Host`` (HTTP/1.0); its refusal is plain text, not the API's error."""
    from starlette.middleware.trustedhost import TrustedHostMiddleware

    app = served(monkeypatch)
    with TestClient(app):  # started: its registry made
        assert call(app, host) == 200
        assert call(TrustedHostMiddleware(app, ["localhost", "127.0.0.1", "[::1]"]), host) == 400


def test_a_host_with_a_control_character_is_refused(monkeypatch):
    """``Host: a\\x00b`` (an ASGI server that passes it on) raised the loopback check's bare "embedded null
    character" out of the middleware: a 500."""
    app = served(monkeypatch)
    with TestClient(app):
        assert call(app, "a\x00b") == 403 and call(app, "localhost\x00") == 403

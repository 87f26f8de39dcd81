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
    monkeypatch.setattr("rlnb.server.app.run", lambda app, sock: apps.append(app) or sock.close())
    assert main(["serve", "--device", "cpu", "--port", str(free_port()), *options]) == 0
    return apps[0]


@pytest.mark.parametrize("host", ["127.0.0.1:8000", "localhost:8000", "LOCALHOST", "[::1]:8000", "127.0.0.1"])
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

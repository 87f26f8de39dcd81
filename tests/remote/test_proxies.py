"""Which requests go through the proxy the environment names (``transport.Proxies``), decided in one place for the
request and for the words of its error: ``HTTP_PROXY`` / ``HTTPS_PROXY`` / ``ALL_PROXY`` by the URL's scheme, less
what ``NO_PROXY`` lists, and never a loopback host (a proxy's loopback is not this machine's). Read with the standard
library's public ``urllib.request`` (it was httpx's private ``httpx._utils``, which any httpx release may change)."""

import re
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest

from rlnb.errors import APITimeoutError
from rlnb.remote.client import APIClient
from rlnb.remote.transport import DeadlineTransport, Proxies, Route

RLNB = Path(__file__).resolve().parents[2] / "rlnb"
PROXY = "http://proxy.rl.test:3128"


@pytest.fixture
def environment(monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "REQUEST_METHOD"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return monkeypatch


def through(proxies: Proxies, url: str) -> bool:
    return proxies.said(httpx.URL(url)) != ""


ALLOWED_PRIVATE = {
    "rlnb/testing/ops.py: torch.utils._python_dispatch": "TorchDispatchMode, torch's only way to see each aten op "
    "(no public path in torch 2.13); a test and bench tool, imported by no library code",
}


def test_rlnb_imports_no_private_module_of_another_package():
    private = [
        f"{path.relative_to(RLNB.parent)}: {name}"
        for path in sorted(RLNB.rglob("*.py"))
        for line in re.findall(r"^\s*(?:from\s+(\S+)\s+import|import\s+(.+))", path.read_text(), re.M)
        for name in [item.split(" as ")[0].strip() for item in (line[0] or line[1]).split(",")]
        if not name.startswith("rlnb") and any(part.startswith("_") for part in name.split(".")[1:])
    ]
    assert [p for p in private if p not in ALLOWED_PRIVATE] == []
    assert sorted(ALLOWED_PRIVATE) == sorted(set(private) & set(ALLOWED_PRIVATE)), "an allowed import no longer made"


def test_the_scheme_picks_the_proxy_and_all_proxy_takes_the_rest(environment):
    environment.setenv("HTTP_PROXY", PROXY)
    only_http = Proxies()
    assert through(only_http, "http://api.rl.test/v1") and not through(only_http, "https://api.rl.test/v1")
    environment.setenv("ALL_PROXY", "socks-less.rl.test:8080")  # no scheme: http:// as httpx and curl take it
    both = Proxies()
    assert "http://socks-less.rl.test:8080" in both.said(httpx.URL("https://api.rl.test/v1"))
    assert PROXY in both.said(httpx.URL("http://api.rl.test/v1"))


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "localhost", "localhost.", "[::1]"])
def test_a_loopback_host_is_never_proxied(environment, host):
    environment.setenv("ALL_PROXY", PROXY)
    assert not through(Proxies(), f"http://{host}:8000/v1/rl")


@pytest.mark.parametrize(
    "no_proxy, url, direct",
    [
        ("rl.test", "http://api.rl.test/v1", True),  # a name keeps its subdomains off the proxy
        ("rl.test", "http://rl.test:8000/v1", True),
        (".rl.test", "http://api.rl.test/v1", True),
        ("rl.test", "http://notrl.test/v1", False),
        ("api.rl.test:8000", "http://api.rl.test:8000/v1", True),
        ("api.rl.test:8000", "http://api.rl.test:9000/v1", False),
        ("10.1.2.3", "http://10.1.2.3/v1", True),
        ("fd00::1", "http://[fd00::1]:8000/v1", True),
        ("other.test, *", "http://api.rl.test/v1", True),  # "*" anywhere: no proxy at all
        ("10.0.0.0/8", "http://10.1.2.3/v1", True),  # a network, as curl, requests and Go read it
        ("other.test,192.168.0.0/16", "http://192.168.5.6:8000/v1", True),
        ("10.0.0.0/8", "http://11.1.2.3/v1", False),
        ("10.0.0.0/8", "http://api.rl.test/v1", False),  # a name is not resolved to match a network
        ("fd00::/8", "http://[fd12::1]:8000/v1", True),
        ("fd00::/8", "http://10.1.2.3/v1", False),
        ("10.0.0.0/33", "http://10.1.2.3/v1", False),  # not a network: as any name that matches nothing
        ("", "http://api.rl.test/v1", False),
    ],
)
def test_no_proxy_keeps_the_hosts_it_lists_off_the_proxy(environment, no_proxy, url, direct):
    environment.setenv("HTTP_PROXY", PROXY)
    environment.setenv("NO_PROXY", no_proxy)
    assert through(Proxies(), url) is not direct


def test_the_route_a_request_takes_is_the_one_its_error_names(environment):
    """The route sends each request as ``said`` says: through the proxy or straight there, by the transport given."""
    environment.setenv("HTTP_PROXY", PROXY)
    environment.setenv("NO_PROXY", "direct.rl.test,10.0.0.0/8")
    direct = DeadlineTransport()
    route = Proxies().route(direct)
    assert isinstance(route, Route)
    assert route.transport_for(httpx.URL("http://api.rl.test/")) is not direct
    for url in ("http://direct.rl.test/", "http://localhost/", "http://10.9.8.7/"):
        assert route.transport_for(httpx.URL(url)) is direct
    route.close()


def test_no_environment_no_proxy_and_no_route(environment):
    environment.setenv("HTTP_PROXY", PROXY)
    direct = DeadlineTransport()
    assert Proxies(environment=False).route(direct) is direct and not through(Proxies(environment=False), "http://a.")
    environment.delenv("HTTP_PROXY")
    assert Proxies().route(direct) is direct
    direct.close()


def test_behind_a_proxy_the_client_builds_only_the_transports_its_requests_take(environment, monkeypatch):
    """The client's own ``DeadlineTransport`` is the direct route: one was built for the client, another for the
    route's direct requests, and the client's never sent a request (its pool held for nothing)."""
    built: list[DeadlineTransport] = []
    init = DeadlineTransport.__init__

    def counted(self: DeadlineTransport, **kwargs: object) -> None:
        built.append(self)
        init(self, **kwargs)

    monkeypatch.setattr(DeadlineTransport, "__init__", counted)
    environment.setenv("HTTP_PROXY", PROXY)
    with APIClient("http://api.rl.test") as client:  # no key: none goes over http:// (CleartextKeyWarning)
        assert len(built) == 2  # straight there, and through the one proxy
        assert "through the proxy" in client._proxies.said(httpx.URL("http://api.rl.test/"))


def _dripping_proxy() -> str:
    """A loopback "proxy" that answers every request with a status line, then one header byte every 0.1 s (for 30 s
    at most, then it closes: a request that its deadline does not end fails then, rather than hang)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def drip(conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\n")
            for _ in range(300):
                time.sleep(0.1)
                try:
                    conn.sendall(b"X")
                except OSError:
                    return

    def serve() -> None:
        while True:
            conn, _ = server.accept()
            threading.Thread(target=drip, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return f"http://127.0.0.1:{server.getsockname()[1]}"


def test_a_request_through_the_proxy_ends_by_its_deadline(environment):
    """httpx's timeouts are per socket operation: a proxy that drips its answer never trips them. The proxied route
    is a ``DeadlineTransport`` too, so the call's deadline ends it, and its error names the proxy."""
    environment.setenv("HTTP_PROXY", _dripping_proxy())
    client = APIClient("http://api.rl.test", deadline=0.3, max_retries=0)  # no key: none goes over http://
    with pytest.raises(APITimeoutError, match="through the proxy http://127.0.0.1") as info, client:
        client.supported_models()
    assert "deadline" in str(info.value)

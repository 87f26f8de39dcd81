"""Which requests go through the proxy the environment names (``transport.Proxies``), decided in one place for the
request and for the words of its error: ``HTTP_PROXY`` / ``HTTPS_PROXY`` / ``ALL_PROXY`` by the URL's scheme, less
what ``NO_PROXY`` lists, and never a loopback host (a proxy's loopback is not this machine's). Read with the standard
library's public ``urllib.request`` (it was httpx's private ``httpx._utils``, which any httpx release may change)."""

import re
from pathlib import Path

import httpx
import pytest

from rlnb.remote.transport import Proxies

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


def test_rlnb_imports_no_private_module_of_another_package():
    private = [
        f"{path.relative_to(RLNB.parent)}: {name}"
        for path in sorted(RLNB.rglob("*.py"))
        for line in re.findall(r"^\s*(?:from\s+(\S+)\s+import|import\s+(.+))", path.read_text(), re.M)
        for name in [item.split(" as ")[0].strip() for item in (line[0] or line[1]).split(",")]
        if not name.startswith("rlnb") and any(part.startswith("_") for part in name.split(".")[1:])
    ]
    assert private == []


def test_the_scheme_picks_the_proxy_and_all_proxy_takes_the_rest(environment):
    environment.setenv("HTTP_PROXY", PROXY)
    only_http = Proxies()
    assert through(only_http, "http://api.rl.test/v1") and not through(only_http, "https://api.rl.test/v1")
    environment.setenv("ALL_PROXY", "socks-less.rl.test:8080")  # no scheme: http:// as httpx and curl take it
    both = Proxies()
    assert "http://socks-less.rl.test:8080" in both.said(httpx.URL("https://api.rl.test/v1"))
    assert PROXY in both.said(httpx.URL("http://api.rl.test/v1"))


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "localhost", "[::1]"])
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
        ("", "http://api.rl.test/v1", False),
    ],
)
def test_no_proxy_keeps_the_hosts_it_lists_off_the_proxy(environment, no_proxy, url, direct):
    environment.setenv("HTTP_PROXY", PROXY)
    environment.setenv("NO_PROXY", no_proxy)
    assert through(Proxies(), url) is not direct


def test_the_route_a_request_takes_is_the_one_its_error_names(environment):
    """The mounted transport sends each request as ``said`` says: through the proxy or straight there."""
    environment.setenv("HTTP_PROXY", PROXY)
    environment.setenv("NO_PROXY", "direct.rl.test")
    proxies = Proxies()
    assert list(proxies.mounts) == ["all://"]
    route = proxies.mounts["all://"]
    assert route.transport_for(httpx.URL("http://api.rl.test/")) is not route.transport_for(
        httpx.URL("http://direct.rl.test/")
    )
    assert route.transport_for(httpx.URL("http://localhost/")) is route.transport_for(
        httpx.URL("http://direct.rl.test/")
    )
    route.close()


def test_no_environment_no_proxy_and_nothing_mounted(environment):
    environment.setenv("HTTP_PROXY", PROXY)
    assert Proxies(environment=False).mounts == {} and not through(Proxies(environment=False), "http://a.test/")
    environment.delenv("HTTP_PROXY")
    assert Proxies().mounts == {}

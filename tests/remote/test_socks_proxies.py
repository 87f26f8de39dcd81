"""``ALL_PROXY=socks5://...`` where httpx cannot use it (socksio not installed): a proxy's transport is built when a
request first needs it, so a loopback ``rlnb serve`` (or a ``NO_PROXY`` host) is reached as ever; one that needs it is
an ``ImportError`` naming the variable and the fix. Every client broke, loopback too, with httpx's bare ImportError."""

import sys

import httpx
import pytest

from rlnb.remote.client import APIClient
from rlnb.remote.transport import Proxies

SOCKS = "socks5://127.0.0.1:1080"


@pytest.fixture
def socks_without_socksio(monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "REQUEST_METHOD"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    monkeypatch.setenv("ALL_PROXY", SOCKS)
    monkeypatch.setitem(sys.modules, "socksio", None)  # ``import socksio`` raises ImportError, installed or not
    return monkeypatch


def answered(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"host": request.url.host})


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000", "http://localhost:8000", "http://api.rl.test"])
def test_a_host_the_proxy_is_not_for_is_reached_directly(socks_without_socksio, url):
    socks_without_socksio.setenv("NO_PROXY", "api.rl.test")
    route = Proxies().route(httpx.MockTransport(answered), url)
    with httpx.Client(transport=route) as http:
        assert http.get(f"{url}/v1/rl/supported-models").json() == {"host": httpx.URL(url).host}
    APIClient(url).close()  # built, nothing sent: the loopback target needs no proxy


def test_a_target_that_needs_the_socks_proxy_is_an_import_error_naming_the_variable_and_the_fix(socks_without_socksio):
    said = (r"the proxy the environment names for all:// \(ALL_PROXY or all_proxy\), socks5://127\.0\.0\.1:1080, is "
            r"a SOCKS proxy, and httpx needs the socksio package for one: pip install 'httpx\[socks\]', or list the "
            r"API's host in NO_PROXY")  # fmt: skip
    with pytest.raises(ImportError, match=said):
        APIClient("https://api.rl.test")


def test_a_request_to_another_host_that_needs_it_says_so_when_it_is_sent(socks_without_socksio):
    """The base URL reached directly; a presigned URL of another host needs the proxy: its first request says so."""
    route = Proxies().route(httpx.MockTransport(answered), "http://127.0.0.1:8000")
    with httpx.Client(transport=route) as http, pytest.raises(ImportError, match=r"\(ALL_PROXY or all_proxy\)"):
        http.get("https://storage.rl.test/payload")

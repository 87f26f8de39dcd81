"""An ``http_client`` of the user's own may carry credentials for the API by default (``headers={"Authorization":
...}`` or any other header, ``auth=``, ``cookies=``, ``params=``): httpx adds them to every request it sends, so they
went to the presigned storage hosts of payloads and checkpoint files too. rlnb sends them to ``base_url``'s origin
only, as it does its own key: a presigned request carries rlnb's own headers and the URL the API gave, nothing else."""

import httpx
import pytest

import rlnb
from rlnb.remote.client import APIClient
from tests.support.fake_api import BASE

STORAGE = "https://storage.test"
USER_KEY = "user-gateway-key-0123456789"


def api_and_storage(seen: list[httpx.Request]) -> httpx.MockTransport:
    """The API's payload URL calls, and a storage host that keeps the payload PUT to it."""
    kept: dict[str, bytes] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        path = request.url.path
        if path.endswith("/upload-url"):
            return httpx.Response(200, json={"payload_id": "p1", "upload_url": f"{STORAGE}/p1?sig=s"})
        if path.endswith("/download-url"):
            return httpx.Response(200, json={"download_url": f"{STORAGE}/p1?sig=s"})
        if request.method == "PUT":
            kept[path] = request.read()
            return httpx.Response(200)
        return httpx.Response(200, content=kept[path])

    return httpx.MockTransport(handler)


DEFAULTS = {
    "a default header": {"headers": {"Authorization": f"Bearer {USER_KEY}"}},
    "basic auth": {"auth": httpx.BasicAuth("user", USER_KEY)},
    "another header": {"headers": {"X-Api-Key": USER_KEY}},
    "a proxy's header": {"headers": {"Proxy-Authorization": f"Basic {USER_KEY}"}},
    "a cookie": {"cookies": {"session": USER_KEY}},
    "a query parameter": {"params": {"key": USER_KEY}},
}


def carries(request: httpx.Request) -> bool:
    """Whether the user's credential is anywhere in ``request``'s URL or headers (Basic auth: base64 of it)."""
    import base64

    basic = base64.b64encode(f"user:{USER_KEY}".encode()).decode()
    text = f"{request.url} {request.headers.raw}"
    return USER_KEY in text or basic in text


@pytest.mark.parametrize("defaults", DEFAULTS.values(), ids=DEFAULTS.keys())
def test_the_clients_own_credentials_go_to_the_api_only(monkeypatch, defaults):
    monkeypatch.delenv("TOGETHER_API_KEY", raising=False)
    seen: list[httpx.Request] = []
    with httpx.Client(transport=api_and_storage(seen), **defaults) as http, APIClient(BASE, http_client=http) as c:
        assert c.download_payload("s1", c.upload_payload("s1", b'{"x": [1, 2]}')) == {"x": [1, 2]}
    api = [r for r in seen if r.url.host != "storage.test"]
    storage = [r for r in seen if r.url.host == "storage.test"]
    assert len(api) == 2 and all(carries(r) for r in api)  # the API still gets them
    assert [r.method for r in storage] == ["PUT", "GET"]
    assert not any(carries(r) for r in storage), [(str(r.url), dict(r.headers)) for r in storage]
    assert all(r.url.params["sig"] == "s" for r in storage)  # the presigned URL as the API gave it


@pytest.mark.parametrize("defaults", DEFAULTS.values(), ids=DEFAULTS.keys())
def test_the_clients_own_credentials_go_to_no_checkpoint_files_host(monkeypatch, tmp_path, defaults):
    monkeypatch.delenv("TOGETHER_API_KEY", raising=False)
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.host == "storage.test":
            return httpx.Response(200, content=b"{}")
        file = {"filename": "config.json", "size": "2", "url": f"{STORAGE}/f/config.json?sig=s"}
        return httpx.Response(200, json={"data": [file]})

    transport = httpx.MockTransport(handler)
    with httpx.Client(transport=transport, **defaults) as http, APIClient(BASE, http_client=http) as client:
        [path] = client.download_checkpoint("ckpt-1", tmp_path)
    assert path.read_bytes() == b"{}"
    api, storage = seen
    assert carries(api) and storage.url.host == "storage.test" and storage.url.params["sig"] == "s"
    assert not carries(storage), (str(storage.url), dict(storage.headers))


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_an_http_client_that_follows_redirects_follows_none_of_the_apis(method):
    """httpx drops the Authorization header on a redirect to another host, but nothing else: an ``http_client=``
    made with ``follow_redirects=True`` took the other host's answer for the API's, and a 307 sent it the POST's body
    (training data) and the client's own credentials (``X-Api-Key``), though rlnb says it follows no redirect."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.host == "rl.test":
            return httpx.Response(307, headers={"Location": f"http://elsewhere.test{request.url.path}"})
        return httpx.Response(200, json={"data": []})

    transport = httpx.MockTransport(handler)
    with httpx.Client(transport=transport, follow_redirects=True, headers={"X-Api-Key": USER_KEY}) as http:
        client = APIClient(BASE, "sk-rlnb-TEST-7f3a9c0d", http_client=http)
        call = client.supported_models if method == "GET" else lambda: client.extend_expiry("mr-1", 3600)
        with pytest.raises(rlnb.APIStatusError, match=r"307 Temporary Redirect: the server redirects to http://else"):
            call()
    assert [r.url.host for r in seen] == ["rl.test"]  # nothing went to the other host

"""An ``http_client`` of the user's own may carry credentials for the API by default (``headers={"Authorization":
...}``, or ``auth=``): httpx adds them to every request it sends, so they went to the presigned storage hosts of
payloads and checkpoint files too. rlnb sends them to ``base_url``'s origin only, as it does its own key."""

import httpx
import pytest

from rlnb.remote.client import APIClient
from tests.support.fake_api import BASE

STORAGE = "http://storage.test"
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
}


@pytest.mark.parametrize("defaults", DEFAULTS.values(), ids=DEFAULTS.keys())
def test_the_clients_own_credentials_go_to_the_api_only(monkeypatch, defaults):
    monkeypatch.delenv("TOGETHER_API_KEY", raising=False)
    seen: list[httpx.Request] = []
    with httpx.Client(transport=api_and_storage(seen), **defaults) as http, APIClient(BASE, http_client=http) as c:
        assert c.download_payload("s1", c.upload_payload("s1", b'{"x": [1, 2]}')) == {"x": [1, 2]}
    api = [r for r in seen if r.url.host != "storage.test"]
    storage = [r for r in seen if r.url.host == "storage.test"]
    assert len(api) == 2 and all("Authorization" in r.headers for r in api)  # the API still gets them
    assert [r.method for r in storage] == ["PUT", "GET"]
    assert all("Authorization" not in r.headers for r in storage), [dict(r.headers) for r in storage]

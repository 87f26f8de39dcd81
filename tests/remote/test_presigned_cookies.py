"""httpx keeps every ``Set-Cookie`` in the client's jar and sends each cookie to any host its domain matches: a
presigned (storage) host on the API's host name (another port, as rlnb serve on loopback with its storage) or under
its parent domain (``Domain=``) set cookies that then went to the API, replaced the API's own, or deleted them. rlnb
keeps a presigned answer's cookies out of the jar, the user's ``http_client=`` and its own; and sends none of the
jar's cookies to a presigned host."""

import threading
from http.cookiejar import DefaultCookiePolicy

import httpx
import pytest

from rlnb.remote.client import APIClient
from tests.support.fake_api import BASE, KEY

API_COOKIE = "api=from-the-api; Path=/"
STORAGES = {
    "the API's host on another port": ("https://rl.test:9000", ""),
    "a sibling host under Domain=": ("https://files.rl.test", "; Domain=rl.test"),
}
SET = {
    "a new cookie": "planted=from-storage",
    "the API's cookie replaced": "api=from-storage",
    "the API's cookie deleted": "api=gone; Max-Age=0",
}


def api_and_storage(seen: list[httpx.Request], storage: str, set_cookie: str) -> httpx.MockTransport:
    """The API (which sets its own cookie) and a storage host that answers with ``set_cookie``."""
    kept: dict[str, bytes] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.host != "rl.test" or request.url.port == 9000:
            if request.method == "PUT":
                kept[request.url.path] = request.read()
            return httpx.Response(200, content=kept.get(request.url.path, b""), headers={"Set-Cookie": set_cookie})
        cookie = {"Set-Cookie": API_COOKIE}
        if request.url.path.endswith("/upload-url"):
            return httpx.Response(200, json={"payload_id": "p1", "upload_url": f"{storage}/p1?sig=s"}, headers=cookie)
        if request.url.path.endswith("/download-url"):
            return httpx.Response(200, json={"download_url": f"{storage}/p1?sig=s"}, headers=cookie)
        return httpx.Response(200, json={"data": []}, headers=cookie)

    return httpx.MockTransport(handler)


@pytest.mark.parametrize("set_cookie", SET.values(), ids=SET.keys())
@pytest.mark.parametrize("storage", STORAGES.values(), ids=STORAGES.keys())
@pytest.mark.parametrize("own_client", [True, False], ids=["http_client=", "rlnb's client"])
def test_a_presigned_hosts_cookies_never_reach_the_api(storage, set_cookie, own_client):
    url, domain = storage
    seen: list[httpx.Request] = []
    transport = api_and_storage(seen, url, set_cookie + domain)
    http = httpx.Client(transport=transport) if own_client else None
    with APIClient(BASE, KEY, http_client=http, transport=None if own_client else transport) as client:
        client.supported_models()  # the API sets its cookie
        assert client.download_payload("s1", client.upload_payload("s1", b'{"x": 1}')) == {"x": 1}
        client.supported_models()
        jar = client._http.cookies
        assert dict(jar.items()) == {"api": "from-the-api"}
    if http is not None:
        http.close()
    api = [r for r in seen if r.url.host == "rl.test" and r.url.port is None]
    storage_requests = [r for r in seen if r not in api]
    assert [r.method for r in storage_requests] == ["PUT", "GET"]
    assert [r.headers.get("cookie") for r in api] == [None] + ["api=from-the-api"] * 3
    assert all("cookie" not in r.headers for r in storage_requests)  # the API's cookie goes to the API only


def test_a_response_hook_that_raises_on_a_presigned_answer_leaves_the_jar_as_it_was():
    """httpx keeps the cookies before the client's response hooks run: one that raises leaves rlnb no response to read
    the cookies' names from, and every change to the jar is undone."""
    seen: list[httpx.Request] = []

    def hook(response: httpx.Response) -> None:
        if response.request.url.port == 9000:
            raise RuntimeError("the hook refused the storage answer")

    transport = api_and_storage(seen, "https://rl.test:9000", "planted=from-storage")
    with httpx.Client(transport=transport, event_hooks={"response": [hook]}) as http:
        with APIClient(BASE, KEY, http_client=http) as client:
            client.supported_models()
            with pytest.raises(RuntimeError, match="the hook refused"):
                client.upload_payload("s1", b'{"x": 1}')
        assert dict(http.cookies.items()) == {"api": "from-the-api"}
    assert seen[-1].url.port == 9000


def test_a_cookie_a_presigned_hosts_redirect_sets_never_reaches_the_api():
    """An ``http_client=`` that follows redirects kept the cookies of each answer on the way: only the last answer's
    were undone, so a storage host's 307 replaced the API's cookie."""
    seen: list[httpx.Request] = []
    inner = api_and_storage(seen, "https://rl.test:9000", "planted=from-storage")

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.port == 9000 and request.method == "GET" and "moved" not in request.url.path:
            seen.append(request)
            moved = request.url.copy_with(path="/moved" + request.url.path)
            return httpx.Response(307, headers={"Location": str(moved), "Set-Cookie": "api=from-a-redirect; Path=/"})
        if "moved" in request.url.path:
            request = httpx.Request(request.method, request.url.copy_with(path=request.url.path[len("/moved") :]))
        return inner.handle_request(request)

    with httpx.Client(transport=httpx.MockTransport(handler), follow_redirects=True) as http:
        with APIClient(BASE, KEY, http_client=http) as client:
            client.supported_models()
            assert client.download_payload("s1", client.upload_payload("s1", b'{"x": 1}')) == {"x": 1}
            client.supported_models()
        assert dict(http.cookies.items()) == {"api": "from-the-api"}
    assert [r.headers.get("cookie") for r in seen if r.url.port is None][-1] == "api=from-the-api"


@pytest.mark.parametrize("set_cookie", [SET["the API's cookie replaced"], SET["the API's cookie deleted"]])
def test_a_cookie_the_api_sets_during_a_presigned_request_is_kept(set_cookie):
    """The jar used to be put back after a presigned answer as it was before the request: an API answer that set the
    same cookie meanwhile, in another thread (the poller's), was reverted to the older value. Events order the two
    threads: the API answers while the storage host holds its answer."""
    storage_holding, storage_may_answer = threading.Event(), threading.Event()
    api_value = ["first"]
    kept: dict[str, bytes] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.port == 9000:
            if request.method == "PUT":
                kept[request.url.path] = request.read()
            else:
                storage_holding.set()
                assert storage_may_answer.wait(30), "the test never let the storage host answer"
            return httpx.Response(200, content=kept.get(request.url.path, b""), headers={"Set-Cookie": set_cookie})
        cookie = {"Set-Cookie": f"api={api_value[0]}; Path=/"}
        if request.url.path.endswith("/upload-url"):
            storage = "https://rl.test:9000/p1?sig=s"
            return httpx.Response(200, json={"payload_id": "p1", "upload_url": storage}, headers=cookie)
        if request.url.path.endswith("/download-url"):
            return httpx.Response(200, json={"download_url": "https://rl.test:9000/p1?sig=s"}, headers=cookie)
        return httpx.Response(200, json={"data": []}, headers=cookie)

    with APIClient(BASE, KEY, transport=httpx.MockTransport(handler)) as client:
        payload = client.upload_payload("s1", b'{"x": 1}')
        got: list[object] = []
        downloading = threading.Thread(target=lambda: got.append(client.download_payload("s1", payload)))
        downloading.start()
        try:
            assert storage_holding.wait(30), "the download never reached the storage host"
            api_value[0] = "second"
            client.supported_models()  # the API replaces its cookie while the storage host holds its answer
        finally:
            storage_may_answer.set()
            downloading.join(30)
        assert not downloading.is_alive()
        assert got == [{"x": 1}]
        assert dict(client._http.cookies.items()) == {"api": "second"}


def test_the_jars_own_policy_still_judges_the_apis_cookies():
    """rlnb wraps an ``http_client=``'s cookie policy to keep presigned answers out: the user's policy (here, one that
    blocks the API's domain) still decides for every other answer, and a later ``set_policy`` of theirs is wrapped
    again."""
    seen: list[httpx.Request] = []
    transport = api_and_storage(seen, "https://rl.test:9000", "planted=from-storage")
    with httpx.Client(transport=transport) as http:
        http.cookies.jar.set_policy(DefaultCookiePolicy(blocked_domains=["rl.test"]))
        with APIClient(BASE, KEY, http_client=http) as client:
            client.download_payload("s1", client.upload_payload("s1", b'{"x": 1}'))
            client.supported_models()
            assert dict(http.cookies.items()) == {}  # blocked by the user's policy
            http.cookies.jar.set_policy(DefaultCookiePolicy())
            client.download_payload("s1", client.upload_payload("s1", b'{"x": 1}'))
            client.supported_models()
            assert dict(http.cookies.items()) == {"api": "from-the-api"}

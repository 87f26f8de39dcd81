"""The credentials of a proxy an ``http_client`` (or a ``transport``) of the user's own goes through are masked:
httpcore writes its ``Proxy-Authorization`` (and an ``httpx.Proxy``'s own ``headers``) past every hook of httpx's,
so a proxy that quoted the request it refused put them, and the password they encode, in rlnb's error and log."""

import base64
import logging
import socket
import threading
import warnings
from collections.abc import Callable
from typing import Any

import httpx
import pytest

import rlnb
from rlnb.remote.client import APIClient
from tests.support.hostile import Loopback, write_response


def quote_the_request(conn: socket.socket, request: httpx.Request, stop: threading.Event) -> None:
    """A proxy that refuses each request quoting its headers and the password of its Basic credentials, in the body
    and in a header of the answer (which httpcore's DEBUG line lists)."""
    given = request.headers.get("proxy-authorization", "Basic ").split()[-1]
    password = base64.b64decode(given).decode().partition(":")[2]
    said = f"proxy refused {dict(request.headers)} (password {password})"
    answer = httpx.Response(400, headers={"X-Echo": given}, json={"error": {"message": said, "type": "proxy"}})
    write_response(conn, answer)


Way = Callable[[str, str], dict[str, Any]]
WAYS: dict[str, Way] = {
    "an http_client's proxy=": lambda url, token: {"http_client": httpx.Client(proxy=url)},
    "an http_client's mounted httpx.Proxy with headers": lambda url, token: {
        "http_client": httpx.Client(
            mounts={"all://": httpx.HTTPTransport(proxy=httpx.Proxy(url, headers={"X-Proxy-Token": token}))}
        )
    },
    "a transport's proxy=": lambda url, token: {"transport": httpx.HTTPTransport(proxy=url)},
}


@pytest.mark.slow  # a server
@pytest.mark.parametrize("way", WAYS)
def test_the_credentials_of_a_proxy_the_user_configured_appear_in_no_text_rlnb_shows(way, caplog):
    caplog.set_level(logging.DEBUG)
    n = list(WAYS).index(way)  # each its own: a value masked once stays masked in the process
    password, token = f"proxy-pass-{n}-0123456789", f"proxy-token-{n}-0123456789"
    basic = base64.b64encode(f"alice:{password}".encode()).decode()
    with Loopback(quote_the_request) as proxy:
        given = WAYS[way](proxy.url.replace("http://", f"http://alice:{password}@"), token)
        with warnings.catch_warnings():  # none is expected: the proxy's credentials are not sent to the API
            warnings.simplefilter("error")
            api = APIClient("http://api.rl.test", max_retries=0, **given)
        with api, pytest.raises(rlnb.BadRequestError) as info:
            api.supported_models()
        http = given.get("http_client")
        if isinstance(http, httpx.Client):
            http.close()
    said = str(info.value)
    assert "'proxy-authorization': 'Basic ***'" in said and said.endswith("(password ***)"), said
    assert "x-echo" in caplog.text  # httpcore's DEBUG line of the answer's headers was logged
    for text in (said, repr(api), caplog.text):
        assert password not in text and basic not in text and token not in text
    if "headers" in way:
        assert "'x-proxy-token': '***'" in said, said

"""A server (or proxy) that echoes the API key back, in a body that is no valid answer or in the error of a
transport that quotes the request: the error rlnb raises masks it, but a traceback that shows every frame's locals
(IPython's verbose mode, pytest ``--showlocals``, rich) printed it from rlnb's own frames, which held the raw body
text, or the httpx error unmasked."""

import base64
from collections.abc import Callable
from typing import Any

import httpx
import pytest

import rlnb
from rlnb.errors import APIConnectionError, APIError
from rlnb.remote.client import APIClient
from tests.support.fake_api import BASE, KEY, quick
from tests.support.tracebacks import with_locals


def connect_error(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError(f"proxy refused {request.headers['authorization']}", request=request)


ECHOES = {
    "a body that is not JSON": (lambda r: httpx.Response(200, text=f"<html>{r.headers['authorization']}"), APIError),
    "JSON of the wrong shape": (lambda r: httpx.Response(200, json={"data": r.headers["authorization"]}), APIError),
    "an httpx error quoting the key": (connect_error, APIConnectionError),
}


@pytest.mark.parametrize("echo", ECHOES.values(), ids=ECHOES.keys())
def test_an_echoed_key_is_in_no_frames_locals(echo):
    handler, error = echo
    client = APIClient(BASE, KEY, transport=httpx.MockTransport(handler), **quick({"max_retries": 1}))
    with client, pytest.raises(error) as info:
        client.supported_models()
    text = with_locals(info.value)
    assert "rlnb/remote/" in text  # rlnb's frames, with their locals
    assert KEY not in text


def echo(request: httpx.Request) -> httpx.Response:
    """A server that answers 400 quoting the request's headers."""
    said = f"bad request; headers were {dict(request.headers)}"
    return httpx.Response(400, json={"error": {"message": said, "type": "invalid_request_error"}})


def echoed(**client: object) -> str:
    """The error's text when an ``http_client`` made with ``client`` talks to ``echo``."""
    http = httpx.Client(transport=httpx.MockTransport(echo), **client)  # type: ignore[arg-type]
    with http, APIClient(BASE, http_client=http, max_retries=0) as api, pytest.raises(rlnb.APIError) as info:
        api.get_session("s1")
    return str(info.value)


GIVEN: dict[str, Callable[[str], dict[str, Any]]] = {
    "authorization": lambda secret: {"headers": {"Authorization": f"Bearer {secret}"}},
    "x-api-key": lambda secret: {"headers": {"X-Api-Key": secret}},
    "cookie-header": lambda secret: {"headers": {"Cookie": f"session={secret}; theme=dark"}},
    "cookies": lambda secret: {"cookies": {"session": secret}},
    "basic-auth": lambda secret: {"auth": ("alice", secret)},
    "helicone-auth": lambda secret: {"headers": {"Helicone-Auth": f"Bearer {secret}"}},  # a gateway's own header
    "auxiliary": lambda secret: {"headers": {"X-Ms-Authorization-Auxiliary": f"Bearer {secret}"}},  # Azure's
    "versioned": lambda secret: {"headers": {"X-Api-Key-V2": secret}},  # a credential word, then another word
    "secondary": lambda secret: {"headers": {"X-Api-Key-Secondary": secret}},
    "token-value": lambda secret: {"headers": {"X-Token-Value": secret}},
}
"""How an ``http_client`` is given a credential. Each test's is its own: rlnb masks a key for the life of the process,
so one shared by every case was masked in the later ones by the first one's registration, whatever they did."""


@pytest.mark.parametrize("given", GIVEN)
def test_an_http_clients_own_credentials_are_masked_where_a_server_echoes_them(given):
    """A key in the ``http_client``'s default headers (a gateway's), cookies or ``auth=`` was never masked: a server
    that echoed the request's headers put it in the exception's text (and the run folder); as ``api_key`` it reads
    ``***``."""
    secret = f"user-gateway-{given}-0123456789"
    said = echoed(**GIVEN[given](secret))
    basic = base64.b64encode(f"alice:{secret}".encode()).decode()
    assert secret not in said and basic not in said and "***" in said


def test_only_credentials_are_masked_not_the_words_of_other_headers():
    """Header names matched by substring masked ``X-Auth-Scheme: training`` ("auth") and ``X-Portkey-Provider``
    ("key") for the life of the process, and a cookie ``consent=accepted``: every later message saying "training"
    read "***". A name holding a credential word is one unless a word after it says the value is about it:
    ``X-Api-Key-Id`` names a key, holds none."""
    harmless = {"X-Auth-Scheme": "training-wheels-v2", "X-Portkey-Provider": "together-ai-provider",
                "X-Api-Key-Id": "production-default-key", "X-Auth-Token-Expires": "2026-12-31T00:00:00Z",
                "Cookie": "consent=accepted"}  # fmt: skip
    said = echoed(headers=harmless)
    assert all(value in said for value in harmless.values()), said


def echo_key(request: httpx.Request) -> httpx.Response:
    """A gateway that answers 401 quoting the credential alone (the last word of its header), not the header."""
    said = f"invalid key {request.headers['authorization'].split()[-1]}"
    return httpx.Response(401, json={"error": {"message": said, "type": "authentication_error"}})


@pytest.mark.parametrize("given", ["authorization", "basic-auth"])
def test_an_http_clients_credential_quoted_without_its_scheme_is_masked(given):
    secret = f"gateway-{given}-only-0123456789"
    client = GIVEN[given](secret)
    http = httpx.Client(transport=httpx.MockTransport(echo_key), **client)
    with http, APIClient(BASE, http_client=http, max_retries=0) as api, pytest.raises(rlnb.APIError) as info:
        api.get_session("s1")
    basic = base64.b64encode(f"alice:{secret}".encode()).decode()
    assert secret not in str(info.value) and basic not in str(info.value) and "invalid key ***" in str(info.value)

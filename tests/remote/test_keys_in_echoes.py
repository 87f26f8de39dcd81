"""A server (or proxy) that echoes the API key back, in a body that is no valid answer or in the error of a
transport that quotes the request: the error rlnb raises masks it, but a traceback that shows every frame's locals
(IPython's verbose mode, pytest ``--showlocals``, rich) printed it from rlnb's own frames, which held the raw body
text, or the httpx error unmasked."""

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


@pytest.mark.parametrize("header", ["Authorization", "X-Api-Key", "Cookie"])
def test_an_http_clients_own_credentials_are_masked_where_a_server_echoes_them(header):
    """A key in the ``http_client``'s default headers (a gateway's) was never masked: a server that echoed the
    request's headers put it in the exception's text (and the run folder); as ``api_key`` it reads ``***``."""
    secret = "user-gateway-key-0123456789"
    value = f"Bearer {secret}" if header == "Authorization" else secret

    def echo(request: httpx.Request) -> httpx.Response:
        said = f"bad request; headers were {dict(request.headers)}"
        return httpx.Response(400, json={"error": {"message": said, "type": "invalid_request_error"}})

    http = httpx.Client(transport=httpx.MockTransport(echo), headers={header: value})
    with APIClient(BASE, http_client=http, max_retries=0) as client, pytest.raises(rlnb.APIError) as info:
        client.get_session("s1")
    assert secret not in str(info.value) and "***" in str(info.value)
    http.close()

"""An API key that no HTTP header can carry as written (``api_key=open("key.txt").read()`` keeps the
newline) is refused before anything is sent, in a message that does not quote it; a request that cannot even
be built is not retried; and a key quoted as Python's ``repr`` writes it is masked too."""

import logging

import httpx
import pytest

import rlnb
from rlnb import _secrets
from rlnb.remote.client import APIClient
from tests.support.fake_api import BASE, KEY, quick
from tests.support.hostile import everything_in

BAD_KEYS = {
    "newline": KEY + "\n",
    "trailing space": KEY + " ",
    "crlf": KEY + "\r\n",
    "nul": KEY + "\x00",
    "typographic quote": "\u201c" + KEY + "\u201d",
    "inner space": KEY[:6] + " " + KEY[6:],
}


def recording() -> tuple[list[httpx.Request], httpx.MockTransport]:
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={"data": []})

    return sent, httpx.MockTransport(handler)


@pytest.mark.parametrize("key", BAD_KEYS.values(), ids=BAD_KEYS.keys())
def test_a_key_no_header_can_carry_is_refused_at_connect_without_quoting_it(key):
    sent, transport = recording()
    with pytest.raises(ValueError, match=r"api_key holds .* at position \d+") as info:
        rlnb.connect(BASE, api_key=key, transport=transport, record=False)
    assert sent == []
    text = everything_in(info.value)
    assert KEY not in text and KEY[:-1] not in text and repr(key)[1:-1] not in text


def test_a_bad_key_from_the_environment_is_named_as_the_variable(monkeypatch):
    monkeypatch.setenv("TOGETHER_API_KEY", KEY + "\n")
    with pytest.raises(ValueError, match=r"TOGETHER_API_KEY holds whitespace .* strip it") as info:
        APIClient(BASE, transport=recording()[1])
    assert KEY not in str(info.value)


def test_a_key_of_another_type_is_a_type_error_naming_api_key():
    with pytest.raises(TypeError, match="api_key must be a str, got int"):
        APIClient(BASE, api_key=123456789012, transport=recording()[1])  # type: ignore[arg-type]


def test_a_request_that_cannot_be_built_is_not_retried_and_its_cause_quoting_the_key_is_dropped(caplog):
    """h11 quotes an illegal header as a bytes repr: the key's repr form is masked and not chained."""
    calls = []

    def refuse(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        value = repr(request.headers["authorization"].encode() + b"\n")
        raise httpx.LocalProtocolError(f"Illegal header value {value}")

    caplog.set_level(logging.INFO, logger="rlnb")
    with (
        APIClient(BASE, KEY, transport=httpx.MockTransport(refuse), **quick({"max_retries": 3})) as client,
        pytest.raises(rlnb.APIConnectionError, match=r"Illegal header value b'Bearer \*\*\*") as info,
    ):
        client.supported_models()
    assert len(calls) == 1  # the same request would fail the same way: no retry
    assert info.value.__cause__ is None and info.value.__context__ is None
    assert KEY not in everything_in(info.value) and KEY not in caplog.text


def test_redact_masks_a_registered_keys_repr_forms():
    key = "sk-rlnb-repr-form-\u00e9x"
    _secrets.register(key)
    text = f"{key!r} {key.encode()!r} {ascii(key)}"
    assert _secrets.redact(text) == "'***' b'***' '***'"

"""An API key that no HTTP header can carry as written (``api_key=open("key.txt").read()`` keeps the
newline) is refused before anything is sent, in a message that does not quote it; a request that cannot even
be built is not retried; a key quoted as Python's ``repr`` writes it is masked too; and a base URL that carries
credentials is refused without quoting them."""

import logging

import httpx
import pytest

import rlnb
from rlnb.remote.client import APIClient
from rlnb.secrets import redaction
from rlnb.sweep import sweep
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


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "Basic"])
def test_a_key_given_with_its_header_scheme_is_told_to_drop_it(scheme):
    """``api_key="Bearer sk-..."`` (copied from a curl line) was refused as "whitespace at position 6" with no hint:
    the message now says to pass the key alone, still without quoting it."""
    sent, transport = recording()
    with pytest.raises(ValueError, match=rf"position {len(scheme)} .*pass the key without '{scheme} '") as info:
        rlnb.connect(BASE, api_key=f"{scheme} {KEY}", transport=transport, record=False)
    assert sent == [] and KEY not in everything_in(info.value)


@pytest.mark.parametrize("key", ["Q", "Qz7", "sk-Qz7x"])
def test_a_key_too_short_to_be_one_is_refused_at_connect_without_quoting_it(key, monkeypatch):
    """tnb U6: ``api_key="k"`` was sent, and masking it made every "k" of an error "***" ("Name or service not
    ***nown"). A key under 8 characters is a placeholder (Together's have dozens; rlnb serve without --token needs
    none): refused naming the argument or variable and the length, never the key; 8 characters are a key."""
    sent, transport = recording()
    with pytest.raises(ValueError, match=rf"^api_key is {len(key)} character\(s\) long: an API key has at least 8"
                       ) as info:  # fmt: skip
        rlnb.connect(BASE, api_key=key, transport=transport, record=False)
    assert key not in everything_in(info.value) and sent == []
    monkeypatch.setenv("TOGETHER_API_KEY", key)
    with pytest.raises(ValueError, match=r"^TOGETHER_API_KEY is \d character\(s\) long"):
        APIClient(BASE, transport=transport)
    assert key not in redaction.known()
    client = APIClient(BASE, api_key=key + "x" * (8 - len(key)), transport=transport)
    client.close()


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
    redaction.register(key)
    text = f"{key!r} {key.encode()!r} {ascii(key)}"
    assert redaction.redact(text) == "'***' b'***' '***'"


CREDENTIALED = {
    "user and password": "https://bob:hunter2-secret@rl.test",
    "password with @": "http://bob:hunter2@secret@rl.test/v1",
    "user only": "https://hunter2-secret@rl.test",
}


@pytest.mark.parametrize("url", CREDENTIALED.values(), ids=CREDENTIALED.keys())
def test_a_base_url_with_credentials_is_refused_before_anything_is_sent_without_quoting_them(url, tmp_path):
    """httpx sent ``user:password@`` as Basic auth in place of the Bearer key (never accepted by Together), and the
    password stood in ``repr(APIClient)``, every ``APIError``'s URL and the run folder's ``config.json``."""
    sent, transport = recording()
    with pytest.raises(ValueError, match=r"base_url must not carry credentials .*rl\.test.* as api_key") as info:
        APIClient(url, api_key=KEY, transport=transport)
    text = everything_in(info.value)
    assert "hunter2" not in text and "secret" not in text and "bob" not in text
    with pytest.raises(ValueError, match=r"the target \(the base_url\) must not carry credentials") as info:
        rlnb.connect(url, api_key=KEY, transport=transport, runs_dir=tmp_path)
    assert "hunter2" not in everything_in(info.value)
    with pytest.raises(ValueError, match=r"the target \(the base_url\) must not carry credentials") as info:
        sweep(rlnb.AdamParams(), target=url, api_key=KEY, runs_dir=tmp_path, progress=False)
    assert "hunter2" not in everything_in(info.value) and sent == [] and list(tmp_path.iterdir()) == []


def test_a_base_url_with_credentials_from_the_environment_is_named_as_the_variable(monkeypatch):
    monkeypatch.setenv("TOGETHER_BASE_URL", "https://bob:hunter2@rl.test")
    with pytest.raises(ValueError, match=r"TOGETHER_BASE_URL must not carry credentials") as info:
        APIClient(api_key=KEY, transport=recording()[1])
    assert "hunter2" not in str(info.value)
    client = APIClient(BASE + "/path@v1", api_key=KEY, transport=recording()[1])  # an @ after the host: no user info
    assert repr(client).startswith("<APIClient https://rl.test/path@v1 ")

"""A ``Host`` or ``Authorization`` header given twice is a 400 naming it (review41e F5), as a repeated
``Idempotency-Key`` is: the first one was used, so ``Host: 127.0.0.1`` then ``Host: evil.example`` passed the loopback
check of a server without a token, and a valid key then a wrong one was let in (RFC 9112 3.2: two Hosts are a 400)."""

import pytest
from fastapi.testclient import TestClient

from rlnb.server import create_app

TOKEN = "t-secret-token"


def get(c: TestClient, headers: list[tuple[str, str]]):
    return c.get("/v1/rl/training-sessions", headers=headers)


@pytest.mark.parametrize("host_names", [frozenset({"rl.example"}), None])  # loopback without a token, and any name
def test_two_hosts_are_a_400_naming_host(tmp_path, host_names):
    app = create_app(device="cpu", checkpoint_dir=tmp_path, host_names=host_names)
    with TestClient(app, base_url="http://127.0.0.1") as c:
        assert get(c, []).status_code == 200
        for hosts in (["127.0.0.1", "evil.example"], ["evil.example", "127.0.0.1"], ["127.0.0.1", "127.0.0.1"]):
            r = get(c, [("Host", h) for h in hosts])
            assert r.status_code == 400, r.text
            assert r.json()["error"] == {
                "message": "Host is given 2 times: a request names one host",
                "type": "invalid_request_error",
                "param": "Host",
                "code": None,
            }


@pytest.mark.parametrize("token", [TOKEN, None])
def test_two_authorizations_are_a_400_naming_it_and_no_key_is_echoed(tmp_path, token):
    app = create_app(device="cpu", checkpoint_dir=tmp_path, token=token)
    with TestClient(app, base_url="http://127.0.0.1") as c:
        right, wrong = ("Authorization", f"Bearer {TOKEN}"), ("Authorization", "Bearer wrong-key")
        assert get(c, [right]).status_code == 200
        for pair in ([right, wrong], [wrong, right], [right, right]):
            r = get(c, pair)
            assert r.status_code == 400, r.text
            assert r.json()["error"]["param"] == "Authorization"
            assert r.json()["error"]["message"] == "Authorization is given 2 times: give one API key"
            assert TOKEN not in r.text and "wrong-key" not in r.text

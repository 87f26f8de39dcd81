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
def test_two_differing_authorizations_are_a_400_naming_it_and_no_key_is_echoed(tmp_path, token):
    app = create_app(device="cpu", checkpoint_dir=tmp_path, token=token)
    with TestClient(app, base_url="http://127.0.0.1") as c:
        right, wrong = ("Authorization", f"Bearer {TOKEN}"), ("Authorization", "Bearer wrong-key")
        assert get(c, [right]).status_code == 200
        for pair in (
            [right, wrong],
            [wrong, right],
            [right, right, wrong],
            [right, ("authorization", "Bearer wrong-key")],
        ):
            r = get(c, pair)
            assert r.status_code == 400, r.text
            assert r.json()["error"]["param"] == "Authorization"
            assert r.json()["error"]["message"] == (
                f"Authorization is given {len(pair)} times, with different values: give one API key"
            )
            assert TOKEN not in r.text and "wrong-key" not in r.text


@pytest.mark.parametrize("token", [TOKEN, None])
def test_one_key_given_twice_passes_as_the_together_sdk_sends_it(tmp_path, token):
    """``Together(api_key=k, default_headers={"authorization": f"Bearer {k}"})`` (or ``extra_headers``) sends the
    SDK's ``Authorization`` and the user's ``authorization``: its merge is case-sensitive (review41j L3). One key given
    twice is that key; a wrong one twice is still a 401."""
    app = create_app(device="cpu", checkpoint_dir=tmp_path, token=token)
    with TestClient(app, base_url="http://127.0.0.1") as c:
        right = f"Bearer {TOKEN}"
        assert get(c, [("Authorization", right), ("authorization", right)]).status_code == 200
        assert get(c, [("Authorization", right)] * 3).status_code == 200
        r = get(c, [("Authorization", "Bearer wrong-key")] * 2)
        assert r.status_code == (401 if token else 200), r.text
        assert "wrong-key" not in r.text

"""A 4xx message quotes what the request named cut to ``SHOWN`` characters (``wire.shown``): an 8 KB id, cursor, status,
operation kind or query parameter came back whole in the message (8 KB of error for a typo'd paste); an unknown query
parameter's name, whole in ``param`` too."""

import pytest

from rlnb.server.errors import SHOWN
from tests.support.server import app_client

LONG = "x" * 8000
SAID = f"{LONG[:SHOWN]!r}... (80"  # (8000 characters), (8005 with the "/stop" the %2F joined


@pytest.mark.parametrize(
    ("method", "path", "params", "status", "param"),
    [
        ("GET", f"/training-sessions/{LONG}", {}, 404, "session_id"),
        ("GET", f"/model-resources/{LONG}", {}, 404, "model_resources_id"),
        ("GET", f"/checkpoints/{LONG}", {}, 404, "checkpoint_id"),
        ("GET", "/training-sessions", {"after": LONG}, 400, "after"),
        ("GET", "/model-resources", {"status": LONG}, 400, "status"),
        ("GET", "/training-sessions", {LONG: "1"}, 400, f"{LONG[:SHOWN]!r}... (8000 characters)"),  # was 8 KB
        ("POST", f"/training-sessions/s/operations/{LONG}", {}, 404, "kind"),
        ("GET", f"/training-sessions/{LONG}%2Fstop", {}, 404, "session_id"),
    ],
)
def test_a_long_value_is_cut_in_the_message(tmp_path, method, path, params, status, param):
    with app_client(tmp_path) as c:
        r = c.request(method, path, params=params, json={} if method == "POST" else None)
    error = r.json()["error"]
    assert r.status_code == status and error["param"] == param, r.text[:300]
    assert SAID in error["message"] and len(error["message"]) < 1000  # was 8 KB


def test_a_long_unknown_body_field_is_cut_in_param_and_the_message(tmp_path):
    """An unknown body field is a 400 naming it; an 8 KB name came back whole in both ``param`` and the message."""
    with app_client(tmp_path) as c:
        r = c.post("/model-resources", json={"base_model": "rlnb/tiny", LONG: 1})
    error = r.json()["error"]
    assert r.status_code == 400 and error["param"] == f"{LONG[:SHOWN]!r}... (8000 characters)", r.text[:300]
    assert len(error["message"]) < 1000


def test_an_id_of_a_real_length_is_quoted_whole(tmp_path):
    ident = "ckpt-infer-" + "0123456789abcdef" * 4  # longer than any id this server makes
    with app_client(tmp_path) as c:
        error = c.get(f"/checkpoints/{ident}").json()["error"]
    assert error["message"] == f"checkpoint {ident!r} not found"

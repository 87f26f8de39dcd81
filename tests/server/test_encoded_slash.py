"""An id holding ``%2F`` (an encoded ``/``): the ASGI server decodes it before routing, so
``/training-sessions/ID%2Fstop`` reached the stop route of session ID (it stopped it), ``/training-sessions/%2F`` the
list by a redirect (a POST there created a session), ``/checkpoints/X%2Fdownload`` the download of checkpoint X.
Every path holding one is a 404 naming the id, before any route is reached; no id has a ``/``."""

import pytest

from rlnb import wire
from tests.support.server import app_client, new_session, submit, wait


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """A server with a RUNNING session that has a completed optim-step and an inference checkpoint."""
    with app_client(tmp_path_factory.mktemp("slash")) as c:
        rid, sid = new_session(c)
        op = wait(c, sid, "optim-step", submit(c, sid, "optim-step")["id"])["id"]
        ckpt = wait(c, sid, "inference-checkpoint", submit(c, sid, "inference-checkpoint")["id"])
        yield c, {"rid": rid, "sid": sid, "op": op, "ckpt": ckpt["output"]["checkpoint"]["id"]}


CASES = [  # (method, path, param, the id it names); {names} are the live objects' ids
    ("POST", "/training-sessions/{sid}%2Fstop", "session_id", "{sid}/stop"),
    ("GET", "/training-sessions/%2F", "session_id", "/"),
    ("POST", "/training-sessions/%2F", "session_id", "/"),
    (
        "GET",
        "/training-sessions/{sid}%2Foperations%2Foptim-step%2F{op}",
        "session_id",
        "{sid}/operations/optim-step/{op}",
    ),
    ("GET", "/training-sessions/{sid}/operations/optim-step%2F{op}", "kind", "optim-step/{op}"),
    ("POST", "/model-resources/{rid}%2Fstop", "model_resources_id", "{rid}/stop"),
    ("POST", "/model-resources/{rid}%2fextend-expiry", "model_resources_id", "{rid}/extend-expiry"),
    ("GET", "/checkpoints/{ckpt}%2Fdownload?variant=CHECKPOINT_VARIANT_MERGED", "checkpoint_id", "{ckpt}/download"),
    ("POST", "/training-sessions/{sid}%2Fpayloads%2Fupload-url", "session_id", "{sid}/payloads/upload-url"),
]


@pytest.mark.parametrize(("method", "path", "param", "ident"), CASES)
def test_a_path_holding_an_encoded_slash_reaches_no_route_and_is_a_404_naming_the_id(live, method, path, param, ident):
    c, ids = live
    body = {"model_resources_id": ids["rid"]} if path == "/training-sessions/%2F" else {"seconds": 600}
    r = c.request(method, path.format(**ids), json=body, follow_redirects=False)
    assert r.status_code == 404, r.text
    err = r.json()["error"]
    assert err["param"] == param, err
    assert err["message"] == f"{param} {ident.format(**ids)!r} holds a '/' (sent as %2F): no {param} has one"
    assert c.get(f"/training-sessions/{ids['sid']}").json()["status"] == wire.SessionStatus.RUNNING
    assert c.get(f"/model-resources/{ids['rid']}").json()["status"] == wire.ModelResourcesStatus.READY
    assert len(c.get("/training-sessions").json()["data"]) == 1  # no session was created

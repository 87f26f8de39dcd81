"""Where `rlnb serve` strayed from the API reference (R-new), each now as the reference says."""

import math
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from rlnb import samples, wire
from tests.support.server import app_client, new_session, submit, wait


@pytest.fixture(scope="module")
def c(tmp_path_factory) -> Iterator[TestClient]:
    with app_client(tmp_path_factory.mktemp("ckpt")) as client:
        yield client


def test_a_status_filter_of_unspecified_is_a_400_not_an_empty_list(c):
    """The list filter's statuses omit UNSPECIFIED (no session is ever in it): ``?status=..._UNSPECIFIED``
    answered an empty list, as a misspelt status used to."""
    running, unspecified = wire.SessionStatus.RUNNING, wire.SessionStatus.UNSPECIFIED
    r = c.get("/training-sessions", params={"status": f"{running},{unspecified}"})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "status" and f"{unspecified.value!r} is not" in err["message"]
    assert running in err["message"] and f"{unspecified}," not in err["message"]  # not offered as a choice
    assert c.get("/training-sessions", params={"status": running}).status_code == 200


def test_an_empty_string_clears_a_label_at_create_and_in_metadata(c):
    """"Empty strings clear": a PATCH of ``metadata.wandb.url: ""`` kept ``"url": ""``, and a session created
    with ``display_name: ""`` showed ``""`` where a PATCH of the same cleared it (proto3 has no empty string
    apart from unset)."""
    rid = c.post("/model-resources", json={"base_model": "rlnb/tiny"}).json()["id"]
    made = c.post(
        "/training-sessions",
        json={"model_resources_id": rid, "display_name": "", "metadata": {"wandb": {"project": "p", "group": ""}}},
    )
    assert made.status_code == 200, made.text
    session = made.json()
    assert session["display_name"] is None
    assert session["metadata"]["wandb"]["project"] == "p" and session["metadata"]["wandb"]["group"] is None
    patched = c.patch(f"/training-sessions/{session['id']}", json={"metadata": {"wandb": {"project": "p", "url": ""}}})
    assert patched.status_code == 200, patched.text
    assert patched.json()["metadata"]["wandb"] == {
        "entity": None, "group": None, "project": "p", "run_id": None, "run_name": None, "url": None,
    }  # fmt: skip
    assert patched.json()["updated_at"] == session["updated_at"]  # nothing changed


def test_positions_outside_the_loss_come_back_as_zero_not_minus_zero(c):
    """``loss_fn_outputs`` logprobs at positions the loss excludes "come back as 0": they came back ``-0.0``
    (a log-prob times a zero mask), which a client comparing the JSON, or dividing by it, tells from 0."""
    _, sid = new_session(c)
    sample = samples.cross_entropy([1, 2, 3, 4], weights=[0.0, 0.0, 1.0, 0.5])
    body = {"samples": [sample.to_json_dict()], "loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"},
            "return_loss_fn_outputs": True, "forward_only": True}  # fmt: skip
    env = wait(c, sid, "forward-backward", submit(c, sid, "forward-backward", body)["id"])
    data = env["output"]["loss_fn_outputs"][0]["tensors"]["logprobs"]["data"]
    assert data[0] == 0 and math.copysign(1.0, data[0]) == 1.0, data  # +0.0
    assert data[1] < 0 and data[2] < 0  # a fractional weight still counts: its log-prob whole

"""An empty string in ``update_session`` clears a field, as the reference says ("omitted fields unchanged, empty
strings clear"): it is sent as ``""`` (it went as ``null``, which the reference gives no meaning), and an answer's
``""`` (proto3 JSON with its defaults written) reads as no value."""

import json

import httpx
import pytest

from rlnb import wire
from rlnb.remote.client import APIClient
from tests.support.server import app_client

SESSION = {"id": "s1", "status": "TRAINING_SESSION_STATUS_RUNNING", "base_model": "m", "model_resources_id": "r",
           "created_by": "u", "created_at": "2026-01-01T00:00:10Z", "updated_at": "2026-01-01T00:00:10Z"}  # fmt: skip


def _client(sent, answer=SESSION):
    def handler(request):
        sent.append(json.loads(request.content) if request.content else None)
        return httpx.Response(200, json=answer)

    return APIClient("https://rl.test", api_key="sk-test-12345678", transport=httpx.MockTransport(handler))


def test_an_empty_string_is_sent_as_given_in_a_patch():
    sent = []
    with _client(sent) as c:
        c.update_session("s1", metadata={"wandb": {"project": ""}})
        c.update_session("s1", display_name="", metadata=wire.SessionMetadata(wandb=wire.WandbMetadata(url="")))
        c.create_session(wire.StartTrainingSessionRequest(model_resources_id="r", metadata={"wandb": {"group": ""}}))
    assert sent == [
        {"metadata": {"wandb": {"project": ""}}},
        {"display_name": "", "metadata": {"wandb": {"url": ""}}},
        {"model_resources_id": "r", "metadata": {"wandb": {}}},  # a create's empty string is no value: absent
    ]


def test_an_empty_string_in_an_answer_reads_as_no_value():
    answer = {**SESSION, "metadata": {"wandb": {"project": "", "url": "https://wandb.ai/x", "group": None}}}
    with _client([], answer) as c:
        wandb = c.get_session("s1").metadata.wandb
    assert wandb is not None and (wandb.project, wandb.url, wandb.group) == (None, "https://wandb.ai/x", None)


@pytest.mark.slow  # the app builds its session's model
def test_rlnb_serve_clears_a_field_on_an_empty_string_and_on_null(tmp_path):
    with app_client(tmp_path) as http:
        c = APIClient("http://testserver", None, http_client=http)
        rid = c.create_model_resources(wire.CreateModelResourcesRequest(base_model="rlnb/tiny")).id
        wandb = {"project": "p", "entity": "team", "url": "https://u", "group": ""}
        sid = c.create_session(wire.StartTrainingSessionRequest(model_resources_id=rid, metadata={"wandb": wandb})).id
        made = c.get_session(sid).metadata.wandb
        assert made is not None and (made.project, made.entity, made.group) == ("p", "team", None)
        cleared = c.update_session(sid, metadata={"wandb": {"project": ""}}).metadata.wandb
        assert cleared is not None and (cleared.project, cleared.entity, cleared.url) == (None, "team", "https://u")
        nulled = http.patch(f"/training-sessions/{sid}", json={"metadata": {"wandb": {"entity": None}}})
        assert nulled.status_code == 200, nulled.text
        assert nulled.json()["metadata"]["wandb"] == {"entity": None, "group": None, "project": None, "run_id": None,
                                                      "run_name": None, "url": "https://u"}  # fmt: skip


def test_a_none_wandb_field_is_left_out_of_a_patch_and_a_create():
    """``{"wandb": {"url": None}}`` went as ``"url": null``, which the reference gives no meaning (a service may read
    it as "unchanged", or refuse it): a field given None is not given."""
    sent = []
    with _client(sent) as c:
        c.update_session("s1", metadata={"wandb": {"url": None, "project": "rl"}})
        metadata = {"wandb": {"url": None, "project": ""}}
        c.create_session(wire.StartTrainingSessionRequest(model_resources_id="r", metadata=metadata))
    assert sent == [
        {"metadata": {"wandb": {"project": "rl"}}},
        {"model_resources_id": "r", "metadata": {"wandb": {}}},
    ]

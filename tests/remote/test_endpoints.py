"""``APIClient``'s checkpoint, session-update and model-resource calls against a scripted transport: what is sent,
what is refused before sending (the field and its range), which calls are retried, and an answer about another
object."""

import json

import httpx
import pytest

import rlnb
from rlnb import wire
from rlnb.remote.client import APIClient
from tests.support.fake_api import BASE, KEY, NOW, quick

SESSION = {"id": "s-1", "status": "TRAINING_SESSION_STATUS_RUNNING", "base_model": "m", "model_resources_id": "mr-1",
           "created_by": "me", "created_at": NOW, "updated_at": NOW}  # fmt: skip
RESOURCE = {"id": "mr-1", "base_model": "m", "compute_config": {"num_generator_replicas": 1}, "created_at": NOW,
            "created_by": "me", "inactive_timeout": 3600, "lora_enabled": True, "optimizer_config": {"adam": {}},
            "status": "MODEL_RESOURCES_STATUS_READY", "updated_at": NOW, "expires_at": NOW}  # fmt: skip
CHECKPOINT = {"id": "ck-1", "base_model": "m", "created_at": NOW, "session_id": "s-1", "step": "3",
              "type": "CHECKPOINT_TYPE_INFERENCE", "lora_rank": 8}  # fmt: skip


class Script:
    """Answers ``fails`` 503s, then ``body``; keeps every request."""

    def __init__(self, body: dict, fails: int = 0):
        self.body, self.fails, self.seen = body, fails, []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        if len(self.seen) <= self.fails:
            return httpx.Response(503, json={"error": {"message": "busy", "type": "server_error"}})
        return httpx.Response(200, json=self.body)


def client(script: Script) -> APIClient:
    return APIClient(BASE, KEY, transport=httpx.MockTransport(script), **quick({}))


def test_checkpoints_are_listed_and_got_with_their_filters():
    page = Script({"data": [CHECKPOINT], "meta": {"has_more": True, "next_cursor": "ck-1"}})
    with client(page) as c:
        got = c.list_checkpoints(session_id="s-1", type="CHECKPOINT_TYPE_INFERENCE", after="ck-0", limit=5)
    assert got.data[0].step == 3 and got.meta.next_cursor == "ck-1"
    [sent] = page.seen
    assert sent.url.path == "/v1/rl/checkpoints"
    asked = {"limit": "5", "session_id": "s-1", "type": "CHECKPOINT_TYPE_INFERENCE", "after": "ck-0"}
    assert dict(sent.url.params) == asked
    one = Script(CHECKPOINT)
    with client(one) as c:
        assert c.get_checkpoint("ck-1").lora_rank == 8
    assert one.seen[0].url.path == "/v1/rl/checkpoints/ck-1"


def test_an_answer_about_another_object_is_refused():
    for call, body in [
        (lambda c: c.get_checkpoint("ck-2"), CHECKPOINT),
        (lambda c: c.update_session("s-2", display_name="x"), SESSION),
        (lambda c: c.extend_expiry("mr-2", 600), RESOURCE),
    ]:
        with client(Script(body)) as c, pytest.raises(rlnb.APIError, match="its id is '.*-1', for '.*-2'"):
            call(c)


def test_a_patch_sends_only_what_is_given_and_is_retried():
    script = Script({**SESSION, "display_name": "new"}, fails=1)
    with client(script) as c:
        got = c.update_session("s-1", metadata={"wandb": {"url": "https://wandb.ai/x"}})
    assert got.display_name == "new"
    assert [r.method for r in script.seen] == ["PATCH", "PATCH"]
    assert script.seen[0].url.path == "/v1/rl/training-sessions/s-1"
    assert json.loads(script.seen[-1].content) == {"metadata": {"wandb": {"url": "https://wandb.ai/x"}}}


def test_extend_expiry_and_estimate_cost_are_sent_as_the_api_takes_them_and_retried():
    extend = Script(RESOURCE, fails=1)
    with client(extend) as c:
        assert c.extend_expiry("mr-1", 600).id == "mr-1"
    assert len(extend.seen) == 2 and extend.seen[-1].url.path == "/v1/rl/model-resources/mr-1/extend-expiry"
    assert json.loads(extend.seen[-1].content) == {"seconds": 600}
    cost = Script({"currency": "USD", "price_per_hour": 12.5}, fails=1)
    request = wire.CreateModelResourcesRequest(base_model="m", lora_enabled=True)
    with client(cost) as c:
        assert c.estimate_cost(request).price_per_hour == 12.5
    assert len(cost.seen) == 2 and cost.seen[-1].url.path == "/v1/rl/model-resources/estimate-cost"
    assert json.loads(cost.seen[-1].content) == {"base_model": "m", "lora_enabled": True}


@pytest.mark.parametrize(
    ("call", "said"),
    [
        (lambda c: c.list_checkpoints(limit=0), r"limit must be an integer in \[1, 100\]"),
        (lambda c: c.list_checkpoints(limit=500), r"limit must be an integer in \[1, 100\]"),
        (lambda c: c.list_sessions(limit=101), r"limit must be an integer in \[1, 100\]"),
        (lambda c: c.list_model_resources(limit=2.5), r"limit must be an integer in \[1, 100\]"),
        (lambda c: c.list_checkpoints(type="INFERENCE"), "type must be None or one of CHECKPOINT_TYPE_TRAINING"),
        (lambda c: c.extend_expiry("mr-1", 0), r"seconds must be an integer >= 1, got 0"),
        (lambda c: c.extend_expiry("mr-1", 600.0), "seconds must be an integer >= 1, got 600.0"),
        (lambda c: c.update_session("s-1"), "update_session needs display_name or metadata"),
        (lambda c: c.update_session("s-1", display_name=5), "update_session.display_name = 5 is invalid"),
        (lambda c: c.update_session("s-1", metadata={"wandb": 5}), "update_session.metadata.wandb = 5"),
        (lambda c: c.update_session("", display_name="x"), "non-empty session_id"),
        (lambda c: c.estimate_cost({"base_model": "m"}), "estimate_cost takes a wire.CreateModelResourcesRequest"),
    ],
)
def test_bad_arguments_are_refused_naming_the_field_before_anything_is_sent(call, said):
    script = Script({})
    with client(script) as c, pytest.raises((ValueError, TypeError), match=said):
        call(c)
    assert script.seen == []

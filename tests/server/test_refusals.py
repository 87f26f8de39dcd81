"""What `rlnb serve` used to accept, ignore or answer oddly, and now refuses with a 400 naming the field: a
``lora_config`` on a full-weight resource, unknown fields in a PATCH or a cost estimate, both optimizers'
params, a status filter that matches nothing, a cost estimate of a body create refuses, a full-weight checkpoint
resumed on another base model; a resume mismatch that showed the server's own path; and a body that is missing or not
sent as JSON, which the 400 now says."""

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from rlnb import samples, wire
from tests.support.server import app_client, new_session, running, submit, wait

CE = wire.ForwardBackwardBody(
    samples=[samples.cross_entropy(list(b"refusals"))], loss=wire.LossConfig(type="LOSS_TYPE_CROSS_ENTROPY")
).to_json_dict()


@pytest.fixture(scope="module")
def c(tmp_path_factory) -> Iterator[TestClient]:
    with app_client(tmp_path_factory.mktemp("ckpt"), full_session_cap=4) as client:
        yield client


def error_of(r, status: int = 400) -> dict:
    assert r.status_code == status, r.text
    return r.json()["error"]


def test_a_lora_config_on_a_full_weight_resource_is_refused_not_dropped(c):
    rid = c.post("/model-resources", json={"base_model": "rlnb/tiny", "lora_enabled": False}).json()["id"]
    err = error_of(c.post("/training-sessions", json={"model_resources_id": rid, "lora_config": {"rank": 4}}))
    assert err["param"] == "lora_config" and f"{rid} trains all weights (lora_enabled is false)" in err["message"]
    assert c.get("/training-sessions", params={"model_resources_id": rid}).json()["data"] == []
    assert c.post("/training-sessions", json={"model_resources_id": rid}).status_code == 200


@pytest.mark.parametrize(
    "body, param",
    [
        ({"metadata": {"foo": {"x": 1}}}, "metadata.foo"),
        ({"metadata": {"wandb": {"projct": "typo"}}}, "metadata.wandb.projct"),
        ({"display_name": "x", "colour": "red"}, "colour"),
    ],
)
def test_a_patch_refuses_unknown_fields_at_any_depth_as_create_does(c, body, param):
    _, sid = new_session(c)
    err = error_of(c.patch(f"/training-sessions/{sid}", json=body))
    assert err["param"] == param and err["message"].startswith(f"{param}: ")
    assert c.get(f"/training-sessions/{sid}").json()["metadata"] == {"wandb": None}  # nothing was kept


def test_a_cost_estimate_refuses_unknown_fields(c):
    body = {"base_model": "rlnb/tiny", "compute_config": {"num_generator_replicas": 1, "gpus": 8}}
    assert error_of(c.post("/model-resources/estimate-cost", json=body))["param"] == "compute_config.gpus"


def test_both_optimizers_params_fail_the_step_invalid_input_naming_both(c):
    """The muon_params of an Adam session were silently ignored. The submission itself is accepted (the SDK's
    own tests send both), the step fails as muon_params alone does."""
    _, sid = new_session(c)
    body = {"adam_params": {"learning_rate": 1e-3}, "muon_params": {"learning_rate": 0.02}}
    env = wait(c, sid, "optim-step", submit(c, sid, "optim-step", body)["id"])
    assert env["error"]["code"] == wire.OperationErrorCode.INVALID_INPUT
    assert "send adam_params only, not adam_params and muon_params" in env["error"]["message"]
    assert c.get(f"/training-sessions/{sid}").json()["step"] == "0"


@pytest.mark.parametrize("path", ["/training-sessions", "/model-resources"])
@pytest.mark.parametrize("status", ["RUNNING,,x", "TRAINING_SESSION_STATUS_RUNING", ","])
def test_a_status_filter_that_names_no_status_is_a_400(c, path, status):
    err = error_of(c.get(path, params={"status": status}))
    assert err["param"] == "status" and "is not a" in err["message"]


def test_a_resume_mismatch_does_not_show_the_servers_checkpoint_path(c, tmp_path_factory):
    _, sid = new_session(c)
    submit(c, sid, "forward-backward", CE)
    submit(c, sid, "optim-step", {})
    ckpt = wait(c, sid, "training-checkpoint", submit(c, sid, "training-checkpoint")["id"])["output"]["checkpoint"]
    muon = {"base_model": "rlnb/tiny", "optimizer_config": {"muon": {}}}
    rid = c.post("/model-resources", json=muon).json()["id"]
    r = c.post("/training-sessions", json={"model_resources_id": rid, "resume_from_checkpoint_id": ckpt["id"]})
    err = running(c, r.json()["id"])["error"]  # found as the model is built: the session ends ERROR, saying why
    assert err["message"].startswith("resume_from_checkpoint_id: ") and ckpt["id"] in err["message"]
    assert "/" not in err["message"].replace(ckpt["id"], ""), err["message"]


def test_a_base_weights_ref_is_refused_not_ignored(c):
    """rlnb serve has no model registry: a resource asked to train ``base_weights_ref``'s weights used to be
    made, echo the ref, and train the base model's own weights."""
    before = len(c.get("/model-resources", params={"limit": 100}).json()["data"])
    body = {"base_model": "rlnb/tiny", "base_weights_ref": "together://ml_A1b2C3d4E5f6G7h8I9j0K"}
    err = error_of(c.post("/model-resources", json=body))
    assert err["param"] == "base_weights_ref" and "registry" in err["message"]
    assert len(c.get("/model-resources", params={"limit": 100}).json()["data"]) == before


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"base_weights_ref": "together://ml_A1b2C3d4E5f6G7h8I9j0K"}, "base_weights_ref", "no model registry"),
        ({"optimizer_config": {}}, "optimizer_config", "exactly one of adam or muon"),
        ({"optimizer_config": {"adam": {}, "muon": {}}}, "optimizer_config", "exactly one of adam or muon"),
        ({"base_model": "nope/none"}, "base_model", "must be one of"),
    ],
    ids=["base_weights_ref", "no optimizer", "both optimizers", "unknown model"],
)
def test_estimate_cost_refuses_what_create_refuses(c, body, param, words):
    """R-new: estimate-cost takes the same body as create. It checked only ``base_model`` and priced a body create
    refuses (``base_weights_ref``, no optimizer or both)."""
    body = {"base_model": "rlnb/tiny", **body}
    for route in ("/model-resources", "/model-resources/estimate-cost"):
        err = error_of(c.post(route, json=body))
        assert err["param"] == param and words in err["message"], (route, err)


@pytest.mark.parametrize(
    ("send", "words"),
    [
        ({}, r"^the request has no JSON body: this endpoint takes a JSON object \(Content-Type: application/json\)$"),
        ({"content": b'{"adam_params": {}}'}, r"Content-Type: application/json \(none was sent\)$"),
        ({"data": {"adam_params": "x"}}, r"Content-Type: application/json \(got 'application/x-www-form-urlencoded'\)"),
        ({"content": b"{}", "headers": {"Content-Type": "text/plain"}}, r"\(got 'text/plain'\)$"),
        ({"json": []}, r"^the body must be a JSON object$"),
    ],
    ids=["no body", "no content type", "form", "text", "a list"],
)
def test_a_missing_body_or_one_not_sent_as_json_is_said_so(c, send, words):
    """``curl -X POST`` without ``-d`` got "request: Field required", and ``curl -d '{...}'`` (a form's content type)
    "request: Input should be a valid dictionary or object to extract fields from": neither said what was wrong."""
    _, sid = new_session(c)
    send = dict(send)
    headers = {"Idempotency-Key": "k-" + sid, **send.pop("headers", {})}
    for path in (f"/training-sessions/{sid}/operations/optim-step", "/model-resources"):
        err = error_of(c.post(path, headers=headers, **send))
        assert re.search(words, err["message"]) and err["param"] is None and err["type"] == "invalid_request_error"
        assert set(err) == {"message", "type", "param", "code"}
    assert c.get(f"/training-sessions/{sid}").json()["step"] == "0"


def test_num_generator_replicas_past_int32_is_refused_not_echoed(c):
    """2**70 was kept and echoed back as a JSON integer past int64, which typed clients cannot read."""
    body = {"base_model": "rlnb/tiny", "compute_config": {"num_generator_replicas": 2**70}}
    err = error_of(c.post("/model-resources", json=body))
    assert err["param"] == "compute_config.num_generator_replicas" and "2147483647" in err["message"]
    body["compute_config"]["num_generator_replicas"] = 2**31 - 1
    assert c.post("/model-resources/estimate-cost", json=body).status_code == 200


def test_load_optimizer_without_a_resume_is_refused_not_ignored(c):
    """``load_optimizer`` with no ``resume_from_checkpoint_id`` was silently ignored: a fresh session at step 0."""
    rid = c.post("/model-resources", json={"base_model": "rlnb/tiny"}).json()["id"]
    for value in (True, False):
        err = error_of(c.post("/training-sessions", json={"model_resources_id": rid, "load_optimizer": value}))
        assert err["param"] == "load_optimizer" and "resume_from_checkpoint_id" in err["message"]
    assert c.get("/training-sessions", params={"model_resources_id": rid}).json()["data"] == []


def test_an_empty_resume_from_checkpoint_id_is_refused_as_no_value(c):
    """``""`` (an unset variable) was looked up as a checkpoint's id: 404 "checkpoint '' not found"."""
    rid = c.post("/model-resources", json={"base_model": "rlnb/tiny"}).json()["id"]
    err = error_of(c.post("/training-sessions", json={"model_resources_id": rid, "resume_from_checkpoint_id": ""}))
    assert err["param"] == "resume_from_checkpoint_id" and "an empty string is no value" in err["message"], err
    assert c.get("/training-sessions", params={"model_resources_id": rid}).json()["data"] == []


def test_an_unknown_operation_kind_is_a_404_naming_it_and_the_kinds(c):
    """``operations/bogus`` was FastAPI's route miss: 404 "Not Found", ``param`` null, unlike every other 404."""
    _, sid = new_session(c)
    base = f"/training-sessions/{sid}/operations"
    for r in (c.post(f"{base}/bogus", json={}, headers={"Idempotency-Key": "k"}), c.get(f"{base}/bogus/some-id")):
        err = error_of(r, 404)
        assert err["param"] == "kind" and "unknown operation kind 'bogus'" in err["message"], err
        assert all(kind in err["message"] for kind in wire.OperationKind), err
    assert c.get(f"{base}/forward-backward").status_code == 405  # a known kind, the wrong method: as before
    assert c.post(f"{base}/forward-backward/some-id", json={}).status_code == 405
    assert error_of(c.get(f"{base}/optim-step/some-id"), 404)["param"] == "operation_id"


@pytest.mark.parametrize("kind", ["training-checkpoint", "inference-checkpoint"])
def test_a_full_weight_checkpoint_of_another_base_model_is_refused_at_the_post(c, kind):
    """R-new: full-weight training checkpoints need the original base model. The checkpoint's record says which, yet
    the POST answered 200 and the session then ended ERROR as its model was built."""
    _, sid = new_session(c)
    ckpt = wait(c, sid, kind, submit(c, sid, kind)["id"])["output"]["checkpoint"]
    c.post(f"/training-sessions/{sid}/stop")  # the module's full-weight sessions are capped
    rid = c.post("/model-resources", json={"base_model": "rlnb/small"}).json()["id"]
    err = error_of(
        c.post("/training-sessions", json={"model_resources_id": rid, "resume_from_checkpoint_id": ckpt["id"]})
    )
    assert err["param"] == "resume_from_checkpoint_id", err
    assert "of base model 'rlnb/tiny'" in err["message"] and f"{rid} serves 'rlnb/small'" in err["message"], err
    assert c.get("/training-sessions", params={"model_resources_id": rid}).json()["data"] == []


@pytest.mark.parametrize("kind", ["forward-backward", "custom-forward-backward"])
def test_a_routed_experts_key_the_server_never_issued_fails_the_operation(c, kind):
    """R-new: the key replays a sampled sequence's MoE routing and the operation fails if the key is not available.
    rlnb serve's models are dense and issue none (each sequence's ``routed_experts_key`` is null), yet a key sent
    was ignored: the operation trained as if routing had been replayed."""
    _, sid = new_session(c)
    body = CE if kind == "forward-backward" else {"samples": CE["samples"], "gradients": [{"data": [1.0] * 7}]}
    body = {**body, "samples": [*body["samples"], {**body["samples"][0], "routed_experts_key": "routing/nope"}]}
    if kind == "custom-forward-backward":
        body["gradients"] *= 2
    env = wait(c, sid, kind, submit(c, sid, kind, body)["id"])
    assert env["status"] == wire.OperationStatus.FAILED, env
    assert env["error"]["code"] == wire.OperationErrorCode.INVALID_INPUT, env
    assert env["error"]["message"].startswith("samples[1].routed_experts_key: "), env
    assert "dense" in env["error"]["message"] and "no routing keys" in env["error"]["message"], env


@pytest.mark.parametrize(
    ("field", "low", "high", "span"),
    [("num_samples", 0, 257, f"1..{wire.MAX_NUM_SAMPLES}"), ("lora_config.rank", 0, 65, "1..64")],
)
def test_a_number_below_or_above_the_servers_range_names_the_same_range(c, field, low, high, span):
    """The wire's lower bound answered "allowed: 1..2147483647" (int32's range) where the server takes 1..256 or
    1..64 (``max_lora_rank``), and its own upper bound said "[1, 256]" or "<= 64": one range, the server's, in both."""
    _, sid = new_session(c)
    rid = c.post("/model-resources", json={"base_model": "rlnb/tiny", "lora_enabled": True}).json()["id"]
    said = []
    for value in (low, high):
        if field == "num_samples":
            body = {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": [1, 2]}}]}], "num_samples": value}
            r = c.post(
                f"/training-sessions/{sid}/operations/sample", json=body, headers={"Idempotency-Key": f"{value}"}
            )
        else:
            r = c.post("/training-sessions", json={"model_resources_id": rid, "lora_config": {"rank": value}})
        err = error_of(r)
        assert err["param"] == field and err["message"].startswith(f"{field}"), err
        said.append(err["message"])
    assert all(f"(allowed: {span}; got {v})" in m for v, m in zip((low, high), said, strict=True)), said

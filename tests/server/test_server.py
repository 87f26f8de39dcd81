"""`rlnb serve`'s routes in process (FastAPI TestClient): the R-new paths, errors, idempotency, caps,
checkpoints, LoRA. The wire itself is tested over real loopback HTTP in test_remote_server / test_sdk."""

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient

from rlnb import samples, wire
from rlnb.server import create_app
from tests.support.server import app_client, new_session, running, submit, wait


@pytest.fixture(scope="module")
def c(tmp_path_factory) -> Iterator[TestClient]:
    with app_client(tmp_path_factory.mktemp("ckpt")) as client:
        yield client


@pytest.fixture(scope="module")
def auth_c(tmp_path_factory) -> Iterator[TestClient]:
    with app_client(tmp_path_factory.mktemp("ckpt"), token="secret-token") as client:
        yield client


CE = wire.ForwardBackwardBody(
    samples=[samples.cross_entropy(list(b"hello server"))], loss=wire.LossConfig(type="LOSS_TYPE_CROSS_ENTROPY")
).to_json_dict()


def test_auth_off_and_on(c, auth_c):
    assert c.get("/supported-models").status_code == 200
    for headers in ({}, {"Authorization": "Bearer wrong-token"}):
        r = auth_c.get("/supported-models", headers=headers)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert r.json()["error"]["type"] == "authentication_error"
    assert auth_c.get("/supported-models", headers={"Authorization": "Bearer secret-token"}).status_code == 200
    assert auth_c.get("http://testserver/health").status_code == 200
    assert auth_c.get("http://testserver/openapi.json").status_code == 200


def test_openapi_lists_every_r_new_path(c):
    paths = c.get("http://testserver/openapi.json").json()["paths"]
    for kind in wire.REQUEST_TYPES:
        assert f"/v1/rl/training-sessions/{{session_id}}/operations/{kind}" in paths
        assert f"/v1/rl/training-sessions/{{session_id}}/operations/{kind}/{{operation_id}}" in paths
    for p in [
        "/v1/rl/supported-models",
        "/v1/rl/model-resources",
        "/v1/rl/model-resources/estimate-cost",
        "/v1/rl/model-resources/{model_resources_id}/extend-expiry",
        "/v1/rl/checkpoints/{checkpoint_id}/download",
        "/v1/rl/training-sessions/{session_id}/stop",
        "/v1/rl/training-sessions/{session_id}/payloads/upload-url",
        "/v1/rl/training-sessions/{session_id}/payloads/{payload_id}/download-url",
    ]:
        assert p in paths


@pytest.mark.parametrize(
    "path,body,param",
    [
        ("/model-resources", {}, "base_model"),
        ("/model-resources", {"base_model": "gpt-9"}, "base_model"),
        ("/model-resources", {"base_model": "rlnb/tiny", "inactive_timeout": 5}, "inactive_timeout"),
        (
            "/model-resources",
            {"base_model": "rlnb/tiny", "optimizer_config": {"adam": {}, "muon": {}}},
            "optimizer_config",
        ),
        ("/training-sessions", {}, "model_resources_id"),
    ],
)
def test_bad_bodies_are_400_naming_the_field(c, path, body, param):
    r = c.post(path, json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["type"] == "invalid_request_error" and err["message"]


def test_bad_operation_bodies_are_400_naming_the_field(c):
    _, sid = new_session(c)
    cases = [
        ("optim-step", {"adam_params": {"beta1": 1.5}}, "adam_params.beta1"),
        ("optim-step", {"muon_params": {"newton_schulz_steps": 0}}, "muon_params.newton_schulz_steps"),
        ("weights-sync", {"weight_sync_type": "LATER"}, "weight_sync_type"),
        ("sample", {"model_inputs": [], "topk_prompt_logprobs": 50}, "topk_prompt_logprobs"),
        ("forward-backward", {"samples": []}, "loss"),
    ]
    for kind, body, param in cases:
        r = c.post(f"/training-sessions/{sid}/operations/{kind}", json=body, headers={"Idempotency-Key": "k"})
        assert r.status_code == 400 and r.json()["error"]["param"] == param, (kind, r.text)
    r = c.post(f"/training-sessions/{sid}/operations/optim-step", json={})
    assert r.status_code == 400 and r.json()["error"]["param"] == "Idempotency-Key"


def test_unknown_ids_are_404(c):
    _, sid = new_session(c)
    fb = submit(c, sid, "forward-backward", CE)
    for path in [
        "/training-sessions/nope",
        "/model-resources/nope",
        "/checkpoints/nope",
        f"/training-sessions/{sid}/operations/forward-backward/nope",
        f"/training-sessions/{sid}/operations/optim-step/{fb['id']}",  # an id of another kind
        "/training-sessions/nope/operations/sample/x",
    ]:
        r = c.get(path)
        assert r.status_code == 404 and r.json()["error"]["type"] == "not_found", path
    assert (
        c.post("/training-sessions/nope/operations/optim-step", json={}, headers={"Idempotency-Key": "k"}).status_code
        == 404
    )


def test_idempotency_key_returns_the_original_operation_and_runs_it_once(c):
    _, sid = new_session(c)
    submit(c, sid, "forward-backward", CE)
    first = submit(c, sid, "optim-step", {"adam_params": {"learning_rate": 1e-3}}, key="same-key")
    again = submit(c, sid, "optim-step", {"adam_params": {"learning_rate": 1e-3}}, key="same-key")
    assert first["id"] == again["id"]
    assert wait(c, sid, "optim-step", first["id"])["output"]["step"] == "1"
    assert c.get(f"/training-sessions/{sid}").json()["step"] == "1"
    r = c.post(
        f"/training-sessions/{sid}/operations/weights-sync",
        json={"weight_sync_type": "WEIGHT_SYNC_TYPE_PIPELINE"},
        headers={"Idempotency-Key": "same-key"},
    )
    assert r.status_code == 409 and r.json()["error"]["param"] == "Idempotency-Key"


def test_full_loop_over_http(c):
    _, sid = new_session(c, optimizer_config={"muon": {"scaling_strategy": "MUON_SCALING_STRATEGY_ORIGINAL"}})
    fb = submit(c, sid, "forward-backward", CE)
    opt = submit(c, sid, "optim-step", {"muon_params": {"learning_rate": 0.02, "adam": {"learning_rate": 3e-3}}})
    sync = submit(c, sid, "weights-sync", {"weight_sync_type": "WEIGHT_SYNC_TYPE_SYNCHRONOUS"})
    smp = submit(
        c,
        sid,
        "sample",
        {
            "model_inputs": [wire.ModelInput.from_tokens(list(b"he")).to_json_dict()],
            "num_samples": 2,
            "sampling_params": {"max_tokens": 4, "seed": "3"},
        },
    )
    assert wait(c, sid, "forward-backward", fb["id"])["output"]["loss"] > 0
    out = wait(c, sid, "optim-step", opt["id"])["output"]
    assert out["step"] == "1" and out["metrics"]["grad_norm/muon"] > 0
    assert wait(c, sid, "weights-sync", sync["id"])["output"]["weights_version"] == "1"
    result = wait(c, sid, "sample", smp["id"])["output"]["results"][0]
    assert result["policy_segments"] == [{"start_token": 0, "version": 1}]
    assert [len(s["tokens"]) for s in result["sequences"]] == [4, 4]
    session = c.get(f"/training-sessions/{sid}").json()
    assert session["policy_state"] == {
        "applied_weights_version": "1",
        "pending_publish": False,
        "target_weights_version": "1",
        "trainer_step": "1",
    }
    wrong = wait(c, sid, "optim-step", submit(c, sid, "optim-step", {"adam_params": {}})["id"])
    assert wrong["error"]["code"] == "TRAINING_OPERATION_ERROR_CODE_INVALID_INPUT"


def test_session_cap_stop_and_resource_lifecycle(c):
    rid, sid = new_session(c)
    r = c.post("/training-sessions", json={"model_resources_id": rid})
    assert r.status_code == 429 and r.json()["error"]["type"] == "rate_limit_error"
    assert c.post(f"/model-resources/{rid}/stop").status_code == 409
    before = c.get(f"/model-resources/{rid}").json()["expires_at"]
    same = c.post(f"/model-resources/{rid}/extend-expiry", json={"seconds": 600}).json()["expires_at"]
    assert same == before  # 600 s from now is sooner than the default 3600 s: expires_at never moves earlier
    later = c.post(f"/model-resources/{rid}/extend-expiry", json={"seconds": 7200}).json()["expires_at"]
    assert later > before
    assert c.post("/model-resources/estimate-cost", json={"base_model": "rlnb/tiny"}).json()["currency"] == "USD"
    assert c.post(f"/training-sessions/{sid}/stop").json()["status"] == "TRAINING_SESSION_STATUS_STOPPED"
    late = submit(c, sid, "optim-step", {})
    assert wait(c, sid, "optim-step", late["id"])["error"]["code"] == "TRAINING_OPERATION_ERROR_CODE_SESSION_NOT_ACTIVE"
    second = c.post("/training-sessions", json={"model_resources_id": rid})
    assert second.status_code == 200
    running(c, second.json()["id"])  # force-stopped while CREATING it would read STOPPING until its build ends
    stopped = c.post(f"/model-resources/{rid}/stop", params={"force": "true"}).json()
    assert stopped["status"] == "MODEL_RESOURCES_STATUS_STOPPED"
    assert c.get(f"/training-sessions/{second.json()['id']}").json()["status"] == "TRAINING_SESSION_STATUS_STOPPED"


def test_lists_paginate_and_filter(tmp_path):
    with app_client(tmp_path, full_session_cap=3) as c:  # three sessions on one resource, without LoRA
        rid = c.post("/model-resources", json={"base_model": "rlnb/tiny"}).json()["id"]
        ids = [running(c, c.post("/training-sessions", json={"model_resources_id": rid}).json()["id"])["id"]
               for _ in range(3)]  # fmt: skip
        seen, after = [], None
        while True:
            query = {"model_resources_id": rid, "limit": 2, **({"after": after} if after else {})}
            page = c.get("/training-sessions", params=query).json()
            seen += [s["id"] for s in page["data"]]
            if not page["meta"]["has_more"]:
                assert page["meta"]["next_cursor"] == ""
                break
            after = page["meta"]["next_cursor"]
        assert sorted(seen) == sorted(ids) and len(seen) == 3
        c.post(f"/training-sessions/{ids[0]}/stop")
        live = c.get(
            "/training-sessions", params={"model_resources_id": rid, "status": "TRAINING_SESSION_STATUS_RUNNING"}
        )
        assert {s["id"] for s in live.json()["data"]} == set(ids[1:])
        either = "TRAINING_SESSION_STATUS_RUNNING,TRAINING_SESSION_STATUS_STOPPED"
        both = c.get("/training-sessions", params={"model_resources_id": rid, "status": either})
        assert len(both.json()["data"]) == 3
        patched = c.patch(f"/training-sessions/{ids[1]}", json={"display_name": "lr-3e-3"}).json()
        assert patched["display_name"] == "lr-3e-3"
        cleared = c.patch(f"/training-sessions/{ids[1]}", json={"display_name": ""}).json()
        assert cleared.get("display_name") is None  # an empty string clears it
        assert c.get(f"/training-sessions/{ids[1]}").json().get("display_name") is None


def test_lora_resource_trains_only_adapters_and_serves_both_variants(c, peft):
    rid = c.post("/model-resources", json={"base_model": "rlnb/tiny", "lora_enabled": True}).json()["id"]
    body = {"model_resources_id": rid, "lora_config": {"rank": 4, "alpha": 8}}
    s = running(c, c.post("/training-sessions", json=body).json()["id"])
    assert s["lora_config"]["rank"] == 4
    sid = s["id"]
    first = wait(c, sid, "inference-checkpoint", submit(c, sid, "inference-checkpoint")["id"])["output"]["checkpoint"]
    submit(c, sid, "forward-backward", CE)
    submit(c, sid, "optim-step", {"adam_params": {"learning_rate": 1e-2}})
    second = wait(c, sid, "inference-checkpoint", submit(c, sid, "inference-checkpoint")["id"])["output"]["checkpoint"]
    assert second["step"] == "1"

    def fetch(cid, variant, name):
        files = c.get(f"/checkpoints/{cid}/download", params={"variant": variant}).json()["data"]
        d = next(f for f in files if f["filename"] == name)
        raw = c.get(d["url"]).content  # presigned: no Authorization header
        assert len(raw) == int(d["size"])
        from safetensors.torch import load

        return load(raw)

    a = fetch(first["id"], "CHECKPOINT_VARIANT_MERGED", "model.safetensors")
    b = fetch(second["id"], "CHECKPOINT_VARIANT_MERGED", "model.safetensors")
    assert "lm_head.weight" in a and not any("lora" in k for k in a)
    assert any(not torch.equal(a[k], b[k]) for k in a)  # merged weights moved
    adapter = fetch(second["id"], "CHECKPOINT_VARIANT_ADAPTER", "adapter_model.safetensors")
    assert adapter and all("lora_" in k for k in adapter)
    listed = c.get("/checkpoints", params={"session_id": sid, "type": "CHECKPOINT_TYPE_INFERENCE"}).json()["data"]
    assert [x["id"] for x in listed] == [second["id"], first["id"]] and listed[0]["lora_rank"] == 4
    bad = c.get(
        c.get(f"/checkpoints/{first['id']}/download", params={"variant": "CHECKPOINT_VARIANT_MERGED"})
        .json()["data"][0]["url"]
        .split("?")[0]
        + "?sig=forged"
    )
    assert bad.status_code == 403


def test_training_checkpoint_resume_and_download_rules(c):
    rid, sid = new_session(c)
    submit(c, sid, "forward-backward", CE)
    submit(c, sid, "optim-step", {})
    ckpt = wait(c, sid, "training-checkpoint", submit(c, sid, "training-checkpoint")["id"])["output"]["checkpoint"]
    assert c.get(f"/checkpoints/{ckpt['id']}").json()["type"] == "CHECKPOINT_TYPE_TRAINING"
    r = c.get(f"/checkpoints/{ckpt['id']}/download", params={"variant": "CHECKPOINT_VARIANT_MERGED"})
    assert r.status_code == 400
    c.post(f"/training-sessions/{sid}/stop")
    resumed = c.post("/training-sessions", json={"model_resources_id": rid, "resume_from_checkpoint_id": ckpt["id"]})
    assert resumed.status_code == 200 and resumed.json()["resume_from_checkpoint_id"] == ckpt["id"]
    assert running(c, resumed.json()["id"])["step"] == "1"


def test_a_checkpoint_whose_files_are_gone_is_a_409_that_does_not_show_the_servers_folders(tmp_path):
    """The 409 quoted the checkpoint's folder on the server (``/srv/.../checkpoints/ckpt-...``) to any client."""
    import shutil

    with app_client(tmp_path) as c:
        _, sid = new_session(c)
        op = submit(c, sid, "inference-checkpoint")["id"]
        ckpt = wait(c, sid, "inference-checkpoint", op)["output"]["checkpoint"]
        shutil.rmtree(next(p for p in tmp_path.rglob(ckpt["id"]) if p.is_dir()))
        r = c.get(f"/checkpoints/{ckpt['id']}/download", params={"variant": "CHECKPOINT_VARIANT_MERGED"})
        assert r.status_code == 409 and r.json()["error"]["message"].endswith("files are gone from this server")
        assert str(tmp_path) not in r.text


def test_trainer_only_resource_rejects_sample(c):
    _, sid = new_session(c, compute_config={"num_generator_replicas": 0})
    env = wait(
        c,
        sid,
        "sample",
        submit(c, sid, "sample", {"model_inputs": [wire.ModelInput.from_tokens([1]).to_json_dict()]})["id"],
    )
    assert env["error"]["code"] == "TRAINING_OPERATION_ERROR_CODE_INVALID_INPUT"


def test_conflicts_tell_clients_not_to_retry(c):
    rid, _ = new_session(c)
    r = c.post(f"/model-resources/{rid}/stop")
    assert r.status_code == 409 and r.headers["x-should-retry"] == "false"


def test_sessions_share_base_weights_but_not_their_unseeded_samples(c):
    """Every session starts from the same base weights; unseeded sampling still differs between sessions
    (each gets its own sampling seed), while a seed makes a sample reproducible across sessions."""
    body = {"model_inputs": [wire.ModelInput.from_tokens(list(b"he")).to_json_dict()], "num_samples": 4,
            "sampling_params": {"max_tokens": 8}}  # fmt: skip
    seeded = {**body, "sampling_params": {"max_tokens": 8, "seed": "7"}}
    got = []
    for _ in range(2):
        _, sid = new_session(c)
        ops = [submit(c, sid, "sample", b)["id"] for b in (body, seeded)]
        runs = [wait(c, sid, "sample", op)["output"]["results"][0] for op in ops]
        got.append([[s["tokens"] for s in r["sequences"]] for r in runs])
    assert got[0][0] != got[1][0]  # unseeded: different draws
    assert got[0][1] == got[1][1]  # seeded: the same weights give the same tokens


def test_listing_while_others_insert_is_never_a_5xx(tmp_path):
    """Found by review and reproduced under load: handlers run in a thread pool, so a session
    created (or a checkpoint recorded by a session's worker) while another request listed them
    raised "dictionary changed size during iteration", a 500. Made deterministic here, in process:
    while a listing iterates, another thread creates a session / records a checkpoint through the
    registry; the registry's one lock makes it wait until the listing is done."""
    app = create_app(device="cpu", checkpoint_dir=tmp_path, full_session_cap=2)  # a second session, no LoRA
    registry = app.state.registry
    threads: list[threading.Thread] = []

    class Busy(dict):  # type: ignore[type-arg]
        """A registry table whose iteration lets another thread try to insert, as a concurrent request would."""

        def __init__(self, data: dict, insert: Any):
            super().__init__(data)
            self.insert = insert

        def values(self) -> Any:  # type: ignore[override]
            for value in super().values():
                if self.insert is not None:  # once
                    t = threading.Thread(target=self.insert)
                    self.insert = None
                    t.start()
                    t.join(0.05)  # it would change the dict now if nothing stopped it
                    threads.append(t)
                yield value

    with TestClient(app, base_url="http://testserver/v1/rl", raise_server_exceptions=False) as client:
        rid, sid = new_session(client)
        op = wait(client, sid, "training-checkpoint", submit(client, sid, "training-checkpoint", key="c")["id"])
        assert op["status"] == wire.OperationStatus.COMPLETED, op
        record, env = registry.session(sid), wire.ENVELOPES["training-checkpoint"].model_validate(op)

        def record_another() -> None:
            renamed = env.model_copy(deep=True)
            renamed.output.checkpoint.id = f"ckpt-{uuid.uuid4()}"
            store = record.backend.engine.store  # the copy's files are the original's
            store.paths[renamed.output.checkpoint.id] = store.paths[env.output.checkpoint.id]
            registry._record(record, "training-checkpoint", renamed, [], "c", "")

        request = wire.StartTrainingSessionRequest(model_resources_id=rid)
        registry.sessions = Busy(registry.sessions, lambda: registry.create_session(request, "other"))
        registry.checkpoints = Busy(registry.checkpoints, record_another)
        assert client.get("/training-sessions").status_code == 200
        assert client.get("/checkpoints").status_code == 200
        for t in threads:
            t.join(30)
        assert not any(t.is_alive() for t in threads) and len(threads) == 2
        assert len(client.get("/training-sessions").json()["data"]) == 2
        assert len(client.get("/checkpoints").json()["data"]) == 2


@pytest.mark.slow  # LoRA: peft
def test_a_resume_takes_the_lora_settings_it_leaves_out_from_the_checkpoints_session(c):
    """Together's Tinker shim resumes with ``lora_config: {"rank": r}`` alone: rlnb's defaults took the other
    fields' places and the checkpoint of a session made with ``alpha`` 8 or ``train_unembed`` false was refused
    (400 "checkpoint's LoRA alpha is 8, this session's is 16"). A setting the request gives is still checked."""
    rid = c.post("/model-resources", json={"base_model": "rlnb/tiny", "lora_enabled": True}).json()["id"]
    made = {"rank": 4, "alpha": 8, "dropout": 0.25, "train_unembed": False}
    r = c.post("/training-sessions", json={"model_resources_id": rid, "lora_config": made})
    sid = running(c, r.json()["id"])["id"]
    submit(c, sid, "forward-backward", CE)
    submit(c, sid, "optim-step", {})
    ckpt = wait(c, sid, "training-checkpoint", submit(c, sid, "training-checkpoint")["id"])["output"]["checkpoint"]
    assert c.post(f"/training-sessions/{sid}/stop").status_code == 200
    for given in ({"rank": 4}, None):
        body = {"model_resources_id": rid, "resume_from_checkpoint_id": ckpt["id"], "lora_config": given}
        r = c.post("/training-sessions", json={k: v for k, v in body.items() if v is not None})
        assert r.status_code == 200, r.text
        resumed = running(c, r.json()["id"])
        assert {k: resumed["lora_config"][k] for k in made} == made and resumed["step"] == "1"
        assert c.post(f"/training-sessions/{resumed['id']}/stop").status_code == 200
    body = {"model_resources_id": rid, "resume_from_checkpoint_id": ckpt["id"], "lora_config": {"alpha": 16}}
    failed = running(c, c.post("/training-sessions", json=body).json()["id"])  # found as its model is built
    assert "checkpoint's LoRA alpha is 8, this session's is 16" in failed["error"]["message"]

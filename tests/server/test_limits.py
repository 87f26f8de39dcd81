"""`rlnb serve` under hostile requests: bodies too large, batches and sampling budgets past their limits,
caps on live objects, Idempotency-Keys reused with another body, bad input (INVALID_INPUT naming the
field, never INTERNAL_ERROR), a stop in the middle of a long sample, stopped sessions that must free their models,
and presigned download links. Each limit is a ServerSettings field, set small here."""

import gc
import json
import math
import re
import threading
import time
import uuid
import weakref

import httpx
import pytest

from rlnb import samples, wire
from rlnb.server.settings import ServerSettings, parse_limits
from tests.support.server import Clock, app_client, new_session, running, submit, wait

OPS = "/training-sessions/{sid}/operations/{kind}"
CE = wire.ForwardBackwardBody(
    samples=[samples.cross_entropy(list(b"hello limits"))], loss=wire.LossConfig(type="LOSS_TYPE_CROSS_ENTROPY")
).to_json_dict()


def post(c, sid: str, kind: str, body: dict | None = None, key: str | None = None, **kw) -> httpx.Response:
    headers = {"Idempotency-Key": str(uuid.uuid4()) if key is None else key}
    return c.post(OPS.format(sid=sid, kind=kind), json=body or {}, headers=headers, **kw)


def error_of(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    return r.json()["error"]


# -- bodies, batches, budgets, caps ---------------------------------------------------------------


def test_a_body_over_the_limit_is_413_with_the_error_body(tmp_path):
    with app_client(tmp_path, max_body_bytes=4096, max_payload_bytes=8192) as c:
        _, sid = new_session(c)
        big = {**CE, "samples": CE["samples"] * 200}  # ~60 KB
        err = error_of(post(c, sid, "forward-backward", big), 413)
        assert "larger than 4096 bytes (max_body_bytes)" in err["message"]

        def chunks():  # no Content-Length: counted as it arrives
            yield json.dumps(big).encode()

        headers = {"Idempotency-Key": "k", "Content-Type": "application/json"}
        chunked = c.post(OPS.format(sid=sid, kind="forward-backward"), content=chunks(), headers=headers)
        assert "max_body_bytes" in error_of(chunked, 413)["message"]
        upload = wire.PayloadUploadUrl.model_validate(c.post(f"/training-sessions/{sid}/payloads/upload-url").json())
        assert "max_payload_bytes" in error_of(c.put(upload.upload_url, content=b"x" * 9000), 413)["message"]
        assert c.get("http://testserver/health").status_code == 200
        assert submit(c, sid, "forward-backward", CE)["status"]  # a normal body still goes through


def test_max_batch_size_is_enforced_as_advertised(tmp_path):
    with app_client(tmp_path, max_batch_size=4) as c:
        advertised = c.get("/supported-models").json()["data"][0]["compute_configs"][0]["trainer_config"]
        assert advertised["full"]["max_batch_size"] == 4
        _, sid = new_session(c)
        for kind, extra in (("forward-backward", {}), ("custom-forward-backward", {"gradients": []})):
            body = {"samples": CE["samples"] * 5, **({"loss": CE["loss"]} if kind == "forward-backward" else extra)}
            err = error_of(post(c, sid, kind, body), 400)
            assert err["param"] == "samples" and "limit is 4" in err["message"]
        assert submit(c, sid, "forward-backward", {**CE, "samples": CE["samples"] * 4})["status"]


def sample_body(prompts: int, n: int, max_tokens: int, stop: list[str] | None = None) -> dict:
    params = {"max_tokens": max_tokens, **({"stop": stop} if stop else {})}
    inputs = [wire.ModelInput.from_tokens(list(b"n=")).to_json_dict()] * prompts
    return {"model_inputs": inputs, "num_samples": n, "sampling_params": params}


def test_a_sampling_budget_and_stop_strings_are_capped(tmp_path):
    with app_client(tmp_path, max_sample_tokens=1000, max_stop_strings=3, max_stop_chars=5) as c:
        _, sid = new_session(c)
        err = error_of(post(c, sid, "sample", sample_body(30, 256, 63)), 400)
        assert "30 prompts x 256 samples x 63 max_tokens = 483840 tokens" in err["message"]
        assert "limit is 1000" in err["message"] and err["param"] == "num_samples"  # the largest factor
        err = error_of(post(c, sid, "sample", sample_body(1, 1, 5000)), 400)
        assert err["param"] == "sampling_params.max_tokens" and "1 prompts x 1 samples x 5000" in err["message"]
        assert error_of(post(c, sid, "sample", sample_body(2000, 1, 1)), 400)["param"] == "model_inputs"
        no_tokens = {"model_inputs": [wire.ModelInput.from_tokens([]).to_json_dict()]}
        for body, param in (({"model_inputs": []}, "model_inputs"), (sample_body(1, 300, 1), "num_samples"),
                            (no_tokens, "model_inputs.0")):  # fmt: skip
            assert error_of(post(c, sid, "sample", body), 400)["param"] == param  # FAILED once run, before
        unset = {"model_inputs": sample_body(1, 100, 1)["model_inputs"], "num_samples": 100}
        assert "x 16 max_tokens" in error_of(post(c, sid, "sample", unset), 400)["message"]  # the default counts
        err = error_of(post(c, sid, "sample", sample_body(1, 1, 4, stop=["a", "b", "c", "d"])), 400)
        assert err["param"] == "sampling_params.stop" and "4 strings; the limit is 3" in err["message"]
        err = error_of(post(c, sid, "sample", sample_body(1, 1, 4, stop=["abcdef"])), 400)
        assert "6 characters; the limit is 5" in err["message"]
        lone = json.dumps(sample_body(1, 1, 4, stop=["x", "\ud800"]))  # "\\ud800": JSON escapes it, UTF-8 cannot
        headers = {"Idempotency-Key": str(uuid.uuid4()), "Content-Type": "application/json"}
        err = error_of(c.post(OPS.format(sid=sid, kind="sample"), content=lone, headers=headers), 400)  # never matched
        assert err["param"] == "sampling_params.stop.1" and "lone surrogate" in err["message"]
        err = error_of(post(c, sid, "sample", sample_body(1, 1, 4, stop=["x", "a\ufffd"])), 400)  # never matched
        assert err["param"] == "sampling_params.stop.1" and "U+FFFD" in err["message"]
        ok = wait(c, sid, "sample", submit(c, sid, "sample", sample_body(4, 4, 8, stop=["x", "yy"]))["id"])
        assert ok["status"] == wire.OperationStatus.COMPLETED


def test_the_prompt_tokens_a_sample_prefills_are_capped(tmp_path):
    """Each prompt costs the prefill its padded length x num_samples rows, whatever max_tokens is."""
    with app_client(tmp_path, max_sample_prompt_tokens=1000) as c:
        _, sid = new_session(c)
        long_prompt = wire.ModelInput.from_tokens(list(b"x" * 250)).to_json_dict()
        short = sample_body(1, 1, 1)["model_inputs"][0]
        body = {"model_inputs": [long_prompt] * 2 + [short], "num_samples": 2, "sampling_params": {"max_tokens": 1}}
        err = error_of(post(c, sid, "sample", body), 400)
        assert err["param"] == "model_inputs"
        assert "3 prompts x 2 samples x 250 tokens (the longest prompt) = 1500 prompt tokens" in err["message"]
        assert "limit is 1000 per request (max_sample_prompt_tokens)" in err["message"]
        ok = {**body, "model_inputs": [long_prompt] * 2}  # 2 x 2 x 250 = 1000
        assert wait(c, sid, "sample", submit(c, sid, "sample", ok)["id"])["status"] == wire.OperationStatus.COMPLETED
    assert parse_limits(["max_sample_prompt_tokens=5e5"]) == {"max_sample_prompt_tokens": 500000}


def test_live_resources_and_sessions_are_capped(tmp_path):
    with app_client(tmp_path, max_live_resources=2, max_live_sessions=2, full_session_cap=2) as c:
        tiny = {"base_model": "rlnb/tiny"}
        rids = [c.post("/model-resources", json=tiny).json()["id"] for _ in range(2)]
        err = error_of(c.post("/model-resources", json=tiny), 429)
        assert "max_live_resources" in err["message"]
        sids = [c.post("/training-sessions", json={"model_resources_id": rids[0]}).json()["id"] for _ in range(2)]
        running(c, sids[0])  # stopped while its model is built it would be STOPPING, its slot held until the build ends
        assert (
            "max_live_sessions"
            in error_of(c.post("/training-sessions", json={"model_resources_id": rids[1]}), 429)["message"]
        )
        c.post(f"/training-sessions/{sids[0]}/stop")
        assert c.post("/training-sessions", json={"model_resources_id": rids[1]}).status_code == 200
        c.post(f"/model-resources/{rids[0]}/stop", params={"force": "true"})
        assert c.post("/model-resources", json=tiny).status_code == 200


def test_a_sessions_label_and_metadata_are_capped(tmp_path):
    """A 30 MB ``display_name`` (or W&B metadata) was kept for good, in memory and in the state journal."""
    with app_client(tmp_path, max_label_bytes=100) as c:
        rid = c.post("/model-resources", json={"base_model": "rlnb/tiny"}).json()["id"]
        big = {"display_name": "é" * 51}  # 102 bytes of UTF-8 in 51 characters
        err = error_of(c.post("/training-sessions", json={"model_resources_id": rid, **big}), 400)
        assert err["param"] == "display_name" and "102 bytes; the limit is 100 (max_label_bytes)" in err["message"]
        assert c.get("/training-sessions").json()["data"] == []  # nothing was reserved
        sid = c.post("/training-sessions", json={"model_resources_id": rid, "display_name": "é" * 50}).json()["id"]
        meta = {"metadata": {"wandb": {"url": "https://wandb.ai/" + "x" * 100}}}
        err = error_of(c.patch(f"/training-sessions/{sid}", json=meta), 400)
        assert err["param"] == "metadata" and "max_label_bytes" in err["message"]
        assert c.get(f"/training-sessions/{sid}").json()["display_name"] == "é" * 50  # unchanged
    assert parse_limits(["max_label_bytes=1024"]) == {"max_label_bytes": 1024}


@pytest.mark.parametrize(
    "body, param",
    [
        ('{"display_name": "run \\udcff"}', "display_name"),
        ('{"metadata": {"wandb": {"entity": "a\\ud800b"}}}', "metadata"),
        ('{"metadata": {"other": [1, {"x": "\\udcff"}]}}', "metadata"),  # metadata keeps fields it does not know
    ],
)
def test_a_lone_surrogate_in_a_sessions_label_is_a_400_not_a_session_no_answer_can_show(c, body, param):
    """JSON's escapes spell half a UTF-16 pair; the PATCH was kept, then answered 500, and so was every later GET of
    the session and every list of sessions, for every client of the server."""
    _, sid = new_session(c)
    r = c.patch(f"/training-sessions/{sid}", content=body, headers={"Content-Type": "application/json"})
    err = error_of(r, 400)
    assert err["param"] == param and "holds a lone surrogate" in err["message"]
    assert err["message"].startswith(param)  # named once (not "display_name: Value error, display_name ...")
    assert c.get(f"/training-sessions/{sid}").status_code == 200 and c.get("/training-sessions").status_code == 200
    with pytest.raises(ValueError, match="holds a lone surrogate"):  # rlnb's client refuses it before sending
        wire.UpdateSessionRequest(display_name="run \udcff")


# -- idempotency ----------------------------------------------------------------------------------


def test_an_idempotency_key_is_bound_to_its_body_and_may_not_be_empty(tmp_path):
    with app_client(tmp_path) as c:
        _, sid = new_session(c)
        submit(c, sid, "forward-backward", CE)
        first = submit(c, sid, "optim-step", {"adam_params": {"learning_rate": 1e-4}}, key="k1")
        assert submit(c, sid, "optim-step", {"adam_params": {"learning_rate": 1e-4}}, key="k1")["id"] == first["id"]
        err = error_of(post(c, sid, "optim-step", {"adam_params": {"learning_rate": 0.5}}, key="k1"), 409)
        assert err["param"] == "Idempotency-Key" and "already used with a different body" in err["message"]
        assert err["message"].count(first["id"]) == 1
        assert error_of(post(c, sid, "optim-step", {}, key=""), 400)["param"] == "Idempotency-Key"
        assert wait(c, sid, "optim-step", first["id"])["output"]["step"] == "1"
        assert c.get(f"/training-sessions/{sid}").json()["step"] == "1"  # the 0.5 step never ran
        err = error_of(post(c, sid, "forward-backward", CE, key="k1"), 409)  # another kind: "a optim-step", no remedy
        assert err["param"] == "Idempotency-Key" and err["message"] == (
            f"Idempotency-Key 'k1' was already used for optim-step operation {first['id']}; a retry must send the same "
            "request, and a new request needs a new key"
        )


# -- bad input is the caller's error, never INTERNAL_ERROR -----------------------------------------


def fb(tokens: list, targets: list | None = None, loss: dict | None = None) -> dict:
    sample = {
        "model_input": {"chunks": [{"encoded_text": {"tokens": tokens}}]},
        "loss_fn_inputs": {
            "target_tokens": {"data": targets if targets is not None else [1] * len(tokens), "dtype": "int64"},
            "weights": {"data": [1.0] * len(tokens), "dtype": "float32"},
        },
    }
    return {"samples": [sample], "loss": loss or {"type": "LOSS_TYPE_CROSS_ENTROPY"}}


def cfb(tokens: list, targets: list, grads: list) -> dict:
    body = fb(tokens, targets)
    del body["loss"]
    return {**body, "gradients": [{"data": grads, "dtype": "D_TYPE_FLOAT32"}]}


def weights_with(**fields: object) -> dict:
    """A cross-entropy body over two tokens whose float32 weights have ``fields`` over the valid ones."""
    body = fb([1, 2])
    body["samples"][0]["loss_fn_inputs"]["weights"].update(fields)
    return body


TARGETS = "samples.0.loss_fn_inputs.target_tokens"
"""Where a 400 names int64 ``target_tokens`` data that int64 cannot hold (1.5, 1e30)."""
BAD_INPUT = {
    "misspelt optimizer field": ("optim-step", {"adam_params": {"learning_rat": 0.1}}, "adam_params.learning_rat"),
    "misspelt sampling field": ("sample", {**sample_body(1, 1, 2), "sampling_params": {"temperatur": 1.0}},
                                "sampling_params.temperatur"),
    "bool learning rate": ("optim-step", {"adam_params": {"learning_rate": True}}, "adam_params.learning_rate"),
    "bool num_samples": ("sample", {**sample_body(1, 1, 2), "num_samples": True}, "num_samples"),
    "empty stop string": ("sample", sample_body(1, 1, 2, stop=["x", ""]), "sampling_params.stop.1"),
    "top_k below -1": ("sample", {**sample_body(1, 1, 2), "sampling_params": {"top_k": -2}}, "sampling_params.top_k"),
    "top_k past int32": ("sample", {**sample_body(1, 1, 2), "sampling_params": {"top_k": 2**31}},
                         "sampling_params.top_k"),
    "max_tokens past int32": ("sample", {**sample_body(1, 1, 2), "sampling_params": {"max_tokens": 2**31}},
                              "sampling_params.max_tokens"),
    "token 2^63-1": ("forward-backward", fb([1, 2**63 - 1, 3]), None),
    "token 1e30": ("forward-backward", fb([1, 1e30, 3]), "samples.0.model_input.chunks.0.encoded_text.tokens.1"),
    "sampled token 2^63-1": ("sample", {**sample_body(1, 1, 2), "model_inputs": [
        {"chunks": [{"encoded_text": {"tokens": [2**63 - 1]}}]}]}, None),
    "target 1e30": ("forward-backward", fb([1, 2, 3], [1e30, 2, 3]), TARGETS),  # int64 data no int64 holds
    "cfb target out of range": ("custom-forward-backward", cfb([1, 2, 3], [1, 999999, 3], [0.1] * 3), None),
    "cfb negative target": ("custom-forward-backward", cfb([1, 2, 3], [1, -5, 3], [0.1] * 3), None),
    "cfb target 1e30": ("custom-forward-backward", cfb([1, 2, 3], [1e30, 2, 3], [0.1] * 3), TARGETS),
    "cfb targets too short": ("custom-forward-backward", cfb([1, 2, 3], [1, 2], [0.1] * 3), None),
    "cfb gradients too short": ("custom-forward-backward", cfb([1, 2, 3], [1, 2, 3], [0.1] * 2), None),
    "ppo params on cross-entropy": ("forward-backward", fb([1, 2], loss={
        "type": "LOSS_TYPE_CROSS_ENTROPY", "ppo_params": {"clip_low_threshold": 0.8}}), "loss.ppo_params"),
    "grpo params on ppo": ("forward-backward", fb([1, 2], loss={
        "type": "LOSS_TYPE_PPO", "grpo_params": {"beta": 0.1}}), "loss.grpo_params"),
    # the reference marks dro_params required (its beta has no default): it was accepted, then failed INVALID_INPUT
    "dro without its params": ("forward-backward", fb([1, 2], loss={"type": "LOSS_TYPE_DRO"}), "loss.dro_params"),
    # both were accepted, then failed INVALID_INPUT once they ran
    "unspecified loss type": ("forward-backward", fb([1, 2], loss={"type": "LOSS_TYPE_UNSPECIFIED"}), "loss.type"),
    "no samples": ("forward-backward", {**fb([1, 2]), "samples": []}, "samples"),
    "cfb no samples": ("custom-forward-backward", {**cfb([1, 2], [1, 2], [0.1] * 2), "samples": []}, "samples"),
    "bool clip threshold": ("forward-backward", fb([1, 2], loss={
        "type": "LOSS_TYPE_PPO", "ppo_params": {"clip_low_threshold": True}}), "loss.ppo_params.clip_low_threshold"),
    "bool weight": ("forward-backward", {**fb([1, 2]), "samples": [{**fb([1, 2])["samples"][0], "loss_fn_inputs": {
        "target_tokens": {"data": [1, 1], "dtype": "int64"}, "weights": {"data": [True, 1.0], "dtype": "float32"}}}]},
        "samples.0.loss_fn_inputs.weights.data.0"),
    # the engine reads a tensor past the wire's rules again (tests/engine/test_hostile_inputs.py): these never reach it
    "text weight": ("forward-backward", weights_with(data=["x", 1.0]), "samples.0.loss_fn_inputs.weights.data.0"),
    "float16 weights": ("forward-backward", weights_with(dtype="float16"), "samples.0.loss_fn_inputs.weights.dtype"),
    "2-D weights": ("forward-backward", weights_with(shape=[2, 1]), "samples.0.loss_fn_inputs.weights"),
    "sparse weights": ("forward-backward", weights_with(sparse_crow_indices=[0, 2]),
                       "samples.0.loss_fn_inputs.weights"),
    "null weights": ("forward-backward", weights_with(data=None), "samples.0.loss_fn_inputs.weights.data"),
    "cfb text gradient": ("custom-forward-backward", cfb([1, 2], [1, 2], [0.1, "x"]), "gradients.0.data.1"),
    "target 1.5": ("forward-backward", fb([1, 2], [1.5, 1]), TARGETS),
}  # fmt: skip


@pytest.fixture(scope="module")
def c(tmp_path_factory):
    with app_client(tmp_path_factory.mktemp("ckpt")) as client:
        yield client


@pytest.fixture(scope="module")
def refusing(c) -> str:
    """One session for the cases answered 400: a refusal comes before the session runs anything, so they need no
    fresh session each (a session's model and optimizer cost a test 20 ms of CPU)."""
    return new_session(c)[1]


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_is_a_400_naming_the_field_or_invalid_input(c, refusing, case):
    kind, body, param = BAD_INPUT[case]
    if param is not None:
        assert error_of(post(c, refusing, kind, body), 400)["param"] == param
        return
    _, sid = new_session(c)
    r = post(c, sid, kind, body)
    assert r.status_code == 200, r.text
    env = wait(c, sid, kind, r.json()["id"])
    assert env["status"] == wire.OperationStatus.FAILED
    assert env["error"]["code"] == "TRAINING_OPERATION_ERROR_CODE_INVALID_INPUT"
    assert (
        "samples[0]" in env["error"]["message"]
        or "model_inputs[0]" in env["error"]["message"]
        or ("gradients[0]" in env["error"]["message"])
    )
    c.post(f"/training-sessions/{sid}/stop")


def test_a_diverged_sample_fails_non_finite_and_every_poll_answers(c):
    """NaN log-probs cannot be JSON: the sample fails NON_FINITE_LOSS instead of 500s on every poll."""
    _, sid = new_session(c)
    submit(c, sid, "forward-backward", CE)
    adam = {"learning_rate": 1e6, "grad_clip_norm": 0.0, "weight_decay": 0.0}
    sync = {"weight_sync_type": "WEIGHT_SYNC_TYPE_SYNCHRONOUS"}
    for kind, body in (("optim-step", {"adam_params": adam}), ("weights-sync", sync)):
        assert wait(c, sid, kind, submit(c, sid, kind, body)["id"])["status"] == wire.OperationStatus.COMPLETED
    env = wait(c, sid, "sample", submit(c, sid, "sample", sample_body(1, 2, 4))["id"])
    assert env["error"]["code"] == "TRAINING_OPERATION_ERROR_CODE_NON_FINITE_LOSS"
    assert "weights have diverged" in env["error"]["message"]


def test_a_body_that_is_not_json_is_a_400_that_says_so(c):
    r = c.post("/model-resources", content=b"{not json", headers={"content-type": "application/json"})
    error = error_of(r, 400)
    assert error["message"].startswith("the body is not valid JSON (") and error["param"] is None


# -- stopping -------------------------------------------------------------------------------------


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_a_stop_interrupts_a_running_sample(tmp_path):
    with app_client(tmp_path, max_sample_tokens=10**6) as c:
        _, sid = new_session(c, base_model="rlnb/small")
        op = submit(c, sid, "sample", sample_body(4, 64, 250))
        deadline = time.monotonic() + 30
        url = OPS.format(sid=sid, kind="sample") + f"/{op['id']}"
        while c.get(url).json()["status"] != wire.OperationStatus.RUNNING:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert c.post(f"/training-sessions/{sid}/stop").json()["status"] == wire.SessionStatus.STOPPING
        env = wait(c, sid, "sample", op["id"])
        assert env["error"]["code"] == "TRAINING_OPERATION_ERROR_CODE_SESSION_NOT_ACTIVE"  # not finished: stopped
        assert c.app.state.registry.settle(60)
        assert c.get(f"/training-sessions/{sid}").json()["status"] == wire.SessionStatus.STOPPED


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_stopped_sessions_let_their_models_and_threads_go(tmp_path):
    with app_client(tmp_path) as c:
        registry = c.app.state.registry
        refs, workers, before = [], [], set(session_threads())  # other tests' sessions may still run
        for i in range(6):
            rid, sid = new_session(c)
            submit(c, sid, "forward-backward", CE)
            wait(c, sid, "optim-step", submit(c, sid, "optim-step", {})["id"])
            refs.append(weakref.ref(registry.session(sid).backend))
            workers.append(set(session_threads()) - before)
            if i % 2:
                c.post(f"/training-sessions/{sid}/stop")
            c.post(f"/model-resources/{rid}/stop", params={"force": "true"})  # stops the session with it
            view = c.get(f"/training-sessions/{sid}").json()
            assert view["status"] == wire.SessionStatus.STOPPED and view["step"] == "1"  # the last view is kept
        assert registry.settle(30)  # backends close on threads of their own: a stop answers at once
        gc.collect()
        assert [r() for r in refs] == [None] * 6
        assert all(workers) and set(session_threads()) <= before


def session_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("rlnb-") and t.name != "rlnb-reaper"]


# -- presigned download links ---------------------------------------------------------------------


def test_download_links_are_signed_for_one_file_expire_and_use_the_configured_address(tmp_path, peft):
    clock = Clock()
    with app_client(tmp_path, clock=clock, download_ttl=600, public_url="https://rl.example:9443") as c:
        rid = c.post("/model-resources", json={"base_model": "rlnb/tiny", "lora_enabled": True}).json()["id"]
        sid = running(c, c.post("/training-sessions", json={"model_resources_id": rid}).json()["id"])["id"]
        cid = wait(c, sid, "inference-checkpoint", submit(c, sid, "inference-checkpoint")["id"])["output"][
            "checkpoint"
        ]["id"]

        def links(variant: str, host: str = "testserver") -> dict[str, str]:
            r = c.get(f"/checkpoints/{cid}/download", params={"variant": variant}, headers={"Host": host})
            return {f["filename"]: f["url"] for f in r.json()["data"]}

        merged, adapter = links("CHECKPOINT_VARIANT_MERGED", host="evil.example"), links("CHECKPOINT_VARIANT_ADAPTER")
        assert all(u.startswith("https://rl.example:9443/v1/rl/checkpoints/") for u in [*merged.values()])
        assert c.get(merged["config.json"]).status_code == 200
        # the adapter link's signature does not open the merged variant, nor another file
        swapped = adapter["adapter_config.json"].replace("/files/adapter/", "/files/merged/")
        assert c.get(swapped).status_code == 403
        other = merged["config.json"].replace("/config.json?", "/model.safetensors?")
        assert c.get(other).status_code == 403
        # checkpoints outlive their session and resource: a link works until it expires
        c.post(f"/model-resources/{rid}/stop", params={"force": "true"})
        assert c.get(merged["config.json"]).status_code == 200
        clock.now += 601
        err = error_of(c.get(merged["config.json"]), 403)
        assert "expired" in err["message"]
        assert c.get(links("CHECKPOINT_VARIANT_MERGED")["config.json"]).status_code == 200  # a new link works


def test_limits_are_settings_and_command_line_flags():
    assert parse_limits(["max_body_bytes=1e8", "max_live_sessions=8"]) == {
        "max_body_bytes": 100_000_000,
        "max_live_sessions": 8,
    }
    for bad, says in (("max_bodybytes=1", "the limits are"), ("max_body_bytes=x", "not a number"),
                      ("max_body_bytes=0", "integer in"), ("max_body_bytes=1.5", "integer in")):  # fmt: skip
        with pytest.raises(ValueError, match=says):
            parse_limits([bad])
    with pytest.raises(ValueError, match=r"max_sample_tokens must be an integer in \[1, 2147483647\]"):
        ServerSettings(max_sample_tokens=0)
    with pytest.raises(ValueError, match="public_url"):
        ServerSettings(public_url="rl.example")


@pytest.mark.parametrize(
    "name, value, high",
    [
        ("body_timeout", "1e300", 86400),  # a wait no timer holds: taken, and asyncio.wait_for overflowed at the body
        ("body_idle_timeout", "86401", 86400),
        ("payload_ttl", "1e9", 7 * 86400),
        ("max_body_bytes", str(2**63), 2**63 - 1),
        ("max_stop_strings", "1e12", 2**31 - 1),
        ("max_label_bytes", "9" * 5000, 2**63 - 1),  # past int()'s digits: read as a float (inf), refused the same
    ],
)
def test_every_limit_has_an_upper_bound_named_with_its_range(name, value, high):
    """``rlnb serve --limit body_timeout=1e300`` (or ``ServerSettings(max_body_bytes=2**64)``) was taken: no limit
    had an upper bound. Each has one; the error names the limit and its range, before anything starts; the bound
    itself is taken."""
    says = re.escape(f"{name} must be an integer in [1, {high}]")
    with pytest.raises(ValueError, match=says):
        parse_limits([f"{name}={value}"])
    with pytest.raises(ValueError, match=says):
        ServerSettings(**{name: high + 1})
    assert parse_limits([f"{name}={high}"]) == {name: high} and getattr(ServerSettings(**{name: high}), name) == high
    with pytest.raises(ValueError, match=r"reap_interval must be a finite number of seconds in \(0, 86400\]"):
        ServerSettings(reap_interval=1e300)


@pytest.mark.parametrize(
    "field, value, says",
    [
        ("op_delay", math.nan, r"op_delay must be a finite number of seconds in \[0, 86400\]"),  # passed `< 0`
        ("op_delay", math.inf, r"op_delay must be a finite number of seconds in \[0, 86400\]"),
        ("op_delay", -1.0, r"op_delay must be a finite number of seconds in \[0, 86400\]"),
        ("op_delay", 1e300, r"op_delay .*got 1e\+300"),  # every operation failed INTERNAL_ERROR: OverflowError
        ("fail_rate", math.nan, r"fail_rate must be in \[0, 1\)"),
        ("fail_rate", 1.0, r"fail_rate must be in \[0, 1\)"),
        ("reap_interval", math.nan, r"reap_interval must be a finite number of seconds in \(0, 86400\]"),
        ("reap_interval", 0.0, r"reap_interval must be a finite number of seconds in \(0, 86400\]"),
        ("result_offload_bytes", -5, r"result_offload_bytes must be None or an integer in \[0, 9223372036854775807\]"),
        (
            "result_offload_bytes",
            2**63,
            r"result_offload_bytes must be None or an integer in \[0, 9223372036854775807\]",
        ),
    ],
)
def test_settings_refuse_numbers_that_are_not_finite_or_out_of_range(field, value, says):
    with pytest.raises(ValueError, match=says):
        ServerSettings(**{field: value})


@pytest.mark.parametrize("field", ["state_dir", "checkpoint_dir"])
def test_an_empty_folder_option_is_refused_not_taken_for_the_working_folder(field, tmp_path, monkeypatch):
    """``create_app(state_dir="")`` (``--state-dir "$DIR"`` with DIR unset): ``Path("")`` is the working folder, and
    the registry, its lock and the signing key were written there."""
    from rlnb.server.app import create_app

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=f"{field} is empty \\(an unset variable\\?\\): give a folder, or None"):
        create_app(**{field: ""}, device="cpu")
    assert list(tmp_path.iterdir()) == []


def test_the_servers_token_is_not_in_its_settings_repr():
    """``repr(ServerSettings(token=...))`` (a notebook showing the settings, a traceback's locals) printed the bearer
    token in clear; the client side masks its key everywhere."""
    from rlnb.server import create_app

    settings = ServerSettings(token="sk-TOPSECRET-999")
    assert "sk-TOPSECRET-999" not in repr(settings) and settings.token == "sk-TOPSECRET-999"
    app = create_app(device="cpu", token="sk-TOPSECRET-999")
    assert "sk-TOPSECRET-999" not in repr(app.state.registry.settings)


def test_the_stop_string_bounds_are_the_servers_own_at_their_defaults_naming_the_one_past_them(c):
    """Raw HTTP, as a client other than rlnb's (the Together SDK, curl) sends it: the wire's bounds hold by default,
    each refusal a 400 in the API's error format, the over-long string named by its index ("a stop string" was
    not)."""
    _, sid = new_session(c)
    many = error_of(post(c, sid, "sample", sample_body(1, 1, 4, stop=["x"] * (wire.MAX_STOP_STRINGS + 1))), 400)
    assert many == {"message": f"sampling_params.stop has {wire.MAX_STOP_STRINGS + 1} strings; the limit is "
                               f"{wire.MAX_STOP_STRINGS} (max_stop_strings)", "type": "invalid_request_error",
                    "param": "sampling_params.stop", "code": None}  # fmt: skip
    long = ["x", "y", "z" * (wire.MAX_STOP_CHARS + 1)]
    err = error_of(post(c, sid, "sample", sample_body(1, 1, 4, stop=long)), 400)
    assert err["param"] == "sampling_params.stop.2" and err["message"] == (
        f"sampling_params.stop.2 has {wire.MAX_STOP_CHARS + 1} characters; the limit is {wire.MAX_STOP_CHARS} per "
        "stop string (max_stop_chars)"
    )
    at_bounds = ["x"] * (wire.MAX_STOP_STRINGS - 1) + ["z" * wire.MAX_STOP_CHARS]
    assert submit(c, sid, "sample", sample_body(1, 1, 4, stop=at_bounds))["status"]  # at the bounds: taken

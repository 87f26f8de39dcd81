"""`rlnb serve` behaves as the service where a client can tell, in process: the payload side channel,
optional gradient dtype, stable cursors, LoRA seeds, extend-expiry, inactivity expiry, checkpoint
variants, the long-poll extension."""

import json
import random
import threading
import time
from collections.abc import Iterator

import pytest
import torch
from fastapi.testclient import TestClient

from rlnb import samples, wire
from tests.support.server import Clock, app_client, new_session, running, submit, wait

OPS = "/training-sessions/{sid}/operations"


@pytest.fixture(scope="module")
def c(tmp_path_factory) -> Iterator[TestClient]:
    with app_client(tmp_path_factory.mktemp("ckpt")) as client:
        yield client


def grpo_batch(n: int, seed: int = 0) -> dict:
    """A GRPO forward-backward body of ``n`` 64-token samples with full-precision logprobs (~5 KB each)."""
    rng = random.Random(seed)
    batch = []
    for _ in range(n):
        prompt = [rng.randrange(256) for _ in range(8)]
        completion = [rng.randrange(256) for _ in range(57)]
        batch.append(samples.policy(prompt, completion, [rng.uniform(-8, -0.01) for _ in completion], rng.gauss(0, 1)))
    body = wire.ForwardBackwardBody(samples=batch, loss=wire.LossConfig(type="LOSS_TYPE_GRPO"), forward_only=True)
    return body.to_json_dict()


def upload(c: TestClient, sid: str, body: dict) -> str:
    got = c.post(f"/training-sessions/{sid}/payloads/upload-url")
    assert got.status_code == 200, got.text
    url = wire.PayloadUploadUrl.model_validate(got.json())
    put = c.put(url.upload_url, content=json.dumps(body, separators=(",", ":")).encode())  # presigned: no auth
    assert put.status_code == 200, put.text
    return url.payload_id


# -- the payload side channel ---------------------------------------------------------------------


@pytest.mark.slow  # long polls that wait on purpose (1-2 s)
def test_a_batch_sent_through_the_side_channel_trains_on_the_upload_not_the_stand_in(c):
    """256 GRPO samples (over 0.5 MiB: the SDK's threshold) give the same loss inline and uploaded, on two
    sessions with the same base weights; the 8-token stand-in alone gives another loss."""
    from rlnb.remote import payloads

    body = grpo_batch(256)
    raw = payloads.compact(body)
    assert len(raw) > wire.LARGE_PAYLOAD_BYTES
    _, inline_sid = new_session(c)
    _, channel_sid = new_session(c)
    inline = wait(c, inline_sid, "forward-backward", submit(c, inline_sid, "forward-backward", body)["id"])
    upload_part, stand_in = payloads.split("forward-backward", body)
    stand_in["payload_id"] = upload(c, channel_sid, upload_part)
    assert len(payloads.compact(stand_in)) < len(raw) / 5  # 8 tokens per sample
    via = wait(c, channel_sid, "forward-backward", submit(c, channel_sid, "forward-backward", stand_in)["id"])
    alone = wait(
        c, channel_sid, "forward-backward", submit(c, channel_sid, "forward-backward", payloads.shrink(body))["id"]
    )
    assert inline["status"] == via["status"] == wire.OperationStatus.COMPLETED, (inline, via)
    assert via["output"]["loss"] == pytest.approx(inline["output"]["loss"], rel=1e-6)
    assert via["output"]["metrics"]["loss/tokens"] == inline["output"]["metrics"]["loss/tokens"] == 256 * 57
    assert alone["output"]["metrics"]["loss/tokens"] < 256 * 8


def test_payload_references_are_checked(c):
    _, sid = new_session(c)
    _, other = new_session(c)
    body = wire.ForwardBackwardBody(
        samples=[samples.cross_entropy([1, 2, 3])], loss=wire.LossConfig(type="LOSS_TYPE_CROSS_ENTROPY")
    ).to_json_dict()
    key = {"Idempotency-Key": "k"}
    r = c.post(OPS.format(sid=sid) + "/forward-backward", json={**body, "payload_ref": "x"}, headers=key)
    assert r.status_code == 400 and r.json()["error"]["param"] == "payload_ref"  # unknown fields are refused
    r = c.post(OPS.format(sid=sid) + "/forward-backward", json={**body, "payload_id": "pl-nope"}, headers=key)
    assert r.status_code == 404 and r.json()["error"]["param"] == "payload_id"
    pid = wire.PayloadUploadUrl.model_validate(
        c.post(f"/training-sessions/{sid}/payloads/upload-url").json()
    ).payload_id
    r = c.post(OPS.format(sid=sid) + "/forward-backward", json={**body, "payload_id": pid}, headers=key)
    assert r.status_code == 409  # never uploaded
    r = c.post(OPS.format(sid=other) + "/forward-backward", json={**body, "payload_id": pid}, headers=key)
    assert r.status_code == 404  # another session's payload
    bad = upload(c, sid, {"samples": "not a list"})
    r = c.post(OPS.format(sid=sid) + "/forward-backward", json={**body, "payload_id": bad}, headers=key)
    assert r.status_code == 400 and r.json()["error"]["param"].startswith("payload.samples")
    url = c.post(f"/training-sessions/{sid}/payloads/upload-url").json()["upload_url"]
    assert c.put(url.split("?")[0] + "?sig=forged", content=b"{}").status_code == 403


def test_large_results_come_back_through_download_url(tmp_path):
    with app_client(tmp_path, result_offload_bytes=200) as c:
        _, sid = new_session(c)
        body = {"model_inputs": [wire.ModelInput.from_tokens([1, 2]).to_json_dict()], "num_samples": 4,
                "sampling_params": {"max_tokens": 16, "seed": 1}}  # fmt: skip
        env = wait(c, sid, "sample", submit(c, sid, "sample", body)["id"])
        assert set(env["output"]) == {"payload_id"}  # the results moved to the side channel
        url = c.post(f"/training-sessions/{sid}/payloads/{env['output']['payload_id']}/download-url")
        got = c.get(wire.PayloadDownloadUrl.model_validate(url.json()).download_url).json()
        assert [len(s["tokens"]) for s in got["results"][0]["sequences"]] == [16] * 4
        fb = {"samples": [samples.cross_entropy([1, 2, 3]).to_json_dict()], "loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}}
        small = wait(c, sid, "forward-backward", submit(c, sid, "forward-backward", fb)["id"])
        assert "payload_id" not in small["output"] and small["output"]["loss"] > 0  # small results stay inline


def test_a_stopped_sessions_large_results_are_served_whole_and_make_no_payload(tmp_path):
    with app_client(tmp_path, result_offload_bytes=200) as c:
        _, sid = new_session(c)
        body = {"model_inputs": [wire.ModelInput.from_tokens([1, 2]).to_json_dict()], "num_samples": 4,
                "sampling_params": {"max_tokens": 16, "seed": 1}}  # fmt: skip
        seen, unseen = (submit(c, sid, "sample", body)["id"] for _ in range(2))
        before = wait(c, sid, "sample", seen)["output"]
        registry = c.app.state.registry
        record = registry.sessions[sid].ops[unseen]  # finished, but never asked for (no GET offloads it)
        deadline = time.monotonic() + 60
        while record.env.status != wire.OperationStatus.COMPLETED:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert c.post(f"/training-sessions/{sid}/stop").status_code == 200
        payloads = registry.payloads
        for op in (seen, unseen):  # one offloaded before the stop, one never fetched before it
            env = c.get(OPS.format(sid=sid) + f"/sample/{op}").json()
            assert env["status"] == wire.OperationStatus.COMPLETED and "payload_id" not in env["output"]
            assert [len(s["tokens"]) for s in env["output"]["results"][0]["sequences"]] == [16] * 4
        assert payloads.held(sid) == 0 and not [p for p in payloads._payloads.values() if p.session_id == sid]
        gone = c.post(f"/training-sessions/{sid}/payloads/{before['payload_id']}/download-url")
        assert gone.status_code == 404


# -- requests the SDK may send --------------------------------------------------------------------


def test_gradient_dtype_is_optional(c):
    _, sid = new_session(c)
    sample = samples.cross_entropy([5, 6, 7, 8]).to_json_dict()
    body = {"samples": [sample], "gradients": [{"data": [0.5, -0.25, 1.0]}]}  # no dtype, as the SDK allows
    env = wait(c, sid, "custom-forward-backward", submit(c, sid, "custom-forward-backward", body)["id"])
    assert env["status"] == wire.OperationStatus.COMPLETED, env


def test_an_int64_gradient_with_a_fraction_is_a_400_naming_it(c):
    """A ``D_TYPE_INT64`` gradient holding 0.5 was taken as float32: the dtype or the data is wrong, so say so."""
    _, sid = new_session(c)
    sample = samples.cross_entropy([5, 6, 7, 8]).to_json_dict()
    body = {"samples": [sample], "gradients": [{"data": [1, 0.5, -2], "dtype": "D_TYPE_INT64"}]}
    r = c.post(OPS.format(sid=sid) + "/custom-forward-backward", json=body, headers={"Idempotency-Key": "int64"})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "gradients.0"
    assert "data[1] is 0.5, but dtype D_TYPE_INT64 holds integers in int64's range only" in err["message"]
    body["gradients"][0]["data"] = [1, 0, -2]  # integers: taken, as float32 values
    env = wait(c, sid, "custom-forward-backward", submit(c, sid, "custom-forward-backward", body)["id"])
    assert env["status"] == wire.OperationStatus.COMPLETED, env


@pytest.mark.parametrize(
    ("ids", "said"), [([6, 2.5, 8], "data[1] is 2.5"), ([6, 7, 2**63], "data[2] is 9.223372036854776e+18")]
)
def test_int64_loss_inputs_that_are_no_int64_are_a_400_naming_the_value(c, ids, said):
    """An int64 ``target_tokens`` holding 2.5 was taken (200), then the operation failed ``INVALID_INPUT`` naming no
    value, where a fractional ``D_TYPE_INT64`` gradient is a 400 naming it: now a 400 naming the field and the value."""
    _, sid = new_session(c)
    sample = samples.cross_entropy([5, 6, 7, 8]).to_json_dict()
    sample["loss_fn_inputs"]["target_tokens"]["data"] = ids
    body = {"samples": [sample], "loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}}
    r = c.post(OPS.format(sid=sid) + "/forward-backward", json=body, headers={"Idempotency-Key": f"ids-{ids[-1]}"})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"].startswith("samples.0.loss_fn_inputs.target_tokens"), err
    assert f"{said}, but dtype int64 holds integers in int64's range only" in err["message"], err


# -- lists, LoRA seeds, expiry --------------------------------------------------------------------


def test_a_cursor_stays_valid_when_its_object_stops_matching_the_filter(tmp_path):
    with app_client(tmp_path, full_session_cap=3) as c:  # three sessions on one resource, without LoRA
        rid = c.post("/model-resources", json={"base_model": "rlnb/tiny"}).json()["id"]
        ids = [c.post("/training-sessions", json={"model_resources_id": rid}).json()["id"] for _ in range(3)]
        assert all(running(c, sid)["status"] == wire.SessionStatus.RUNNING for sid in ids)
        query = {"model_resources_id": rid, "status": "TRAINING_SESSION_STATUS_RUNNING", "limit": 1}
        first = c.get("/training-sessions", params=query).json()
        assert [s["id"] for s in first["data"]] == [ids[2]] and first["meta"]["next_cursor"] == ids[2]
        c.post(f"/training-sessions/{ids[2]}/stop")  # the cursor's session no longer matches status=RUNNING
        second = c.get("/training-sessions", params={**query, "after": ids[2]})
        assert second.status_code == 200, second.text
        assert [s["id"] for s in second.json()["data"]] == [ids[1]]
        assert c.get("/training-sessions", params={**query, "after": "sess-unknown"}).status_code == 400


def _inference_files(c: TestClient, sid: str) -> dict[str, dict[str, bytes]]:
    """variant -> file name -> content, as downloaded through the presigned URLs."""
    ckpt = wait(c, sid, "inference-checkpoint", submit(c, sid, "inference-checkpoint")["id"])["output"]["checkpoint"]
    out = {}
    for variant in ("CHECKPOINT_VARIANT_MERGED", "CHECKPOINT_VARIANT_ADAPTER"):
        files = c.get(f"/checkpoints/{ckpt['id']}/download", params={"variant": variant}).json()["data"]
        out[variant] = {f["filename"]: c.get(f["url"]).content for f in files}
        assert all(len(out[variant][f["filename"]]) == int(f["size"]) for f in files)
    return out


def _tensors(files: dict[str, bytes]) -> dict[str, torch.Tensor]:
    from safetensors.torch import load

    return {k: v for name, raw in files.items() if name.endswith(".safetensors") for k, v in load(raw).items()}


def test_lora_seed_seeds_only_the_adapters(c, peft):
    rid = c.post("/model-resources", json={"base_model": "rlnb/tiny", "lora_enabled": True}).json()["id"]
    bodies = [{"model_resources_id": rid, "lora_config": {"seed": seed}} for seed in ("1", 2)]
    made = [c.post("/training-sessions", json=body) for body in bodies]
    sids = [running(c, r.json()["id"])["id"] for r in made]
    a, b = (_inference_files(c, sid) for sid in sids)
    merged_a, merged_b = _tensors(a["CHECKPOINT_VARIANT_MERGED"]), _tensors(b["CHECKPOINT_VARIANT_MERGED"])
    assert merged_a and merged_a.keys() == merged_b.keys()
    assert all(torch.equal(merged_a[k], merged_b[k]) for k in merged_a)  # B = 0 at first: merged = the same base
    adapter_a, adapter_b = _tensors(a["CHECKPOINT_VARIANT_ADAPTER"]), _tensors(b["CHECKPOINT_VARIANT_ADAPTER"])
    lora_a = [k for k in adapter_a if "lora_A" in k]
    assert lora_a and not any(torch.equal(adapter_a[k], adapter_b[k]) for k in lora_a)  # the seeds differ
    assert c.get(f"/training-sessions/{sids[0]}").json()["lora_config"]["seed"] == "1"


def test_merged_and_adapter_are_different_files(c, peft):
    rid = c.post("/model-resources", json={"base_model": "rlnb/tiny", "lora_enabled": True}).json()["id"]
    sid = running(c, c.post("/training-sessions", json={"model_resources_id": rid}).json()["id"])["id"]
    submit(c, sid, "forward-backward", {"samples": [samples.cross_entropy(list(b"adapter")).to_json_dict()],
                                        "loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}})  # fmt: skip
    submit(c, sid, "optim-step", {"adam_params": {"learning_rate": 1e-2}})
    files = _inference_files(c, sid)
    merged_files, adapter_files = files["CHECKPOINT_VARIANT_MERGED"], files["CHECKPOINT_VARIANT_ADAPTER"]
    assert "config.json" in merged_files and "adapter_config.json" in adapter_files
    assert not set(merged_files) & {"adapter_config.json", "adapter_model.safetensors"}
    merged, adapter = _tensors(merged_files), _tensors(adapter_files)
    assert merged and not any("lora" in k for k in merged)  # the full model, adapters folded in
    assert adapter and all("lora_" in k for k in adapter)  # the LoRA weights only
    assert any(adapter[k].abs().sum() > 0 for k in adapter if "lora_B" in k)  # trained


def test_extend_expiry_counts_from_now_and_never_moves_earlier(tmp_path):
    clock = Clock()
    with app_client(tmp_path, clock=clock) as c:
        rid = c.post("/model-resources", json={"base_model": "rlnb/tiny", "inactive_timeout": 600}).json()["id"]
        clock.now += 500  # 100 s left
        extended = c.post(f"/model-resources/{rid}/extend-expiry", json={"seconds": 300}).json()
        expected = wire.ModelResources.model_validate(extended).expires_at.timestamp()
        assert expected == pytest.approx(clock.now + 300)  # from now, not from the old expires_at (+ 300)
        shorter = c.post(f"/model-resources/{rid}/extend-expiry", json={"seconds": 60}).json()
        assert shorter["expires_at"] == extended["expires_at"]


def test_idle_resources_stop_and_their_sessions_expire(tmp_path):
    clock = Clock()
    with app_client(tmp_path, clock=clock, op_delay=0.3) as c:
        registry = c.app.state.registry
        rid, sid = new_session(c, inactive_timeout=300)
        busy = submit(c, sid, "optim-step", {})
        clock.now += 301
        assert registry.reap() == 0  # an operation is running: the resource never stops under it
        wait(c, sid, "optim-step", busy["id"])
        assert registry.reap() == 0  # its end was activity: 300 s more
        clock.now += 301
        assert registry.reap() == 1
        assert c.get(f"/model-resources/{rid}").json()["status"] == wire.ModelResourcesStatus.STOPPED
        assert c.get(f"/training-sessions/{sid}").json()["status"] == wire.SessionStatus.EXPIRED
        late = wait(c, sid, "optim-step", submit(c, sid, "optim-step", {})["id"])
        assert late["error"]["code"] == "TRAINING_OPERATION_ERROR_CODE_SESSION_NOT_ACTIVE"
        assert c.post("/training-sessions", json={"model_resources_id": rid}).status_code == 409


def _idle_session_expires(c, clock: Clock, why: str) -> str:
    """A session left idle past its ``inactive_timeout`` on ``clock`` becomes EXPIRED by the reaper's own turns,
    within 10 s (``why`` otherwise); its resource's id."""
    rid, sid = new_session(c, inactive_timeout=300)
    clock.now += 301
    deadline = time.monotonic() + 10
    while c.get(f"/training-sessions/{sid}").json()["status"] != wire.SessionStatus.EXPIRED:
        assert time.monotonic() < deadline, why
        time.sleep(0.02)
    return rid


def test_the_reaper_runs_by_itself(tmp_path):
    clock = Clock()
    with app_client(tmp_path, clock=clock, reap_interval=0.02) as c:
        rid = _idle_session_expires(c, clock, "the reaper did not expire the idle session")
        assert c.get(f"/model-resources/{rid}").json()["status"] == wire.ModelResourcesStatus.STOPPED


def test_the_reaper_lives_through_an_error_and_logs_it(tmp_path, caplog):
    """One exception in the reaper's turn ended its thread for good: idle sessions never expired again, and a
    journal that failed was never mended, for the rest of the server's life."""
    clock = Clock()
    with app_client(tmp_path, clock=clock, reap_interval=0.02) as c:
        registry = c.app.state.registry
        reap, calls = registry.reap, []

        def reap_once_failing() -> int:
            calls.append(1)
            if len(calls) == 1:
                raise RuntimeError("a reaper's bad turn")
            return reap()

        registry.reap = reap_once_failing
        _idle_session_expires(c, clock, "the reaper died at its first error")
    assert "a reaper's bad turn" in caplog.text


# -- the long-poll extension ----------------------------------------------------------------------


@pytest.mark.slow  # long polls that wait on purpose (1-2 s)
def test_long_poll_answers_when_the_status_changes(tmp_path):
    """Each poll waits up to 30 s: an answer well before that came from the change, however loaded the machine."""
    with app_client(tmp_path, op_delay=1.0) as c:
        _, sid = new_session(c)
        assert c.get("/supported-models").headers["rlnb-long-poll-max-wait"] == "30.0"
        t0 = time.monotonic()  # before the submission: the operation may start running before submit returns
        op = submit(c, sid, "optim-step", {})
        path = OPS.format(sid=sid) + f"/optim-step/{op['id']}"
        running = c.get(path, params={"wait": 30, "seen": wire.OperationStatus.PENDING}).json()
        assert running["status"] == wire.OperationStatus.RUNNING and time.monotonic() - t0 < 15
        held = c.get(
            path, params={"wait": 0.05, "seen": wire.OperationStatus.RUNNING}
        ).json()  # nothing changes in 50 ms of the 1 s the operation runs
        assert held["status"] == wire.OperationStatus.RUNNING
        done = c.get(path, params={"wait": 30, "seen": wire.OperationStatus.RUNNING}).json()
        finished = time.monotonic() - t0
        assert done["status"] == wire.OperationStatus.COMPLETED and 1.0 <= finished < 15  # held until it ended
        t1 = time.monotonic()
        assert c.get(path, params={"wait": 30}).json()["status"] == wire.OperationStatus.COMPLETED  # terminal: at once
        assert time.monotonic() - t1 < 15
        too_long = c.get(path, params={"wait": 31})
        assert too_long.status_code == 400 and too_long.json()["error"]["param"] == "wait"


@pytest.mark.slow  # long polls that wait on purpose (1-2 s)
def test_a_long_poll_does_not_hold_up_other_requests(tmp_path):
    """A poll held until the 2 s operation ends; another request is answered while the poll is still held."""
    with app_client(tmp_path, op_delay=2.0) as c:
        _, sid = new_session(c)
        op = submit(c, sid, "optim-step", {})
        path = OPS.format(sid=sid) + f"/optim-step/{op['id']}"
        running = c.get(path, params={"wait": 30, "seen": wire.OperationStatus.PENDING}).json()
        assert running["status"] == wire.OperationStatus.RUNNING
        result: dict = {}
        poll = threading.Thread(
            target=lambda: result.update(c.get(path, params={"wait": 30, "seen": wire.OperationStatus.RUNNING}).json())
        )
        poll.start()
        time.sleep(0.2)  # the poll is in
        assert c.get(f"/training-sessions/{sid}").status_code == 200
        assert poll.is_alive() and not result  # answered while the long poll waits for the operation's end
        poll.join(60)
        assert result["status"] == wire.OperationStatus.COMPLETED


def test_a_session_that_fails_to_build_frees_its_slot(c, monkeypatch):
    from rlnb.server import sessions as sessions_mod  # where create_session finds make_backend

    rid = c.post("/model-resources", json={"base_model": "rlnb/tiny"}).json()["id"]  # full weights: cap 1

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(sessions_mod, "make_backend", broken)
    failed = running(c, c.post("/training-sessions", json={"model_resources_id": rid}).json()["id"])
    assert (
        failed["status"] == wire.SessionStatus.ERROR
        and "(OSError): the server's models['rlnb/tiny'] ('tiny'): disk full" in failed["error"]["message"]
    )
    monkeypatch.undo()
    assert c.post("/training-sessions", json={"model_resources_id": rid}).status_code == 200

"""What a queued operation may hold (review41e F1): a datum longer than the model's context is a 400 at submission,
naming it and the range, not a 200 PENDING whose parsed body waits in the queue only to fail once it ran (a 30 MB
sample of 2.2 M tokens held ~300 MB until then); and the bytes of the bodies a session has queued are bounded
(``max_pending_bytes``), the side channel's uploads with them, as their count is (``max_pending_operations``)."""

import json
import uuid

import pytest

from rlnb import samples, wire
from rlnb.server.settings import ServerSettings
from tests.support.server import app_client, held, new_session, wait

OPS = "/training-sessions/{sid}/operations/{kind}"
FB = wire.OperationKind.FORWARD_BACKWARD
STAND_IN = {"loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}, "samples": []}
"""The inline body that names an upload; the upload's ``samples`` replace these."""
CONTEXT = 256
"""rlnb/tiny's context: supported-models' ``max_seq_length`` and ``context_length``."""


def post(c, sid: str, kind: str, body: dict):
    return c.post(OPS.format(sid=sid, kind=kind), json=body, headers={"Idempotency-Key": str(uuid.uuid4())})


def upload_url(c, sid: str) -> wire.PayloadUploadUrl:
    r = c.post(f"/training-sessions/{sid}/payloads/upload-url")
    assert r.status_code == 200, r.text
    return wire.PayloadUploadUrl.model_validate(r.json())


def refused(r, param: str | None) -> str:
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param, err
    return err["message"]


def fb(*samples_: wire.Sample) -> dict:
    return {"samples": [s.to_json_dict() for s in samples_], "loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}}


def pending(c, sid: str) -> int:
    s = c.app.state.registry.sessions[sid]
    return len(s.ops) - len(s.finished)


def test_a_training_sample_past_the_context_is_a_400_naming_it_before_it_is_queued(tmp_path):
    with app_client(tmp_path) as c:
        _, sid = new_session(c)
        models = c.get("/supported-models").json()["data"]
        tiny = next(m for m in models if m["base_model"] == "rlnb/tiny")["compute_configs"][0]
        assert tiny["trainer_config"]["lora"]["max_seq_length"] == CONTEXT
        fits, long = samples.cross_entropy([7] * (CONTEXT + 1)), samples.cross_entropy([7] * (CONTEXT + 2))
        said = refused(post(c, sid, "forward-backward", fb(fits, long)), "samples.1.model_input")
        assert said == (
            f"samples.1.model_input: {CONTEXT + 1} tokens exceed the model's context of {CONTEXT} (max_seq_length in "
            f"supported-models; allowed: 1..{CONTEXT} tokens)"
        )
        custom = {"samples": [long.to_json_dict()], "gradients": [{"data": [0.0] * (CONTEXT + 1)}]}
        refused(post(c, sid, "custom-forward-backward", custom), "samples.0.model_input")
        assert pending(c, sid) == 0 and not c.app.state.registry.sessions[sid].ops  # nothing was queued
        env = wait(c, sid, "forward-backward", post(c, sid, "forward-backward", fb(fits)).json()["id"])
        assert env["status"] == wire.OperationStatus.COMPLETED  # the context itself fits


def test_a_loss_input_or_gradient_past_the_context_is_a_400_naming_it(tmp_path):
    with app_client(tmp_path) as c:
        _, sid = new_session(c)
        short = samples.cross_entropy([1, 2, 3]).to_json_dict()
        short["loss_fn_inputs"]["weights"]["data"] = [1.0] * (CONTEXT + 1)
        body = {"samples": [short], "loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}}
        said = refused(post(c, sid, "forward-backward", body), "samples.0.loss_fn_inputs.weights")
        assert said.startswith(f"samples.0.loss_fn_inputs.weights: {CONTEXT + 1} values exceed the model's context")
        ok = samples.cross_entropy([1, 2, 3]).to_json_dict()
        custom = {"samples": [ok, ok], "gradients": [{"data": [0.5, 0.5]}, {"data": [0.0] * 10**5}]}
        said = refused(post(c, sid, "custom-forward-backward", custom), "gradients.1")
        assert said.startswith("gradients.1: 100000 values exceed") and f"allowed: 1..{CONTEXT} values" in said
        assert not c.app.state.registry.sessions[sid].ops


def test_a_prompt_past_the_context_is_a_400_naming_it(tmp_path):
    """A prompt that fits but leaves no room for ``max_tokens`` is no larger a body: it is still the engine's FAILED
    ``INVALID_INPUT`` (the SDK's own tests send ``max_tokens`` 512 to any model)."""
    with app_client(tmp_path) as c:
        _, sid = new_session(c)
        fits, long = ([7] * n for n in (CONTEXT, CONTEXT + 1))
        body = {"model_inputs": [wire.ModelInput.from_tokens(t).to_json_dict() for t in (fits, long)]}
        said = refused(post(c, sid, "sample", {**body, "sampling_params": {"max_tokens": 1}}), "model_inputs.1")
        assert said == (
            f"model_inputs.1: {CONTEXT + 1} tokens exceed the model's context of {CONTEXT} (context_length in "
            f"supported-models; allowed: 1..{CONTEXT} tokens)"
        )
        assert not c.app.state.registry.sessions[sid].ops
        no_room = {"model_inputs": body["model_inputs"][:1], "sampling_params": {"max_tokens": 1}}
        env = wait(c, sid, "sample", post(c, sid, "sample", no_room).json()["id"])
        assert env["status"] == wire.OperationStatus.FAILED, env
        assert (
            env["error"]["message"]
            == f"model_inputs[0]: {CONTEXT} tokens + max_tokens 1 exceed the model's context of {CONTEXT}"
        )


def test_the_bytes_of_queued_bodies_are_bounded_per_session(tmp_path, monkeypatch):
    body = fb(*[samples.cross_entropy([7] * 20)] * 2)
    size = len(json.dumps(body, separators=(",", ":")))  # as httpx sends it
    limit = 2 * size + size // 2
    with app_client(tmp_path, max_pending_bytes=limit, max_body_bytes=limit) as c, held(monkeypatch, FB) as gate:
        _, sid = new_session(c)
        sent = [post(c, sid, "forward-backward", body) for _ in range(2)]  # the first runs, held; the second waits
        assert [r.status_code for r in sent] == [200, 200]
        s = c.app.state.registry.sessions[sid]
        assert s.pending_bytes == 2 * size  # each body's bytes as they came
        r = post(c, sid, "forward-backward", body)
        assert r.status_code == 429, r.text
        assert r.headers["retry-after"] == "1"
        assert r.json()["error"]["message"] == (
            f"session {sid} has {2 * size:,} bytes of operation bodies queued or running; with this body's "
            f"{size:,} that passes the limit of {limit:,} (max_pending_bytes): wait for one to finish, then "
            "submit again"
        )
        assert pending(c, sid) == 2
        gate.set()
        for op in sent:
            assert wait(c, sid, "forward-backward", op.json()["id"])["status"] == wire.OperationStatus.COMPLETED
        assert s.pending_bytes == 0  # freed as they finished
        assert post(c, sid, "forward-backward", body).status_code == 200


def test_a_body_larger_than_max_pending_bytes_is_a_400_and_an_upload_counts_its_bytes(tmp_path, monkeypatch):
    """An inline body past ``max_pending_bytes`` is past ``max_body_bytes`` too (the settings refuse a smaller
    ``max_pending_bytes``): a 413 as it arrives. One whose upload takes it past is a 400, not the full queue's 429."""
    limits = {"max_pending_bytes": 3_000, "max_body_bytes": 3_000, "max_pending_operations": 1}
    with app_client(tmp_path, **limits) as c, held(monkeypatch, FB):
        _, sid = new_session(c)
        assert post(c, sid, "forward-backward", fb(samples.cross_entropy([1, 2]))).status_code == 200  # held
        big = fb(*[samples.cross_entropy([7] * 20)] * 10)  # ~3.4 kB
        assert post(c, sid, "forward-backward", big).status_code == 413
        u = upload_url(c, sid)
        assert c.put(u.upload_url, json={"samples": big["samples"]}).status_code == 200
        r = post(c, sid, "forward-backward", {**STAND_IN, "payload_id": u.payload_id})
        said = refused(r, "payload_id")  # the upload's bytes count
        assert said.startswith(f"this body (with payload {u.payload_id}) is ") and said.endswith("split it")
        assert pending(c, sid) == 1


def test_max_pending_bytes_defaults_to_the_largest_body_a_request_may_send(tmp_path, monkeypatch):
    """Unset, it is ``max_body_bytes`` + ``max_payload_bytes`` (an upload with the body naming it), whatever those are:
    a fixed 288 MiB made a raised ``max_body_bytes=512MiB`` refuse every body past 288 MiB (review41j L2)."""
    assert ServerSettings(device="cpu", max_body_bytes=512 << 20).pending_bytes() == 768 << 20
    assert ServerSettings(device="cpu", max_payload_bytes=1 << 30).pending_bytes() == (1 << 30) + (32 << 20)
    assert ServerSettings(device="cpu", max_body_bytes=5, max_pending_bytes=5).pending_bytes() == 5
    body = fb(*[samples.cross_entropy([7] * 100)] * 2)
    size = len(json.dumps(body, separators=(",", ":")))
    limits = {"max_body_bytes": 2 * size, "max_payload_bytes": size // 2}  # so queued bodies may hold 2.5 x size
    with app_client(tmp_path, **limits) as c, held(monkeypatch, FB) as gate:
        _, sid = new_session(c)
        assert [post(c, sid, "forward-backward", body).status_code for _ in range(2)] == [200, 200]
        r = post(c, sid, "forward-backward", body)
        assert r.status_code == 429, r.text
        assert f"passes the limit of {2 * size + size // 2:,} (max_pending_bytes)" in r.json()["error"]["message"]
        gate.set()


@pytest.mark.parametrize("body", [None, 1_000])
def test_a_max_pending_bytes_below_max_body_bytes_is_refused_when_the_settings_are_made(body):
    """A body ``max_body_bytes`` took by size that ``max_pending_bytes`` could never queue was a 400 at every send:
    such settings are refused, naming both fields and the range, before a server runs."""
    most = 32 << 20 if body is None else body
    given = {} if body is None else {"max_body_bytes": body}
    with pytest.raises(ValueError) as caught:
        ServerSettings(device="cpu", max_pending_bytes=most - 1, **given)
    assert str(caught.value) == (
        f"max_pending_bytes must be an integer in [{most}, {2**63 - 1}] (at least max_body_bytes, {most}), got "
        f"{most - 1}: a body max_body_bytes lets in could never be queued (a 400 at every send); raise it, or lower "
        "max_body_bytes"
    )
    assert ServerSettings(device="cpu", max_pending_bytes=most, **given).pending_bytes() == most

"""A 409 says whether a retry can cure it (``x-should-retry``): the SDK's and rlnb's retry policy retry every 409
unless told, so an extend-expiry on a stopped resource waited ~15 s of backoff for an answer that could not change,
while an operation sent while its session is CREATING is cured by waiting: that one says ``true``."""

import threading

import pytest

import rlnb
from rlnb import wire
from rlnb.remote.client import APIClient
from rlnb.remote.retry import RetryPolicy
from rlnb.server import sessions as sessions_module
from tests.support.server import DEADLINE, app_client

pytestmark = pytest.mark.slow  # each builds a model, and the second waits out backoff

KIND = wire.OperationKind.OPTIM_STEP


def _client(http, sent: list) -> APIClient:
    http.event_hooks["response"].append(lambda r: sent.append(r.status_code))
    return APIClient("http://testserver", None, http_client=http, retry=RetryPolicy(initial_delay=0.01, max_delay=0.05))


def test_a_conflict_no_retry_can_cure_comes_back_at_once(tmp_path):
    sent: list[int] = []
    with app_client(tmp_path, public_url="http://testserver") as http:
        c = _client(http, sent)
        rid = c.create_model_resources(wire.CreateModelResourcesRequest(base_model="rlnb/tiny")).id
        c.create_session(wire.StartTrainingSessionRequest(model_resources_id=rid))
        c.stop_model_resources(rid, force=True)
        sent.clear()
        with pytest.raises(rlnb.ConflictError, match="not ready"):
            c.extend_expiry(rid, 600)
        assert sent == [409]  # one request: no retry
        sent.clear()
        with pytest.raises(rlnb.ConflictError):
            c.create_session(wire.StartTrainingSessionRequest(model_resources_id=rid))
        assert sent == [409]


def test_an_operation_sent_while_creating_is_retried_until_the_session_runs(tmp_path, monkeypatch):
    built, real = threading.Event(), sessions_module.make_backend

    def slow(*args, **kwargs):
        built.wait(DEADLINE)
        return real(*args, **kwargs)

    monkeypatch.setattr(sessions_module, "make_backend", slow)
    sent: list[int] = []
    with app_client(tmp_path, public_url="http://testserver") as http:
        c = _client(http, sent)
        rid = c.create_model_resources(wire.CreateModelResourcesRequest(base_model="rlnb/tiny")).id
        sid = c.create_session(wire.StartTrainingSessionRequest(model_resources_id=rid)).id
        early = http.post(f"/training-sessions/{sid}/operations/optim-step", json={}, headers={"Idempotency-Key": "k"})
        assert early.status_code == 409 and early.headers["x-should-retry"] == "true"
        http.event_hooks["response"].append(lambda r: built.set() if r.status_code == 409 else None)
        sent.clear()
        op = c.submit_operation(sid, KIND, wire.OptimStepBody())
        assert sent[0] == 409 and sent[-1] == 200 and op.id


def test_a_payload_put_while_another_request_uploads_it_may_be_retried(tmp_path):
    with app_client(tmp_path, public_url="http://testserver") as http:
        rid = http.post("/model-resources", json={"base_model": "rlnb/tiny"}).json()["id"]
        sid = http.post("/training-sessions", json={"model_resources_id": rid}).json()["id"]
        url = wire.PayloadUploadUrl.model_validate(http.post(f"/training-sessions/{sid}/payloads/upload-url").json())
        http.app.state.registry.payloads.begin_upload(url.payload_id, None)  # another request is reading its body
        r = http.put(url.upload_url, content=b"{}")
        assert r.status_code == 409 and r.headers["x-should-retry"] == "true", r.text

"""How `rlnb serve` reads what a client puts in the query and the body, beyond the SDK's own spelling."""

import tracemalloc
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from rlnb import wire
from rlnb.server.errors import ServerError
from rlnb.server.json_body import read_json
from tests.support.server import app_client, new_session, submit


@pytest.fixture(scope="module")
def c(tmp_path_factory) -> Iterator[TestClient]:
    with app_client(tmp_path_factory.mktemp("ckpt")) as client:
        yield client


def statuses(r) -> set[str]:
    assert r.status_code == 200, r.text
    return {item["status"] for item in r.json()["data"]}


def test_a_status_filter_repeated_in_the_query_keeps_every_value(c):
    """``?status=A&status=B`` (how httpx, requests and curl send a list) used to filter by B alone, silently;
    the SDK's comma-joined ``?status=A,B`` and the repeated form now list the same."""
    stopped_rid, stopped = new_session(c)
    c.post(f"/training-sessions/{stopped}/stop")
    c.post(f"/model-resources/{stopped_rid}/stop")
    new_session(c)
    running, done = wire.SessionStatus.RUNNING, wire.SessionStatus.STOPPED
    both = {running.value, done.value}
    assert statuses(c.get("/training-sessions", params={"status": f"{running},{done}"})) == both
    assert statuses(c.get("/training-sessions", params={"status": [running.value, done.value]})) == both
    assert statuses(c.get("/training-sessions", params={"status": [done.value, running.value]})) == both
    ready, gone = wire.ModelResourcesStatus.READY, wire.ModelResourcesStatus.STOPPED
    assert statuses(c.get("/model-resources", params={"status": [gone.value, ready.value]})) == {ready, gone}
    r = c.get("/training-sessions", params={"status": [running.value, "RUNING"]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "status" and "RUNING" in r.text


def test_a_checkpoint_operation_refuses_a_body_field_instead_of_ignoring_it(c):
    """Checkpoint operations take no body; ``{"name": "best"}`` used to be accepted and ignored (a checkpoint
    named nothing), where every other body's unknown field is a 400 naming it. No body, or ``{}``, still works."""
    _, sid = new_session(c)
    for kind in (wire.OperationKind.INFERENCE_CHECKPOINT, wire.OperationKind.TRAINING_CHECKPOINT):
        url = f"/training-sessions/{sid}/operations/{kind}"
        r = c.post(url, json={"name": "best"}, headers={"Idempotency-Key": f"named-{kind}"})
        assert r.status_code == 400 and r.json()["error"]["param"] == "name", r.text
        assert c.post(url, headers={"Idempotency-Key": f"bare-{kind}"}).status_code == 200
        assert c.post(url, json={}, headers={"Idempotency-Key": f"empty-{kind}"}).status_code == 200
    c.post(f"/training-sessions/{sid}/stop")


def test_a_stop_or_payload_url_refuses_a_body_field_instead_of_ignoring_it(c):
    """A session's stop, a resource's stop and the payload URLs take no body, as the checkpoint operations do;
    a field in one was ignored without a word (``{"force": true}`` sent as a resource stop's body, where ``force``
    is a query parameter). No body, ``{}`` or ``null`` still works, as the SDK sends none."""
    rid, sid = new_session(c)
    upload = c.post(f"/training-sessions/{sid}/payloads/upload-url")
    assert upload.status_code == 200, upload.text
    pid = upload.json()["payload_id"]
    for url, field in {
        f"/training-sessions/{sid}/stop": "reason",
        f"/model-resources/{rid}/stop": "force",
        f"/training-sessions/{sid}/payloads/upload-url": "size",
        f"/training-sessions/{sid}/payloads/{pid}/download-url": "ttl",
    }.items():
        r = c.post(url, json={field: True})
        assert r.status_code == 400, (url, r.text)
        assert r.json()["error"]["param"] == field, (url, r.text)
    assert c.get(f"/training-sessions/{sid}").json()["status"] == wire.SessionStatus.RUNNING  # not stopped
    assert c.post(f"/training-sessions/{sid}/payloads/{pid}/download-url", json={}).status_code == 200
    assert c.post(f"/training-sessions/{sid}/payloads/upload-url", json=None).status_code == 200
    assert c.post(f"/training-sessions/{sid}/stop", json={}).status_code == 200
    assert c.post(f"/model-resources/{rid}/stop").status_code == 200


def test_a_key_given_twice_in_a_body_sent_without_a_content_type_is_named_too(c):
    """A FastAPI before 0.132 (pyproject allows 0.115) parses a body with no Content-Type as JSON: the check read only
    ``application/json`` bodies, and such a body made a resource of the last ``base_model`` again."""
    r = c.post("/model-resources", content=b'{"base_model": "rlnb/small", "base_model": "rlnb/tiny"}')
    assert r.status_code == 400 and "base_model is given 2 times" in r.json()["error"]["message"], r.text


def test_an_integer_too_long_under_a_long_key_is_named_by_a_cut_path(c):
    """The 400 for an integer no field holds echoed its whole path (a 100 KB key came back twice: 200 KB), where a key
    given twice is cut as every echoed value is (``named``)."""
    key = "k" * 100_000
    body = ('{"base_model": "rlnb/tiny", "' + key + '": ' + "9" * 5000 + "}").encode()
    r = c.post("/model-resources", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400 and "5000 digits" in r.json()["error"]["message"], r.text[:300]
    assert len(r.content) < 2_000


def test_a_key_given_twice_in_a_json_object_is_a_400_naming_it_not_the_last_value(tmp_path):
    """``json.loads`` keeps the last of two equal keys without a word: ``{"base_model": "rlnb/small", "base_model":
    "rlnb/tiny"}`` made a tiny resource, and a learning rate given twice ran with the second. Protobuf JSON, which the
    service speaks, refuses a duplicate field; so does `rlnb serve` now, inline and in an uploaded payload."""
    json_type = {"content-type": "application/json"}
    with app_client(tmp_path) as c:
        _, sid = new_session(c)
        r = c.post(
            "/model-resources", content=b'{"base_model": "rlnb/small", "base_model": "rlnb/tiny"}', headers=json_type
        )
        assert r.status_code == 400 and r.json()["error"]["param"] == "base_model", r.text
        assert "given 2 times" in r.json()["error"]["message"]
        assert [m["base_model"] for m in c.get("/model-resources").json()["data"]] == ["rlnb/tiny"]  # new_session's
        step = f"/training-sessions/{sid}/operations/optim-step"
        twice = b'{"adam_params": {"learning_rate": 1.0, "learning_rate": 0.001}}'
        r = c.post(step, content=twice, headers={**json_type, "Idempotency-Key": "twice"})
        assert r.status_code == 400 and r.json()["error"]["param"] == "adam_params.learning_rate", r.text
        assert c.app.state.registry.sessions[sid].ops == {}  # nothing was queued
        upload = c.post(f"/training-sessions/{sid}/payloads/upload-url").json()
        assert c.put(upload["upload_url"], content=b'{"samples": [], "samples": []}').status_code == 200
        stand_in = {"loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}, "samples": [], "payload_id": upload["payload_id"]}
        r = c.post(
            f"/training-sessions/{sid}/operations/forward-backward", json=stand_in, headers={"Idempotency-Key": "p"}
        )
        assert r.status_code == 400 and r.json()["error"]["param"] == "payload.samples", r.text
        r = c.post(
            step, content=b'{"adam_params": {"learning_rate": 0.001}}', headers={**json_type, "Idempotency-Key": "once"}
        )
        assert r.status_code == 200, r.text  # one of each is read as before


@pytest.mark.timeout(120)  # a hang guard: the one-pass search reads this body in a fraction of a second
def test_a_key_given_twice_at_the_end_of_a_huge_object_is_found_in_one_pass(c):
    """The repeated key was found by searching each key's earlier keys: a 2.6 MB body of 200,000 keys with its last
    key given again (under the 32 MiB body limit) held the server's event loop for about ten minutes."""
    n = 200_000
    body = "{" + ",".join(f'"k{i}":0' for i in range(n)) + f',"k{n - 1}":1}}'
    r = c.post("/model-resources", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["param"] == f"k{n - 1}", r.text
    assert "given 2 times" in r.json()["error"]["message"]


def test_a_key_given_twice_after_a_wide_object_deep_down_is_found_without_a_path_per_item():
    """Finding where the repeated key is copied each item's whole path: 30,000 keys 900 levels down (a 0.3 MB body)
    held a 900-key tuple for each, over 200 MB (200,000 keys: 1.7 GB; the 32 MiB body limit allows 15 times that)."""
    wide = "{" + ",".join(f'"k{i}":0' for i in range(30_000)) + "}"
    body = '{"a":' * 900 + "[" + wide + ',{"z":1,"z":2}]' + "}" * 900
    tracemalloc.start()
    try:
        with pytest.raises(ServerError) as refused:
            read_json(body)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "(1803 characters)" in str(refused.value.param)  # a.a....a.1.z, cut for the message
    assert peak < 64 << 20, f"{peak >> 20} MiB"


def test_long_poll_params_that_are_not_finite_or_would_be_ignored_are_400s_saying_so(c):
    _, sid = new_session(c)
    path = f"/training-sessions/{sid}/operations/optim-step/{submit(c, sid, 'optim-step', {})['id']}"
    for value in ("nan", "inf", "-inf"):
        err = c.get(path, params={"wait": value}).json()["error"]
        assert err["param"] == "wait" and "finite" in err["message"], err  # not "less than or equal to 30"
    r = c.get(path, params={"seen": wire.OperationStatus.PENDING})  # no wait: it would hold nothing
    assert r.status_code == 400 and r.json()["error"]["param"] == "seen", r.text
    assert "only with wait" in r.json()["error"]["message"]
    assert c.get(path, params={"wait": 0, "seen": wire.OperationStatus.PENDING}).status_code == 200


def test_a_query_parameter_given_twice_is_a_400_naming_it_not_the_last_value(tmp_path):
    with app_client(tmp_path) as c:
        rid, sid = new_session(c)
        asked = {
            "/training-sessions?limit=1&limit=50": "limit",
            "/model-resources?created_by=me&created_by=someone": "created_by",
            "/checkpoints?session_id=a&session_id=b": "session_id",
            f"/model-resources/{rid}/stop?force=true&force=false": "force",
        }
        for url, name in asked.items():
            r = c.request("POST" if url.endswith("false") else "GET", url)
            assert r.status_code == 400, (url, r.text)
            assert r.json()["error"]["param"] == name and "given 2 times" in r.json()["error"]["message"]
        assert c.get(f"/training-sessions/{sid}").json()["status"] == wire.SessionStatus.RUNNING  # not stopped
        both = c.get("/training-sessions", params=[("status", "TRAINING_SESSION_STATUS_RUNNING")] * 2)
        assert both.status_code == 200 and [s["id"] for s in both.json()["data"]] == [sid]  # status may repeat


def test_an_unknown_query_parameter_is_a_400_naming_it_not_ignored(c):
    rid, sid = new_session(c)
    _, other = new_session(c)
    r = c.get("/training-sessions", params={"model_resource_id": rid})  # misspelt: it listed every session
    assert r.status_code == 400 and r.json()["error"]["param"] == "model_resource_id", r.text
    assert "model_resources_id" in r.json()["error"]["message"]  # what the route reads
    r = c.post(f"/training-sessions/{sid}/stop", params={"force": "true"})  # a session's stop takes none
    assert r.status_code == 400 and r.json()["error"]["param"] == "force", r.text
    assert c.get(f"/training-sessions/{sid}").json()["status"] == wire.SessionStatus.RUNNING
    ids = [s["id"] for s in c.get("/training-sessions", params={"model_resources_id": rid}).json()["data"]]
    assert ids == [sid]  # the declared ones still work


def test_an_empty_filter_is_a_400_naming_it_not_an_empty_list(tmp_path):
    with app_client(tmp_path) as c:
        new_session(c)
        for url, name in {
            "/training-sessions?model_resources_id=": "model_resources_id",
            "/training-sessions?created_by=": "created_by",
            "/model-resources?created_by=%20": "created_by",
            "/checkpoints?session_id=": "session_id",
            "/checkpoints?base_model=": "base_model",
        }.items():
            r = c.get(url)  # each answered an empty list: no object has an empty id
            assert r.status_code == 400, (url, r.text)
            assert r.json()["error"]["param"] == name and "is empty" in r.json()["error"]["message"]
        assert len(c.get("/training-sessions").json()["data"]) == 1


def test_two_idempotency_key_headers_are_a_400_not_one_joined_key(c):
    _, sid = new_session(c)
    path = f"/training-sessions/{sid}/operations/optim-step"
    r = c.post(path, json={}, headers=[("Idempotency-Key", "a"), ("Idempotency-Key", "b")])
    assert r.status_code == 400 and r.json()["error"]["param"] == "Idempotency-Key", r.text  # ran as key "a, b"
    assert "given 2 times" in r.json()["error"]["message"]
    assert c.app.state.registry.sessions[sid].ops == {}  # nothing was queued

"""The payload side channel under a hostile client (issue 19 §1.1, §1.11, §1.16): uploads are capped per
session and in total, freed when used, when they expire and when their session stops; a stopped session
takes none; URLs expire, an upload URL takes one body and only uploads, a download URL only downloads;
a payload that nests too deeply is a 400. In process (FastAPI TestClient), each limit set small."""

import json
import threading
import uuid

import httpx
import pytest

from rlnb import samples, wire
from tests.support.server import Clock, app_client, new_session, submit, wait

CE = wire.ForwardBackwardBody(
    samples=[samples.cross_entropy(list(b"payloads"))], loss=wire.LossConfig(type="LOSS_TYPE_CROSS_ENTROPY")
).to_json_dict()
STAND_IN = {"loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}, "samples": []}
"""The inline body that names an upload; the upload's ``samples`` replace these."""


def upload_url(c, sid: str) -> wire.PayloadUploadUrl:
    r = c.post(f"/training-sessions/{sid}/payloads/upload-url")
    assert r.status_code == 200, r.text
    return wire.PayloadUploadUrl.model_validate(r.json())


def body_of(n: int) -> bytes:
    """A JSON object of about ``n`` bytes: a valid forward-backward upload padded by repeated samples."""
    sample = json.dumps(CE["samples"][0], separators=(",", ":"))
    count = max(1, n // (len(sample) + 1))
    return ('{"samples":[' + ",".join([sample] * count) + "]}").encode()


def error_of(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    return r.json()["error"]


def use(c, sid: str, payload_id: str) -> dict:
    r = c.post(
        f"/training-sessions/{sid}/operations/forward-backward",
        json={**STAND_IN, "payload_id": payload_id},
        headers={"Idempotency-Key": str(uuid.uuid4())},
    )
    assert r.status_code == 200, r.text
    return r.json()


def test_uploads_are_capped_per_session_and_in_total_and_freed_when_used(tmp_path):
    limits = {"max_payload_bytes": 4_000, "max_session_payload_bytes": 10_000, "max_total_payload_bytes": 14_000}
    with app_client(tmp_path, **limits) as c:
        store = c.app.state.registry.payloads
        _, a = new_session(c)
        _, b = new_session(c)
        body = body_of(3_000)
        held = [upload_url(c, a) for _ in range(3)]
        for u in held:
            assert c.put(u.upload_url, content=body).status_code == 200
        assert store.held(a) == 3 * len(body)
        err = error_of(c.put(upload_url(c, a).upload_url, content=body), 429)  # a 4th would pass 10 kB
        assert "max_session_payload_bytes" in err["message"] and a in err["message"]

        def chunked():  # no Content-Length: refused as the bytes arrive, before they are kept
            yield body[:2_000]
            yield body[2_000:]

        assert (
            "max_session_payload_bytes"
            in error_of(c.put(upload_url(c, a).upload_url, content=chunked()), 429)["message"]
        )
        assert store.held(a) == 3 * len(body)  # the refused uploads hold nothing
        assert c.put(upload_url(c, b).upload_url, content=body).status_code == 200
        err = error_of(c.put(upload_url(c, b).upload_url, content=body), 429)  # 5 x 3 kB would pass 14 kB
        assert "max_total_payload_bytes" in err["message"]
        env = wait(c, a, "forward-backward", use(c, a, held[0].payload_id)["id"])
        assert env["status"] == wire.OperationStatus.COMPLETED
        assert env["output"]["metrics"]["loss/tokens"] > 7  # the upload's
        assert store.held(a) == 2 * len(body)  # submitted: its bytes are freed
        assert c.put(upload_url(c, b).upload_url, content=body).status_code == 200  # room again
        err = error_of(c.post(f"/training-sessions/{a}/operations/forward-backward",
                              json={**STAND_IN, "payload_id": held[0].payload_id}, headers={"Idempotency-Key": "x"}),
                       409)  # fmt: skip
        assert "already used" in err["message"] and err["param"] == "payload_id"
        assert error_of(c.put(held[0].upload_url, content=body), 409)["message"].count("already used") == 1


def test_a_stopped_session_takes_no_uploads_and_frees_what_it_held(tmp_path):
    with app_client(tmp_path) as c:
        store = c.app.state.registry.payloads
        rid, sid = new_session(c)
        kept = upload_url(c, sid)
        assert c.put(kept.upload_url, content=body_of(50_000)).status_code == 200
        pending = upload_url(c, sid)  # asked for, never uploaded
        assert store.held(sid) > 0 and store.total > 0
        c.post(f"/training-sessions/{sid}/stop")
        assert store.held(sid) == 0 and store.total == 0
        err = error_of(c.post(f"/training-sessions/{sid}/payloads/upload-url"), 409)
        assert "TRAINING_SESSION_STATUS_STOPPED" in err["message"] and err["param"] == "session_id"
        assert "gone" in error_of(c.put(pending.upload_url, content=b"{}"), 404)["message"]
        assert error_of(c.put(kept.upload_url, content=b"{}"), 404)
        # a resource stopped with force stops its sessions: the same holds for them
        rid, other = new_session(c)
        assert c.put(upload_url(c, other).upload_url, content=body_of(10_000)).status_code == 200
        c.post(f"/model-resources/{rid}/stop", params={"force": "true"})
        assert store.total == 0
        assert c.post(f"/training-sessions/{other}/payloads/upload-url").status_code == 409


def test_payload_urls_expire_go_one_way_and_take_one_body(tmp_path):
    clock = Clock()
    with app_client(tmp_path, clock=clock, payload_ttl=600, result_offload_bytes=200) as c:
        registry = c.app.state.registry
        _, sid = new_session(c)
        up = upload_url(c, sid)
        body = json.dumps({"samples": CE["samples"]}).encode()
        assert c.put(up.upload_url, content=body).status_code == 200
        assert c.put(up.upload_url, content=body).status_code == 200  # a retry of the same bytes (answer lost)
        other = error_of(c.put(up.upload_url, content=body.replace(b"1", b"2")), 409)
        assert "already uploaded with other bytes" in other["message"]
        assert "not the download URL" in error_of(c.get(up.upload_url), 403)["message"]  # an upload URL only uploads
        down = c.post(f"/training-sessions/{sid}/payloads/{up.payload_id}/download-url").json()["download_url"]
        assert json.loads(c.get(down).content) == json.loads(body)
        assert "not the upload URL" in error_of(c.put(down, content=b"{}"), 403)["message"]
        # an offloaded result: its download URL expires, a new one works
        sample = {"model_inputs": [wire.ModelInput.from_tokens([1, 2]).to_json_dict()], "num_samples": 4,
                  "sampling_params": {"max_tokens": 16}}  # fmt: skip
        env = wait(c, sid, "sample", submit(c, sid, "sample", sample)["id"])
        pid = env["output"]["payload_id"]
        link = c.post(f"/training-sessions/{sid}/payloads/{pid}/download-url").json()["download_url"]
        late = upload_url(c, sid)
        clock.now += 601
        assert "expired" in error_of(c.get(link), 403)["message"]
        assert "expired" in error_of(c.put(late.upload_url, content=body), 403)["message"]
        fresh = c.post(f"/training-sessions/{sid}/payloads/{pid}/download-url").json()["download_url"]
        assert len(c.get(fresh).json()["results"][0]["sequences"]) == 4
        # an upload no operation used is dropped once it expires (the reaper sweeps); results stay
        registry.reap()
        assert registry.payloads.held(sid) == 0
        r = c.post(f"/training-sessions/{sid}/operations/forward-backward",
                   json={**STAND_IN, "payload_id": up.payload_id}, headers={"Idempotency-Key": "late"})  # fmt: skip
        assert error_of(r, 404)["param"] == "payload_id"
        assert c.get(c.post(f"/training-sessions/{sid}/payloads/{pid}/download-url").json()["download_url"]).is_success


@pytest.mark.parametrize("depth", [10_000, 100_000])
def test_a_payload_that_nests_too_deeply_is_a_400(tmp_path, depth):
    with app_client(tmp_path) as c:
        _, sid = new_session(c)
        up = upload_url(c, sid)
        assert c.put(up.upload_url, content=b'{"samples":' + b"[" * depth + b"]" * depth + b"}").status_code == 200
        r = c.post(f"/training-sessions/{sid}/operations/forward-backward",
                   json={**STAND_IN, "payload_id": up.payload_id}, headers={"Idempotency-Key": "deep"})  # fmt: skip
        err = error_of(r, 400)
        assert "nests JSON too deeply" in err["message"] and err["param"] == "payload_id"
        deep = b'{"base_model":' + b"[" * depth + b"]" * depth + b"}"
        r = c.post("/model-resources", content=deep, headers={"content-type": "application/json"})
        assert r.status_code == 400, r.text  # an inline body too: FastAPI's parser refuses it


def test_two_concurrent_submissions_naming_one_upload_run_it_once(tmp_path):
    with app_client(tmp_path) as c:
        store = c.app.state.registry.payloads
        _, sid = new_session(c)
        up = upload_url(c, sid)
        assert c.put(up.upload_url, content=body_of(2_000)).status_code == 200
        both_read = threading.Barrier(2, timeout=60)
        read = store.body

        def read_then_wait(session_id: str, payload_id: str) -> dict:
            obj = read(session_id, payload_id)  # both requests read the upload before either is submitted
            both_read.wait()
            return obj

        store.body = read_then_wait
        answers: list[httpx.Response] = []

        def post(key: str) -> None:
            body = {**STAND_IN, "payload_id": up.payload_id}
            path = f"/training-sessions/{sid}/operations/forward-backward"
            answers.append(c.post(path, json=body, headers={"Idempotency-Key": key}))

        threads = [threading.Thread(target=post, args=(k,)) for k in ("first", "second")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(r.status_code for r in answers) == [200, 409], [r.text for r in answers]
        refused = next(r for r in answers if r.status_code == 409).json()["error"]
        assert refused["param"] == "payload_id" and "already used" in refused["message"]
        ran = [op for op in c.app.state.registry.sessions[sid].ops.values() if op.kind == "forward-backward"]
        assert len(ran) == 1 and store.total == 0


def test_unused_upload_urls_are_capped_per_session_and_freed_when_used_or_expired(tmp_path):
    clock = Clock()
    with app_client(tmp_path, clock=clock, max_session_uploads=3, payload_ttl=600) as c:
        registry = c.app.state.registry
        _, sid = new_session(c)
        _, other = new_session(c)
        held = [upload_url(c, sid) for _ in range(3)]
        err = error_of(c.post(f"/training-sessions/{sid}/payloads/upload-url"), 429)  # one more record, without end
        assert "max_session_uploads" in err["message"]
        upload_url(c, other)  # another session's count is its own
        assert c.put(held[0].upload_url, content=body_of(500)).status_code == 200
        use(c, sid, held[0].payload_id)  # a used upload frees its place
        upload_url(c, sid)
        assert c.post(f"/training-sessions/{sid}/payloads/upload-url").status_code == 429
        clock.now += 601
        registry.reap()  # unused ones expire and free theirs
        assert len([upload_url(c, sid) for _ in range(3)]) == 3


def test_an_offloaded_result_goes_with_its_operation_past_max_kept_operations(tmp_path):
    """The payload of an offloaded result is freed when the operation is let go, and counted with its bytes while
    held: a running session's results stay within max_kept_operations, payloads included."""
    sample = {"model_inputs": [wire.ModelInput.from_tokens([1, 2, 3]).to_json_dict()],
              "sampling_params": {"max_tokens": 8}}  # fmt: skip
    with app_client(tmp_path, result_offload_bytes=64, max_kept_operations=2) as c:
        registry = c.app.state.registry
        _, sid = new_session(c)
        named = [
            wait(c, sid, "sample", submit(c, sid, "sample", sample)["id"])["output"]["payload_id"] for _ in range(6)
        ]
        held = {p.id for p in registry.payloads._payloads.values()}
        assert held == set(named[-2:])  # the two operations kept, their payloads; the four let go, none
        s = registry.sessions[sid]
        assert s.kept_bytes == sum(op.size for op in s.ops.values())
        assert all(op.size > len(op.answer) for op in s.ops.values())  # the offloaded copy and payload counted
        assert c.post(f"/training-sessions/{sid}/payloads/{named[0]}/download-url").status_code == 404
        link = c.post(f"/training-sessions/{sid}/payloads/{named[-1]}/download-url").json()["download_url"]
        assert len(c.get(link).json()["results"]) == 1
        assert c.post(f"/training-sessions/{sid}/stop").status_code == 200
        assert s.kept_bytes == sum(len(op.answer) for op in s.ops.values())  # served whole once it ended

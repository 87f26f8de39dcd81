"""``max_pending_operations``: a session's queued and running operations are bounded (each keeps its parsed body in
memory: 60 forward-backwards of 0.93 MB took the server from 403 to 804 MB, and nothing refused 1,227 of them). Past
it a submission is a 429 in the API's error body with ``Retry-After``; rlnb's client, which retries a 429, carries a
pipelined loop past the limit without an operation failing."""

import time
import uuid

import rlnb
from rlnb import samples, wire
from rlnb.remote.retry import RetryPolicy
from rlnb.server.ops import PENDING_RETRY
from tests.support.server import CE, DEADLINE, app_client, held, new_session, wait

OPS = "/training-sessions/{sid}/operations/{kind}"
FB = wire.OperationKind.FORWARD_BACKWARD


def post(c, sid: str, kind: str, body: dict, key: str | None = None):
    return c.post(OPS.format(sid=sid, kind=kind), json=body, headers={"Idempotency-Key": key or str(uuid.uuid4())})


def test_past_max_pending_operations_a_submission_is_a_429_with_retry_after(tmp_path, monkeypatch):
    with app_client(tmp_path, max_pending_operations=3) as c, held(monkeypatch, FB) as gate:
        _, sid = new_session(c)
        queued = [post(c, sid, "forward-backward", CE, key=f"k{i}") for i in range(3)]  # the first runs, held
        assert [r.status_code for r in queued] == [200] * 3
        refused = post(c, sid, "optim-step", {})
        assert refused.status_code == 429, refused.text
        assert refused.headers["retry-after"] == "1"
        err = refused.json()["error"]
        assert err["type"] == "rate_limit_error" and err["message"] == (
            f"session {sid} has 3 operations queued or running; the limit is 3 (max_pending_operations): wait for "
            "one to finish, then submit again"
        )
        again = post(c, sid, "forward-backward", CE, key="k0")  # a retry of a queued one is its answer, not a 429
        assert again.status_code == 200 and again.json()["id"] == queued[0].json()["id"]
        gate.set()
        for r in queued:
            assert wait(c, sid, "forward-backward", r.json()["id"])["status"] == wire.OperationStatus.COMPLETED
        late = post(c, sid, "optim-step", {})
        assert late.status_code == 200, late.text
        assert wait(c, sid, "optim-step", late.json()["id"])["output"]["step"] == "1"  # the refused one never ran


def test_an_rlnb_client_pipelining_past_the_limit_completes_every_operation(tmp_path, monkeypatch):
    batch = [samples.cross_entropy(list(b"pipelined"))]
    asked: list[float] = []  # each retry's wait, 0.1 s here (the server's 1 s idled the test 2 s), 50 of them: 5 s,
    retry = RetryPolicy(max_retries=50, pause=lambda seconds: asked.append(seconds) or time.sleep(0.1))  # as 5 of 1 s
    with (
        app_client(tmp_path, max_pending_operations=2) as c,
        rlnb.connect("http://testserver", base_model="rlnb/tiny", http_client=c, record=False, retry=retry) as s,
    ):
        s.forward_backward(batch).result(DEADLINE)  # warmed up: an operation then takes milliseconds, not seconds
        statuses: list[int] = []
        with held(monkeypatch, FB) as gate:  # the first two stay pending until the client meets the limit

            def seen(r) -> None:
                statuses.append(r.status_code)
                if r.status_code == 429:
                    gate.set()

            c.event_hooks["response"].append(seen)
            ops = [s.forward_backward(batch) for _ in range(6)]
            losses = [op.result(DEADLINE).loss for op in ops]
        assert len(losses) == 6 and all(loss > 0 for loss in losses)
        assert 429 in statuses  # the client met the limit, and retried after the wait the server asked for
        assert asked and set(asked) == {PENDING_RETRY}, asked

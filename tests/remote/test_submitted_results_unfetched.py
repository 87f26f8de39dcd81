"""An operation POST answered COMPLETED (an Idempotency-Key retry that reached an operation already done) whose
offloaded result could not be fetched (storage down a moment): the envelope was taken for unreadable, so the POST and
the download were sent 3 times, and the operation failed "the server took the POST and may run this forward-backward:
its answer could not be read", ``earlier_may_have_acted`` False. The envelope is the server's: the operation is
polled for its result (once more on a refusal, then up to ``max_retries`` polls in a row), its POST sent once."""

import logging

import httpx
import pytest

import rlnb
from rlnb import samples, wire
from rlnb.remote.client import APIClient
from tests.support.fake_api import BASE, FAST_POLL, KEY, FakeAPI, quick

BATCH = [samples.cross_entropy(list(b"keep me"))]


def done_at_once(fails: int) -> tuple[FakeAPI, httpx.MockTransport]:
    """A fake API whose forward-backward POST answers COMPLETED with its result offloaded, and whose storage answers
    the first ``fails`` GETs 503."""
    fake = FakeAPI(ready_after=1, op_states=("COMPLETED",))
    fake.offload = True
    left = [fails]

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "storage.test" and request.method == "GET" and left[0]:
            left[0] -= 1
            return httpx.Response(503, json={"error": {"message": "storage down", "type": "unavailable"}})
        return fake(request)

    return fake, httpx.MockTransport(handler)


def session(transport: httpx.MockTransport, retries: int = 2) -> rlnb.Session:
    return rlnb.connect(BASE, api_key=KEY, transport=transport, base_model="org/model-a", record=False, **FAST_POLL,
                        **quick({"max_retries": retries}))  # fmt: skip


def test_a_completed_submission_whose_result_storage_refuses_a_moment_is_polled_for_it_posted_once():
    fake, transport = done_at_once(fails=3)  # the submission's download: 1 try and 2 retries
    with session(transport) as s:
        result = s.forward_backward(BATCH).result(30)
    assert result.loss == 99.0 and len(result.loss_fn_outputs) == 1
    assert len(fake.calls("POST", "/operations/forward-backward")) == 1
    assert fake.calls("GET", "/operations/forward-backward/")  # the poll that fetched it


def test_one_whose_result_never_comes_fails_saying_it_ran_posted_once():
    fake, transport = done_at_once(fails=10**6)
    with session(transport) as s, pytest.raises(rlnb.OperationFailed) as info:
        s.forward_backward(BATCH).result(30)
    said = str(info.value)
    assert "is TRAINING_OPERATION_STATUS_COMPLETED, but its result's payload" in said and "503 storage down" in said
    assert "(it ran on the server; its result could not be fetched, 3 times in a row)" in said
    assert "may run" not in said and "could not be read" not in said
    assert len(fake.calls("POST", "/operations/forward-backward")) == 1


def test_the_client_hands_back_the_operation_running_without_its_result(caplog):
    """``APIClient.submit_operation`` alone: the envelope comes back RUNNING, for ``get_operation`` to fetch."""
    caplog.set_level(logging.INFO, logger="rlnb")
    fake, transport = done_at_once(fails=3)
    rid = fake.add_resource({"adam": {}})
    sid = fake.add_session(rid)
    body = wire.ForwardBackwardBody(samples=BATCH, loss=wire.LossConfig(type="LOSS_TYPE_CROSS_ENTROPY"))
    kind = wire.OperationKind.FORWARD_BACKWARD
    with APIClient(BASE, KEY, transport=transport, **quick({"max_retries": 2})) as c:
        env = c.submit_operation(sid, kind, body)
        assert (env.status, env.output) == (wire.OperationStatus.RUNNING, None)
        done = c.get_operation(sid, kind, env.id)
    assert done.status == wire.OperationStatus.COMPLETED and done.output.loss == 99.0
    assert len(fake.calls("POST", "/operations/forward-backward")) == 1
    assert f"forward-backward {env.id} is TRAINING_OPERATION_STATUS_COMPLETED, but its result's payload" in caplog.text

"""What a hostile (or newer) server sends in operation envelopes — a wrong id, a COMPLETED answer without
the output the API requires, no error at all — and error codes rlnb does not know, on operations, sessions
and model resources."""

import json
import math
import threading
import time
from collections.abc import Callable

import httpx
import pytest

import rlnb
from rlnb import samples, wire
from tests.support.fake_api import BASE, FAST_POLL, KEY, NOW, FakeAPI, quick

Edit = Callable[[dict], dict]


def session_on(edit_post: Edit | None = None, edit_get: Edit | None = None) -> rlnb.Session:
    """A session on the fake API whose operation answers (POST and GET) are rewritten by the edits."""
    fake = FakeAPI(ready_after=1)
    rid = fake.add_resource({"adam": {}})

    def handler(request: httpx.Request) -> httpx.Response:
        response = fake(request)
        edit = edit_post if request.method == "POST" else edit_get
        if "/operations/" not in request.url.path or edit is None or response.status_code != 200:
            return response
        return httpx.Response(200, json=edit(json.loads(response.content)), headers=response.headers)

    return rlnb.connect(
        BASE, api_key=KEY, transport=httpx.MockTransport(handler), model_resources_id=rid, ready_timeout=5,
        operation_timeout=30, record=False, **FAST_POLL, **quick({}),
    )  # fmt: skip


def failure(op: rlnb.Operation) -> rlnb.OperationFailed:
    try:
        op.result(timeout=10)
    except rlnb.OperationFailed as exc:
        return exc
    raise AssertionError(f"{op.kind} did not fail")


def test_an_envelope_with_an_empty_or_another_id_fails_its_operation_and_polling_goes_on():
    """An empty id used to kill the poll thread (ValueError): every later operation waited for ever, and
    close() raised it; another operation's id was polled instead, and its 404 blamed a server restart."""
    s = session_on(edit_post=lambda env: {**env, "id": ""} if env["id"] == "op-3" else env)
    first = s.forward_backward([samples.cross_entropy([1, 2, 3])])
    exc = failure(first)
    assert "id" in exc.message and "''" in exc.message and "Operation" in exc.message
    later = s.forward_backward([samples.cross_entropy([1, 2, 3])])
    assert later.result(timeout=10).loss == 2.5  # the poller is alive
    assert [t for t in threading.enumerate() if t.name == f"rlnb-poll-{s.id}"]
    s.close()

    other = session_on(edit_get=lambda env: {**env, "id": "op-999"})
    exc = failure(other.forward_backward([samples.cross_entropy([1, 2, 3])]))
    assert "op-999" in exc.message and "op-3" in exc.message and "restarted" not in exc.message
    other.close()


def test_a_completed_answer_without_the_output_the_api_requires_fails_naming_it():
    """A COMPLETED sample, forward-backward, weights-sync or checkpoint without ``output`` used to give
    ``result()`` None (then ``'NoneType' object has no attribute 'results'`` in the user's code). An
    optim-step may complete without one (the SDK says so); a custom-forward-backward's has no fields."""
    s = session_on(edit_get=lambda env: {k: v for k, v in env.items() if k != "output"})
    fb = s.forward_backward([samples.cross_entropy([1, 2, 3])])
    step = s.optim_step(rlnb.AdamParams(learning_rate=1e-3))
    sync = s.weights_sync()
    out = s.sample([[1, 2]], max_tokens=2)
    for op in (fb, sync, out):
        exc = failure(op)
        assert "COMPLETED" in exc.message and "output" in exc.message, exc.message
    assert step.result(timeout=10) is None
    s.close()


def test_an_error_code_rlnb_does_not_know_keeps_the_servers_code_and_message():
    """A FAILED envelope with a code newer than rlnb (as NON_FINITE_LOSS once was) used to fail with
    "polling failed: ... is not a valid Operation[...]: Input should be ..." and lose the server's message."""
    code = "TRAINING_OPERATION_ERROR_CODE_QUOTA_EXCEEDED"
    error = {"code": code, "message": "you are out of credits"}
    s = session_on(edit_get=lambda env: {"id": env["id"], "status": env["status"].replace("COMPLETED", "FAILED"),
                                         "error": error})  # fmt: skip
    exc = failure(s.forward_backward([samples.cross_entropy([1, 2, 3])]))
    assert exc.code == wire.OperationErrorCode.UNSPECIFIED
    assert code in exc.message and "you are out of credits" in exc.message and "polling failed" not in exc.message
    row = s.history.df.iloc[-1]
    assert row.error_code == wire.OperationErrorCode.UNSPECIFIED and code in row.error_message
    s.close()


def test_a_failed_answer_without_an_error_says_so_not_none_none():
    """Both members of a FAILED envelope's ``error`` are optional in the API; such a failure used to read
    ``forward-backward op-3 failed: None: None``."""
    s = session_on(edit_get=lambda env: {"id": env["id"], "status": env["status"].replace("COMPLETED", "FAILED")})
    exc = failure(s.forward_backward([samples.cross_entropy([1, 2, 3])]))
    assert "None" not in str(exc) and "no error code" in str(exc) and "op-3" in str(exc)
    assert exc.code is None and exc.message is None
    s.close()


def test_a_resource_or_session_error_code_rlnb_does_not_know_keeps_the_servers_reason():
    """A resource or session in ERROR with a code newer than rlnb's catalogue made ``connect`` fail with
    pydantic's "200 response is not a valid ModelResources: ... Input should be ..." and no word of why."""
    code = "MODEL_RESOURCES_ERROR_CODE_QUOTA_EXCEEDED"
    fake = FakeAPI(ready_after=1)
    fake.resource_fails = True

    def handler(request: httpx.Request) -> httpx.Response:
        response = fake(request)
        data = json.loads(response.content) if response.content else None
        if isinstance(data, dict) and data.get("error") and "code" in data["error"]:
            data["error"].update(code=code, message="your organisation has no GPU quota")
            return httpx.Response(response.status_code, json=data)
        return response

    with pytest.raises(rlnb.RlnbError) as info:
        rlnb.connect(BASE, api_key=KEY, transport=httpx.MockTransport(handler), base_model="org/model-a",
                     ready_timeout=5, record=False, **FAST_POLL, **quick({}))  # fmt: skip
    assert code in str(info.value) and "no GPU quota" in str(info.value) and "validation" not in str(info.value)

    view = wire.Session.model_validate({
        "id": "s", "status": wire.SessionStatus.ERROR, "base_model": "m", "model_resources_id": "r",
        "created_by": "u", "created_at": NOW, "updated_at": NOW,
        "error": {"code": "TRAINING_SESSION_ERROR_CODE_PREEMPTED", "message": "the node went away", "occurred_at": NOW},
    })  # fmt: skip
    assert view.error is not None and view.error.code == wire.SessionErrorCode.SESSION_FAILED
    assert "TRAINING_SESSION_ERROR_CODE_PREEMPTED" in view.error.message and "node went away" in view.error.message


def test_a_result_payload_that_cannot_be_fetched_is_named_not_taken_for_a_lost_operation():
    """A completed result naming a payload whose download-url answers 404 (it expired, or its session stopped
    meanwhile) used to fail the operation ``SESSION_NOT_ACTIVE``: "the server no longer knows this operation
    ... it may have restarted", though the server had just reported it COMPLETED."""
    fake = FakeAPI(ready_after=1)
    fake.offload = True
    rid = fake.add_resource({"adam": {}})

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/download-url"):
            return httpx.Response(404, json={"error": {"message": "payload not found", "type": "not_found"}})
        return fake(request)

    s = rlnb.connect(BASE, api_key=KEY, transport=httpx.MockTransport(handler), model_resources_id=rid,
                     ready_timeout=5, record=False, **FAST_POLL, **quick({}))  # fmt: skip
    exc = failure(s.forward_backward([samples.cross_entropy([1, 2, 3])]))
    assert exc.code != wire.OperationErrorCode.SESSION_NOT_ACTIVE and "restarted" not in exc.message
    assert "payload" in exc.message and "COMPLETED" in exc.message and "payload not found" in exc.message
    s.close()


def test_a_result_payload_gone_is_asked_for_once_more_and_taken_whole():
    """rlnb serve answers a stopped session's results whole (no payload): when the payload's download-url is a 404
    (the session stopped between the poll and the download), the operation failed though one more GET had it."""
    fake = FakeAPI(ready_after=1)
    fake.offload = True
    rid = fake.add_resource({"adam": {}})
    refused = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/download-url"):
            refused.append(request.url.path)
            for op in fake.ops.values():  # the result is now served whole, as rlnb serve does after a stop
                op.pop("offload", None)
            return httpx.Response(404, json={"error": {"message": "payload not found", "type": "not_found"}})
        return fake(request)

    s = rlnb.connect(BASE, api_key=KEY, transport=httpx.MockTransport(handler), model_resources_id=rid,
                     ready_timeout=5, record=False, **FAST_POLL, **quick({}))  # fmt: skip
    result = s.forward_backward([samples.cross_entropy([1, 2, 3])]).result(10)
    assert math.isfinite(result.loss) and len(refused) == 1
    s.close()


def test_close_on_an_unreachable_server_does_not_wait_for_a_poll_in_flight():
    """The stop cannot reach the server (connection refused) while a poll hangs on it: ``close()`` used to
    join the poll thread, so it waited for that GET to end (up to its deadline, 120 s by default), though
    it settles what is in flight without asking the server."""
    fake = FakeAPI(ready_after=1)
    fake.hold = True
    rid = fake.add_resource({"adam": {}})
    gone, released = threading.Event(), threading.Event()

    def handler(request: httpx.Request) -> httpx.Response:
        if not gone.is_set():
            return fake(request)
        if request.method == "GET":
            released.wait(10)  # a poll the dead server never answers
        raise httpx.ConnectError("refused", request=request)

    s = rlnb.connect(BASE, api_key=KEY, transport=httpx.MockTransport(handler), model_resources_id=rid,
                     ready_timeout=5, record=False, **FAST_POLL, **quick({"max_retries": 0}))  # fmt: skip
    op = s.forward_backward([samples.cross_entropy([1, 2, 3])])
    deadline = time.monotonic() + 5
    while op.status != wire.OperationStatus.RUNNING and time.monotonic() < deadline:
        time.sleep(0.005)
    gone.set()
    time.sleep(0.1)  # the next poll is in flight, hanging
    start = time.monotonic()
    with pytest.raises(rlnb.APIConnectionError):
        s.close()
    took = time.monotonic() - start
    released.set()
    assert took < 2, took
    assert failure(op).code == wire.OperationErrorCode.SESSION_NOT_ACTIVE

"""A remote step's forward-backward that fails at its POST without an API error (a transport's own exception), or
whose POST is answered with an earlier operation's id (it may never have run), fails the optim-step and weights-sync
of its step unsent (``rlnb._one_step``): sent, the optim-step counted a step on gradients that were not this
batch's. An operation outside the step is sent as ever."""

import time
from collections.abc import Callable

import httpx
import pytest

import rlnb
from rlnb import _one_step, samples, wire
from tests.support.fake_api import BASE, FAST_POLL, KEY, FakeAPI, quick

Handler = Callable[[httpx.Request], httpx.Response]
BATCH = [samples.cross_entropy([1, 2, 3])]
FAILED = wire.OperationStatus.FAILED


def one_remote_step(
    handler_for: Callable[[FakeAPI], Handler], answered: bool = True
) -> tuple[list[rlnb.Operation], list[str], int]:
    """A session on a fake API whose every request goes through ``handler_for(fake)``: a forward-backward, then one
    step (forward-backward, optim-step, weights-sync) in ``one_step``, then a forward-backward outside it, sent unless
    a POST before it got no answer (not ``answered``). The step's three operations, the paths POSTed, and the
    session's step."""
    fake, posted = FakeAPI(ready_after=1), []
    handler = handler_for(fake)

    def record(request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and "/operations/" in request.url.path:
            posted.append(request.url.path.rsplit("/", 1)[-1])
        return handler(request)

    rid = fake.add_resource({"adam": {}})
    with rlnb.connect(
        BASE, api_key=KEY, transport=httpx.MockTransport(record), model_resources_id=rid, ready_timeout=5,
        operation_timeout=20, record=False, **FAST_POLL, **quick({}),
    ) as s:  # fmt: skip
        s.forward_backward(BATCH).result(10)
        with _one_step.one_step():
            ops = [s.forward_backward(BATCH), s.optim_step(rlnb.AdamParams()), s.weights_sync()]
        after = s.forward_backward([samples.cross_entropy([4, 5])])
        s.wait(20)
        assert (after.status == wire.OperationStatus.COMPLETED) is answered  # the step's end broke nothing after it
        return ops, posted, s.step


def test_a_forward_backward_whose_post_raises_fails_the_rest_of_its_step_unsent():
    def handler_for(fake: FakeAPI) -> Handler:
        calls = []

        def handler(request: httpx.Request) -> httpx.Response:
            if request.method == "POST" and request.url.path.endswith("/forward-backward"):
                calls.append(1)
                if len(calls) == 2:
                    raise RuntimeError("proxy refused the request")
            return fake(request)

        return handler

    ops, posted, step = one_remote_step(handler_for)
    assert [op.status for op in ops] == [FAILED] * 3 and step == 0
    assert posted == ["forward-backward"] * 3  # the optim-step and weights-sync never POSTed
    with pytest.raises(rlnb.OperationFailed, match="could not be sent: RuntimeError: proxy refused"):
        ops[0].result(0)
    for op in ops[1:]:
        with pytest.raises(rlnb.OperationFailed, match="not sent: this step's forward-backward before it was not sent"):
            op.result(0)


def test_a_forward_backward_answered_with_an_earlier_id_fails_the_rest_of_its_step_unsent():
    """A server that deduplicates by body answered the step's forward-backward (the same batch as the one before it)
    with the earlier envelope: the optim-step was sent and applied the earlier gradients, or none, as this step."""

    def handler_for(fake: FakeAPI) -> Handler:
        posts: dict[bytes, httpx.Response] = {}

        def handler(request: httpx.Request) -> httpx.Response:
            if request.method == "POST" and request.url.path.endswith("/forward-backward"):
                if request.content not in posts:
                    posts[request.content] = fake(request)
                return posts[request.content]
            return fake(request)

        return handler

    ops, posted, step = one_remote_step(handler_for)
    assert [op.status for op in ops] == [FAILED] * 3 and step == 0
    assert posted == ["forward-backward"] * (3 + 5)  # asked again 5 times (max_retries), under its key; no optim-step
    with pytest.raises(rlnb.OperationFailed, match="with the id of an earlier operation"):
        ops[0].result(0)
    for op in ops[1:]:
        with pytest.raises(rlnb.OperationFailed, match="not run: this step's forward-backward before it failed, nor"):
            op.result(0)


MAYBE = "the server may have run it: its gradients would then be accumulated there"


def _answer_lost(request: httpx.Request) -> httpx.Response:
    raise httpx.ReadError("connection reset by peer", request=request)


def _never_sent(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


def _unreadable(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, text='{"id": "op-')  # a proxy cut the envelope short


def steps_forward_backward(tries: list[tuple[bool, Handler]]) -> Callable[[FakeAPI], Handler]:
    """``one_remote_step``'s ``handler_for``: the step's forward-backward (the session's second Idempotency-Key) at its
    n-th try (the last of ``tries`` for every later one) is run on the server first where ``tries[n]``'s ``runs`` and
    answered by its ``answer``; every other request is the fake's."""

    def handler_for(fake: FakeAPI) -> Handler:
        keys: list[str] = []
        tried: list[int] = []

        def handler(request: httpx.Request) -> httpx.Response:
            if request.method == "POST" and request.url.path.endswith("/forward-backward"):
                key = request.headers["Idempotency-Key"]
                keys.extend([key] if key not in keys else [])
                if keys.index(key) == 1:  # the step's
                    runs, answer = tries[min(len(tried), len(tries) - 1)]
                    tried.append(1)
                    if runs:
                        fake(request)
                    return answer(request)
            return fake(request)

        return handler

    return handler_for


@pytest.mark.parametrize(
    ("answer", "runs"),
    [(_answer_lost, True), (lambda r: httpx.Response(502, text="Bad Gateway"), True), (_unreadable, True),
     (_never_sent, False)],
    ids=["reset-after-run", "502-after-run", "unreadable-2xx", "refused"],
)  # fmt: skip
def test_a_forward_backward_whose_answer_is_lost_after_the_server_ran_it_says_its_gradients_may_stay(
    answer, runs, request
):
    """Every try of the step's forward-backward reaches the server, which runs it (once, by its Idempotency-Key), and
    loses its answer (no answer, a 502, a 2xx that cannot be read): its gradients are accumulated there and the next
    optim-step applies them with its own, so its error says so and the rest of its step says it failed, not that it
    was never sent. One never sent says neither."""
    handler_for = steps_forward_backward([(runs, answer)])
    ops, posted, step = one_remote_step(handler_for, answered=answer is not _answer_lost and runs)
    assert [op.status for op in ops] == [FAILED] * 3 and step == 0
    assert posted.count("optim-step") == 0
    with pytest.raises(rlnb.OperationFailed) as info:
        ops[0].result(0)
    assert (MAYBE in info.value.message) is runs, info.value.message
    assert ("next optim-step would apply them with its own" in info.value.message) is runs
    # a POST with no answer fails what is queued behind it unsent; a 5xx, the rest of its step alone
    unanswered = "not sent: the POST of an earlier operation got no answer"
    failed = "not run: this step's forward-backward before it failed"
    rest = {"reset-after-run": unanswered, "502-after-run": failed, "unreadable-2xx": failed}
    for op in ops[1:]:
        with pytest.raises(rlnb.OperationFailed, match=rest.get(request.node.callspec.id, unanswered)) as info:
            op.result(0)
        assert (MAYBE in info.value.message) is runs, info.value.message


@pytest.mark.parametrize(
    ("kind", "accumulates"),
    [(wire.OperationKind.CUSTOM_FORWARD_BACKWARD, True), (wire.OperationKind.FORWARD_BACKWARD, False)],
    ids=["custom-forward-backward", "forward-only"],
)  # fmt: skip
def test_a_custom_forward_backward_whose_answer_is_lost_says_so_and_a_forward_only_one_does_not(kind, accumulates):
    fake = FakeAPI(ready_after=1)

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path.endswith(f"/{kind}"):
            fake(request)
            return _answer_lost(request)
        return fake(request)

    rid = fake.add_resource({"adam": {}})
    with rlnb.connect(
        BASE, api_key=KEY, transport=httpx.MockTransport(handler), model_resources_id=rid, ready_timeout=5,
        operation_timeout=20, record=False, **FAST_POLL, **quick({}),
    ) as s:  # fmt: skip
        if kind == wire.OperationKind.CUSTOM_FORWARD_BACKWARD:
            body = wire.CustomForwardBackwardBody(samples=BATCH, gradients=[wire.GradientTensor(data=[0.1] * 3)])
            got: list[wire.Operation] = []
            s.backend.submit(kind, body, got.append)
            deadline = time.monotonic() + 20
            while not got or got[-1].status != FAILED:
                assert time.monotonic() < deadline, got
                time.sleep(0.01)
            message = got[-1].error.message if got[-1].error else ""
        else:
            with pytest.raises(rlnb.OperationFailed) as info:
                s.forward_backward(BATCH, forward_only=True).result(20)
            message = info.value.message
    assert "ReadError" in message
    assert (MAYBE in message) is accumulates, message


def test_a_forward_backward_whose_upload_fails_says_nothing_of_gradients_and_its_step_is_not_sent(monkeypatch):
    """A body over the side channel's threshold is uploaded before its POST: an upload answered with a 502 means the
    server never saw the forward-backward, so no gradients of it wait there, and the rest of its step was not sent."""
    monkeypatch.setattr(wire, "LARGE_PAYLOAD_BYTES", 0)  # every forward-backward goes through the side channel

    def handler_for(fake: FakeAPI) -> Handler:
        uploaded: set[bytes] = set()

        def handler(request: httpx.Request) -> httpx.Response:
            if request.method == "PUT" and request.content in uploaded:  # the step's batch is the first one's again
                return httpx.Response(502, text="Bad Gateway")
            uploaded.add(request.content if request.method == "PUT" else b"")
            return fake(request)

        return handler

    ops, posted, step = one_remote_step(handler_for)
    assert [op.status for op in ops] == [FAILED] * 3 and step == 0
    assert posted == ["forward-backward"] * 2  # the one before the step and the one after it; the step's never
    with pytest.raises(rlnb.OperationFailed, match="502") as info:
        ops[0].result(0)
    assert MAYBE not in info.value.message
    for op in ops[1:]:
        with pytest.raises(rlnb.OperationFailed, match="not sent: this step's forward-backward before it was not sent"):
            op.result(0)


def _conflict(request: httpx.Request) -> httpx.Response:
    return httpx.Response(409, json={"error": {"message": "conflict", "code": "conflict", "type": "invalid_request"}})


@pytest.mark.parametrize("then", [_conflict, _never_sent], ids=["409", "refused"])
def test_a_forward_backward_taken_then_refused_on_its_retry_says_its_gradients_may_stay(then):
    """Its first try runs on the server and its 2xx cannot be read; the try again under the same Idempotency-Key is
    refused (a 409, or no connection made): that error alone said the server took nothing, though it ran the first."""
    handler_for = steps_forward_backward([(True, _unreadable), (False, then)])  # taken, then refused
    ops, posted, step = one_remote_step(handler_for, answered=then is not _never_sent)
    assert [op.status for op in ops] == [FAILED] * 3 and step == 0 and posted.count("optim-step") == 0
    with pytest.raises(rlnb.OperationFailed) as info:
        ops[0].result(0)
    assert MAYBE in info.value.message, info.value.message

"""A remote step's forward-backward that fails at its POST without an API error (a transport's own exception), or
whose POST is answered with an earlier operation's id (it may never have run), fails the optim-step and weights-sync
of its step unsent (``rlnb._one_step``): sent, the optim-step counted a step on gradients that were not this
batch's. An operation outside the step is sent as ever."""

from collections.abc import Callable

import httpx
import pytest

import rlnb
from rlnb import _one_step, samples, wire
from tests.support.fake_api import BASE, FAST_POLL, KEY, FakeAPI, quick

Handler = Callable[[httpx.Request], httpx.Response]
BATCH = [samples.cross_entropy([1, 2, 3])]
FAILED = wire.OperationStatus.FAILED


def one_remote_step(handler_for: Callable[[FakeAPI], Handler]) -> tuple[list[rlnb.Operation], list[str], int]:
    """A session on a fake API whose every request goes through ``handler_for(fake)``: a forward-backward, then one
    step (forward-backward, optim-step, weights-sync) in ``one_step``, then a forward-backward outside it. The step's
    three operations, the paths POSTed, and the session's step."""
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
        assert after.status == wire.OperationStatus.COMPLETED  # the step's end broke nothing after it
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
    assert posted == ["forward-backward"] * 3
    with pytest.raises(rlnb.OperationFailed, match="with the id of an earlier operation"):
        ops[0].result(0)
    for op in ops[1:]:
        with pytest.raises(rlnb.OperationFailed, match="not run: this step's forward-backward before it failed, nor"):
            op.result(0)

"""An optim-step refused at its POST (a 429 past the client's retries, a 400) took nothing: the gradients its
forward-backwards accumulated stay on the server, and the next optim-step applies them with its own. R-new has no
call that drops them, so the failure says so and what to do, in the in-process engine's words for a refused
optim-step (``rlnb.params.GRADIENTS_KEPT``), and the history keeps that message."""

from collections.abc import Callable

import httpx
import pytest

import rlnb
from rlnb import params, samples, wire
from rlnb.tasks import Task, rl_step
from tests.support.fake_api import BASE, FAST_POLL, KEY, FakeAPI, error, quick
from tests.support.server import DEADLINE, app_client, held

FB, OPT = wire.OperationKind.FORWARD_BACKWARD, wire.OperationKind.OPTIM_STEP
BATCH = [samples.cross_entropy(list(b"held back"))]
PARAMS = rlnb.AdamParams(learning_rate=0.01, grad_clip_norm=0)  # no clipping: grad_norm is the gradient's own norm
KEPT = params.GRADIENTS_KEPT.lstrip("; ")


@pytest.mark.slow  # the app on a model and a session on it (seconds on a loaded machine)
def test_an_optim_step_refused_429_says_its_gradients_stay_and_the_next_step_applies_them(tmp_path, monkeypatch):
    with (
        app_client(tmp_path, max_pending_operations=2) as c,
        rlnb.connect("http://testserver", base_model="rlnb/tiny", http_client=c, max_retries=0) as s,
        held(monkeypatch, FB) as gate,
    ):
        fbs = [s.forward_backward(BATCH) for _ in range(2)]
        refused = s.optim_step(PARAMS)
        with pytest.raises(rlnb.OperationFailed) as info:
            refused.result(DEADLINE)  # refused at its POST while both forward-backwards are queued or running
        gate.set()
        assert [fb.result(DEADLINE).loss > 0 for fb in fbs] == [True, True]
        late = s.optim_step(PARAMS).result(DEADLINE)  # no forward-backward before it: it steps on the kept gradients
        record = next(r for r in s.history.records if r.kind == OPT)
    assert info.value.code == wire.OperationErrorCode.RESOURCE_EXHAUSTED
    assert "max_pending_operations" in info.value.message and KEPT in info.value.message
    assert "submit an optim-step again" in info.value.message
    assert record.status == wire.OperationStatus.FAILED and KEPT in (record.error_message or "")
    assert late.step == 1 and late.metrics["grad_norm"] > 0


@pytest.mark.slow  # the app on a model and a session on it (seconds on a loaded machine)
def test_rl_step_whose_optim_step_is_refused_says_its_gradients_stay(tmp_path, monkeypatch):
    task = Task("sums", [[104, 105]], lambda p, c: float(len(c) % 3), group_size=4, max_tokens=3)
    with (
        app_client(tmp_path, max_pending_operations=1) as c,
        rlnb.connect("http://testserver", base_model="rlnb/tiny", http_client=c, max_retries=0, record=False) as s,
        held(monkeypatch, FB) as gate,
    ):
        with pytest.raises(rlnb.OperationFailed) as info:
            rl_step(s, task, PARAMS, seed=1)
        gate.set()
        s.wait(DEADLINE)
        kinds = [(r.kind, r.status) for r in s.history.records[1:]]
    assert info.value.kind == OPT and KEPT in info.value.message
    done, failed = wire.OperationStatus.COMPLETED, wire.OperationStatus.FAILED
    assert kinds == [(FB, done), (OPT, failed), (wire.OperationKind.WEIGHTS_SYNC, failed)]


def _session(fake: FakeAPI, handler: Callable[[httpx.Request], httpx.Response], retries: int) -> rlnb.Session:
    """A session on a new resource of ``fake``'s, each request answered by ``handler`` (which hands most to ``fake``),
    its calls retried ``retries`` times."""
    rid = fake.add_resource({"adam": {}})
    return rlnb.connect(
        BASE, api_key=KEY, transport=httpx.MockTransport(handler), model_resources_id=rid, ready_timeout=5,
        operation_timeout=20, record=False, **FAST_POLL, **quick({"max_retries": retries}),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("status", "kept"), [(429, True), (400, True), (403, True), (404, False), (409, False), (500, False)]
)  # fmt: skip
def test_which_refusals_say_the_gradients_stay(status, kept):
    """A 4xx took nothing on a live session; a 404 names no session to apply them, a 409 (a used Idempotency-Key) may
    answer a retry whose first try was taken, and a 5xx may have acted."""
    fake = FakeAPI(ready_after=1)

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path.endswith("/optim-step"):
            return error(status, "no")
        return fake(request)

    with _session(fake, handler, retries=0) as s:
        s.forward_backward(BATCH).result(20)
        with pytest.raises(rlnb.OperationFailed) as info:
            s.optim_step(PARAMS).result(20)
    assert (KEPT in info.value.message) is kept, info.value.message


def _lost(request: httpx.Request) -> httpx.Response:
    raise httpx.ReadTimeout("answer lost", request=request)


def _unsent(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("refused", request=request)


@pytest.mark.parametrize(
    ("first", "taken", "kept"),
    [(_lost, True, False), (lambda r: error(502, "bad gateway"), True, False), (_unsent, False, True),
     (lambda r: error(429, "busy"), False, True)],
)  # fmt: skip
def test_a_refusal_after_a_try_that_may_have_been_taken_says_check_the_step(first, taken, kept):
    """The first try of the optim-step's POST is handed to the server, which takes it (its gradients applied), and then
    gets no answer or a 5xx; the retry gets a 429. That step may have been taken: the failure says to check the
    session's step, not that nothing changed. A first try that surely took nothing (never sent, or refused) keeps
    the "nothing changed" advice."""
    fake, tries = FakeAPI(ready_after=1), []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path.endswith("/optim-step"):
            tries.append(request)
            if len(tries) > 1:
                return error(429, "rate limited")
            if taken:
                fake(request)
            return first(request)
        return fake(request)

    with _session(fake, handler, retries=1) as s:
        s.forward_backward(BATCH).result(20)
        with pytest.raises(rlnb.OperationFailed) as info:
            s.optim_step(PARAMS).result(20)
        step = s.step
    assert len(tries) == 2 and step == int(taken)  # the fake took the first try exactly when it was handed it
    assert info.value.code == wire.OperationErrorCode.RESOURCE_EXHAUSTED
    assert (KEPT in info.value.message) is kept, info.value.message
    assert ("may have been taken" in info.value.message) is taken, info.value.message
    assert ("check session.step" in info.value.message) is taken, info.value.message


@pytest.mark.slow  # a fresh Python process: what one import loads
def test_the_sender_says_a_refused_steps_words_without_loading_params():
    """``GRADIENTS_KEPT`` and ``SUBMIT_AGAIN`` lived in ``rlnb.params``: ``import rlnb.remote.sender`` loaded the
    params package for two strings. They are ``rlnb.errors``' now (``rlnb.params`` still names them)."""
    import subprocess
    import sys

    code = "import sys, rlnb.remote.sender; print('rlnb.params' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.stdout.strip() == "False", done.stderr
    assert (params.GRADIENTS_KEPT, params.SUBMIT_AGAIN) == (rlnb.errors.GRADIENTS_KEPT, rlnb.errors.SUBMIT_AGAIN)


@pytest.mark.parametrize(
    ("answer", "taken"),
    [(_lost, True), (lambda r: error(500, "oops"), True), (lambda r: httpx.Response(200, text='{"id": "op-'), True),
     (_unsent, False)],
    ids=["no-answer", "500", "unreadable-2xx", "never-sent"],
)  # fmt: skip
def test_an_optim_step_whose_every_try_may_have_been_taken_says_check_the_step(answer, taken):
    """Every try of the optim-step reaches the server, which takes the first (its Idempotency-Key replays it after), and
    gets no answer, a 5xx or a 2xx cut short: the step may have been taken, and one submitted again steps twice, so
    the failure says to check the session's step."""
    fake = FakeAPI(ready_after=1)

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path.endswith("/optim-step"):
            if taken:
                fake(request)
            return answer(request)
        return fake(request)

    with _session(fake, handler, retries=2) as s:
        s.forward_backward(BATCH).result(20)
        with pytest.raises(rlnb.OperationFailed) as info:
            s.optim_step(PARAMS).result(20)
        step = s.step
    assert step == int(taken)
    assert ("may have been taken" in info.value.message) is taken, info.value.message
    assert ("check session.step" in info.value.message) is taken, info.value.message
    assert KEPT not in info.value.message

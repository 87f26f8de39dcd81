"""A step whose prompts × group_size samples are more than the trainer's ``max_batch_size`` (supported-models: 256
in ``rlnb serve``, where the default task's step has 1024) is sent in forward-backwards of at most that many, which
add up to one forward-backward of the whole batch: the same loss, metrics, gradient norm and weights as the unsplit
step, to float tolerance, for each loss's aggregation. A forward-backward refused at its POST fails the optim-step
and weights-sync behind it unsent, and the step is not counted. One that FAILS as it runs (out of memory, a non-finite
loss) fails the rest of its step unrun on the local engine, the weights and step as they were; on ``rlnb serve``, which
runs each operation as it comes, the optim-step ran on the other pieces' gradients, and the error says so."""

import math

import httpx
import pytest
import torch
from fastapi.testclient import TestClient

import rlnb
from rlnb import _one_step, samples, wire
from rlnb.engine import handlers
from rlnb.session import bodies
from rlnb.session import session as session_mod
from rlnb.tasks import StepReport, Task, pieces, rl_step
from rlnb.tasks.rollouts import Rollout
from tests.support.fake_api import error
from tests.support.server import app_client

TASK = Task("sums", [[104, 105], [106, 107], [108, 109]], lambda p, c: float(sum(map(ord, c)) % 5), group_size=4,
            max_tokens=3)  # fmt: skip
"""3 prompts × 4 = 12 samples: 3 forward-backwards of 4 under a limit of 5."""
PARAMS = rlnb.AdamParams(learning_rate=0.01, grad_clip_norm=0)  # no clipping: grad_norm is the gradient's own norm
PROBE = samples.cross_entropy([104, 105, 106, 107, 108])
FB, OPT, SYNC = wire.OperationKind.FORWARD_BACKWARD, wire.OperationKind.OPTIM_STEP, wire.OperationKind.WEIGHTS_SYNC


def probe(s: rlnb.Session) -> list[float]:
    """The policy's log-probs of a fixed sample (forward only: no gradient)."""
    out = s.forward_backward([PROBE], "cross_entropy", forward_only=True, return_loss_fn_outputs=True).result(60)
    return list(out.loss_fn_outputs[0].tensors["logprobs"].data)


def step(limit: int | None, loss: str, loss_params: dict | None) -> tuple[StepReport, list[float], int]:
    """One seeded step on a fresh in-process session whose trainer takes ``limit`` samples a forward-backward: its
    report, the probe after it, and how many forward-backwards it sent."""
    with rlnb.connect("local", model="tiny", seed=0, device="cpu", record=False) as s:
        before = probe(s)
        s.backend.max_batch_size = limit  # as a remote session learns it from supported-models
        report = rl_step(s, TASK, PARAMS, seed=7, loss=loss, loss_params=loss_params)
        s.backend.max_batch_size = None
        after = probe(s)
        assert after != before  # the step moved the weights: the comparison below can fail
        return report, after, sum(r.kind == FB for r in s.history.records) - 2  # less the two probes


@pytest.mark.parametrize(
    ("loss", "loss_params"),
    [("grpo", None), ("grpo", {"agg_type": "TOKEN_MEAN"}), ("grpo", {"agg_type": "SEQUENCE_MEAN"}),
     ("grpo", {"ratio_type": "SEQUENCE"}), ("ppo", None), ("dro", {"beta": 0.5})],
)  # fmt: skip
def test_a_step_split_under_the_trainers_limit_equals_the_unsplit_step(loss, loss_params):
    whole, whole_after, whole_fbs = step(None, loss, loss_params)
    split, split_after, split_fbs = step(5, loss, loss_params)
    assert (whole_fbs, split_fbs) == (1, 3)
    assert split.rewards == whole.rewards and split.step == whole.step == 1
    assert split.grad_norm == pytest.approx(whole.grad_norm, rel=1e-5) and whole.grad_norm > 0
    # float32 sums of ~36 terms of size ~5 in another order (DRO's cancel to 0.14): 2.6e-5 apart
    assert split.loss == pytest.approx(whole.loss, rel=1e-5, abs=1e-4)
    assert split.metrics.keys() == whole.metrics.keys()
    for key, value in whole.metrics.items():
        assert split.metrics[key] == pytest.approx(value, rel=1e-5, abs=1e-7) or math.isnan(value), key
    assert split_after == pytest.approx(whole_after, rel=1e-5, abs=1e-6)


def test_a_limit_no_forward_backward_can_meet_is_refused_before_anything_is_sampled():
    with rlnb.connect("local", model="tiny", seed=0, device="cpu", record=False) as s:
        s.backend.max_batch_size = 0
        with pytest.raises(ValueError, match=r"3 prompts × group_size 4 = 12 samples cannot be trained: this model's "
                                             r"max_batch_size \(supported-models\) is 0"):  # fmt: skip
            rl_step(s, TASK, PARAMS, seed=7)
        assert s.history.records == []


@pytest.mark.slow  # the app on a model and a session on it (seconds on a loaded machine)
def test_on_the_real_app_a_step_past_its_max_batch_size_trains_in_pieces(tmp_path):
    """It was one forward-backward of 12, refused 400 after the samples: "the limit is 5 per request"."""
    with app_client(tmp_path, max_batch_size=5) as c, rlnb.connect("http://testserver", base_model="rlnb/tiny",
                                                                    http_client=c, record=False) as s:  # fmt: skip
        report = rl_step(s, TASK, s.check_params(), seed=1)
        s.wait(60)
        ops = [(r.kind, r.status) for r in s.history.records]
        with pytest.raises(ValueError, match=r"samples has 6 entries, more than the 5 one forward-backward of this "):
            s.forward_backward([PROBE] * 6, "cross_entropy")  # refused before it is sent
        assert s.history.records[-1].kind == SYNC
    done = wire.OperationStatus.COMPLETED
    assert report.step == s.step == 1 and math.isfinite(report.loss)
    assert ops[1:] == [(FB, done)] * 3 + [(OPT, done), (SYNC, done)]


def unlisted(c: TestClient) -> httpx.Client:
    """A client of the app behind ``c`` whose supported-models is not found: its session learns no batch limit, and
    sends the whole batch, which the app refuses at its POST."""

    def relay(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/rl/supported-models":
            return error(404, "not found")
        answer = c.request(request.method, str(request.url), content=request.read(), headers=request.headers)
        return httpx.Response(answer.status_code, headers=answer.headers.multi_items(), content=answer.content)

    return httpx.Client(transport=httpx.MockTransport(relay))


@pytest.mark.slow  # the app on a model and a session on it (seconds on a loaded machine)
def test_a_forward_backward_refused_at_its_post_fails_its_optim_step_and_sync_unsent(tmp_path):
    """They were sent all the same: the optim-step COMPLETED and counted a step that applied no gradient."""
    with (
        app_client(tmp_path, max_batch_size=6) as c,
        unlisted(c) as http,
        rlnb.connect("http://testserver", base_model="rlnb/tiny", http_client=http, record=False) as s,
    ):
        with pytest.raises(rlnb.OperationFailed, match=r"forward-backward: 400 samples has 12 entries") as info:
            rl_step(s, TASK, s.check_params(), seed=1)  # the forward-backward's own failure, not the optim-step's
        s.wait(60)
        failed = [(r.kind, r.status, r.error_code) for r in s.history.records[1:]]
        said = [r.error_message or "" for r in s.history.records[2:]]
        assert s.step == 0 and info.value.kind == FB
        report = rl_step(s, TASK, s.check_params(), group_size=2, seed=1)  # 6 samples: sent, and counted
        assert report.step == s.step == 1
    bad, code = wire.OperationStatus.FAILED, wire.OperationErrorCode.INVALID_INPUT
    assert failed == [(FB, bad, code), (OPT, bad, code), (SYNC, bad, code)]
    assert all(m.startswith("not sent: this step's forward-backward before it was not sent, nor") for m in said), said


def uneven() -> tuple[list[list[int]], list[wire.SampleResult], list[list[Rollout]]]:
    """3 prompts × 4 completions of 1 to 7 tokens (a sampled step's are all ``max_tokens`` long on the tiny model:
    TOKEN_MEAN's share of tokens would equal its share of samples), advantages of both signs."""
    prompts, results, groups = [[104, 105], [106, 107], [108, 109]], [], []
    logprobs = [-4.0 - 0.3 * k for k in range(7)]  # the sampler's, near the tiny model's (~ln 1/257)
    for i in range(3):
        seqs = [list(range(97, 97 + 1 + (i * 4 + j) * 5 % 7)) for j in range(4)]
        results.append(wire.SampleResult(policy_segments=[], sequences=[
            wire.SampledSequence(tokens=t, stop_reason=wire.STOP_REASON_STOP, logprobs=logprobs[: len(t)])
            for t in seqs
        ]))  # fmt: skip
        groups.append([Rollout(i, "", "", tuple(t), False, 0.0, (-1.0) ** j * (1 + j)) for j, t in enumerate(seqs)])
    return prompts, results, groups


@pytest.mark.parametrize("agg", ["TOKEN_MEAN", "SEQUENCE_MEAN", "FIXED_HORIZON"])
def test_pieces_of_uneven_completions_add_up_to_the_whole_batch(agg):
    """Each piece's advantages scaled by its share of GRPO's divisor, tokens for TOKEN_MEAN (4, 4 and 4 samples of
    13, 16 and 19 tokens here), samples otherwise."""
    loss_params = {"agg_type": agg}
    said = []
    for limit in (None, 5):
        with rlnb.connect("local", model="tiny", seed=0, device="cpu", record=False) as s:
            s.backend.max_batch_size = limit
            batches, tokens = pieces.batches(s, *uneven(), "grpo", loss_params)
            fbs = [s.forward_backward(b, "grpo", loss_params) for b in batches]
            grad = s.optim_step(PARAMS).result(60).metrics["grad_norm"]
            said.append((len(batches), tokens, pieces.joined([fb.result(60) for fb in fbs], tokens), grad))
    (one, whole_tokens, whole, whole_grad), (three, split_tokens, split, split_grad) = said
    assert (one, three) == (1, 3) and len(set(split_tokens)) > 1 and sum(split_tokens) == whole_tokens[0]
    assert split_grad == pytest.approx(whole_grad, rel=1e-5) and whole_grad > 0
    assert split.loss == pytest.approx(whole.loss, rel=1e-5, abs=1e-7)
    assert split.metrics == pytest.approx(whole.metrics, rel=1e-5, abs=1e-7)


def test_a_piece_refused_before_sending_sends_none_of_the_step():
    """The second piece has a sample past the trainer's length (a remote one's ``max_seq_length`` may be below its
    sampler's context): the first piece was sent already, its gradients left for the next step's optim-step."""
    with rlnb.connect("local", model="tiny", seed=0, device="cpu", record=False) as s:
        s.backend.max_batch_size = 5
        batches, _ = pieces.batches(s, *uneven(), "grpo", None)
        s.backend.max_seq_length = 7  # the first piece's longest sample has 7 tokens, the second's 8
        with pytest.raises(ValueError, match=r"samples\[0\] has 8 tokens, more than the model's context of 7"):
            pieces.send(s, batches, "grpo", None)
        assert s.history.records == []


def test_each_piece_is_built_once_and_sent_as_checked(monkeypatch):
    """Every piece's body is built (and checked) before any is sent, and that body is the one sent: each was built a
    second time by ``Session.forward_backward``."""
    built = []

    def counted(*args, **kwargs):
        built.append(bodies.forward_backward_body(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(pieces, "forward_backward_body", counted)
    monkeypatch.setattr(session_mod, "forward_backward_body", counted)
    with rlnb.connect("local", model="tiny", seed=0, device="cpu", record=False) as s:
        s.backend.max_batch_size = 5
        sent, submit = [], s.backend.submit

        def seen(kind, body, listener):
            sent.append(body)
            return submit(kind, body, listener)

        monkeypatch.setattr(s.backend, "submit", seen)
        batches, _ = pieces.batches(s, *uneven(), "grpo", None)
        fbs = pieces.send(s, batches, "grpo", None)
        s.wait(60)
    assert len(built) == len(batches) == 3 and [fb.status for fb in fbs] == [DONE] * 3
    assert len(sent) == 3 and all(a is b for a, b in zip(sent, built, strict=True))


FAILED, DONE = wire.OperationStatus.FAILED, wire.OperationStatus.COMPLETED
OOM, NON_FINITE = wire.OperationErrorCode.RESOURCE_EXHAUSTED, wire.OperationErrorCode.NON_FINITE_LOSS


def failing_at(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    """The engine's ``n``-th forward-backward from now runs out of memory (as a GPU's would) as it runs."""
    real, calls = handlers.HANDLERS[FB], []

    def flaky(engine, body, cancelled):
        calls.append(1)
        if len(calls) == n:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(engine, body, cancelled)

    monkeypatch.setitem(handlers.HANDLERS, FB, flaky)


@pytest.mark.parametrize(("limit", "n", "kept"), [(None, 1, ""), (5, 2, "1 of 3 forward-backwards' gradients stay")])
def test_a_piece_failing_as_it_runs_fails_the_rest_of_its_step_unrun_locally(monkeypatch, limit, n, kept):
    """The optim-step ran on the other pieces' gradients (grad_norm 0.025 of 2 pieces of 3), published, and counted."""
    with rlnb.connect("local", model="tiny", seed=0, device="cpu", record=False) as s:
        before = probe(s)
        s.backend.max_batch_size = limit
        failing_at(monkeypatch, n)
        with pytest.raises(rlnb.OperationFailed, match="out of memory") as info:
            rl_step(s, TASK, PARAMS, seed=7)
        s.wait(60)
        monkeypatch.undo()
        ops = [(r.kind, r.status, r.error_code) for r in s.history.records[2:]]  # less the probe and the sample
        said = [r.error_message or "" for r in s.history.records if r.status == FAILED][1:]
        assert s.step == 0 and probe(s) == before and info.value.kind == FB and kept in str(info.value)
    first = [(FB, DONE, None)] * (n - 1)
    assert ops == [*first, (FB, FAILED, OOM), *[(FB, FAILED, OOM)] * (3 - n if limit else 0), (OPT, FAILED, OOM),
                   (SYNC, FAILED, OOM)]  # fmt: skip
    assert said and all(m.startswith("not run: this step's forward-backward before it failed, nor") for m in said)


def test_a_piece_with_a_non_finite_loss_leaves_the_weights_and_step_as_they_were():
    """The second piece's sampler log-probs of -200 make its PPO ratio exp(195): inf in float32 (review37j s2)."""
    prompts, results, groups = [[104, 105], [106, 107]], [], []
    for i, lp in enumerate((-5.0, -200.0)):
        seqs = [[97, 98, 99], [100, 101]]
        made = [wire.SampledSequence(tokens=t, stop_reason=wire.STOP_REASON_STOP, logprobs=[lp] * len(t)) for t in seqs]
        results.append(wire.SampleResult(policy_segments=[], sequences=made))
        groups.append([Rollout(i, "", "", tuple(t), False, 0.0, a) for t, a in zip(seqs, [1.0, -1.0], strict=True)])
    with rlnb.connect("local", model="tiny", seed=0, device="cpu", record=False) as s:
        before = probe(s)
        s.backend.max_batch_size = 2
        batch, _ = pieces.batches(s, prompts, results, groups, "ppo", None)
        with _one_step.one_step():
            fbs = pieces.send(s, batch, "ppo", None)
            opt, sync = s.optim_step(PARAMS), s.weights_sync()
        s.wait(60)
        assert [fb.status for fb in fbs] == [DONE, FAILED] and fbs[1].error.code == NON_FINITE
        assert [(op.status, op.error.code) for op in (opt, sync)] == [(FAILED, NON_FINITE)] * 2
        assert opt.error.message.startswith("not run: this step's forward-backward before it failed")
        assert s.step == 0 and probe(s) == before


@pytest.mark.slow  # the app on a model and a session on it (seconds on a loaded machine)
def test_on_rlnb_serve_a_piece_failing_as_it_runs_says_the_step_was_taken_on_the_others(tmp_path, monkeypatch):
    """The server runs each POST as it comes: its optim-step, queued behind the failing piece, ran all the same."""
    with app_client(tmp_path, max_batch_size=5) as c, rlnb.connect("http://testserver", base_model="rlnb/tiny",
                                                                    http_client=c, record=False) as s:  # fmt: skip
        failing_at(monkeypatch, 2)
        with pytest.raises(rlnb.OperationFailed, match="out of memory") as info:
            rl_step(s, TASK, s.check_params(), seed=1)
        s.wait(60)
        assert s.step == 1 and info.value.kind == FB
    said = "the step's optim-step ran on the other pieces' gradients: step 1 was taken with 2 of 3 forward-backwards"
    assert said in str(info.value)


@pytest.mark.slow  # the app on a model and a session on it (seconds on a loaded machine)
def test_a_piece_refused_at_its_post_after_one_ran_says_its_gradients_stay_for_the_next_step(tmp_path):
    """The first piece's gradients were added to the next step's in silence (review37j 4): the API cannot drop them."""
    posts: list[int] = []

    def relay_for(c: TestClient) -> httpx.Client:
        def relay(request: httpx.Request) -> httpx.Response:
            if request.method == "POST" and request.url.path.endswith("/operations/forward-backward"):
                posts.append(1)
                if len(posts) == 2:
                    return error(400, "refused (a server-side input check)")
            answer = c.request(request.method, str(request.url), content=request.read(), headers=request.headers)
            return httpx.Response(answer.status_code, headers=answer.headers.multi_items(), content=answer.content)

        return httpx.Client(transport=httpx.MockTransport(relay))

    with (
        app_client(tmp_path, max_batch_size=5) as c,
        relay_for(c) as http,
        rlnb.connect("http://testserver", base_model="rlnb/tiny", http_client=http, record=False) as s,
    ):
        with pytest.raises(rlnb.OperationFailed, match="refused") as info:
            rl_step(s, TASK, s.check_params(), seed=1)
        s.wait(60)
        assert s.step == 0 and info.value.kind == FB
    said = "1 of 3 forward-backwards' gradients stay accumulated: the next optim-step applies them with its own"
    assert said in str(info.value)

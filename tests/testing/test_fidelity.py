"""FakeBackend against the in-process engine: each scenario runs on both (the engine on the built-in ``tiny`` model)
and what a caller sees (status, error code and message, result fields) is compared. Where the fake differs by design
(its loss is ``loss(step)``, its tokens pseudo-random at log-prob -1), the shape is compared, not the values."""

import math

import pytest

from rlnb import samples, wire
from rlnb.engine.backend import LocalBackend
from rlnb.testing import FakeBackend
from tests.support.fidelity import both, seen, session, submitted

CE = samples.cross_entropy([1, 2, 3, 4], weights=[0, 0, 1, 1])


def test_a_non_finite_loss_fails_the_forward_backward_on_both():
    """The engine (and the service: ``NON_FINITE_LOSS``) fails a forward-backward whose loss is NaN or inf, leaving
    no gradients; ``FakeBackend(loss=lambda s: nan)`` completed it, so a test of a caller's NaN handling passed on the
    fake and met a failure on the engine. The engine's inf comes from log-probs far below the policy's."""
    far = samples.policy([1, 2], [3, 4], [-3e38, -3e38], 1.0)
    engine = session("engine")
    fake = session("fake", loss=lambda step: float("nan") if step == 0 else -math.inf)
    try:
        for s in (engine, fake):
            got = seen(s.forward_backward([far], loss="importance_sampling"))
            assert got[:2] == ("FAILED", wire.OperationErrorCode.NON_FINITE_LOSS), got
            assert got[2].startswith("loss is ") and got[2].endswith("; no gradients were accumulated")
            step = s.optim_step().result(30)  # the failed one left nothing to apply
            assert step.step == 1 and step.metrics["grad_norm"] == 0.0
            again = seen(s.forward_backward([far], loss="importance_sampling"))
            assert again[:2] == ("FAILED", wire.OperationErrorCode.NON_FINITE_LOSS)
    finally:
        engine.close()
        fake.close()


BAD_INPUTS = {
    "a policy loss without its inputs": ([CE], "grpo", None),
    "an input the loss does not read": ([{**CE.model_dump(), "loss_fn_inputs": {
        **CE.model_dump()["loss_fn_inputs"], "mask": {"data": [1, 1, 1], "dtype": "int64"}}}], "cross_entropy", None),
    "an input no loss reads (misspelt)": ([{**CE.model_dump(), "loss_fn_inputs": {
        **CE.model_dump()["loss_fn_inputs"], "weight": {"data": [1.0, 1.0, 1.0], "dtype": "float32"}}}],
        "cross_entropy", None),
    "both weights and mask": ([samples.policy([1, 2], [3], [-1.0], 1.0).model_copy(update={
        "loss_fn_inputs": {**samples.policy([1, 2], [3], [-1.0], 1.0).loss_fn_inputs,
                           "weights": wire.TensorData(data=[0.0, 1.0], dtype="float32")}})], "ppo", None),
    "weights of another length": ([{**CE.model_dump(), "loss_fn_inputs": {
        **CE.model_dump()["loss_fn_inputs"], "weights": {"data": [1.0], "dtype": "float32"}}}], "cross_entropy", None),
    "a sample without its weights after one whose weights are of another length": ([{**CE.model_dump(),
        "loss_fn_inputs": {**CE.model_dump()["loss_fn_inputs"], "weights": {"data": [1.0], "dtype": "float32"}}},
        {**CE.model_dump(), "loss_fn_inputs": {"target_tokens": CE.model_dump()["loss_fn_inputs"]["target_tokens"]}}],
        "cross_entropy", None),  # the inputs' keys are checked first, in every sample
    "a target outside the vocabulary": ([{**CE.model_dump(), "loss_fn_inputs": {
        **CE.model_dump()["loss_fn_inputs"], "target_tokens": {"data": [2, 3, 999], "dtype": "int64"}}}],
        "cross_entropy", None),
    "GRPO's beta without reference log-probs": ([samples.policy([1, 2], [3], [-1.0], 1.0)], "grpo", {"beta": 0.1}),
    "probabilities sent as log-probs": ([samples.policy([1, 2], [3], [-1.0], 1.0).model_copy(update={
        "loss_fn_inputs": {**samples.policy([1, 2], [3], [-1.0], 1.0).loss_fn_inputs,
                           "logprobs": wire.TensorData(data=[0.0, 0.5], dtype="float32")}})], "ppo", None),
    "a routed_experts_key no sample issued": ([CE, CE.model_copy(update={"routed_experts_key": "nope"})],
        "cross_entropy", None),  # dense models: R-new's op fails for a key that is not (or no longer) there
}  # fmt: skip


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_a_forward_backward_the_engine_refuses_fails_the_same_on_the_fake(case):
    """Each of these completed on the fake (a loss of 1.0), so a caller's test passed on inputs the engine fails
    ``INVALID_INPUT``: the fake fails them too, in the engine's words."""
    batch, loss, params = BAD_INPUTS[case]
    engine, fake = both(lambda s: seen(s.forward_backward(batch, loss=loss, loss_params=params)))
    assert engine[:2] == ("FAILED", wire.OperationErrorCode.INVALID_INPUT), engine
    assert fake == engine


def test_loss_fn_outputs_come_back_when_asked_on_both():
    """``return_loss_fn_outputs=True`` gave ``loss_fn_outputs=None`` on the fake: a caller reading
    ``result.loss_fn_outputs[0]`` passed on the engine and raised ``TypeError`` on the fake."""
    batch = [CE, samples.cross_entropy([5, 6, 7])]
    engine, fake = both(lambda s: s.forward_backward(batch, return_loss_fn_outputs=True).result(30))
    for out in (engine, fake):
        data = [o.tensors["logprobs"].data for o in out.loss_fn_outputs]
        assert [len(d) for d in data] == [3, 2] and [o.tensors["logprobs"].dtype for o in out.loss_fn_outputs] == [
            "float32",
            "float32",
        ]
        assert data[0][0] == 0.0 and all(v < 0 for v in data[0][1:] + data[1])  # 0 where the weight is 0
        assert out.metrics["loss/tokens"] == 4.0
    assert set(fake.metrics) <= set(engine.metrics)


@pytest.mark.parametrize("optimizer", ["adam", "muon"])
def test_an_optim_step_reports_the_engines_fields(optimizer):
    """The fake's optim-step lacked ``clip_coef`` (and a Muon step's group norms and Adam learning rate), took a
    default learning rate of its own, and reported its grad norm with no gradients at all."""

    def run(s):
        bare = s.optim_step().result(30)
        s.forward_backward([CE])
        return bare, s.optim_step().result(30)

    (engine_bare, engine), (fake_bare, fake) = both(run, optimizer=optimizer)
    assert set(fake.metrics) == set(engine.metrics) and (fake.step, fake_bare.step) == (
        engine.step,
        engine_bare.step,
    ) == (2, 1)
    for key in ("grad_clip_norm", "learning_rate", "adam/learning_rate"):
        assert fake.metrics.get(key) == engine.metrics.get(key)
    assert engine_bare.metrics["grad_norm"] == fake_bare.metrics["grad_norm"] == 0.0
    assert engine_bare.metrics["clip_coef"] == fake_bare.metrics["clip_coef"] == 1.0


def test_the_other_optimizers_params_fail_the_optim_step_on_both():
    """An Adam session sent ``muon_params`` (a body built by hand): the engine fails it ``INVALID_INPUT``, the fake
    stepped with its own defaults."""
    body = wire.OptimStepBody(muon_params=wire.MuonParams(learning_rate=0.02))
    engine, fake = both(lambda s: (submitted(s, wire.OperationKind.OPTIM_STEP, body), s.backend.session().step))
    assert engine[0][:2] == (wire.OperationStatus.FAILED, wire.OperationErrorCode.INVALID_INPUT) and fake == engine


SAMPLE_BODIES = {
    "more completions than the engine takes": {"num_samples": 300},
    "a prompt with no room for max_tokens": {"model_inputs": [wire.ModelInput.from_tokens([1] * 250)]},
}


@pytest.mark.parametrize("case", SAMPLE_BODIES)
def test_a_sample_past_the_engines_bounds_fails_the_same_on_both(case):
    """Sent by hand past the ``Session``'s checks, these completed on the fake."""
    body = wire.SampleBody(**{"model_inputs": [wire.ModelInput.from_tokens([1, 2])], **SAMPLE_BODIES[case]})
    engine, fake = both(lambda s: submitted(s, wire.OperationKind.SAMPLE, body))
    assert engine[:2] == (wire.OperationStatus.FAILED, wire.OperationErrorCode.INVALID_INPUT) and fake == engine


def test_the_session_refuses_the_same_samples_before_sending_on_both():
    """The fake told the ``Session`` no bound of the engine's: 17 stop strings, 300 completions a prompt and a
    prompt past the context were sent, and completed."""
    assert FakeBackend.max_num_samples == LocalBackend.max_num_samples

    def run(s):
        refused = []
        for kwargs in ({"stop": [str(i) for i in range(17)]}, {"num_samples": 300}, {"stop": ["x" * 257]}):
            with pytest.raises(ValueError) as info:
                s.sample("hi", max_tokens=2, **kwargs)
            refused.append(str(info.value))
        with pytest.raises(ValueError) as info:
            s.sample([[1] * 250])
        return [*refused, str(info.value)]

    engine, fake = both(run)
    assert fake == engine


def test_samples_have_the_engines_shape_and_policy_versions():
    """The fake's default ``max_tokens`` was 4 (the engine's, the wire's default: 16), it ignored prompt log-probs,
    and a prompt id past the byte vocabulary was taken."""

    def run(s):
        before = s.sample([[1, 2, 3]], num_samples=2, seed=1, prompt_logprobs=True, topk_prompt_logprobs=2)
        s.forward_backward([CE])
        s.optim_step()
        unsynced = s.sample([[1]], max_tokens=3, seed=1)
        s.weights_sync()
        synced = s.sample([[1]], max_tokens=3, seed=1)
        with pytest.raises(ValueError, match=r"prompts\[0\]: token 300 is outside the vocabulary \[0, 256\)"):
            s.sample([[300]])
        return [op.result(30) for op in (before, unsynced, synced)]

    for before, unsynced, synced in both(run):
        result = before.results[0]
        assert [len(q.tokens) for q in result.sequences] == [16, 16]
        assert [len(q.logprobs) for q in result.sequences] == [16, 16]
        assert {q.stop_reason for q in result.sequences} == {wire.STOP_REASON_LENGTH}
        assert len(result.prompt_logprobs) == 3 and result.prompt_logprobs[0] == 0.0
        assert [len(t.token_ids) for t in result.topk_prompt_logprobs] == [0, 2, 2]
        versions = [o.results[0].policy_segments[0].version for o in (before, unsynced, synced)]
        assert versions == [0, 0, 1]


def test_a_stop_string_ends_a_sequence_as_on_the_engine():
    """The fake ignored ``stop``: its bytes ran on past a stop string, every sequence ``STOP_REASON_LENGTH``. Each
    sequence on both ends at the token that completes a stop string (``STOP_REASON_STOP``), or at ``max_tokens``
    with none in it."""
    stops = [chr(c) for c in range(97, 97 + 16)]  # "a" to "p": many sequences meet one within 16 bytes

    def run(s):
        return s.sample("hi", num_samples=32, max_tokens=16, stop=stops, seed=3).result(30).results[0].sequences

    for seqs in both(run):
        reasons = []
        for q in seqs:
            text = bytes(q.tokens).decode("latin-1")
            if q.stop_reason == wire.STOP_REASON_STOP:
                assert text[-1] in stops and not any(c in stops for c in text[:-1])
            else:
                assert len(q.tokens) == 16 and not any(c in stops for c in text)
            reasons.append(q.stop_reason)
        assert wire.STOP_REASON_STOP in reasons


def test_a_trainer_only_session_refuses_to_sample_on_both():
    """``num_generator_replicas=0`` (a trainer-only session): the engine fails a sample ``INVALID_INPUT``; the fake had
    no such session."""

    def run(s):
        return seen(s.sample([[1, 2]], max_tokens=2)), s.forward_backward([CE]).result(30) is not None

    engine, fake = both(run, num_generator_replicas=0)
    assert engine[0][:2] == ("FAILED", wire.OperationErrorCode.INVALID_INPUT) and fake == engine


def test_checkpoints_are_listed_on_the_session_on_both():
    """The engine's session lists the checkpoints it saved (as the API's GET does); the fake's lists stayed empty."""

    def run(s):
        s.forward_backward([CE])
        s.optim_step()
        saved = [
            s.save_training_checkpoint().result(30).checkpoint,
            s.save_inference_checkpoint().result(30).checkpoint,
        ]
        info = s.backend.session()
        return saved, info.training_checkpoints, info.inference_checkpoints, info.updated_at > info.created_at

    for saved, training, inference, updated in both(run):
        assert training == [saved[0]] and inference == [saved[1]] and saved[0].step == saved[1].step == 1 and updated


def test_unseeded_samples_are_reproducible_from_the_sessions_seed_on_both():
    """The engine draws an unseeded sample's seed from the session's ``seed``: the same run gives the same tokens. The
    fake's were different on each run, so a test that sampled without a seed was flaky on the fake alone."""

    def run(s):
        return [s.sample([[1, 2]], max_tokens=8).result(30).results[0].sequences[0].tokens for _ in range(2)]

    for first, second in zip(both(run), both(run), strict=True):
        assert first == second and first[0] != first[1]

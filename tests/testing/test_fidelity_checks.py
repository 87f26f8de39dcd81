"""FakeBackend against the in-process engine, the checks of a request that the ``Session`` does not make: a custom
forward-backward's gradients, non-finite gradients at an optim-step, hyperparameters the weights' dtype cannot take,
sampling params sent past the wire's validation (``model_construct``), greedy sampling, and ``config()``. Each case
runs on both (``tests.support.fidelity``) and what a caller sees is compared."""

import math

import pytest

from rlnb import samples, wire
from rlnb.engine.backend import LocalBackend
from rlnb.testing import FakeBackend
from tests.support.fidelity import both, seen, submitted

K = wire.OperationKind
FAILED = wire.OperationStatus.FAILED
INVALID, NON_FINITE = wire.OperationErrorCode.INVALID_INPUT, wire.OperationErrorCode.NON_FINITE_LOSS
CE = samples.cross_entropy([1, 2, 3, 4])  # weights [1, 1, 1]
F32, I64 = "float32", "int64"


def sample(**inputs: tuple[list, str]) -> wire.Sample:
    """Tokens [1, 2, 3, 4] with these ``loss_fn_inputs`` (each ``(data, dtype)``), built without the wire's checks."""
    tensors = {k: wire.TensorData.model_construct(data=d, dtype=t) for k, (d, t) in inputs.items()}
    return wire.Sample.model_construct(model_input=CE.model_input, loss_fn_inputs=tensors)


def custom(batch: list[wire.Sample], *gradients: list[float]) -> wire.CustomForwardBackwardBody:
    return wire.CustomForwardBackwardBody.model_construct(
        samples=batch, gradients=[wire.GradientTensor.model_construct(data=g, dtype=None) for g in gradients]
    )


TARGETS = ([2, 3, 4], I64)
CUSTOM_BODIES = {
    "more gradients than samples": custom([CE], [0.5] * 3, [0.5] * 3),
    "a gradient of another length": custom([CE], [0.5] * 2),
    "a NaN gradient": custom([CE], [0.5, math.nan, 1.0]),
    "a gradient past float32's range": custom([CE], [0.5, 1e39, 1.0]),
    "no target_tokens": custom([sample()], [0.5] * 3),
    "float target_tokens": custom([sample(target_tokens=([2.0, 3.0, 4.0], F32))], [0.5] * 3),
    "short target_tokens": custom([sample(target_tokens=([2, 3], I64))], [0.5] * 3),
    "a target outside the vocabulary": custom([sample(target_tokens=([2, 3, 999], I64))], [0.5] * 3),
    "both weights and mask": custom([sample(target_tokens=TARGETS, weights=([1.0] * 3, F32), mask=([1] * 3, I64))],
                                    [0.5] * 3),
    "a short mask": custom([sample(target_tokens=TARGETS, mask=([1, 1], I64))], [0.5] * 3),
    "weights past float32's range": custom([sample(target_tokens=TARGETS, weights=([1.0, 1e39, 1.0], F32))],
                                           [0.5] * 3),
    "an input nothing reads": custom([sample(target_tokens=TARGETS, weight=([1.0] * 3, F32))], [0.5] * 3),
    "no samples": custom([]),
    "the second sample's gradient": custom([CE, CE], [0.5] * 3, [math.inf] * 3),
}  # fmt: skip


@pytest.mark.parametrize("case", CUSTOM_BODIES)
def test_a_custom_forward_backward_the_engine_refuses_fails_the_same_on_the_fake(case):
    """The fake checked a custom forward-backward's token ids only: these completed on it, and failed
    ``INVALID_INPUT`` (or ``NON_FINITE_LOSS``, a gradient that is not finite in float32) on the engine."""
    engine, fake = both(lambda s: submitted(s, K.CUSTOM_FORWARD_BACKWARD, CUSTOM_BODIES[case]))
    assert engine[0] == FAILED and engine[1] in (INVALID, NON_FINITE), engine
    assert fake == engine


def test_a_custom_forward_backward_accumulates_gradients_on_both():
    """The fake's custom forward-backward left nothing for the optim-step: its ``grad_norm`` was 0, the engine's
    that of the gradients given."""

    def run(s):
        done = submitted(s, K.CUSTOM_FORWARD_BACKWARD, custom([CE, CE], [0.5] * 3, [-1.0, 0.0, 2.0]))
        return done, s.optim_step().result(30).metrics["grad_norm"]

    (engine, engine_norm), (fake, fake_norm) = both(run)
    assert engine == fake == (wire.OperationStatus.COMPLETED, None, None)
    assert engine_norm > 0 and fake_norm > 0


def test_non_finite_gradients_fail_the_optim_step_on_both():
    """On the engine, gradients that overflow float32 (a finite custom gradient of 3e38, summed) fail the optim-step
    ``NON_FINITE_LOSS`` and are dropped, the step unchanged; the fake's ``grad_norm`` could not say so (a NaN
    norm was reported, the step taken). ``grad_norm=lambda step: nan`` fails it in the engine's words."""

    def run(s):
        s.wait()
        failed = seen(s.optim_step())
        step = s.backend.session().step
        return failed, step, s.optim_step().result(30)

    def engine_run(s):
        submitted(s, K.CUSTOM_FORWARD_BACKWARD, custom([CE], [3e38] * 3))
        return run(s)

    def fake_run(s):
        s.forward_backward([CE])
        return run(s)

    (engine, engine_step, engine_after), _ = both(engine_run)
    _, (fake, fake_step, fake_after) = both(fake_run, grad_norm=lambda step: math.nan)
    for failed in (engine, fake):
        assert failed[:2] == ("FAILED", NON_FINITE), failed
        head, _, tail = failed[2].partition("; non-finite gradients in: ")
        assert head == "gradient norm is nan" and tail.endswith(
            "; parameters and optimizer state unchanged, the accumulated gradients dropped (run a forward-backward "
            "to train on)"
        )
    assert engine_step == fake_step == 0
    assert (engine_after.step, engine_after.metrics["grad_norm"]) == (fake_after.step, fake_after.metrics["grad_norm"])
    assert fake_after.step == 1 and fake_after.metrics["grad_norm"] == 0.0


STEP_BODIES = {
    "adam: an eps that is 0 in float32": ("adam", {"adam_params": {"eps": 1e-50}}),
    "adam: an eps below float32's least": ("adam", {"adam_params": {"eps": 1e-45}}),
    "adam: a step past float32's range": ("adam", {"adam_params": {"learning_rate": 1e39, "weight_decay": 0.0}}),
    "muon: Adam's eps that is 0 in float32": ("muon", {"muon_params": {"adam": {"eps": 1e-50}}}),
    "muon: a step past float32's range": ("muon", {"muon_params": {"learning_rate": 1e39, "weight_decay": 0.0}}),
}


@pytest.mark.parametrize("case", STEP_BODIES)
def test_hyperparams_the_weights_cannot_take_fail_the_optim_step_on_both(case):
    """The engine refuses an eps that is 0 in its weights' dtype (float32 for ``tiny``) and a step size past it
    ``INVALID_INPUT``, the gradients kept; the fake stepped."""
    optimizer, body = STEP_BODIES[case]

    def run(s):
        s.forward_backward([CE]).result(30)
        refused = submitted(s, K.OPTIM_STEP, wire.OptimStepBody.model_validate(body))
        return refused, s.backend.session().step, s.optim_step().result(30).metrics["grad_norm"] > 0

    engine, fake = both(run, optimizer=optimizer)
    assert engine[0][:2] == (FAILED, INVALID) and engine[1:] == (0, True), engine
    assert fake == engine


SP = wire.SamplingParams.model_construct
PROMPTS = [wire.ModelInput.from_tokens([1, 2])]
SAMPLE_BODIES = {
    "a negative temperature": SP(temperature=-1.0),
    "a temperature in text": SP(temperature="hot"),
    "a NaN temperature": SP(temperature=math.nan),
    "top_p 0": SP(top_p=0.0),
    "top_p past 1": SP(top_p=2.0),
    "top_k below -1": SP(top_k=-2),
    "a fractional top_k": SP(top_k=1.5),
    "max_tokens 0": SP(max_tokens=0),
    "sampling params as a dict": {"temperature": 1.0},
    "an empty stop string": SP(stop=["a", ""]),
    "17 stop strings": SP(stop=[str(i) for i in range(17)]),
    "a stop string of 257 characters": SP(stop=["x" * 257]),
    "num_samples in text": None,
    "no prompts": [],
    "prompts as a dict": {"a": 1},
    "a prompt that is no ModelInput": [[1, 2]],
}


def crafted(case: str) -> wire.SampleBody:
    """``SAMPLE_BODIES[case]`` in a sample body built without the wire's checks."""
    value = SAMPLE_BODIES[case]
    if value is None:
        return wire.SampleBody.model_construct(model_inputs=PROMPTS, num_samples="3")
    if isinstance(value, list | dict) and "prompt" in case:
        return wire.SampleBody.model_construct(model_inputs=value)
    return wire.SampleBody.model_construct(model_inputs=PROMPTS, sampling_params=value)


@pytest.mark.parametrize("case", SAMPLE_BODIES)
def test_a_crafted_sample_the_engine_refuses_fails_the_same_on_the_fake(case):
    """The engine checks a sample's params by the wire's rules again (a body built by ``model_construct`` skipped
    them): the fake sampled with a negative temperature, top_p 0, an empty stop string, and failed
    ``INTERNAL_ERROR`` on a dict or a text ``num_samples``."""
    engine, fake = both(lambda s: submitted(s, K.SAMPLE, crafted(case)))
    assert engine[:2] == (FAILED, INVALID), engine
    assert fake == engine


GREEDY = {"temperature 0": {"temperature": 0.0}, "a temperature below 1e-5": {"temperature": 1e-6},
          "top_k 1": {"top_k": 1}}  # fmt: skip


@pytest.mark.parametrize("case", GREEDY)
def test_greedy_sampling_gives_every_completion_the_same_tokens_on_both(case):
    """Greedy sampling on the engine gives a prompt's completions the same tokens whatever the seed; the fake's were
    pseudo-random each, so a test of a caller's greedy decoding passed on the fake with tokens the engine never
    gives. A temperature of 1 gives different ones on both."""

    def run(s):
        def tokens(seed, **params):
            out = s.sample([[1, 2]], num_samples=3, max_tokens=6, seed=seed, **params).result(30)
            return [q.tokens for q in out.results[0].sequences]

        return tokens(1, **GREEDY[case]), tokens(2, **GREEDY[case]), tokens(1)

    for first, second, sampled in both(run):
        assert first == second and all(q == first[0] for q in first) and len(first[0]) == 6
        assert len({tuple(q) for q in sampled}) > 1


def test_config_records_the_seed_on_both():
    """``config()`` (a run's ``config.json``) records the engine's ``seed``; the fake's had none, so a comparison of
    runs by seed had no seed for a run on the fake."""
    engine = LocalBackend("adam", "tiny", seed=5)
    fake = FakeBackend(seed=5)
    try:
        assert engine.config()["seed"] == fake.config()["seed"] == 5
        assert set(fake.config()) <= set(engine.config())
    finally:
        engine.close()
        fake.close()

"""Hostile inputs that reach the in-process engine past the wire's validation: a sample changed after it was built
(pydantic checks a model once, not a list item set later; a ``Session`` validates its copy, a caller of
``LocalBackend.submit`` does not) or made by ``model_construct``, and what ``rlnb serve`` hands on as valid JSON.
Each fails its operation ``INVALID_INPUT`` naming the field, never ``INTERNAL_ERROR`` nor a silently other
computation."""

from __future__ import annotations

import pytest

import rlnb
from rlnb import samples, wire


@pytest.fixture(scope="module")
def session():
    with rlnb.connect("local", model="tiny", device="cpu", record=False) as s:
        yield s


def failed(op) -> wire.OperationError:
    with pytest.raises(rlnb.OperationFailed) as info:
        op.result(timeout=60)
    return info.value


def on_engine(session, batch: list[wire.Sample], *, forward_only: bool = False) -> wire.Operation:
    """A forward-backward of ``batch`` submitted to the engine as it is: past ``Session``'s checks (it validates a
    copy of each sample), as an in-process caller of the backend sends it. Its last envelope."""
    body = wire.ForwardBackwardBody.model_construct(
        samples=batch, loss=wire.loss_config("cross_entropy", None), forward_only=forward_only or None
    )
    got: list[wire.Operation] = []
    session.backend.submit(wire.OperationKind.FORWARD_BACKWARD, body, got.append)
    assert session.backend.wait_idle(60)
    return got[-1]


@pytest.mark.parametrize("bad", [1.5, 2.0, True])
def test_a_token_id_that_is_no_integer_fails_invalid_input_naming_it(session, bad):
    """1.5 reached the embedding (``INTERNAL_ERROR``: "Expected tensor for argument #1 'indices' to have one of the
    following scalar types"); True and 2.0 were read as the ids 1 and 2 in silence."""
    sample = samples.cross_entropy([1, 2, 3])
    sample.model_input.chunks[0].encoded_text.tokens[1] = bad
    err = on_engine(session, [sample]).error
    assert err is not None and err.code == wire.OperationErrorCode.INVALID_INPUT
    assert f"samples[0]: token {bad!r} at position 1 is {type(bad).__name__}, expected an integer id" in err.message
    assert all(p.grad is None for p in session.backend.trainer.parameters())


def test_a_float_after_numpy_ids_or_in_a_prompt_fails_invalid_input(session):
    """numpy integers are ids (a ``model_construct`` sample may hold them); a float after them is still named, and a
    sample's prompts are checked as a forward-backward's model inputs are."""
    np = pytest.importorskip("numpy")
    sample = samples.cross_entropy([1, 2, 3])
    sample.model_input.chunks[0].encoded_text.tokens[:] = [np.int64(1), 2.5]
    err = on_engine(session, [sample]).error
    assert err is not None and "token 2.5 at position 1 is float" in err.message
    sample.model_input.chunks[0].encoded_text.tokens[:] = [np.int64(1), 2]
    done = on_engine(session, [sample], forward_only=True)
    assert done.status == wire.OperationStatus.COMPLETED and done.output.loss > 0, done
    body = wire.SampleBody(model_inputs=[wire.ModelInput.from_tokens([1, 2])])
    body.model_inputs[0].chunks[0].encoded_text.tokens[0] = 1.5
    got: list[wire.Operation] = []
    session.backend.submit("sample", body, got.append)
    session.backend.wait_idle(60)
    assert got[-1].error is not None and got[-1].error.code == wire.OperationErrorCode.INVALID_INPUT, got[-1]
    assert "model_inputs[0]: token 1.5 at position 0 is float, expected an integer id" in got[-1].error.message


def policy_sample(**inputs: list[float]) -> wire.Sample:
    """A two-token completion after a one-token prompt, with these float32 inputs over the defaults."""
    given = {"logprobs": [-1.0, -1.0], "advantages": [1.0, 1.0], **inputs}
    tensors = {k: wire.TensorData(data=v, dtype="float32") for k, v in given.items()}
    tensors["target_tokens"] = wire.TensorData(data=[2, 3], dtype="int64")
    return wire.Sample(model_input=wire.ModelInput.from_tokens([1, 2]), loss_fn_inputs=tensors)


@pytest.mark.parametrize("loss", ["ppo", "importance_sampling", "cispo"])
def test_sampler_log_probs_above_zero_fail_invalid_input_naming_the_position(session, loss):
    """Probabilities sent as log-probs (0.9), or 1e30: the ratio e^(lp - q) was ~0 and the step trained on nothing
    (PPO's loss -0.0, COMPLETED); ``rlnb.samples.policy`` refused them, a sample written by hand or
    sent to ``rlnb serve`` did not."""
    err = failed(session.forward_backward([policy_sample(logprobs=[-0.5, 0.9])], loss))
    assert err.code == wire.OperationErrorCode.INVALID_INPUT
    assert "sample 0: input 'logprobs' is 0.9 at position 1: log-probabilities are <= 0" in str(err)
    assert all(p.grad is None for p in session.backend.trainer.parameters())


def test_a_log_prob_above_zero_where_it_is_not_read_is_taken(session):
    """A masked position is never read (a prompt's slot may hold anything), nor are reference log-probs with beta 0;
    a log-softmax that rounds a hair above 0 is a log-prob."""
    ok = policy_sample(logprobs=[5.0, 1e-5], reference_logprobs=[0.5, 0.5], mask=[0.0, 1.0])
    assert session.forward_backward([ok], "grpo", forward_only=True).result(timeout=60).metrics["loss/tokens"] == 1
    err = failed(session.forward_backward([ok], "grpo", {"beta": 0.1}, forward_only=True))
    assert "sample 0: input 'reference_logprobs' is 0.5 at position 1: log-probabilities are <= 0" in str(err)


def test_an_input_past_float32s_range_is_refused_naming_the_range(session):
    """1e39 is a finite JSON number (the wire takes it) and inf as the float32 the engine reads: the error said "has
    non-finite values" of a value that was finite as sent, naming no range."""
    err = failed(session.forward_backward([policy_sample(advantages=[1.0, 1e39])], "ppo"))
    assert err.code == wire.OperationErrorCode.INVALID_INPUT
    said = "sample 0: input 'advantages' has non-finite values: NaN, inf or past float32's range (+-3.403e+38)"
    assert said in str(err)


def test_a_batch_whose_logits_would_not_fit_the_free_memory_is_refused_before_the_forward(session, monkeypatch):
    """A forward-backward had no bound: samples x tokens x vocabulary logits (and their float32 log-softmax) took what
    memory there was, and failed only once allocated — or, where Linux overcommits, the process was killed (64
    samples of 4,096 tokens over Qwen3's 151,936-token vocabulary are 318 GB). The sample's KV cache was checked."""
    from rlnb.engine import inputs, memory

    batch = [samples.cross_entropy(list(range(1, 101)))] * 3  # 3 rows x 99 tokens x 256 logits x 8 bytes
    need = 3 * 99 * 256 * 8
    monkeypatch.setattr(inputs, "LOGITS_CHECKED", 0)  # this small batch is checked too
    monkeypatch.setattr(memory, "free_memory", lambda device: need - 1, raising=False)
    for op in (session.forward_backward(batch), session.forward_backward(batch, forward_only=True)):
        err = failed(op)
        assert err.code == wire.OperationErrorCode.RESOURCE_EXHAUSTED
        said = "(3 samples x 99 tokens (the longest) x 256 logits x 8 bytes: float32 logits and log-softmax)"
        assert said in str(err)
        assert "GiB free on cpu: send fewer or shorter samples at once" in str(err)
    assert all(p.grad is None for p in session.backend.trainer.parameters())
    monkeypatch.setattr(memory, "free_memory", lambda device: need)
    assert session.forward_backward(batch, forward_only=True).result(timeout=60).metrics["loss/tokens"] == 3 * 99
    monkeypatch.undo()  # logits under LOGITS_CHECKED: free memory is not read (it cost ~0.2 ms a step)
    monkeypatch.setattr(memory, "free_memory", lambda device: pytest.fail("free memory read for 0.6 MB of logits"))
    assert session.forward_backward(batch, forward_only=True).result(timeout=60).metrics["loss/tokens"] == 3 * 99


def test_a_sentinel_past_float32_at_a_masked_position_is_not_read(session):
    """Masked positions are never read (docs/reliability.md: a -1e30 sentinel there changes nothing), but one past
    float32's range (-1.7e308, float64's lowest, a common stand-in for -inf) was refused as "non-finite"; where the
    loss reads it, it still is."""
    sentinel = policy_sample(logprobs=[-1.7e308, -1.0], advantages=[1e300, 1.0], reference_logprobs=[-1e39, -1.0],
                             mask=[0.0, 1.0])  # fmt: skip
    neutral = policy_sample(logprobs=[0.0, -1.0], advantages=[0.0, 1.0], reference_logprobs=[0.0, -1.0],
                            mask=[0.0, 1.0])  # fmt: skip
    got, want = (session.forward_backward([s], "grpo", {"beta": 0.1}, forward_only=True).result(timeout=60)
                 for s in (sentinel, neutral))  # fmt: skip
    assert (got.loss, got.metrics) == (want.loss, want.metrics)
    read = policy_sample(logprobs=[-1.0, -1.7e308], mask=[0.0, 1.0])
    assert "input 'logprobs' has non-finite values" in str(failed(session.forward_backward([read], "ppo")))


def weights_set(**fields: object) -> wire.Sample:
    """A cross-entropy sample whose weights tensor has ``fields`` set after it was built (pydantic checks it once)."""
    sample = samples.cross_entropy([1, 2, 3], weights=[1.0, 1.0, 1.0])
    for name, value in fields.items():
        setattr(sample.loss_fn_inputs["weights"], name, value)
    return sample


BAD_TENSORS = {
    "text": ({"data": ["x", 1.0]}, "'x' at position 0 is str, expected a number"),
    "bool": ({"data": [1.0, True]}, "True at position 1 is bool, expected a number"),
    "None": ({"data": None}, "data must be a list of numbers, got NoneType"),
    "dtype": ({"dtype": "float16"}, "dtype 'float16' is not one of int64, float32"),
    "shape": ({"shape": [2, 1]}, "shape [2, 1] must be 1-D and equal to the data length 2"),
    "sparse": ({"sparse_col_indices": [0]}, "sparse tensors are reserved and rejected: sparse_crow_indices and "
               "sparse_col_indices must be null"),
    "past floats": ({"data": [1.0, 10**400]}, "float32 data holds a number past float32's range (+-3.403e+38)"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BAD_TENSORS))
def test_a_loss_input_that_breaks_the_wires_rules_fails_invalid_input_naming_it(session, case):
    """Text was ``INTERNAL_ERROR`` ("too many dimensions 'str'", "must be real number"), a bool the number 1, a float16
    or int32 dtype read as float32, ``shape`` and the sparse fields ignored: the run went on with a tensor the wire
    refuses (``rlnb serve`` answers each with a 400)."""
    fields, said = BAD_TENSORS[case]
    err = on_engine(session, [weights_set(**fields)]).error
    assert err is not None and err.code == wire.OperationErrorCode.INVALID_INPUT, err
    assert f"samples[0].loss_fn_inputs.weights: {said}" in err.message
    assert all(p.grad is None for p in session.backend.trainer.parameters())


@pytest.mark.parametrize(
    ("ids", "said"),
    [([1, 2**63], f"data[1] is {2**63}"), ([1.0, 2.0**63], "data[1] is 9.223372036854776e+18"),
     ([1.0, float("nan")], "data[1] is nan"), ([2, 10**400], "data[1] is 1000"), ([1, 2.5], "data[1] is 2.5")],
)  # fmt: skip
def test_target_ids_past_int64_or_not_whole_fail_invalid_input(session, ids, said):
    """NaN was ``INTERNAL_ERROR`` ("cannot convert float NaN to integer"); the rest guard the ids' check, now tensor
    ops where it was a Python loop per id. The first bad value is named (it was not: "int64 data must be integers")."""
    sample = samples.cross_entropy([1, 2, 3])
    sample.loss_fn_inputs["target_tokens"].data = ids
    err = on_engine(session, [sample]).error
    assert err is not None and err.code == wire.OperationErrorCode.INVALID_INPUT, err
    assert f"samples[0].loss_fn_inputs.target_tokens: {said}" in err.message  # the value named, as the wire's 400 does
    assert "but dtype int64 holds integers in int64's range only" in err.message


def test_ids_as_the_wire_holds_them_python_integers_or_numpy_numbers_read_the_same(session):
    """The wire holds int64 data as whole floats; a sample built past it may hold ints or numpy numbers: one loss."""
    np = pytest.importorskip("numpy")
    losses = []
    for ids, weights in (([2.0, 3.0], [1.0, 0.5]), ([2, 3], [1, 0.5]), ([np.int64(2), 3], [np.float32(1), 0.5])):
        sample = samples.cross_entropy([1, 2, 3], weights=[0.0, 1.0, 0.5])
        sample.loss_fn_inputs["target_tokens"].data = ids
        sample.loss_fn_inputs["weights"].data = weights
        done = on_engine(session, [sample], forward_only=True)
        assert done.status == wire.OperationStatus.COMPLETED, done
        losses.append(done.output.loss)
    assert losses[0] > 0 and losses == [losses[0]] * 3


def test_a_crafted_sample_of_dicts_fails_invalid_input_naming_the_part(session):
    """A body made with ``model_construct`` holds what it is given: a dict where a sample, its model input or a tensor
    belongs was ``INTERNAL_ERROR`` ("'dict' object has no attribute 'model_input'")."""
    good = samples.cross_entropy([1, 2, 3])
    crafted = {
        "samples[0] must be a Sample, got dict": good.model_dump(),
        "samples[0].model_input must be a ModelInput, got dict": good.model_copy(
            update={"model_input": good.model_input.model_dump()}
        ),
        "samples[0].loss_fn_inputs must be a dict, got list": good.model_copy(update={"loss_fn_inputs": []}),
        "samples[0].loss_fn_inputs.target_tokens must be a TensorData, got dict": good.model_copy(
            update={"loss_fn_inputs": {"target_tokens": {"data": [2, 3], "dtype": "int64"}}}
        ),
    }
    for said, sample in crafted.items():
        err = on_engine(session, [sample]).error
        assert err is not None and err.code == wire.OperationErrorCode.INVALID_INPUT, err
        assert said in err.message
    assert all(p.grad is None for p in session.backend.trainer.parameters())


def crafted_model_inputs() -> dict[str, object]:
    """Model inputs as a ``model_construct`` body may hold them, each with the part its refusal names."""
    good = wire.ModelInput.from_tokens([1, 2, 3])
    chunk = good.chunks[0]
    return {
        ".chunks must be a list, got dict": good.model_copy(update={"chunks": {"0": chunk}}),
        ".chunks[0] must be a ModelInputChunk, got dict": good.model_copy(update={"chunks": [chunk.model_dump()]}),
        ".chunks[0].encoded_text must be an EncodedText, got dict": good.model_copy(
            update={"chunks": [chunk.model_copy(update={"encoded_text": {"tokens": [1, 2, 3]}})]}
        ),
        ".chunks[0].encoded_text.tokens must be a list, got int": good.model_copy(
            update={"chunks": [chunk.model_copy(update={"encoded_text": wire.EncodedText.model_construct(tokens=3)})]}
        ),
    }


def test_a_crafted_model_input_of_dicts_fails_invalid_input_naming_the_part(session):
    """``ModelInput.tokens`` read ``c.encoded_text.tokens`` of each chunk: a dict chunk was ``INTERNAL_ERROR``
    ("'dict' object has no attribute 'encoded_text'"), in a forward-backward's sample and a sample request's prompt
    alike, and a prompt that is no ``ModelInput`` at all too; ``model_inputs`` of no length was the tuner's
    ``TypeError`` ("object of type 'int' has no len()")."""
    good = samples.cross_entropy([1, 2, 3])
    for said, model_input in crafted_model_inputs().items():
        err = on_engine(session, [good.model_copy(update={"model_input": model_input})]).error
        assert err is not None and err.code == wire.OperationErrorCode.INVALID_INPUT, err
        assert f"samples[0].model_input{said}" in err.message
    prompts = {f"model_inputs[0]{said}": mi for said, mi in crafted_model_inputs().items()}
    prompts["model_inputs[0] must be a ModelInput, got dict"] = wire.ModelInput.from_tokens([1, 2]).model_dump()
    for said, prompt in [*((s, [p]) for s, p in prompts.items()), ("model_inputs must be a list, got int", 5)]:
        got: list[wire.Operation] = []
        session.backend.submit("sample", wire.SampleBody.model_construct(model_inputs=prompt), got.append)
        assert session.backend.wait_idle(60)
        assert got[-1].error is not None and got[-1].error.code == wire.OperationErrorCode.INVALID_INPUT, got[-1]
        assert said in got[-1].error.message
    assert all(p.grad is None for p in session.backend.trainer.parameters())


BAD_GRADIENTS = [
    (["x", 0.1], "'x' at position 0 is str"),
    ([0.1, None], "None at position 1 is NoneType"),
    ((0.1, 0.2), "data must be a list of numbers, got tuple"),
]


@pytest.mark.parametrize(("data", "said"), BAD_GRADIENTS)
def test_a_custom_gradient_that_is_no_list_of_numbers_fails_invalid_input_naming_it(session, data, said):
    """Text or None in a custom forward-backward's gradients was ``INTERNAL_ERROR`` ("must be real number")."""
    gradient = wire.GradientTensor(data=[0.1, 0.2])
    gradient.data = data
    body = wire.CustomForwardBackwardBody.model_construct(samples=[samples.cross_entropy([1, 2, 3])],
                                                          gradients=[gradient])  # fmt: skip
    got: list[wire.Operation] = []
    session.backend.submit(wire.OperationKind.CUSTOM_FORWARD_BACKWARD, body, got.append)
    assert session.backend.wait_idle(60)
    err = got[-1].error
    assert err is not None and err.code == wire.OperationErrorCode.INVALID_INPUT, err
    assert f"gradients[0]: {said}" in err.message
    assert all(p.grad is None for p in session.backend.trainer.parameters())


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"num_samples": "3"}, "num_samples must be an integer in [1, "),
        ({"num_samples": 0}, "num_samples must be an integer in [1, "),
        ({"num_samples": 2.0}, "num_samples must be an integer in [1, "),
        ({"sampling_params": wire.SamplingParams.model_construct(max_tokens="5")}, "sampling_params.max_tokens"),
        ({"sampling_params": wire.SamplingParams.model_construct(temperature="hot")}, "sampling_params.temperature"),
        ({"sampling_params": {"max_tokens": 2}}, "sampling_params must be a SamplingParams, got dict"),
    ],
)
def test_a_crafted_sample_request_of_bad_scalars_fails_invalid_input_naming_the_field(session, fields, said):
    """A ``model_construct`` sample request with ``num_samples="3"`` was ``INTERNAL_ERROR`` ("'>' not supported
    between instances of 'str' and 'int'"), and the tuner sized it as the string "3" repeated; its sampling params
    reached the sampler unchecked."""
    body = wire.SampleBody.model_construct(model_inputs=[wire.ModelInput.from_tokens([1, 2])], **fields)
    got: list[wire.Operation] = []
    session.backend.submit("sample", body, got.append)
    assert session.backend.wait_idle(60)
    assert got[-1].error is not None and got[-1].error.code == wire.OperationErrorCode.INVALID_INPUT, got[-1]
    assert said in got[-1].error.message

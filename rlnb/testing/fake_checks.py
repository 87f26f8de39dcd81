"""The engine's refusals of a request that live in its torch modules (``rlnb.engine.inputs``' sample reading and
custom gradients, ``sample_inputs.sample_request``, ``sampling.check_stop``, ``optim.limits.StepLimits``,
``NonFiniteGradient``), made again over a body's plain lists for ``FakeBackend``, in the engine's words and order:
``tests/testing/test_fidelity_checks.py`` runs each case on both and compares the words. The pretend model's weights
are float32, as the built-in ``tiny``'s are."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import pydantic

from rlnb import params as params_mod
from rlnb import wire
from rlnb.engine.refusals import InvalidLossInput, check_read, check_tokens, mask_key
from rlnb.errors import OperationError
from rlnb.prompts import EMPTY_STOP, no_room
from rlnb.wire import OperationErrorCode as Code
from rlnb.wire.inputs import outside_vocab
from rlnb.wire.loss_params import FLOAT32_MAX

if TYPE_CHECKING:
    from rlnb.testing.fake import FakeBackend

FLOAT32_LEAST = 2.0**-149
"""float32's least positive number: an AdamW ``eps`` below it rounds to it or to 0 in the weights."""
MUON_SCALE = 2.0
"""Muon's largest shape scale on ``tiny`` (its 4:1 MLP matrices, ``original`` scaling): a Muon step's factor."""
_ROUNDS_TO_INF = 2.0**128 - 2.0**103
"""The least magnitude float32 rounds to inf (halfway past its largest, which rounds up)."""
_TORCH_DTYPE = {"int64": "torch.int64", "float32": "torch.float32"}
Inputs = dict[str, wire.TensorData]


def refuse(message: str) -> OperationError:
    return OperationError(Code.INVALID_INPUT, message)


def must_be(value: object, kind: type, where: str) -> None:
    """``INVALID_INPUT`` naming ``where`` unless ``value`` is a ``kind`` (``rlnb.engine.inputs.must_be``)."""
    if not isinstance(value, kind):
        a = "an" if kind.__name__[0] in "AEIOU" else "a"
        raise refuse(f"{where} must be {a} {kind.__name__}, got {type(value).__name__}")


def finite32(data: list[float]) -> bool:
    """Whether every value is finite once read as float32 (past its range is inf there)."""
    return not data or (math.isfinite(sum(map(abs, data))) and max(map(abs, data)) < _ROUNDS_TO_INF)


def read_sample(fake: FakeBackend, i: int, s: wire.Sample) -> tuple[Inputs, int]:
    """Sample ``i``'s loss inputs and its length, its tokens and target ids checked as ``rlnb.engine.inputs``
    checks them (every sample's, before any loss input's key)."""
    n = len(check_tokens(fake, s.model_input.tokens, f"samples[{i}]"))
    x = s.loss_fn_inputs
    ids = x["target_tokens"].data if "target_tokens" in x and x["target_tokens"].dtype == "int64" else None
    if ids and fake.vocab_size is not None and not 0 <= min(ids) <= max(ids) < fake.vocab_size:
        raise refuse(f"samples[{i}].loss_fn_inputs.target_tokens: {outside_vocab(ids, fake.vocab_size)}")
    return x, n


def check_input(where: str, key: str, td: wire.TensorData, n: int) -> None:
    """A loss input's dtype, length and finiteness (``rlnb.engine.loss_inputs.check_input``)."""
    dtypes = wire.LOSS_INPUT_DTYPES[key]
    if td.dtype not in dtypes:
        allowed = " or ".join(_TORCH_DTYPE[d] for d in dtypes)
        raise InvalidLossInput(f"{where} must be {allowed}, got {_TORCH_DTYPE.get(td.dtype, td.dtype)}")
    if len(td.data) != n:
        raise InvalidLossInput(f"{where} must be 1-D of length {n} (the model input's), got ({len(td.data)},)")
    if td.dtype == "float32" and not finite32(td.data):
        said = f"NaN, inf or past float32's range (+-{FLOAT32_MAX:.4g}), which the engine reads them in"
        raise InvalidLossInput(f"{where} has non-finite values: {said}")


def custom_gradients(fake: FakeBackend, body: wire.CustomForwardBackwardBody) -> None:
    """A custom forward-backward's body as the engine checks it: its samples, the keys of their inputs, one gradient
    per sample with one value per token, ``target_tokens`` and the mask; ``NON_FINITE_LOSS`` for a gradient that is
    not finite in float32."""
    if not body.samples:
        raise refuse("samples is empty")
    read = [read_sample(fake, i, s) for i, s in enumerate(body.samples)]
    try:
        check_read(None, [x for x, _ in read])
    except InvalidLossInput as exc:
        raise refuse(str(exc)) from None
    if len(body.gradients) != len(read):
        raise refuse(f"gradients has {len(body.gradients)} entries for {len(read)} samples")
    for i, ((x, n), g) in enumerate(zip(read, body.gradients, strict=True)):
        where = f"samples[{i}].loss_fn_inputs"
        if "target_tokens" not in x:
            raise refuse(f"{where}.target_tokens is required")
        try:
            check_input(f"{where}.target_tokens", "target_tokens", x["target_tokens"], n)
            if len(g.data) != n:
                raise refuse(f"gradients[{i}] has {len(g.data)} values for {n} tokens")
            key = mask_key(where, x)
            if key is not None:
                check_input(f"{where}.{key}", key, x[key], n)
        except InvalidLossInput as exc:
            raise refuse(str(exc)) from None
        if not finite32(g.data):
            raise OperationError(Code.NON_FINITE_LOSS, f"gradients[{i}] is not finite; no gradients were accumulated")


def step_limits(hp: params_mod.Hyperparams) -> None:
    """A ``ValueError`` naming the field where ``hp`` would corrupt or half-step float32 weights: an AdamW ``eps``
    that is 0 there, a step factor past its range (``rlnb.engine.optim.limits.StepLimits.check``)."""
    muon = isinstance(hp, params_mod.MuonHyperparams)
    adam = hp.adam if isinstance(hp, params_mod.MuonHyperparams) else hp
    prefix = "muon_params.adam." if muon else "adam_params."
    least = float(f"{FLOAT32_LEAST:.3g}")
    if adam.eps < least:
        what = "0" if adam.eps <= FLOAT32_LEAST / 2 else f"below {least:g}, the least positive number"
        raise ValueError(
            f"{prefix}eps {adam.eps:g} is {what} in float32, the dtype of the weights AdamW updates: an eps of 0 there "
            f"turns every weight whose gradient is 0 into 0/0 = NaN; give {prefix}eps >= {least:g}"
        )
    factors = [(f"{prefix}learning_rate", adam.learning_rate / (1 - adam.beta1))]
    if isinstance(hp, params_mod.MuonHyperparams):
        factors.append(("muon_params.learning_rate", hp.learning_rate * MUON_SCALE))
    for field, value in factors:
        if value > FLOAT32_MAX:
            raise ValueError(f"{field} is too large: the update would multiply by {value:.3g}, past the "
                             f"{FLOAT32_MAX:.3g} the weights' dtype holds; give a smaller one")  # fmt: skip


def non_finite_gradients(norm: float) -> str:
    """A ``NON_FINITE_LOSS`` optim-step's message (``NonFiniteGradient.dropped``'s): the fake has no parameters to
    name."""
    return (
        f"gradient norm is {norm}; non-finite gradients in: every parameter (FakeBackend's grad_norm); parameters "
        "and optimizer state unchanged, the accumulated gradients dropped (run a forward-backward to train on)"
    )


def sample_request(fake: FakeBackend, body: wire.SampleBody) -> tuple[wire.SamplingParams, int, list[list[int]]]:
    """A sample request as the engine checks it (``sample_inputs.sample_request``, then ``sampling.check_stop``): its
    sampling params by the wire's rules again (a ``model_construct`` body skipped them), ``num_samples``, each prompt's
    tokens with room for ``max_tokens``, the stop strings."""
    sp = _sampling_params(body.sampling_params)
    n = 1 if body.num_samples is None else body.num_samples
    if type(n) is not int or not 1 <= n <= fake.max_num_samples:
        raise refuse(f"num_samples must be an integer in [1, {fake.max_num_samples}], got {n!r}")
    must_be(body.model_inputs, list, "model_inputs")
    if not body.model_inputs:
        raise refuse("model_inputs is empty")
    stop, length = sp.stop or [], sp.max_tokens or wire.DEFAULT_MAX_TOKENS
    empty = next((i for i, s in enumerate(stop) if not s), None)
    if empty is not None:
        raise refuse(f"sampling_params.stop[{empty}] {EMPTY_STOP}")
    prompts = []
    for i, mi in enumerate(body.model_inputs):
        must_be(mi, wire.ModelInput, f"model_inputs[{i}]")
        prompt = check_tokens(fake, mi.tokens, f"model_inputs[{i}]")
        why = None if fake.context_length is None else no_room(len(prompt), length, fake.context_length)
        if why is not None:
            raise refuse(f"model_inputs[{i}]: {why}")
        prompts.append(prompt)
    if len(stop) > fake.max_stop_strings:
        raise refuse(f"sampling_params.stop has {len(stop)} strings; the limit is {fake.max_stop_strings}")
    at = max(range(len(stop)), key=lambda i: len(stop[i]), default=None)
    if at is not None and len(stop[at]) > fake.max_stop_chars:
        raise refuse(f"sampling_params.stop[{at}] has {len(stop[at])} characters; the limit is "
                     f"{fake.max_stop_chars} per stop string")  # fmt: skip
    return sp, n, prompts


def _sampling_params(sp: Any) -> wire.SamplingParams:
    if sp is None:
        return wire.SamplingParams()
    must_be(sp, wire.SamplingParams, "sampling_params")
    try:
        return wire.SamplingParams.model_validate(dict(sp))
    except pydantic.ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        raise refuse(f"sampling_params.{where}: {error['msg']}") from None


def greedy(sp: wire.SamplingParams) -> bool:
    """Whether the engine samples ``sp`` greedily: every completion of a prompt the same, whatever the seed."""
    return (sp.temperature is not None and sp.temperature < wire.MIN_TEMPERATURE) or sp.top_k == 1

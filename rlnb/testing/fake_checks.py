"""The engine's checks of a request, in its order, over a body's plain lists for ``FakeBackend``: each rule and its
words are the engine's own, from ``rlnb.engine.refusals`` (what its torch modules ``inputs``, ``loss_inputs``,
``sample_inputs`` and ``optim.limits`` call too) and ``optim.failures``; here is only the walk over the body, and
what a list says where the engine reads a tensor (float32 finiteness). ``tests/testing/test_fidelity_checks.py`` runs
each case on both and compares the words. The pretend model's weights are float32, as the built-in ``tiny``'s are."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rlnb import params as params_mod
from rlnb import wire
from rlnb.engine.optim.failures import NonFiniteGradient
from rlnb.engine.refusals import (
    InvalidLossInput,
    check_empty_stop,
    check_gradient_length,
    check_gradients,
    check_loaded,
    check_read,
    check_step,
    check_stop,
    check_target_ids,
    check_tokens,
    mask_key,
    must_be,
    no_routing_key,
    non_finite_gradient,
    require_targets,
    sample_head,
)
from rlnb.errors import OperationError
from rlnb.text.prompts import no_room
from rlnb.wire import OperationErrorCode as Code
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


def finite32(data: list[float]) -> bool:
    """Whether every value is finite once read as float32 (past its range is inf there)."""
    return not data or (math.isfinite(sum(map(abs, data))) and max(map(abs, data)) < _ROUNDS_TO_INF)


def read_sample(fake: FakeBackend, i: int, s: wire.Sample) -> tuple[Inputs, int]:
    """Sample ``i``'s loss inputs and its length, its tokens and target ids checked as ``rlnb.engine.inputs``
    checks them (every sample's, before any loss input's key)."""
    n = len(check_tokens(fake, s.model_input.tokens, f"samples[{i}]"))
    if s.routed_experts_key is not None:
        raise no_routing_key(i)
    x = s.loss_fn_inputs
    if "target_tokens" in x:
        check_target_ids(f"samples[{i}].loss_fn_inputs.target_tokens", x["target_tokens"], fake.vocab_size)
    return x, n


def check_input(where: str, key: str, td: wire.TensorData, n: int) -> None:
    """A loss input's dtype, length and finiteness (``refusals.check_loaded``, as ``loss_inputs.check_input`` calls
    it)."""
    dtype = _TORCH_DTYPE.get(td.dtype, td.dtype)
    check_loaded(where, key, dtype, (len(td.data),), n, lambda: finite32(td.data))


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
    check_gradients(len(body.gradients), len(read))
    for i, ((x, n), g) in enumerate(zip(read, body.gradients, strict=True)):
        where = f"samples[{i}].loss_fn_inputs"
        require_targets(where, x)
        try:
            check_input(f"{where}.target_tokens", "target_tokens", x["target_tokens"], n)
            check_gradient_length(i, len(g.data), n)
            key = mask_key(where, x)
            if key is not None:
                check_input(f"{where}.{key}", key, x[key], n)
        except InvalidLossInput as exc:
            raise refuse(str(exc)) from None
        if not finite32(g.data):
            raise non_finite_gradient(i)


def step_limits(hp: params_mod.Hyperparams) -> None:
    """A ``ValueError`` naming the field where ``hp`` would corrupt or half-step float32 weights
    (``refusals.check_step``, as ``rlnb.engine.optim.limits.StepLimits.check`` calls it)."""
    check_step(hp, [("float32", FLOAT32_LEAST)], FLOAT32_MAX, FLOAT32_MAX, MUON_SCALE)


def non_finite_gradients(norm: float) -> str:
    """A ``NON_FINITE_LOSS`` optim-step's message (``NonFiniteGradient.dropped``'s): the fake has no parameters to
    name."""
    return NonFiniteGradient(norm, ["every parameter (FakeBackend's grad_norm)"]).dropped()


def sample_request(fake: FakeBackend, body: wire.SampleBody) -> tuple[wire.SamplingParams, int, list[list[int]]]:
    """A sample request as the engine checks it (``sample_inputs.sample_request``, then ``refusals.check_stop``): its
    sampling params by the wire's rules again (a ``model_construct`` body skipped them), ``num_samples``, each prompt's
    tokens with room for ``max_tokens``, the stop strings."""
    sp, n = sample_head(body, fake.max_num_samples)
    stop, length = sp.stop or [], sp.max_tokens or wire.DEFAULT_MAX_TOKENS
    check_empty_stop(stop)
    prompts = []
    for i, mi in enumerate(body.model_inputs):
        must_be(mi, wire.ModelInput, f"model_inputs[{i}]")
        prompt = check_tokens(fake, mi.tokens, f"model_inputs[{i}]")
        why = None if fake.context_length is None else no_room(len(prompt), length, fake.context_length)
        if why is not None:
            raise refuse(f"model_inputs[{i}]: {why}")
        prompts.append(prompt)
    check_stop(stop, fake.max_stop_strings, fake.max_stop_chars)
    return sp, n, prompts


def greedy(sp: wire.SamplingParams) -> bool:
    """Whether the engine samples ``sp`` greedily: every completion of a prompt the same, whatever the seed."""
    return (sp.temperature is not None and sp.temperature < wire.MIN_TEMPERATURE) or sp.top_k == 1

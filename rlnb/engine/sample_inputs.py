"""A sample request's inputs checked before anything is decoded (``rlnb.engine.handlers.sample``): its sampling
params by the wire's rules again, ``num_samples``, the decoding settings and each prompt's tokens (``inputs``' checks,
shared with the training kinds), each error naming the request's field.
"""

from __future__ import annotations

import pydantic

from rlnb import wire
from rlnb.engine import sampling
from rlnb.engine.inputs import check_tokens, model_tokens, must_be
from rlnb.engine.models.adapter import ModelAdapter
from rlnb.errors import OperationError
from rlnb.prompts import EMPTY_STOP, no_room
from rlnb.text import NoTokenizerCodec
from rlnb.wire import MAX_NUM_SAMPLES
from rlnb.wire import OperationErrorCode as Code
from rlnb.wire.loss_params import FLOAT32_MAX


def _sampling_params(sp: object) -> wire.SamplingParams:
    """``sp`` checked by the wire's rules again: a crafted body's (``model_construct``) skipped them, and its text
    ``max_tokens`` or ``temperature`` reached the sampler (``INTERNAL_ERROR``)."""
    if sp is None:
        return wire.SamplingParams()
    must_be(sp, wire.SamplingParams, "sampling_params")
    try:
        return wire.SamplingParams.model_validate(dict(sp))  # type: ignore[call-overload]
    except pydantic.ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        raise OperationError(Code.INVALID_INPUT, f"sampling_params.{where}: {error['msg']}") from None


def sample_request(
    adapter: ModelAdapter, body: wire.SampleBody
) -> tuple[wire.SamplingParams, int, sampling.Settings, list[list[int]]]:
    """A sample request checked: its sampling params (defaults filled), completions per prompt, the
    decoding settings and each prompt's tokens, which leave room for ``max_tokens`` in the context."""
    sp = _sampling_params(body.sampling_params)
    n = 1 if body.num_samples is None else body.num_samples
    if type(n) is not int or not 1 <= n <= MAX_NUM_SAMPLES:  # a crafted body's "3" or 2.0 was INTERNAL_ERROR
        raise OperationError(Code.INVALID_INPUT, f"num_samples must be an integer in [1, {MAX_NUM_SAMPLES}], got {n!r}")
    must_be(body.model_inputs, list, "model_inputs")
    if not body.model_inputs:
        raise OperationError(Code.INVALID_INPUT, "model_inputs is empty")
    settings = sampling.Settings(
        max_tokens=sp.max_tokens or wire.DEFAULT_MAX_TOKENS,
        # logits are float32: a larger temperature is inf there, and a masked (-inf) logit over it NaN, so every row
        # drew the vocabulary's last token; at float32's largest every unmasked token is as likely, the limit
        temperature=1.0 if sp.temperature is None else min(sp.temperature, FLOAT32_MAX),
        top_p=1.0 if sp.top_p is None else sp.top_p,
        top_k=-1 if sp.top_k is None else sp.top_k,
        stop=tuple(sp.stop or ()),
        eos=adapter.codec.eos_token_ids,
    )
    empty = next((i for i, s in enumerate(settings.stop) if not s), None)
    if empty is not None:  # else ignored here, where a server that matches it ends every sequence at once
        raise OperationError(Code.INVALID_INPUT, f"sampling_params.stop[{empty}] {EMPTY_STOP}")
    codec = adapter.codec
    if settings.stop and isinstance(codec, NoTokenizerCodec):  # stop strings are matched on decoded text
        raise OperationError(Code.INVALID_INPUT, f"sampling_params.stop: {codec.refusal()}")
    context = adapter.context_length
    prompts = []
    for i, mi in enumerate(body.model_inputs):
        prompt = check_tokens(adapter, model_tokens(mi, f"model_inputs[{i}]"), f"model_inputs[{i}]")
        why = no_room(len(prompt), settings.max_tokens, context)
        if why is not None:
            raise OperationError(Code.INVALID_INPUT, f"model_inputs[{i}]: {why}")
        prompts.append(prompt)
    return sp, n, settings, prompts

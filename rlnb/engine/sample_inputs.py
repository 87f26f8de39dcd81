"""A sample request's inputs checked before anything is decoded (``rlnb.engine.handlers.sample``): its sampling
params by the wire's rules again, ``num_samples``, the decoding settings and each prompt's tokens (``inputs``' checks,
shared with the training kinds), each error naming the request's field.
"""

from __future__ import annotations

from rlnb import wire
from rlnb.engine import sampling
from rlnb.engine.inputs import model_tokens
from rlnb.engine.models.adapter import ModelAdapter
from rlnb.engine.refusals import check_empty_stop, check_tokens, sample_head
from rlnb.errors import OperationError
from rlnb.text.codec import NoTokenizerCodec
from rlnb.text.prompts import no_room
from rlnb.wire import MAX_NUM_SAMPLES
from rlnb.wire import OperationErrorCode as Code
from rlnb.wire.loss_params import FLOAT32_MAX


def sample_request(
    adapter: ModelAdapter, body: wire.SampleBody
) -> tuple[wire.SamplingParams, int, sampling.Settings, list[list[int]]]:
    """A sample request checked: its sampling params (defaults filled), completions per prompt, the
    decoding settings and each prompt's tokens, which leave room for ``max_tokens`` in the context."""
    sp, n = sample_head(body, MAX_NUM_SAMPLES)
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
    check_empty_stop(settings.stop)  # else ignored here, where a server that matches it ends every sequence at once
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

"""Sampling: the sample request, its settings, and the completions it returns."""

from __future__ import annotations

from typing import Annotated, Final, Literal, TypeAlias

from pydantic import FailFast, Field, Strict

from rlnb.wire.base import (
    INT32_MAX,
    NUMBER_ONLY,
    Int64,
    Newer,
    StrictBool,
    StrictInt,
    _Model,
    _Request,
)
from rlnb.wire.inputs import ModelInput
from rlnb.wire.lists import Int64List, LogProbList

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "MAX_NUM_SAMPLES",
    "MAX_STOP_CHARS",
    "MIN_TEMPERATURE",
    "MAX_STOP_STRINGS",
    "STOP_REASON_LENGTH",
    "STOP_REASON_STOP",
    "PolicyVersionSegment",
    "PromptTopLogprobs",
    "SampleBody",
    "SampleOutput",
    "SampleResult",
    "SampledSequence",
    "SamplingParams",
    "StopReason",
]

StopReason: TypeAlias = Literal["STOP_REASON_LENGTH", "STOP_REASON_STOP"]
"""Why a sampled sequence ended: ``max_tokens`` reached (LENGTH) or a stop string / EOS (STOP)."""
STOP_REASON_LENGTH: Final[StopReason] = "STOP_REASON_LENGTH"
"""A sequence that reached ``max_tokens`` before EOS or a stop string (TRL calls it clipped)."""
STOP_REASON_STOP: Final[StopReason] = "STOP_REASON_STOP"
"""A sequence that ended at EOS or a stop string."""

DEFAULT_MAX_TOKENS = 16
"""``max_tokens`` when a sample request leaves it unset (rlnb's backends; advertised by ``rlnb serve``)."""

MAX_NUM_SAMPLES = 256
"""Completions per prompt in one sample operation: the in-process engine's bound, ``rlnb serve``'s and
``FakeBackend``'s."""
MAX_STOP_STRINGS = 16
"""Stop strings of one sample request: ``rlnb serve``'s default limit (``max_stop_strings``), and the in-process
engine's bound (each new token is searched for every stop string, in every row)."""
MAX_STOP_CHARS = 256
"""Characters of one stop string: ``rlnb serve``'s default limit (``max_stop_chars``), and the in-process engine's."""
MIN_TEMPERATURE = 1e-5
"""Below this temperature rlnb's sampler is greedy (dividing logits by a tinier one overflows); RL steps refuse it."""


class SamplingParams(_Model):
    """Sampling settings of one sample request; unset fields take the session's defaults. The integers other than
    ``seed`` are the API's plain (int32) ones: a larger one, sent, would be for a server to refuse or wrap."""

    max_tokens: Annotated[StrictInt, Field(ge=1, le=INT32_MAX)] | None = None
    temperature: Annotated[float, Strict(), Field(ge=0, allow_inf_nan=False), NUMBER_ONLY] | None = None
    top_p: Annotated[float, Strict(), Field(gt=0, le=1, allow_inf_nan=False), NUMBER_ONLY] | None = None
    top_k: Annotated[StrictInt, Field(ge=-1, le=INT32_MAX)] | None = None
    """-1 = off (the API's word); 0 is off too (as vLLM takes it), and so is a k at or past the vocabulary."""
    stop: list[str] | None = Field(default=None, fail_fast=True)
    seed: Int64 | None = None
    """Same seed + same prompt at the same index of the request + same weights -> same tokens (rlnb's backends)."""


class SampleBody(_Request):
    """The sample request: prompts, samples per prompt, sampling settings, prompt log-probs."""

    model_inputs: Annotated[list[ModelInput], FailFast()]  # the first bad prompt's error only
    num_samples: Annotated[StrictInt, Field(ge=1, le=INT32_MAX)] | None = None
    sampling_params: SamplingParams | None = None
    prompt_logprobs: StrictBool | None = None
    topk_prompt_logprobs: Annotated[StrictInt, Field(ge=0, le=20)] | None = None
    """0 disables; at most 20."""
    return_routed_experts: StrictBool | None = None
    payload_id: str | None = None
    """The uploaded body replaces the inline stand-in."""


class PolicyVersionSegment(_Model):
    """From ``start_token`` on, the tokens came from policy ``version`` (weights may change mid-sample)."""

    start_token: int
    version: int


class SampledSequence(_Model):
    """One completion: its tokens, log-probs and stop reason (``text`` is decoded client-side)."""

    tokens: Int64List
    stop_reason: Annotated[StopReason, Newer]
    prompt_cache_hit_tokens: int = 0
    logprobs: LogProbList | None = None
    routed_experts_key: str | None = None
    text: str | None = Field(default=None, exclude=True)
    """rlnb, client side: ``tokens`` decoded with the session's tokenizer. Never sent on the wire."""


class PromptTopLogprobs(_Model):
    """The top-k candidate tokens and their log-probs at one prompt position."""

    token_ids: list[int] = Field(default_factory=list)
    logprobs: LogProbList = Field(default_factory=list)


class SampleResult(_Model):
    """The completions of one prompt, with its prompt log-probs when asked for."""

    policy_segments: list[PolicyVersionSegment]
    sequences: list[SampledSequence]
    prompt_logprobs: LogProbList | None = None
    """A token the model gives probability 0 has ``-inf`` (``"-Infinity"`` in JSON: ``LogProb``)."""
    topk_prompt_logprobs: list[PromptTopLogprobs] | None = None


class SampleOutput(_Model):
    """The output of a sample operation: one ``SampleResult`` per prompt, in request order."""

    results: list[SampleResult]

"""Build wire ``Sample``s from plain token lists, or from text with a tokenizer.

The API's position convention: ``model_input = (prompt + response)[:-1]`` and slot ``i`` of every
loss tensor describes the token predicted at position ``i``, i.e. ``(prompt + response)[i + 1]``.
These helpers do that shift so notebook code can think in whole sequences.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from rlnb import wire
from rlnb._input.checks import check_bool
from rlnb.text.codec import Message, as_codec, to_tokens
from rlnb.text.prompts import a_type, check_messages, check_text, token_ids
from rlnb.wire.lists import only
from rlnb.wire.loss_params import FLOAT32_MAX  # the engine reads loss inputs as float32: past it, inf

LOGPROB_SLACK = 1e-4
"""How far above 0 a log-prob may round (a certain token's log-softmax) before it is refused as not one."""
ID_MAX = 2**63 - 1
"""The largest token id the wire's int64 carries."""


def _tensor(data: Sequence[float], dtype: wire.TensorDType, name: str = "") -> wire.TensorData:
    """``data`` as wire tensor data; a value it cannot hold (NaN, inf; past float32's range, inf on the engine, which
    would fail the forward-backward as "non-finite") is refused naming the argument ``name``."""
    data = list(data)
    if dtype == "float32" and not _within(data, -FLOAT32_MAX, FLOAT32_MAX):  # int64: ids ``_ids`` checked, a mask
        bad = next((v for v in data if not -FLOAT32_MAX <= v <= FLOAT32_MAX), None)  # one pass: NaN fails it too
        if bad is not None and not math.isfinite(bad):
            raise ValueError(f"{name} must be finite numbers, got {bad}")
        if bad is not None:
            raise ValueError(f"{name} must be numbers a float32 holds (at most {FLOAT32_MAX:.4g} in size), got {bad:g}")
    return wire.TensorData(data=data, dtype=dtype)


def _within(values: list[float], low: float, high: float) -> bool:
    """Whether every float of ``values`` is in [``low``, ``high``], in C passes (a NaN or inf anywhere makes the sum
    one); False sends the caller to its item-by-item search, which finds the one to name."""
    return not values or (math.isfinite(sum(values)) and low <= min(values) and max(values) <= high)


def _ids(tokens: Any, name: str) -> list[int]:
    """``tokens`` as a list of ints >= 0 (``text.prompts.token_ids``); text is refused pointing to ``from_text``."""
    if isinstance(tokens, str):
        raise TypeError(f"{name} must be token ids, not text: use samples.from_text(session, prompt, completion)")
    listed = tokens.tolist() if hasattr(tokens, "tolist") else tokens  # an array's or tensor's are plain ints
    plain = type(listed) in (list, tuple) and only(listed, int)  # the common case: no Python step per id
    if plain and (not listed or 0 <= min(listed) <= max(listed) <= ID_MAX):
        return list(listed)  # anything else is converted or named below
    ids = token_ids(tokens, name)
    bad = next((i for i, t in enumerate(ids) if not 0 <= t <= ID_MAX), None)
    if bad is not None:  # else sent and refused by the engine, or past int64 a raw pydantic error on EncodedText
        rule = ">= 0" if ids[bad] < 0 else "< 2**63 (the wire's int64)"
        raise ValueError(f"{name} must be token ids {rule}, got {ids[bad]} at index {bad}")
    return ids


def _logprobs(values: Any, name: str, n: int) -> list[float]:
    """``values`` as ``n`` log-probs (<= 0, up to ``LOGPROB_SLACK``): probabilities passed by mistake are refused."""
    lps = _numbers(values, name)
    if len(lps) != n:
        raise ValueError(f"{name} has {len(lps)} entries for {n} completion tokens")
    if max(lps, default=0.0) <= LOGPROB_SLACK:  # at C speed; a NaN is never above, one first makes max() NaN
        return lps
    above = next((i for i, lp in enumerate(lps) if LOGPROB_SLACK < lp < math.inf), None)  # inf: _tensor's error
    if above is not None:
        raise ValueError(f"{name} are log-probabilities (<= 0), got {lps[above]} at index {above}: pass log-probs, "
                         "not probabilities")  # fmt: skip
    return lps


def _numbers(values: Any, name: str) -> list[float]:
    """``values`` (a list, an array, a generator) as floats; a bool, text or anything but a real number is a
    ``TypeError`` naming ``name`` (``True`` is 1.0 in Python, a weight or advantage no one meant)."""
    listed = values.tolist() if hasattr(values, "tolist") else values
    if isinstance(listed, str | bytes) or not isinstance(listed, Sequence | Iterator):
        raise TypeError(f"{name} must be a list of numbers, got {a_type(listed)}")
    listed = list(listed)
    if not (only(listed, float) or only(listed, int)):  # plain numbers (an array's tolist() too): no step per item
        bad = next((v for v in listed if isinstance(v, bool) or not isinstance(v, numbers.Real)), None)
        if bad is not None:
            raise TypeError(f"{name} must be numbers, got {bad!r}")
    try:
        return list(map(float, listed))
    except OverflowError:  # an int no float holds (10**400): Python's message names no argument
        raise ValueError(f"{name} must be numbers a float32 holds (at most {FLOAT32_MAX:.4g} in size), got an "
                         "integer past any float") from None  # fmt: skip


def gradient(values: Any, name: str = "gradient") -> wire.GradientTensor:
    """One sample's gradient for ``Session.custom_forward_backward``: d loss / d log-prob of each of its tokens (one
    value per token of its ``model_input``, as its ``target_tokens``), a list, array or tensor, or a
    ``wire.GradientTensor`` (or its dict). A value no float32 holds (NaN, inf, past its range: the engine's
    ``NON_FINITE_LOSS``, once sent) is refused naming ``name``."""
    if isinstance(values, wire.GradientTensor | Mapping):
        grad = wire.GradientTensor.model_validate(values)  # a copy below: the operation runs later
        return wire.GradientTensor(data=_tensor(grad.data, "float32", name).data, dtype=grad.dtype)
    return wire.GradientTensor(data=_tensor(_numbers(values, name), "float32", name).data)


def cross_entropy(tokens: Sequence[int], weights: Sequence[float] | None = None) -> wire.Sample:
    """A supervised sample: predict every token of ``tokens`` from the ones before it.

    ``weights`` (optional) has one entry per token of ``tokens``: how much predicting that token
    counts (e.g. ``[0] * len(prompt) + [1] * len(answer)``). ``weights[0]`` is unused, since the
    first token is never predicted. Fractional weights are honoured.
    """
    tokens = _ids(tokens, "tokens")
    if len(tokens) < 2:
        raise ValueError(f"tokens needs at least 2 entries (one input, one target), got {len(tokens)}")
    weights = [1.0] * len(tokens) if weights is None else _numbers(weights, "weights")
    if len(weights) != len(tokens):
        raise ValueError(f"weights has {len(weights)} entries; it needs one per token ({len(tokens)})")
    return wire.Sample(
        model_input=wire.ModelInput.from_tokens(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": _tensor(tokens[1:], "int64"),
            "weights": _tensor(weights[1:], "float32", "weights"),
        },
    )


def policy(
    prompt_tokens: Sequence[int],
    completion_tokens: Sequence[int],
    sampler_logprobs: Sequence[float],
    advantage: float | Sequence[float],
    reference_logprobs: Sequence[float] | None = None,
) -> wire.Sample:
    """A policy-gradient sample (GRPO, PPO, importance sampling, ...) for one sampled completion.

    ``sampler_logprobs`` are the sampler's log-probs of the completion tokens (``sample`` returns
    them); ``advantage`` is one number for the whole completion or one per completion token.
    Prompt positions are masked out of the loss. An empty completion (a remote sampler's, a stop string matched at
    once) trains no token, yet counts as a sample, as TRL keeps one (mask 0): GRPO's ``FIXED_HORIZON`` and
    ``SEQUENCE_MEAN`` divide by the number of samples, so leaving it out would scale the others' gradients.
    """
    prompt, completion = _ids(prompt_tokens, "prompt_tokens"), _ids(completion_tokens, "completion_tokens")
    if not prompt:
        raise ValueError("prompt_tokens must be non-empty")
    n = len(completion)
    tokens = prompt + (completion or prompt[-1:])  # an empty completion: one stand-in target, masked, never read
    pad = len(tokens) - 1 - n
    sampler_logprobs = _logprobs(sampler_logprobs, "sampler_logprobs", n)
    given = advantage.tolist() if hasattr(advantage, "tolist") else advantage  # numpy / torch, 0-d or not
    if isinstance(given, str | bool) or not isinstance(given, numbers.Real | Sequence):
        raise TypeError(f"advantage must be a number or one number per completion token, got {advantage!r}")
    adv = _numbers([given], "advantage") * n if isinstance(given, numbers.Real) else _numbers(given, "advantage")
    if len(adv) != n:
        raise ValueError(f"advantage has {len(adv)} entries for {n} completion tokens")
    inputs = {
        "target_tokens": _tensor(tokens[1:], "int64"),
        "logprobs": _tensor([0.0] * pad + list(sampler_logprobs), "float32", "sampler_logprobs"),
        "advantages": _tensor([0.0] * pad + adv, "float32", "advantage"),
        "mask": _tensor([0] * pad + [1] * n, "int64"),
    }
    if reference_logprobs is not None:
        reference_logprobs = _logprobs(reference_logprobs, "reference_logprobs", n)
        inputs["reference_logprobs"] = _tensor([0.0] * pad + list(reference_logprobs), "float32", "reference_logprobs")
    return wire.Sample(model_input=wire.ModelInput.from_tokens(tokens[:-1]), loss_fn_inputs=inputs)


def from_text(tokenizer: Any, prompt: str | Sequence[Message], completion: str, *, eos: bool = False) -> wire.Sample:
    """A supervised sample that trains on ``completion`` only, given ``prompt`` (text or chat messages).

    ``tokenizer`` is a Session, a Hugging Face tokenizer or None (bytes). The two parts are tokenized
    separately and joined, so the prompt's tokens are exactly what ``Session.sample`` would send;
    the completion gets no special tokens except, with ``eos``, the tokenizer's EOS at the end.
    """
    eos = check_bool("eos", eos)  # "no" is truthy: it would train on an EOS
    codec = as_codec(tokenizer)
    if not isinstance(completion, str):
        raise TypeError(f"completion must be a string, got {completion!r}"[:300])
    check_text(completion, "completion")
    head = _ids(to_tokens(codec, prompt), "prompt")  # ids given as the prompt: -1 was named "tokens"
    tail = codec.encode(completion, special=False)
    if eos:
        if not codec.eos_token_ids:
            raise ValueError("eos=True, but this tokenizer has no EOS token")
        tail.append(codec.eos_token_ids[0])
    empty = [name for name, ids in (("prompt", head), ("completion", tail)) if not ids]
    if empty:  # said "prompt and completion must both ...", not which one was empty
        raise ValueError(f"{' and '.join(empty)} {'encode' if len(empty) > 1 else 'encodes'} to no tokens: from_text "
                         "needs a prompt and a completion of at least one token each")  # fmt: skip
    return cross_entropy(head + tail, [0.0] * len(head) + [1.0] * len(tail))


def from_chat(tokenizer: Any, messages: Sequence[Message]) -> wire.Sample:
    """A supervised sample from a conversation: trains on the last message (the assistant's turn, with the
    chat template's end-of-turn tokens), given everything before it."""
    codec = as_codec(tokenizer)
    if isinstance(messages, str | Mapping) or not isinstance(messages, Sequence | Iterator):
        raise TypeError(f"messages must be a list of chat messages ({{'role', 'content'}}), got {a_type(messages)}")
    messages = list(messages)
    check_messages(messages)
    if len(messages) < 2 or messages[-1].get("role") != "assistant":
        raise ValueError("messages must end with an assistant message, after at least one other")
    head = codec.chat(messages[:-1], add_generation_prompt=True)
    full = codec.chat(messages, add_generation_prompt=False)
    if full[: len(head)] != head or len(full) == len(head):
        raise ValueError("the chat template does not render the conversation as its prompt plus the last turn")
    return cross_entropy(full, [0.0] * len(head) + [1.0] * (len(full) - len(head)))

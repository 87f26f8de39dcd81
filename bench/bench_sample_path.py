"""The sample path's long lists: new / old time ratios, measured in one run. No assertions.

--prompts prompts of --tokens token ids each, and an answer of as many sequences of as many tokens with a log-prob
each: the prompts read as ``Session.sample`` reads them (``rlnb.text.prompts.prompt_list``,
``rlnb.text.codec.as_prompt``, ``rlnb.text.prompts.token_ids`` as ``decode`` and ``rlnb.samples`` call it), the
request body built and written as a client sends it (``to_json_dict``), the answer written as a server does
(``model_dump_json``) and read as a client does (``model_validate_json``, its token ids the service's decimal
strings). "old" is a copy, below, of the code at 78f2140: its models (``list[Int64]`` and ``list[LogProb]``, a
Python validator and serialiser per item) and its prompt readers; the two models' JSON is checked equal first. Each
figure is the best of --reps runs, the variants interleaved, so the ratios are of one run on one machine; a loaded
machine moves the absolute times, which are printed only for scale.

    python bench/bench_sample_path.py [--prompts 64] [--tokens 4096] [--reps 5]
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from rlnb import wire
from rlnb._input.checks import is_integer
from rlnb.text.codec import as_prompt
from rlnb.text.prompts import a_type, prompt_list, token_ids
from rlnb.wire.base import Int64, LogProb, _Model

# --- the old code (78f2140), copied -------------------------------------------------------------------------------


class OldEncodedText(_Model):
    tokens: list[Int64]


class OldModelInputChunk(_Model):
    encoded_text: OldEncodedText


class OldModelInput(_Model):
    chunks: list[OldModelInputChunk]


class OldSampleBody(_Model):
    model_inputs: list[OldModelInput]


class OldSampledSequence(_Model):
    tokens: list[Int64]
    stop_reason: str
    prompt_cache_hit_tokens: int = 0
    logprobs: list[LogProb] | None = None
    routed_experts_key: str | None = None


class OldSampleResult(_Model):
    policy_segments: list[wire.PolicyVersionSegment]
    sequences: list[OldSampledSequence]
    prompt_logprobs: list[LogProb] | None = None
    topk_prompt_logprobs: list[wire.PromptTopLogprobs] | None = None


class OldSampleOutput(_Model):
    results: list[OldSampleResult]


def old_token_ids(tokens: Any, name: str) -> list[int]:
    listed = tokens.tolist() if hasattr(tokens, "tolist") else tokens
    if is_integer(listed) or not isinstance(listed, Sequence | Iterator):
        raise TypeError(f"{name} must be token ids (a list of integers), got {a_type(listed)}")
    listed = list(listed)
    bad = next((t for t in listed if not (is_integer(t) or (isinstance(t, float) and t.is_integer()))), None)
    if bad is not None:
        raise TypeError(f"{name} must be integer token ids, got {bad!r}")
    return [int(t) for t in listed]


def old_is_token_list(p: Any) -> bool:
    return isinstance(p, Sequence) and not isinstance(p, str) and bool(p) and all(is_integer(t) for t in p)


def old_prompt_list(prompts: Any) -> list[Any]:
    if old_is_token_list(prompts):
        return [prompts]
    items = list(prompts)
    return [items] if all(isinstance(m, Mapping) for m in items) else items


def old_as_prompt(prompt: Any, name: str) -> list[int]:
    items: list[Any] = list(prompt)
    if items and all(isinstance(m, Mapping) for m in items):
        raise TypeError(name)
    if all(is_integer(t) for t in items):
        return [int(t) for t in items]
    raise TypeError(name)


# --- the measurement ----------------------------------------------------------------------------------------------


def timed(fn: Callable[[], Any], times: dict[str, list[float]], name: str) -> None:
    """``fn()``, its time added to ``times[name]``."""
    gc.collect()
    start = time.perf_counter()
    fn()
    times.setdefault(name, []).append(time.perf_counter() - start)


def answer(ids: list[list[int]], lps: list[list[float]], model: type[_Model]) -> Any:
    """A sample answer holding ``ids`` as its sequences, built with the new or the old models."""
    old = model is OldSampleOutput
    seq, result = (OldSampledSequence, OldSampleResult) if old else (wire.SampledSequence, wire.SampleResult)
    segment = [wire.PolicyVersionSegment(start_token=0, version=0)]
    sequences = [seq(tokens=t, stop_reason="STOP_REASON_STOP", logprobs=lp) for t, lp in zip(ids, lps, strict=True)]
    return model(results=[result(policy_segments=segment, sequences=sequences)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    rng = random.Random(0)
    ids = [[rng.randrange(1, 150_000) for _ in range(args.tokens)] for _ in range(args.prompts)]
    lps = [[-rng.random() * 5 for _ in range(args.tokens)] for _ in range(args.prompts)]
    new_out, old_out = answer(ids, lps, wire.SampleOutput), answer(ids, lps, OldSampleOutput)
    sent = new_out.model_dump_json()  # token ids as decimal strings, as the service sends them
    if sent != old_out.model_dump_json():
        raise SystemExit("the new and the old models write different JSON: the comparison would mean nothing")
    cases: dict[str, Callable[[], Any]] = {
        "read prompts new": lambda: [as_prompt(p, f"prompts[{i}]") for i, p in enumerate(prompt_list(ids))],
        "read prompts old": lambda: [old_as_prompt(p, f"prompts[{i}]") for i, p in enumerate(old_prompt_list(ids))],
        "token_ids new": lambda: [token_ids(t, "tokens") for t in ids],
        "token_ids old": lambda: [old_token_ids(t, "tokens") for t in ids],
        "write request new": lambda: wire.SampleBody(
            model_inputs=[wire.ModelInput.from_tokens(t) for t in ids]
        ).to_json_dict(),
        "write request old": lambda: OldSampleBody(
            model_inputs=[
                OldModelInput(chunks=[OldModelInputChunk(encoded_text=OldEncodedText(tokens=list(t)))]) for t in ids
            ]  # fmt: skip
        ).to_json_dict(),
        "write answer new": new_out.model_dump_json,
        "write answer old": old_out.model_dump_json,
        "read answer new": lambda: wire.SampleOutput.model_validate_json(sent, context=wire.FROM_SERVER),
        "read answer old": lambda: OldSampleOutput.model_validate_json(sent, context=wire.FROM_SERVER),
    }
    times: dict[str, list[float]] = {}
    for _ in range(args.reps):
        for name, fn in cases.items():
            timed(fn, times, name)
    low = {name: min(ts) for name, ts in times.items()}
    load = os.getloadavg()[0]
    print(f"{args.prompts} x {args.tokens} tokens, best of {args.reps}, load {load:.1f}; seconds for scale only")
    for what in dict.fromkeys(name.rsplit(" ", 1)[0] for name in cases):
        new, old = low[f"{what} new"], low[f"{what} old"]
        print(f"{what:14s} new {new:.3f} s  old {old:.3f} s  new/old {new / old:.2f}")


if __name__ == "__main__":
    main()

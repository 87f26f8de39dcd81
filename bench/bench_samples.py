"""Building and submitting a big batch of samples: new / old time ratios, measured in one run. No assertions.

A batch of --batch samples of --tokens tokens each (random ids, weights 0.0 / 1.0 as a prompt mask, policy samples
with random log-probs and one advantage), built and then copied as ``forward_backward`` copies it at submission
(``rlnb.session.bodies.sample_list``, on the thread that calls it, every step). "old" is a copy, below, of the code
at ef6edbe: its models (``TensorData`` item-by-item validators), its ``rlnb.samples`` helpers, and its plain
``model_copy`` at submission, which validated nothing. "validated" is the submission copy just before this change
(18c50b1: ``model_dump`` then ``model_validate``, the same rules as the new one). Each figure is the best of --reps
runs, the variants interleaved, so the ratios are of one run on one machine; a loaded machine moves the absolute
times, which are printed only for scale.

    python bench/bench_samples.py [--batch 64] [--tokens 4096] [--reps 5]
"""

from __future__ import annotations

import argparse
import gc
import math
import numbers
import os
import random
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from pydantic import field_serializer, model_validator

from rlnb import samples
from rlnb.session.bodies import sample_list
from rlnb.text.prompts import a_type, token_ids
from rlnb.wire.base import Int64, StrictFloat, StrictInt, _finite_list, _Model
from rlnb.wire.loss_params import FLOAT32_MAX

# --- the old code (ef6edbe), copied -------------------------------------------------------------------------------


class OldTensorData(_Model):
    data: list[StrictFloat]
    dtype: str
    shape: list[StrictInt] | None = None
    sparse_crow_indices: list[int] | None = None
    sparse_col_indices: list[int] | None = None

    @field_serializer("data")
    def _int64_as_integers(self, data: list[float]) -> list[float | int]:
        if not isinstance(data, list):
            return data
        if self.dtype != "int64":
            return list(data)
        return [int(v) if isinstance(v, float) and v.is_integer() else v for v in data]

    @model_validator(mode="after")
    def _check(self) -> OldTensorData:
        _finite_list(self.data)
        if self.shape is not None and self.shape != [len(self.data)]:
            raise ValueError("shape")
        if self.sparse_crow_indices is not None or self.sparse_col_indices is not None:
            raise ValueError("sparse")
        return self


class OldEncodedText(_Model):
    tokens: list[Int64]


class OldModelInputChunk(_Model):
    encoded_text: OldEncodedText


class OldModelInput(_Model):
    chunks: list[OldModelInputChunk]


class OldSample(_Model):
    model_input: OldModelInput
    loss_fn_inputs: dict[str, OldTensorData]
    routed_experts_key: str | None = None


def old_tensor(data: Sequence[float], dtype: str, name: str = "") -> OldTensorData:
    if dtype == "float32":
        bad = next((v for v in data if not -FLOAT32_MAX <= v <= FLOAT32_MAX), None)
        if bad is not None:
            raise ValueError(f"{name}: {bad}")
    return OldTensorData(data=list(data), dtype=dtype)


def old_ids(tokens: Any, name: str) -> list[int]:
    ids = token_ids(tokens, name)
    bad = next((i for i, t in enumerate(ids) if not 0 <= t <= 2**63 - 1), None)
    if bad is not None:
        raise ValueError(f"{name}: {bad}")
    return ids


def old_numbers(values: Any, name: str) -> list[float]:
    listed = values.tolist() if hasattr(values, "tolist") else values
    if isinstance(listed, str | bytes) or not isinstance(listed, Sequence | Iterator):
        raise TypeError(f"{name} must be a list of numbers, got {a_type(listed)}")
    listed = list(listed)
    bad = next((v for v in listed if isinstance(v, bool) or not isinstance(v, numbers.Real)), None)
    if bad is not None:
        raise TypeError(f"{name} must be numbers, got {bad!r}")
    return [float(v) for v in listed]


def old_input(tokens: list[int]) -> OldModelInput:
    return OldModelInput(chunks=[OldModelInputChunk(encoded_text=OldEncodedText(tokens=list(tokens)))])


def old_cross_entropy(tokens: Sequence[int], weights: Sequence[float]) -> OldSample:
    tokens, weights = old_ids(tokens, "tokens"), old_numbers(weights, "weights")
    return OldSample(
        model_input=old_input(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": old_tensor(tokens[1:], "int64"),
            "weights": old_tensor(weights[1:], "float32"),
        },
    )


def old_policy(prompt: Sequence[int], completion: Sequence[int], logprobs: Sequence[float], adv: float) -> OldSample:
    prompt, completion = old_ids(prompt, "prompt_tokens"), old_ids(completion, "completion_tokens")
    n, pad = len(completion), len(prompt) - 1
    lps = old_numbers(logprobs, "sampler_logprobs")
    above = next((i for i, lp in enumerate(lps) if 1e-4 < lp < math.inf), None)
    if above is not None:
        raise ValueError("above")
    advs = old_numbers([adv], "advantage") * n
    tokens = prompt + completion
    return OldSample(
        model_input=old_input(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": old_tensor(tokens[1:], "int64"),
            "logprobs": old_tensor([0.0] * pad + lps, "float32"),
            "advantages": old_tensor([0.0] * pad + advs, "float32"),
            "mask": old_tensor([0] * pad + [1] * n, "int64"),
        },
    )


def old_own(sample: OldSample) -> OldSample:
    """ef6edbe's copy at submission: lists copied, nothing validated."""
    chunks = [c.model_copy(update={"encoded_text": text.model_copy(update={"tokens": list(text.tokens)})})
              for c in sample.model_input.chunks for text in [c.encoded_text]]  # fmt: skip
    inputs = {k: t.model_copy(update={"data": list(t.data)} | ({} if t.shape is None else {"shape": list(t.shape)}))
              for k, t in sample.loss_fn_inputs.items()}  # fmt: skip
    return sample.model_copy(update={"model_input": sample.model_input.model_copy(update={"chunks": chunks}),
                                     "loss_fn_inputs": inputs})  # fmt: skip


def validated_own(sample: OldSample) -> OldSample:
    """18c50b1's copy at submission: the same rules as now, by a dump and a validation of it."""
    return OldSample.model_validate(sample.model_dump(warnings=False))


# --- the measurement ----------------------------------------------------------------------------------------------


def timed(fn: Callable[[], Any], times: dict[str, list[float]], name: str) -> Any:
    """``fn()``, its time added to ``times[name]``."""
    gc.collect()
    start = time.perf_counter()
    out = fn()
    times.setdefault(name, []).append(time.perf_counter() - start)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    rng = random.Random(0)
    n, half = args.tokens, args.tokens // 2
    ids = [[rng.randrange(1, 150_000) for _ in range(n)] for _ in range(args.batch)]
    mask = [0.0] * half + [1.0] * (n - half)
    lps = [[-rng.random() * 5 for _ in range(n - half)] for _ in range(args.batch)]
    built: dict[str, Any] = {}
    cases: dict[str, Callable[[], Any]] = {
        "build cross_entropy new": lambda: [samples.cross_entropy(t, mask) for t in ids],
        "build cross_entropy old": lambda: [old_cross_entropy(t, mask) for t in ids],
        "build policy new": lambda: [
            samples.policy(t[:half], t[half:], lp, 0.5) for t, lp in zip(ids, lps, strict=True)
        ],
        "build policy old": lambda: [old_policy(t[:half], t[half:], lp, 0.5) for t, lp in zip(ids, lps, strict=True)],
    }
    times: dict[str, list[float]] = {}
    for _ in range(args.reps):
        for name, fn in cases.items():
            built[name] = timed(fn, times, name)
        for kind in ("cross_entropy", "policy"):
            new, old = built[f"build {kind} new"], built[f"build {kind} old"]
            timed(lambda new=new: sample_list(new), times, f"submit {kind} new")
            timed(lambda old=old: [old_own(s) for s in old], times, f"submit {kind} old")
            timed(lambda old=old: [validated_own(s) for s in old], times, f"submit {kind} validated")
    low = {name: min(ts) for name, ts in times.items()}
    load = os.getloadavg()[0]
    print(f"{args.batch} samples x {args.tokens} tokens, best of {args.reps}, load {load:.1f}; seconds for scale only")
    for what in ("build cross_entropy", "build policy", "submit cross_entropy", "submit policy"):
        new, old = low[f"{what} new"], low[f"{what} old"]
        line = f"{what:22s} new {new:.3f} s  old {old:.3f} s  new/old {new / old:.2f}"
        if f"{what} validated" in low:
            checked = low[f"{what} validated"]
            line += f"  validated (18c50b1) {checked:.3f} s  new/validated {new / checked:.2f}"
        print(line)


if __name__ == "__main__":
    main()

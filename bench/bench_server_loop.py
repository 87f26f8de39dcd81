"""What `rlnb serve` would hold its event loop (or its registry's lock) for: (a) reading and validating an operation
body of many small items, at `deps.PARSED_ON_LOOP` (read on the loop) and at 64 KiB (the threshold before it was
lowered); (b) splitting a completed sample result for `--offload-results-over` (its first GET), by size.

Each figure is the best and the median of the repetitions (ms), in this process: no server is started.

    .venv/bin/python bench/bench_server_loop.py [--reps 40]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from rlnb import wire
from rlnb.server.counts import check_counts
from rlnb.server.deps import PARSED_ON_LOOP
from rlnb.server.json_body import read_json
from rlnb.server.records import json_body
from rlnb.server.routes.operations import split
from rlnb.server.settings import ServerSettings

CE = {"type": "LOSS_TYPE_CROSS_ENTROPY"}


def timed(fn: Callable[[], Any], reps: int) -> tuple[float, float]:
    took = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        took.append(time.perf_counter() - start)
    return min(took) * 1e3, statistics.median(took) * 1e3


def chunk(tokens: list[int]) -> dict[str, Any]:
    return {"chunks": [{"encoded_text": {"tokens": tokens}}]}


def one_sample(n: int) -> dict[str, Any]:
    inputs = {"target_tokens": {"data": [7] * n, "dtype": "int64"}, "weights": {"data": [1.0] * n, "dtype": "float32"}}
    return {"model_input": chunk([7] * n), "loss_fn_inputs": inputs}


SHAPES: dict[str, tuple[type[wire._Model], Callable[[int], dict[str, Any]]]] = {
    "forward-backward, one long sample": (wire.ForwardBackwardBody, lambda n: {"loss": CE, "samples": [one_sample(n)]}),
    "forward-backward, n one-token samples": (  # at most max_batch_size (256): 43 KB
        wire.ForwardBackwardBody,
        lambda n: {"loss": CE, "samples": [one_sample(1)] * n},
    ),
    "custom-forward-backward, one long sample": (
        wire.CustomForwardBackwardBody,
        lambda n: {"samples": [one_sample(n)], "gradients": [{"data": [0.5] * n}]},
    ),
    "sample, n one-token prompts": (
        wire.SampleBody,
        lambda n: {"model_inputs": [chunk([7])] * n, "sampling_params": {"max_tokens": 1}},
    ),
}


def filled(make: Callable[[int], dict[str, Any]], limit: int, most: int) -> tuple[bytes, int]:
    """The body of ``make(n)`` with the largest ``n`` up to ``most`` whose JSON fits ``limit`` bytes."""
    lo, hi = 1, most
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if len(json.dumps(make(mid), separators=(",", ":"))) <= limit else (lo, mid - 1)
    return json.dumps(make(lo), separators=(",", ":")).encode(), lo


def bodies(reps: int) -> None:
    settings = ServerSettings()
    for limit in (PARSED_ON_LOOP, 1 << 16):
        print(f"(a) bodies up to {limit} bytes: read, counted and validated (best / median ms)")
        for name, (model, make) in SHAPES.items():
            body, n = filled(make, limit, settings.max_batch_size if "samples" in name else 100_000)

            def read(body: bytes = body, model: type[wire._Model] = model) -> None:
                data = read_json(body)
                check_counts(settings, model, data)
                model.model_validate(data)

            best, median = timed(read, reps)
            print(f"  {name:42s} n={n:6d} {len(body):6d} B  {best:6.2f} / {median:6.2f}")


def splits(reps: int) -> None:
    print("(b) a completed sample result split for --offload-results-over (best / median ms)")
    for prompts, seqs, tokens in ((64, 8, 128), (64, 8, 1024), (256, 8, 1024)):
        seq = {"tokens": list(range(tokens)), "stop_reason": "length", "logprobs": [-0.123456789] * tokens}
        results = [{"policy_segments": [{"start_token": 0, "version": 1}], "sequences": [seq] * seqs}] * prompts
        body = json_body({"id": "op", "status": "COMPLETED", "output": {"results": results}, "error": None})
        best, median = timed(lambda body=body: split(body, ("results",), 64), max(1, reps // 10))
        print(f"  {prompts} x {seqs} x {tokens} tokens, {len(body) / 1e6:5.2f} MB  {best:7.1f} / {median:7.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=40)
    args = parser.parse_args()
    bodies(args.reps)
    splits(args.reps)


if __name__ == "__main__":
    main()

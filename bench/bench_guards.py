"""What Dynamo's guards cost a compiled decode step of bench_sampler.py's 3m Qwen3 (issue 20 §2(a)), and what
each guard filter would save: counted (guards a call, Python calls a decode step) and timed (one guard check).

For each filter, a copy of ``hf_step`` (its own code object, so its own Dynamo cache) is compiled with that
``guard_filter_fn``, one sample of 16 x 16 tokens runs through it as the sample handler runs it, and the guard
manager of the graph it used checks that call's arguments ``--checks`` times; the filters take turns ``--reps``
times (best of). The filters:

- ``none``: every guard (what rlnb compiles with);
- ``module structure``: no hook-dict, instance-dict or dict-key guards on modules (rlnb never adds hooks or
  instance attributes to its sampler copy once built);
- ``module values``: on modules only identity (``ID_MATCH``) and tensor guards: no guard on a module's constants
  or config (two sessions of one architecture with another LoRA scale or attention implementation would share a
  graph);
- ``torch all-modules``: ``torch.compiler.skip_guard_on_all_nn_modules_unsafe`` (no guard on modules at all: not
  even the identity of the packed layers, whose packed weights the graph reads by id).

    .venv/bin/python bench/bench_guards.py [--reps 5] [--checks 2000]
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
import types

import torch
from bench_sampler import load, local_decode, prompts_for, qwen3
from torch._dynamo.eval_frame import _debug_get_cache_entry_list

from rlnb.engine.models import compiled, decoders, hf_adapter

STRUCTURE = {"EMPTY_NN_MODULE_HOOKS_DICT", "NOT_PRESENT_IN_GENERIC_DICT", "DICT_NOT_CONTAINS"}


def on_module(entry) -> bool:
    return entry.orig_guard.source.is_unspecialized_nn_module()


FILTERS = {
    "none": lambda entries: [True] * len(entries),
    "module structure": lambda entries: [not (on_module(e) and e.guard_type in STRUCTURE) for e in entries],
    "module values": lambda entries: [
        not on_module(e) or e.guard_type in ("ID_MATCH", "TENSOR_MATCH") for e in entries
    ],
    "torch all-modules": torch.compiler.skip_guard_on_all_nn_modules_unsafe,
}


def python_calls(fn) -> int:
    calls = 0

    def count(frame, event, arg):
        nonlocal calls
        calls += event == "call"

    sys.setprofile(count)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--checks", type=int, default=2000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print("command: python " + " ".join(sys.argv))
    print(f"{load()}, torch {torch.__version__}")
    new, prompts = 16, prompts_for(4096, 16)
    checks, kept = {}, {}
    for name, keep in FILTERS.items():
        code = decoders.hf_step.__code__.replace(co_name=f"hf_step_{name.replace(' ', '_').replace('-', '_')}")
        step = types.FunctionType(code, decoders.hf_step.__globals__, code.co_name)

        def counted(entries, keep=keep, name=name):
            flags = keep(entries)
            kept[name] = (sum(flags), len(entries), collections.Counter(e.guard_type for e in entries))
            return flags

        real = torch.compile(step, dynamic=False, options={"guard_filter_fn": counted})
        seen: dict[str, object] = {}

        def spy(model, tokens, mask, pos, cache, real=real, seen=seen):
            seen.update(model=model, tokens=tokens, mask=mask, pos=pos, cache=cache)
            return real(model, tokens, mask, pos, cache)

        hf_adapter.hf_step = step
        compiled._COMPILED[(step, "cpu")] = spy
        run = local_decode(qwen3("3m"), prompts, new, compiled=True)
        run()
        calls = python_calls(run)
        with torch.no_grad():
            manager = next(e.guard_manager for e in _debug_get_cache_entry_list(code) if e.guard_manager.check(seen))
        checks[name] = (manager, seen)
        print(f"{name:18s} guards a call {kept[name][0]:5d} of {kept[name][1]}; Python calls a decode step "
              f"{calls / new:.1f} (the sample's / {new} tokens)", flush=True)  # fmt: skip
    print("guard types (none):", dict(kept["none"][2].most_common()))
    best = dict.fromkeys(checks, float("inf"))
    with torch.no_grad():
        for _ in range(args.reps):
            for name, (manager, frame) in checks.items():
                start = time.perf_counter()
                for _ in range(args.checks):
                    manager.check(frame)
                best[name] = min(best[name], (time.perf_counter() - start) / args.checks)
    for name, t in best.items():
        print(f"{name:18s} one guard check {t * 1e6:7.1f} us ({t / best['none']:.2f} of none's)")
    print(f"{load()} at the end")


if __name__ == "__main__":
    main()

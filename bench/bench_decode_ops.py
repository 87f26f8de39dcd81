"""Work per decode step of the eager sampler, counted (issue 20 (c)): torch ops dispatched and Python calls made.

On the built-in ``small`` model a decode step is dispatch-bound (its matmuls were 104 ms of a 374 ms sample of
16 x 200 tokens), so what a step dispatches is what can be cut, and counts, unlike times, are the same under any
load. The sample is the one (c) of ``bench_sampler.py`` times: 16 samples of ``n=`` at temperature 1, eager, as the
sample handler runs it; a step's count is (a sample of 33 tokens - one of 17) / 16, so the prefill cancels.
It also counts the work done per prompt before decoding (the batch's left padding and its uniforms, ``left_pad`` and
``uniforms``): (that of 18 prompts - that of 2) / 16, at ``n=4`` and 200 tokens. With ``--compiled`` (built-in
models), what a ``compile=True`` sample of (c), 200 tokens, does that the eager one does not, counted: the guards
dynamo checks at every call of each compiled graph (``torch._dynamo.explain``), and the key slots its decode steps
attend over (the eager step: the filled slots; the compiled one: its window of the bucketed cache, the filled slots
rounded up, ``compiled.window``; before decode4 every slot of it). With ``--hf 3m`` (or ``21m``), only the same
counts for a ``compile=True`` sample of ``bench_sampler.py`` (a)'s Qwen3 shape, 16 x 160 (``hf_compiled_work``).

    PYTHONPATH=. .venv/bin/python bench/bench_decode_ops.py [--model small] [--rows 16] [--compiled] [--hf 3m]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from typing import Any

import torch

import rlnb
from rlnb.engine import choice, sampling
from rlnb.engine.models.compiled import Compiler, bucket, window
from rlnb.engine.models.tiny import TinyTransformer
from rlnb.testing.ops import OpCounter, per_step


def sample(session: Any, rows: int, steps: int) -> tuple[Counter[str], int]:
    """(aten ops, Python calls) of one eager sample of ``rows`` x ``steps`` tokens, each counted on its own run
    (the op counter's own Python calls not among the calls)."""
    adapter, model = session.backend.adapter, session.backend.sampler
    prompt = session.encode("n=")

    def run() -> None:
        with torch.no_grad():
            decoder = adapter.decoder(model, rows, len(prompt) + steps)
            settings = sampling.Settings(max_tokens=steps)
            sampling.generate(decoder, [prompt], rows, settings, 0, adapter.codec, adapter.device)

    return counted(run)


def counted(run: Any) -> tuple[Counter[str], int]:
    """(aten ops, Python calls) of ``run()``, each counted on its own run (the op counter's own Python calls not among
    the calls)."""
    calls = [0]

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            calls[0] += 1

    with OpCounter() as ops:
        run()
    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return ops.ops, calls[0]


def before_decoding(prompts: int) -> tuple[Counter[str], int]:
    """(aten ops, Python calls) of the work before a sample's first token for ``prompts`` prompts of 2 to 9 tokens,
    4 samples each, 200 tokens: the left-padded batch and the uniforms."""
    batch = [list(range(2 + i % 8)) for i in range(prompts)]
    cpu = torch.device("cpu")

    def run() -> None:
        sampling.left_pad(batch, 4, cpu)
        sampling.uniforms(0, prompts, 4, 200, cpu)

    return counted(run)


def compiled_work(session: Any, rows: int, steps: int) -> None:
    """Print the guards of the compiled decode step and token choice, and the key slots a sample's decode steps attend
    over, eager and compiled (see the module's docstring)."""
    adapter, model, cpu = session.backend.adapter, session.backend.sampler, torch.device("cpu")
    prompt, settings = session.encode("n="), sampling.Settings(max_tokens=steps)
    length = bucket(len(prompt) + steps, adapter.context_length)
    with torch.no_grad():
        eager = adapter.decoder(model, rows, len(prompt) + steps)
        slots, step = [0, 0, 0], eager.step

        def counted(tokens: torch.Tensor) -> torch.Tensor:
            logits = step(tokens)
            assert eager.cache.end is not None
            slots[0] += 1
            slots[1] += eager.cache.end  # the filled slots, which the eager step attends over
            slots[2] += window(eager.cache.end, length)  # the compiled step's window of them
            return logits

        eager.step = counted
        sampling.generate(eager, [prompt], rows, settings, 0, adapter.codec, cpu)
        compiled = adapter.decoder(model, rows, length, Compiler(cpu))  # its step is not called: nothing compiles
        compiled.prefill(*sampling.left_pad([prompt], rows, cpu))
        compiled.cache.end = window(compiled.filled + 1, length)  # the first step's window, as ``step`` sets it
        graph = torch._dynamo.explain(TinyTransformer.decode_step)(
            compiled.model, torch.zeros(rows, dtype=torch.long), compiled.pos, compiled.slot, compiled.cache
        )
        pick = torch._dynamo.explain(choice.choice)(torch.randn(rows, adapter.vocab_size), torch.rand(rows, 1),
                                                    torch.tensor(1.0), torch.tensor(1.0), -1, False, False)  # fmt: skip
    for what, ex in (("decode step", graph), ("token choice", pick)):
        kinds = Counter(g.create_fn_name() for g in ex.out_guards)
        print(f"compiled {what}: {ex.graph_count} graph(s), {ex.graph_break_count} break(s), {ex.op_count} ops, "
              f"{len(ex.out_guards)} guards checked at each call: {dict(kinds.most_common())}")  # fmt: skip
    print(f"key slots attended per row, {slots[0]} decode steps: eager {slots[1]} (the filled ones), compiled "
          f"{slots[2]} (windows of the {length}-slot cache): {slots[2] / slots[1]:.2f}x; all {length} slots a step "
          f"(before decode4) {slots[0] * length}: {slots[0] * length / slots[1]:.2f}x")  # fmt: skip


def hf_compiled_work(size: str, rows: int, steps: int) -> None:
    """(a)'s ``compile=True`` sample of a Qwen3 shape (``bench_sampler.SIZES``), counted as ``compiled_work`` counts
    the built-in one: the key slots its decode steps attend over (the eager steps' ``DynamicCache``: the filled
    slots; a compiled step's ``StaticCache``: all its slots before decode5, a window of them since), measured on
    the attention's keys with the compiled steps run eager (same caches and slices, nothing compiles); and the ops
    and guards of the first window's graph, and of the whole-cache graph it replaced."""
    from bench_sampler import prompts_for, qwen3
    from transformers import StaticCache

    from rlnb.engine.models import compiled as compiled_module
    from rlnb.engine.models.decoders import HFDecoder, hf_step
    from rlnb.engine.models.hf_window import WindowedCache

    s = rlnb.connect("local", model=qwen3(size), device="cpu", record=False, threads=1)
    adapter, model, cpu = s.backend.adapter, s.backend.sampler, torch.device("cpu")
    prompts, settings = prompts_for(adapter.vocab_size, rows), sampling.Settings(max_tokens=steps)
    length = bucket(max(map(len, prompts)) + steps, adapter.context_length)
    keys: list[int] = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kw: Any) -> torch.Tensor:
        keys.append(k.shape[2])
        return sdpa(q, k, v, **kw)

    def attended(decoder: Any) -> int:
        """Key slots per row over the decode steps of one sample (the prefill's left out)."""
        keys.clear()
        sampling.generate(decoder, prompts, 1, settings, 0, adapter.codec, cpu)
        layers = model.config.num_hidden_layers
        return sum(keys[layers::layers])

    compiled_module._compiled = lambda fn, device: fn  # the compiled steps' code, run eager: nothing compiles
    torch.nn.functional.scaled_dot_product_attention = attention
    try:
        with torch.no_grad():
            eager = attended(adapter.decoder(model, rows, length))
            whole = attended(HFDecoder(model, (StaticCache(config=model.config, max_cache_len=length), length)))
            windowed = attended(adapter.decoder(model, rows, length, Compiler(cpu)))
    finally:
        torch.nn.functional.scaled_dot_product_attention = sdpa
    print(f"Qwen3 {size}, {rows} x {steps}: key slots attended per row over {steps - 1} decode steps: eager {eager} "
          f"(the filled ones), compiled before decode5 {whole} (all {length} slots): {whole / eager:.2f}x, "
          f"compiled windows {windowed}: {windowed / eager:.2f}x")  # fmt: skip
    ids, mask = sampling.left_pad(prompts, 1, cpu)
    with torch.no_grad():
        for name, cache in (("whole cache", StaticCache(config=model.config, max_cache_len=length)),
                            ("first window", WindowedCache(model.config, length))):  # fmt: skip
            decoder = HFDecoder(model, (cache, length), (lambda w: hf_step) if name == "first window" else None)
            decoder.prefill(ids, mask)
            if name == "first window":
                cache.attend(window(decoder.filled + 1, length))
            ex = torch._dynamo.explain(hf_step)(model, ids[:, -1], decoder.mask, decoder.last, cache)
            kinds = Counter(g.create_fn_name() for g in ex.out_guards)
            print(f"compiled Qwen3 decode step, {name}: {ex.graph_count} graph(s), {ex.graph_break_count} break(s), "
                  f"{ex.op_count} ops, {len(ex.out_guards)} guards a call: {dict(kinds.most_common(4))}")  # fmt: skip
    s.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="small")
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--compiled", action="store_true", help="also count the compiled sample's guards and slots")
    parser.add_argument("--hf", metavar="SIZE", help="only count a compiled Qwen3 sample of (a) (3m, 21m): 16 x 160")
    args = parser.parse_args()
    if args.hf:
        hf_compiled_work(args.hf, args.rows, 160)
        return
    s = rlnb.connect("local", model=args.model, device="cpu", record=False, threads=1)
    sample(s, args.rows, 17)  # warm-up: first calls take paths later ones do not
    (short, short_calls), (long, long_calls) = sample(s, args.rows, 17), sample(s, args.rows, 33)
    step = per_step(short, long, 16)
    print(f"{args.model}, {args.rows} rows, eager, torch {torch.__version__}: per decode step "
          f"{sum(step.values()):.1f} aten ops, {(long_calls - short_calls) / 16:.1f} Python calls")  # fmt: skip
    for op, n in sorted(step.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {n:6.2f}  {op}")
    (one, one_calls), (many, many_calls) = before_decoding(2), before_decoding(18)
    prompt = per_step(one, many, 16)
    print(
        f"before decoding, per prompt (n=4, 200 tokens): {sum(prompt.values()):.1f} aten ops, "
        f"{(many_calls - one_calls) / 16:.1f} Python calls"
    )
    for op, n in sorted(prompt.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {n:6.2f}  {op}")
    if args.compiled:
        compiled_work(s, args.rows, 200)
    s.close()


if __name__ == "__main__":
    main()

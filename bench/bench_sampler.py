"""The sampler against the alternatives and against the machine's limit, each comparison measured in one run.

(a) Random Qwen3-shaped models (``SIZES``: ~3 M and ~21 M parameters), 16 left-padded prompts x 160 tokens,
    sampling at temperature 1: rlnb's sampler through ``Session.sample`` (eager, and with ``compile=True``)
    against ``model.generate`` with its default cache and with its static cache and ``torch.compile``.
    Targets: rlnb >= 2x generate (default cache), >= 1.0x generate (static + compile).
(b) The same models: rlnb's tokens/s (its faster setting) as a fraction of the memory-bandwidth bound, at batch
    1 and 16.
    The bound: a decode step reads every weight once (the input embedding only for the rows' tokens), so it
    takes at least weight bytes / copy rate, with the copy rate measured here (a 256 MiB tensor copied, bytes
    copied per second); tokens/s bound = batch / that.
(c) The built-in ``small`` model, 16 samples x 200 tokens: a sample / one forward over the same 16 x 202 tokens,
    eager and compiled (target <= 5), and the uncached recompute for scale.
(d) The demo's RL steps/s on ``small`` (``--demo``).
(t) Compile times (``--parts t``): a child process with an empty inductor cache (cold), then a second one on the
    same cache folder (warm), each sampling 16 x 200 on ``small`` and 16 x 160 on the 21 M Qwen3 with
    ``compile=True`` and printing the session's recorded compiles.
(p) Packed weights (``--parts p``): ``F.linear`` against the packed product the sampler uses
    (``rlnb.engine.models.packed``) at decode shapes (1 and 16 rows) for the layer sizes of (a), and whether
    ``pack`` packs them; a gated MLP's gate and up at 16 rows, two plain products against one packed pair.
(e) Memory of the trainer/sampler pair, full-weight vs LoRA (unique tensor bytes with the sampler's packed weight
    copies, and peak RSS in a child).
(f) Where a compiled sample's time goes (``--parts f``): one sample of (a)'s models on this thread, as the sample
    handler runs it, under ``torch.profiler``: self CPU time in packed products, plain matmuls, attention,
    inductor's compiled kernels, dynamo's guard checks and the rest. Run with (a) (``--parts af``), it also
    prints the bound the products alone set on (a): (a)'s ratio / the products' share, both from this run.

Compile times are reported once, and every timed run comes after a warm-up; contenders take turns run by run
(best of ``--reps``), so a change in the machine's load hits all alike. The thread count is the same for every
contender (``--threads``, default 1: this machine's 2 vCPUs are shared; see bench_threads.py).

    .venv/bin/python bench/bench_sampler.py [--parts abcetpf] [--reps 3] [--threads 1]
    .venv/bin/python bench/bench_sampler.py --demo
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial

import torch

import rlnb
from rlnb.engine import choice, sampling
from rlnb.engine.models import packed
from rlnb.engine.models.adapter import ModelAdapter
from rlnb.engine.models.compiled import Compiler, bucket
from rlnb.engine.models.decoders import RecomputeDecoder

NEW = 160
BATCH = 16


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def load() -> str:
    return f"load average {os.getloadavg()[0]:.2f}"


def take_turns(contenders: dict[str, Callable[[], object]], reps: int) -> dict[str, float]:
    """Best wall time of each contender over ``reps`` rounds, contenders alternating within a round."""
    best = {name: float("inf") for name in contenders}
    for _ in range(reps):
        for name, fn in contenders.items():
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


MATMULS = ("aten::mm", "aten::addmm", "aten::bmm", "mkldnn::_linear_pointwise")  # the last: packed weights


def matmul_time(fn: Callable[[], object]) -> tuple[float, float]:
    """(seconds in matmul kernels, seconds of CPU in all ops) of one call of ``fn`` on this thread, by the
    profiler: the part of a step that no removal of dispatch or Python can remove."""
    from torch.profiler import profile

    with profile() as prof:
        fn()
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    mm = sum(e.self_cpu_time_total for e in events if e.key in MATMULS)
    return mm / 1e6, total / 1e6


def local_decode(
    model: torch.nn.Module, prompts: list[list[int]], new: int, compiled: bool = False
) -> Callable[[], object]:
    """rlnb's sampler on this thread, as the sample handler runs it (the session runs the same code on its worker,
    with the weights packed as its sampler copy's are), eager or as with ``compile=True``."""
    from rlnb.engine.models import packed
    from rlnb.engine.models.factory import build_adapter

    adapter = build_adapter(model, device=torch.device("cpu"))
    if packed.available(adapter.device):
        packed.pack(adapter.module)
    return decode(adapter, adapter.module, prompts, 1, new, Compiler(adapter.device) if compiled else None, seed=1)


def decode(
    adapter: ModelAdapter,
    module: torch.nn.Module,
    prompts: list[list[int]],
    n: int,
    new: int,
    compiler: Compiler | None,
    seed: int = 0,
) -> Callable[[], object]:
    """One sample of ``n`` completions per prompt by ``module`` (its weights already as the sampler holds them),
    as the sample handler runs it: eager, or compiled by ``compiler`` (the static cache's length bucketed)."""
    settings = sampling.Settings(max_tokens=new)
    rows, longest = len(prompts) * n, max(map(len, prompts)) + new
    chooser = choice.pick
    if compiler is not None:
        longest = bucket(longest, adapter.context_length)
        chooser = choice.compiled_pick(compiler, settings, torch.float32, rows, adapter.vocab_size, adapter.device)

    def run() -> object:
        with torch.no_grad():
            if compiler is not None:
                packed.refresh(module)  # as the sample handler does: the compiled step finds the packed copies
            dec = adapter.decoder(module, rows, longest, compiler)
            return sampling.generate(dec, prompts, n, settings, seed, adapter.codec, adapter.device, chooser)

    return run


GROUPS = {
    "packed products": ("mkldnn::_linear_pointwise", "rlnb::packed_linear", "rlnb::packed_pair"),
    "plain matmuls": ("aten::mm", "aten::addmm", "aten::bmm"),
    "attention": ("aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_attention_math"),
    "compiled kernels": ("## Call CompiledFxGraph",),
    "dynamo's guards": ("TorchDynamo Cache Lookup",),
}
"""(f): profiler event names (or their prefixes) by what they do."""


def bench_profile(size: str) -> float:
    """(f) Where a compiled sample's time goes: the profiler's self CPU time of one sample, grouped. Returns the
    share of the products (packed and plain)."""
    from torch.profiler import profile

    model = qwen3(size)
    prompts = prompts_for(model.config.vocab_size, BATCH)
    run = local_decode(model, prompts, NEW, compiled=True)
    timed_first(f"compiled sample, {size}", run)
    start = time.perf_counter()
    run()
    wall = time.perf_counter() - start
    with profile() as prof:
        run()
    times = {"other": 0.0, **{name: 0.0 for name in GROUPS}}
    for e in prof.key_averages():
        group = next((g for g, keys in GROUPS.items() if any(e.key.startswith(k) for k in keys)), "other")
        times[group] += e.self_cpu_time_total / 1e6
    total = sum(times.values())
    print(
        f"(f) {load()}; Qwen3 {size}, {BATCH} x {NEW} tokens compiled: {wall:.2f} s unprofiled, {total:.2f} s of "
        f"self CPU time profiled ({total / NEW * 1e3:.1f} ms a step)"
    )
    for name, t in times.items():
        print(f"(f)     {name:17s} {t:6.2f} s  {t / total:4.0%}")
    return (times["packed products"] + times["plain matmuls"]) / total


def timed_first(label: str, fn: Callable[[], object]) -> None:
    start = time.perf_counter()
    fn()
    print(f"    warm-up {label}: {time.perf_counter() - start:.1f} s (includes any compile)")


SIZES = {
    "21m": dict(
        vocab_size=8192,
        hidden_size=512,
        intermediate_size=1536,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=64,
    ),
    "3m": dict(
        vocab_size=4096,
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
    ),
}
"""Qwen3 shapes: ~21 M parameters (fp32 84 MB: more than this CPU's caches) and ~3 M (fits in them)."""


def qwen3(size: str = "21m", seed: int = 0):
    import transformers as tf

    torch.manual_seed(seed)
    cfg = tf.Qwen3Config(
        **SIZES[size],
        max_position_embeddings=1024,
        tie_word_embeddings=False,
        eos_token_id=None,
        bos_token_id=None,
        pad_token_id=0,
    )
    model = tf.Qwen3ForCausalLM(cfg).eval()
    model.generation_config.eos_token_id = None  # fixed-length samples for every contender
    return model


def weight_bytes(model: torch.nn.Module, batch: int) -> int:
    """Bytes one decode step reads: every parameter, the input embedding only for the batch's tokens."""
    emb = model.get_input_embeddings().weight
    total = sum(p.numel() * p.element_size() for p in model.parameters() if p is not emb)
    return total + batch * emb.shape[1] * emb.element_size()


def copy_rate(mib: int = 256, reps: int = 5, device: str = "cpu") -> float:
    """Bytes copied per second (read once, written once) by a copy of ``mib`` MiB on ``device``, best of ``reps``
    after a warm-up (on CUDA each timed between synchronisations)."""
    src = torch.empty(mib * 2**20 // 4, device=device).uniform_()
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = float("inf")
    for _ in range(reps):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        dst.copy_(src)
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return src.numel() * 4 / best


def prompts_for(vocab: int, n: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(4, 17, (n,), generator=g).tolist()
    return [torch.randint(3, vocab, (k,), generator=g).tolist() for k in lengths]


def bench_vs_generate(reps: int, threads: int, size: str) -> float:
    """(a) and (b) on one Qwen3 shape. Returns ``compile=True``'s speed over ``generate`` with its default cache."""
    from transformers import CompileConfig

    print(f"(a) {load()}")
    model = qwen3(size)
    params = sum(p.numel() for p in model.parameters())
    prompts = prompts_for(model.config.vocab_size, BATCH)
    eager = rlnb.connect("local", model=qwen3(size), device="cpu", record=False, threads=threads)  # the same weights
    compiled = rlnb.connect("local", model=qwen3(size), device="cpu", record=False, threads=threads, compile=True)
    ids, mask = sampling.left_pad(prompts, 1, torch.device("cpu"))
    static = CompileConfig(mode="default")
    static._compile_all_devices = True  # transformers compiles on GPUs only unless told

    def generate(**extra: object) -> Callable[[], object]:
        def run() -> object:
            with torch.no_grad():
                return model.generate(
                    input_ids=ids,
                    attention_mask=mask,
                    do_sample=True,
                    temperature=1.0,
                    top_k=0,
                    top_p=1.0,
                    max_new_tokens=NEW,
                    min_new_tokens=NEW,
                    pad_token_id=0,
                    **extra,
                )

        return run

    def ours(s: rlnb.Session) -> Callable[[], object]:
        return lambda: s.sample(prompts, num_samples=1, max_tokens=NEW, seed=1, temperature=1.0).result()

    contenders = {
        "generate (default cache)": generate(),
        "generate (static cache + torch.compile)": generate(cache_implementation="static", compile_config=static),
        "rlnb (eager)": ours(eager),
        "rlnb (compile=True)": ours(compiled),
    }
    for name, fn in contenders.items():
        timed_first(name, fn)
    best = take_turns(contenders, reps)
    tokens = BATCH * NEW
    print(
        f"(a) Qwen3-shaped {size}, {params / 1e6:.1f} M params, fp32, {BATCH} prompts (4-16 tokens) x {NEW} new "
        f"tokens, {threads} thread(s), best of {reps}:"
    )
    for name, t in best.items():
        print(f"    {name:42s} {t * 1e3:8.0f} ms  {tokens / t:8,.0f} tok/s")
    mode = min(("rlnb (eager)", "rlnb (compile=True)"), key=lambda k: best[k])  # rlnb's faster setting
    r_default = best["generate (default cache)"] / best[mode]
    r_static = best["generate (static cache + torch.compile)"] / best[mode]
    print(f"(a) {mode} / generate default cache: {r_default:.2f}x (target >= 2: {verdict(r_default >= 2)})")
    print(f"(a) {mode} / generate static + compile: {r_static:.2f}x (target >= 1.0: {verdict(r_static >= 1.0)})")
    other = "rlnb (compile=True)" if mode == "rlnb (eager)" else "rlnb (eager)"
    print(
        f"(a) info: {other} / generate default cache: {best['generate (default cache)'] / best[other]:.2f}x; "
        f"compiles paid by the session: {compiled.backend.engine.compiler.compiles}"
    )
    mm, total = matmul_time(local_decode(qwen3(size), prompts, NEW))
    print(
        f"(a) floor: matmuls are {mm / total:.0%} of rlnb eager's op time ({mm:.2f} of {total:.2f} s, profiler); "
        f"removing every other cost would make it at most {total / mm:.2f}x faster, "
        f"{total / mm * best['generate (default cache)'] / best['rlnb (eager)']:.2f}x generate (default cache)"
    )
    bench_bandwidth(model, eager if mode == "rlnb (eager)" else compiled, reps)
    eager.close()
    compiled.close()
    return best["generate (default cache)"] / best["rlnb (compile=True)"]


def bench_bandwidth(model: torch.nn.Module, s: rlnb.Session, reps: int) -> None:
    rate = copy_rate()
    print(
        f"(b) {load()}; memory copy rate {rate / 1e9:.1f} GB/s (256 MiB, best of 5, {torch.get_num_threads()} "
        f"thread(s) on the main thread)"
    )
    for batch in (1, BATCH):
        prompts = prompts_for(model.config.vocab_size, batch)

        def run(prompts: list[list[int]] = prompts) -> object:
            return s.sample(prompts, num_samples=1, max_tokens=NEW, seed=1).result()

        timed_first(f"batch {batch}", run)
        t = take_turns({"run": run}, reps)["run"]
        achieved = batch * NEW / t
        bound = batch * rate / weight_bytes(model, batch)
        how = "compiled" if s.backend.config()["compile"] else "eager"
        print(
            f"(b) batch {batch:2d}: {achieved:8,.0f} tok/s {how}; bound {bound:9,.0f} tok/s "
            f"({weight_bytes(model, batch) / 2**20:.1f} MiB read per step); fraction {achieved / bound:.2f}"
        )


def bench_small(reps: int, threads: int) -> None:
    print(f"(c) {load()}")
    s = rlnb.connect("local", model="small", device="cpu", record=False, threads=threads)
    adapter, model = s.backend.adapter, s.backend.sampler
    prompt = s.encode("n=")
    settings = sampling.Settings(max_tokens=200)
    compiler = Compiler(torch.device("cpu"))
    rows, longest = BATCH, len(prompt) + 200

    def sample(compiled: bool) -> Callable[[], object]:
        return decode(adapter, model, [prompt], rows, 200, compiler if compiled else None)

    ids = torch.randint(0, 256, (rows, longest))

    def forward() -> object:
        with torch.no_grad():
            return adapter.forward(model, ids)

    def uncached() -> object:
        with torch.no_grad():
            dec = RecomputeDecoder(lambda i, m: adapter.forward(model, i, m))
            return sampling.generate(dec, [prompt], rows, settings, 0, adapter.codec, adapter.device)

    contenders = {"forward": forward, "sample (eager)": sample(False), "sample (compiled)": sample(True)}
    torch.set_num_threads(threads)  # the forward runs on this thread
    for name, fn in contenders.items():
        timed_first(name, fn)
    best = take_turns(contenders, reps)
    t_unc = take_turns({"uncached": uncached}, 1)["uncached"]
    fwd = best["forward"]
    print(
        f"(c) small, {rows} x 200 tokens, {threads} thread(s), best of {reps}: one forward {fwd * 1e3:.1f} ms; "
        f"uncached sample {t_unc * 1e3:.0f} ms ({t_unc / fwd:.1f}x)"
    )
    for name in ("sample (eager)", "sample (compiled)"):
        ratio = best[name] / fwd
        print(
            f"(c) {name:18s} {best[name] * 1e3:7.0f} ms = {ratio:5.2f}x a forward (target <= 5: {verdict(ratio <= 5)})"
        )
    print(f"(c) compiles: {compiler.compiles}")
    mm, total = matmul_time(sample(False))
    print(
        f"(c) floor: the eager sample spends {mm * 1e3:.0f} ms of {total * 1e3:.0f} ms in matmuls (profiler) = "
        f"{mm / fwd:.2f}x a forward before any other cost"
    )
    s.close()


def bench_demo(steps: int = 15) -> None:
    from rlnb.tasks import digits_task, rl_step

    s = rlnb.connect("local", model="small", device="cpu", record=False, seed=0)
    task, params = digits_task(), rlnb.AdamParams(learning_rate=3e-3, weight_decay=0.0)
    rl_step(s, task, params, seed=0)
    start = time.perf_counter()
    for i in range(steps):
        rl_step(s, task, params, seed=i + 1)
    took = time.perf_counter() - start
    print(
        f"(d) demo RL step on small ({rlnb.__file__}), threads {s.history.config['threads']}: "
        f"{steps / took:.2f} steps/s ({took / steps * 1e3:.0f} ms/step)"
    )
    s.close()


COMPILES = """
import json, sys, time, rlnb
from bench.bench_sampler import qwen3, prompts_for
with rlnb.connect("local", model="small", compile=True, record=False, threads=1) as s:
    t = time.perf_counter(); s.sample(["n="], num_samples=16, max_tokens=200, seed=0).result()
    first = time.perf_counter() - t
    t = time.perf_counter(); s.sample(["n="], num_samples=16, max_tokens=200, seed=0).result()
    print(f"small: first sample {first:.1f} s, second {time.perf_counter() - t:.2f} s;",
          json.dumps(s.backend.engine.compiler.compiles))
with rlnb.connect("local", model=qwen3("21m"), compile=True, record=False, threads=1) as s:
    t = time.perf_counter(); s.sample(prompts_for(8192, 16), num_samples=1, max_tokens=160, seed=1).result()
    print(f"qwen3 21m: first sample {time.perf_counter() - t:.1f} s;", json.dumps(s.backend.engine.compiler.compiles))
"""


def bench_compile_times() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "PYTHONPATH": os.getcwd(), "TORCHINDUCTOR_CACHE_DIR": cache}
        for label in ("cold (empty inductor cache)", "warm (the same cache, a new process)"):
            print(f"(t) {label}, {load()}")
            res = subprocess.run([sys.executable, "-c", COMPILES], capture_output=True, text=True, env=env, check=True)
            print("\n".join(f"(t)     {line}" for line in res.stdout.splitlines()))


MEMORY = """
import sys, torch, rlnb
from bench.bench_sampler import llama, packed_bytes, unique_bytes
lora = {"rank": 16, "alpha": 32} if sys.argv[1] == "lora" else None
s = rlnb.connect("local", model=llama(512, 8, 32000), lora=lora, device="cpu", record=False)
b = s.backend
weights = unique_bytes(b.trainer, b.sampler) + packed_bytes(b.sampler)
s.forward_backward([rlnb.samples.cross_entropy(list(range(3, 200)))])
s.optim_step().result()
s.weights_sync().result()
# VmHWM: this process image's peak RSS (ru_maxrss would carry the parent's, fork-time RSS across exec)
peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(weights, peak * 1024)
"""


def llama(hidden: int, layers: int, vocab: int):
    import transformers as tf

    torch.manual_seed(0)
    cfg = tf.LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
    )
    return tf.LlamaForCausalLM(cfg).eval()


def unique_bytes(*modules: torch.nn.Module) -> int:
    seen: dict[int, int] = {}
    for m in modules:
        for t in [*m.parameters(), *m.buffers()]:
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(seen.values())


def packed_bytes(sampler: torch.nn.Module) -> int:
    """The packed copies of the sampler's large linear weights and gated MLPs' gate and up pairs
    (``rlnb.engine.models.packed``), each counted at its weights' size."""
    from rlnb.engine.models.packed import PackedGatedMLP, PackedLinear

    weights = [m.weight for m in sampler.modules() if isinstance(m, PackedLinear)]
    weights += [
        w for m in sampler.modules() if isinstance(m, PackedGatedMLP) for w in (m.gate_proj.weight, m.up_proj.weight)
    ]
    return sum(w.numel() * w.element_size() for w in weights)


def bench_packed(reps: int) -> None:
    """(p): one linear layer, plain and packed, at decode shapes."""
    from rlnb.engine.models import packed

    print(f"(p) {load()}; microseconds per product, best of {reps} x 100 calls")
    for rows in (1, 16):
        for k, n in [(256, 256), (256, 768), (512, 512), (512, 1536), (1536, 512), (512, 8192)]:
            layer = torch.nn.Linear(k, n, bias=False)
            plain = torch.nn.Linear(k, n, bias=False)
            plain.load_state_dict(layer.state_dict())
            was_packed = packed.pack(layer) == 1
            x = torch.randn(rows, 1, k)
            times = {}
            with torch.no_grad():
                for name, module in (("plain", plain), ("packed", layer if was_packed else packed_copy(plain))):
                    module(x)
                    best = float("inf")
                    for _ in range(reps):
                        start = time.perf_counter()
                        for _ in range(100):
                            module(x)
                        best = min(best, (time.perf_counter() - start) / 100)
                    times[name] = best * 1e6
            print(
                f"(p) {rows:2d} rows, {k:4d} x {n:4d}: plain {times['plain']:8.1f}  packed {times['packed']:8.1f}  "
                f"plain / packed {times['plain'] / times['packed']:.2f}  (rlnb packs it: {was_packed})"
            )
    bench_pairs(reps)


def bench_pairs(reps: int) -> None:
    """(p): a gated MLP's gate and up at 16 rows, two plain products against the one packed pair."""
    from rlnb.engine.models import packed

    for k, n in [(256, 768), (512, 1536)]:
        gate, up = torch.nn.Linear(k, n, bias=False), torch.nn.Linear(k, n, bias=False)
        pair = torch.ops.mkldnn._reorder_linear_weight(torch.cat([gate.weight, up.weight]).detach(), None)
        x = torch.randn(BATCH, 1, k)
        contenders: dict[str, Callable[[], object]] = {
            "plain": partial(two_products, gate, up, x),
            "pair": partial(pair_product, pair, n, x),
        }
        with torch.no_grad():
            best = take_turns(contenders, reps)
        print(
            f"(p) {BATCH} rows, gate and up {k:4d} x {n:4d} each, microseconds: plain {best['plain'] * 1e4:8.1f}  "
            f"packed pair {best['pair'] * 1e4:8.1f}  plain / pair {best['plain'] / best['pair']:.2f}  "
            f"(rlnb pairs them: {2 * k * n >= packed.MIN_ELEMENTS})"
        )


def two_products(gate: torch.nn.Linear, up: torch.nn.Linear, x: torch.Tensor) -> None:
    for _ in range(100):
        gate(x), up(x)


def pair_product(pair: torch.Tensor, n: int, x: torch.Tensor) -> None:
    for _ in range(100):
        torch.ops.mkldnn._linear_pointwise(x, pair, None, "none", [], "").split(n, -1)


def packed_copy(layer: torch.nn.Linear) -> torch.nn.Module:
    """``layer`` packed whatever its size (``pack`` leaves small ones plain), to time what packing would give."""
    from rlnb.engine.models import packed

    copy = torch.nn.Linear(layer.in_features, layer.out_features, bias=False)
    copy.load_state_dict(layer.state_dict())
    packed.pack(copy, min_elements=0)
    return copy


def bench_memory() -> None:
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    out = {}
    for kind in ("full", "lora"):
        res = subprocess.run([sys.executable, "-c", MEMORY, kind], capture_output=True, text=True, env=env, check=True)
        weights, rss = map(int, res.stdout.split())
        out[kind] = (weights, rss)
        print(
            f"(e) {kind:4}: trainer + sampler weights {weights / 2**20:.0f} MiB, peak RSS after a step "
            f"{rss / 2**20:.0f} MiB (Llama hidden 512, 8 layers, vocab 32000, fp32)"
        )
    (w_full, rss_full), (w_lora, rss_lora) = out["full"], out["lora"]
    print(f"(e) LoRA / full: weights {w_lora / w_full:.2f}, peak RSS {rss_lora / rss_full:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--demo", action="store_true", help="only (d), the demo's steps/s")
    parser.add_argument("--parts", default="abce", help="which of a (with b), c, p, e, t, f to run")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads for every contender")
    parser.add_argument("--sizes", default="3m,21m", help="Qwen3 shapes for (a) and (b): " + ", ".join(SIZES))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print("command: python " + " ".join(sys.argv))
    print(f"{load()}, torch {torch.__version__}, {os.cpu_count()} CPUs")
    if args.demo:
        bench_demo()
        return
    sizes = args.sizes.split(",")
    ratios = {}
    if "a" in args.parts or "b" in args.parts:
        ratios = {size: bench_vs_generate(args.reps, args.threads, size) for size in sizes}
    if "c" in args.parts:
        bench_small(args.reps, args.threads)
    if "t" in args.parts:
        bench_compile_times()
    if "p" in args.parts:
        bench_packed(args.reps)
    if "e" in args.parts:
        bench_memory()
    if "f" in args.parts:
        products = {size: bench_profile(size) for size in sizes}
        for size in ratios:  # (a) and (f) in one run
            print(
                f"(a+f) {size}: the products are {products[size]:.0%} of a compiled sample's profiled time; with no "
                f"other cost, compile=True would be at most {ratios[size] / products[size]:.2f}x generate "
                f"(default cache), against {ratios[size]:.2f}x now"
            )
    print(f"{load()} at the end")


if __name__ == "__main__":
    main()

"""The in-process engine against the obvious alternatives, each pair measured in one run.

(a) KV-cached sampling on the built-in ``small`` model: sample(16 samples x 200 tokens) / one forward over
    the same tokens (target <= 5), next to the uncached decoder (the round-1 sampler's way).
(b) A random Llama-architecture model: rlnb's sampler tokens/s / ``model.generate`` tokens/s with the same
    settings (sampling, temperature 1, no top-k/top-p, KV cache on, fixed length), target >= 1.0.
(c) Engine overhead: forward-backward + optim-step pipelined through ``Session`` (recording on) vs a bare
    torch loop doing the same maths, on ``tiny`` (target <= 1.1).
(d) The demo's RL steps/s on ``small`` (``--demo``; run it once per source tree to compare trees).
(e) Memory of the trainer/sampler pair, full-weight vs LoRA (unique tensor bytes, and peak RSS in a child).

    .venv/bin/python bench/bench_sampler.py            # (a), (b), (c), (e)
    .venv/bin/python bench/bench_sampler.py --demo     # (d) only
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import torch

import rlnb
from rlnb import samples
from rlnb.engine import sampling
from rlnb.engine.models.decoders import RecomputeDecoder


def best(fn, reps: int = 5) -> float:
    fn()  # warm-up
    runs = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return min(runs)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def bench_small_sampling() -> None:
    s = rlnb.connect("local", model="small", device="cpu", record=False)
    adapter, model = s.backend.adapter, s.backend.sampler
    prompt = s.encode("n=")
    settings = sampling.Settings(max_tokens=200)
    B = 16

    def cached():
        with torch.no_grad():
            sampling.generate(adapter.decoder(model, B, len(prompt) + 200), [prompt], B, settings, 0, adapter.codec,
                              adapter.device)

    def uncached():
        with torch.no_grad():
            dec = RecomputeDecoder(lambda ids, mask: adapter.forward(model, ids, mask))
            sampling.generate(dec, [prompt], B, settings, 0, adapter.codec, adapter.device)

    ids = torch.randint(0, 256, (B, len(prompt) + 200))

    def forward():
        with torch.no_grad():
            adapter.forward(model, ids)

    t_fwd, t_cached = best(forward), best(cached)
    t_uncached = best(uncached, reps=2)
    ratio = t_cached / t_fwd
    print(f"(a) small, 16 x 200 tokens: one forward {t_fwd * 1e3:.1f} ms; cached sample {t_cached * 1e3:.0f} ms "
          f"({ratio:.2f}x a forward, target <= 5: {verdict(ratio <= 5)}); uncached {t_uncached * 1e3:.0f} ms "
          f"({t_uncached / t_fwd:.1f}x); cached is {t_uncached / t_cached:.1f}x faster")
    s.close()


def llama(hidden: int, layers: int, vocab: int):
    import transformers as tf

    torch.manual_seed(0)
    cfg = tf.LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    return tf.LlamaForCausalLM(cfg).eval()


def bench_vs_generate() -> None:
    for hidden, layers, vocab in ((64, 2, 512), (256, 4, 8192)):
        _one_vs_generate(hidden, layers, vocab)


def _one_vs_generate(hidden: int, layers: int, vocab: int) -> None:
    if True:
        model = llama(hidden, layers, vocab)
        s = rlnb.connect("local", model=model, device="cpu", record=False)
        adapter, sampler = s.backend.adapter, s.backend.sampler
        g = torch.Generator().manual_seed(0)
        lengths = torch.randint(4, 17, (16,), generator=g).tolist()
        prompts = [torch.randint(3, vocab, (n,), generator=g).tolist() for n in lengths]
        new = 128
        settings = sampling.Settings(max_tokens=new)

        def ours():
            with torch.no_grad():
                longest = max(map(len, prompts)) + new
                sampling.generate(adapter.decoder(sampler, 16, longest), prompts, 1, settings, 1, adapter.codec,
                                  adapter.device)

        ids, mask = sampling.left_pad(prompts, 1, torch.device("cpu"))

        def theirs():
            with torch.no_grad():
                sampler.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0,
                                 top_p=1.0, max_new_tokens=new, min_new_tokens=new, eos_token_id=None, pad_token_id=0)

        t_ours, t_theirs = best(ours, 3), best(theirs, 3)
        tokens = 16 * new
        ratio = t_theirs / t_ours
        print(f"(b) Llama hidden {hidden}, {layers} layers, vocab {vocab}: rlnb {tokens / t_ours:,.0f} tok/s, "
              f"generate() {tokens / t_theirs:,.0f} tok/s, ratio {ratio:.2f} (target >= 1.0: {verdict(ratio >= 1.0)})")
        s.close()


def bench_engine_overhead(steps: int = 300) -> None:
    batch = [samples.cross_entropy(list(b"hello world, this is a training step of rlnb"))]
    hp = rlnb.AdamParams(learning_rate=1e-3)
    runs = tempfile.mkdtemp()

    def session_loop() -> float:
        s = rlnb.connect("local", model="tiny", device="cpu", runs_dir=runs)
        for _ in range(20):
            s.forward_backward(batch)
            s.optim_step(hp)
        s.wait()
        start = time.perf_counter()
        for _ in range(steps):
            s.forward_backward(batch)
            s.optim_step(hp)
        s.wait()
        took = time.perf_counter() - start
        s.close()
        return took / steps

    def bare_loop() -> float:
        from rlnb.engine.models.tiny import build_model

        model = build_model("tiny", 0)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                                foreach=True)
        tokens = list(b"hello world, this is a training step of rlnb")
        idx, tgt = torch.tensor([tokens[:-1]]), torch.tensor([tokens[1:]])

        def step():
            lp = torch.log_softmax(model(idx).float(), -1).gather(-1, tgt[..., None])[..., 0]
            (-lp.sum()).backward()
            total = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
            total.item()
            torch.nn.utils.clip_grads_with_norm_(list(model.parameters()), 1.0, total)
            opt.step()
            for p in model.parameters():
                p.grad = None

        for _ in range(20):
            step()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        return (time.perf_counter() - start) / steps

    pairs = [(session_loop(), bare_loop()) for _ in range(5)]
    ours, bare = min(a for a, _ in pairs), min(b for _, b in pairs)  # best of 5 each: the least disturbed
    ratio = ours / bare
    threads = torch.get_num_threads()
    print(f"(c) engine overhead on tiny, {steps} pipelined steps, {threads} torch thread(s), best of 5: "
          f"Session {ours * 1e3:.2f} ms/step, bare torch {bare * 1e3:.2f} ms/step, ratio {ratio:.2f} "
          f"(pairs {', '.join(f'{a / b:.2f}' for a, b in pairs)}; target <= 1.1: {verdict(ratio <= 1.1)})")


def bench_demo(steps: int = 15) -> None:
    from rlnb.tasks import digits_task, rl_step

    s = rlnb.connect("local", model="small", device="cpu", record=False, seed=0)
    task, params = digits_task(), rlnb.AdamParams(learning_rate=3e-3, weight_decay=0.0)
    rl_step(s, task, params, seed=0)
    start = time.perf_counter()
    for i in range(steps):
        rl_step(s, task, params, seed=i + 1)
    took = time.perf_counter() - start
    print(f"(d) demo RL step on small ({rlnb.__file__}): {steps / took:.2f} steps/s ({took / steps * 1e3:.0f} ms/step)")
    s.close()


MEMORY = """
import resource, sys, torch, rlnb
from bench.bench_sampler import llama, unique_bytes
lora = {"rank": 16, "alpha": 32} if sys.argv[1] == "lora" else None
s = rlnb.connect("local", model=llama(512, 8, 32000), lora=lora, device="cpu", record=False)
b = s.backend
weights = unique_bytes(b.trainer, b.sampler)
s.forward_backward([rlnb.samples.cross_entropy(list(range(3, 200)))])
s.optim_step().result()
s.weights_sync().result()
print(weights, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def unique_bytes(*modules: torch.nn.Module) -> int:
    seen: dict[int, int] = {}
    for m in modules:
        for t in [*m.parameters(), *m.buffers()]:
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(seen.values())


def bench_memory() -> None:
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    out = {}
    for kind in ("full", "lora"):
        res = subprocess.run([sys.executable, "-c", MEMORY, kind], capture_output=True, text=True, env=env, check=True)
        weights, rss = map(int, res.stdout.split())
        out[kind] = (weights, rss)
        print(f"(e) {kind:4}: trainer + sampler weights {weights / 2**20:.0f} MiB, peak RSS after a step "
              f"{rss / 2**20:.0f} MiB (Llama hidden 512, 8 layers, vocab 32000, fp32)")
    (w_full, rss_full), (w_lora, rss_lora) = out["full"], out["lora"]
    print(f"(e) LoRA / full: weights {w_lora / w_full:.2f}, peak RSS {rss_lora / rss_full:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--demo", action="store_true", help="only (d), the demo's steps/s")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    if args.demo:
        bench_demo()
        return
    bench_small_sampling()
    bench_vs_generate()
    bench_engine_overhead()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # two OpenMP threads on two shared cores wait on each other: one is steady
    bench_engine_overhead()
    torch.set_num_threads(threads)
    bench_memory()


if __name__ == "__main__":
    main()

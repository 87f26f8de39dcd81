"""The GPU check, as one script: a bf16, randomly initialised model with Qwen3-0.6B's shape
(built from a config: no download), LoRA rank 16, a GRPO loop for Adam and for Muon, and Newton-Schulz
against ``torch.optim.Muon`` on the full model's hidden matrices.

    python bench/gpu_check.py                 # on a CUDA machine; writes $OUT/gpu_check.json if $OUT is set
    python bench/gpu_check.py --tiny --steps 2   # a CPU smoke run of the same code (small config)

Per optimizer it reports: RL steps/s (sample 64 completions x 128 tokens, GRPO forward-backward, optim-step,
weights-sync), sampler tokens/s, peak GPU memory, and for the trainer/sampler pair the weight bytes of a
LoRA session against a full-weight one. The reward is synthetic (fraction of even token ids): there is no
tokenizer without a download, and the point is the engine's speed, not what it learns.

``decode`` (issue 20): the sampler eager and with ``compile=True`` (on a GPU: ``torch.compile`` with CUDA
graphs, ``mode="reduce-overhead"``), 64 completions x 128 tokens: tokens/s, the compile time paid, the share
of tokens that agree (bf16: the fused kernels round differently, so a few sequences may part; fp32 gives the
same tokens, tests/engine/test_compiled.py), and the thread policy's record (CUDA: ``off``, threads untouched).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

import rlnb
from rlnb import samples
from rlnb.engine.optim.muon import newton_schulz
from rlnb.tasks import group_advantages

QWEN3_0_6B = dict(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                  num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
                  tie_word_embeddings=True, rope_theta=1_000_000.0, rms_norm_eps=1e-6)
TINY = dict(QWEN3_0_6B, vocab_size=2048, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=32)


def model(config: dict, device: str, dtype: torch.dtype) -> torch.nn.Module:
    import transformers as tf

    torch.manual_seed(0)
    return tf.Qwen3ForCausalLM(tf.Qwen3Config(**config)).to(device=device, dtype=dtype)


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def rl_loop(optimizer: str, args, device: str, dtype: torch.dtype) -> dict:
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    config = TINY if args.tiny else QWEN3_0_6B
    lora = {"rank": 16, "alpha": 32}
    s = rlnb.connect("local", model=model(config, device, dtype), optimizer=optimizer, lora=lora, device=device,
                     record=False)
    params = rlnb.AdamParams(learning_rate=1e-4) if optimizer == "adam" else rlnb.MuonParams(learning_rate=0.02)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(10, config["vocab_size"], (32,), generator=g).tolist() for _ in range(args.prompts)]
    per_prompt = 64 // args.prompts
    step_times, sample_times = [], []
    for i in range(args.steps + 1):  # the first step warms up kernels and allocators
        start = time.perf_counter()
        out = s.sample(prompts, num_samples=per_prompt, max_tokens=128, seed=i).result()
        sync(device)
        sampled = time.perf_counter()
        batch = []
        for prompt, result in zip(prompts, out.results, strict=True):
            rewards = [sum(t % 2 == 0 for t in q.tokens) / max(len(q.tokens), 1) for q in result.sequences]
            for q, adv in zip(result.sequences, group_advantages(rewards), strict=True):
                batch.append(samples.policy(prompt, q.tokens, q.logprobs, adv))
        s.forward_backward(batch, "grpo")
        s.optim_step(params)
        s.weights_sync().result()
        sync(device)
        if i:
            step_times.append(time.perf_counter() - start)
            sample_times.append(sampled - start)
    tokens = sum(len(q.tokens) for r in out.results for q in r.sequences)
    result = {
        "optimizer": optimizer,
        "steps_per_s": 1 / statistics.median(step_times),
        "sampler_tokens_per_s": tokens / statistics.median(sample_times),
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None,
        "ns_dtype": str(s.backend.optim.ns_dtype),
    }
    s.close()
    return result


def decode(args, device: str, dtype: torch.dtype) -> dict:
    """The sampler eager vs compiled (CUDA graphs on a GPU) on the same weights: tokens/s, compile time, same tokens."""
    config = TINY if args.tiny else QWEN3_0_6B
    new = 16 if args.tiny else 128
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(10, config["vocab_size"], (32,), generator=g).tolist() for _ in range(args.prompts)]
    out: dict = {"completions": 64, "max_tokens": new}
    tokens = {}
    for compiled in (False, True):
        s = rlnb.connect("local", model=model(config, device, dtype), device=device, record=False, compile=compiled)
        threads_before = torch.get_num_threads()

        def run(s=s):
            result = s.sample(prompts, num_samples=64 // args.prompts, max_tokens=new, seed=3).result()
            sync(device)
            return result

        start = time.perf_counter()
        first = run()  # compiles when compile=True
        warm = time.perf_counter() - start
        times = []
        for _ in range(max(args.steps, 1)):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
        name = "compiled" if compiled else "eager"
        n = sum(len(q.tokens) for r in first.results for q in r.sequences)
        out[name] = {"tokens_per_s": n / min(times), "first_sample_s": warm,
                     "compiles": s.backend.engine.compiler.compiles if compiled else [],
                     "thread_policy": s.backend.config()["thread_policy"],
                     "threads_unchanged": torch.get_num_threads() == threads_before}
        tokens[name] = [q.tokens for r in first.results for q in r.sequences]
        s.close()
    pairs = [(a, b) for x, y in zip(tokens["eager"], tokens["compiled"], strict=True)
             for a, b in zip(x, y, strict=False)]
    out["matching_tokens"] = sum(a == b for a, b in pairs) / max(len(pairs), 1)  # bf16: fused kernels round less
    out["speedup"] = out["compiled"]["tokens_per_s"] / out["eager"]["tokens_per_s"]
    return out


def ns_vs_torch_muon(args, device: str) -> dict:
    """One Muon update of every hidden matrix of the full model: rlnb (batched by shape) vs torch.optim.Muon."""
    config = TINY if args.tiny else QWEN3_0_6B
    net = model(config, device, torch.bfloat16)
    mats = [p for n, p in net.named_parameters() if p.ndim == 2 and "embed" not in n and "lm_head" not in n]
    for p in mats:
        p.grad = torch.randn_like(p)

    from rlnb.engine.optim.trainer import TrainerOptimizer

    ours = TrainerOptimizer(net, "muon", ns_dtype=torch.bfloat16)
    theirs = torch.optim.Muon(mats, lr=0.02, weight_decay=0.0)
    hp = rlnb.MuonParams(learning_rate=0.02, weight_decay=0.0, grad_clip_norm=0.0).resolved()

    @torch.no_grad()
    def time_it(fn, reps=5) -> float:
        fn()
        sync(device)
        runs = []
        for _ in range(reps):
            start = time.perf_counter()
            fn()
            sync(device)
            runs.append(time.perf_counter() - start)
        return min(runs)

    t_ours = time_it(lambda: ours._muon_step(hp))
    t_theirs = time_it(theirs.step)
    t_ns = time_it(lambda: [newton_schulz(p.grad, 5, torch.bfloat16) for p in mats])
    return {"matrices": len(mats), "rlnb_muon_s": t_ours, "torch_muon_s": t_theirs, "ns_alone_s": t_ns,
            "rlnb_over_torch": t_ours / t_theirs}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tiny", action="store_true", help="a small config, for a CPU smoke run")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--prompts", type=int, default=8, help="prompts per step (64 completions in all)")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16
    report = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "torch": torch.__version__,
              "model": "tiny Qwen3" if args.tiny else "Qwen3-0.6B shape, random init", "dtype": "bfloat16",
              "lora_rank": 16, "completions": 64, "max_tokens": 128}
    report["loops"] = [rl_loop(opt, args, device, dtype) for opt in ("adam", "muon")]
    report["muon_step"] = ns_vs_torch_muon(args, device)
    report["decode"] = decode(args, device, dtype)
    print(json.dumps(report, indent=2))
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "gpu_check.json"), "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()

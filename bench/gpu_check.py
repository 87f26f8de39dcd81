"""The GPU check, as one script: a bf16, randomly initialised model with Qwen3-0.6B's shape
(built from a config: no download), LoRA rank 16, a GRPO loop for Adam and for Muon, and Newton-Schulz
against ``torch.optim.Muon`` on the full model's hidden matrices.

    python bench/gpu_check.py                 # on a CUDA machine; writes $OUT/gpu_check.json if $OUT is set
    python bench/gpu_check.py --tiny --steps 2   # a CPU smoke run of the same code (small config)

Per optimizer it reports: RL steps/s (sample 64 completions x 128 tokens, GRPO forward-backward, optim-step,
weights-sync), sampler tokens/s, peak GPU memory, and for the trainer/sampler pair the weight bytes of a
LoRA session against a full-weight one. The reward is synthetic (fraction of even token ids): there is no
tokenizer without a download, and the point is the engine's speed, not what it learns.

``decode`` (issue 20): the sampler eager and with ``compile=True`` (inductor's Triton kernels, no CUDA graphs:
rlnb/engine/models/compiled.py says why) against HF ``generate`` (default cache, and static cache + compile with
CUDA graphs, on this main thread) on the same weights, 64 completions x ``--max-tokens`` (128), contenders taking
turns (one that fails is recorded under ``errors`` and the others still timed): tokens/s, the compile time
paid, the share of tokens that agree (bf16: the fused kernels round differently, so a few sequences may part;
fp32 gives the same tokens, tests/engine/test_cuda.py), the thread policy's record (CUDA: ``off``, threads
untouched), and rlnb's tokens/s as a fraction of the bound a measured device copy rate sets (every weight read
once a step).

Each section is written to the report as soon as it ends, and a section that raises is recorded with its error
while the others still run (a GPU lease is too short to lose every figure to one failure); the exit status is
1 if any section failed. ``--only decode,muon_step`` reruns some sections.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback

import torch
from bench_sampler import copy_rate, take_turns  # this folder is on sys.path when the script runs

import rlnb
from rlnb import samples
from rlnb.engine.optim.muon import newton_schulz
from rlnb.errors import describe
from rlnb.tasks import group_advantages

QWEN3_0_6B = dict(
    vocab_size=151936,
    hidden_size=1024,
    intermediate_size=3072,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    max_position_embeddings=40960,
    tie_word_embeddings=True,
    rope_theta=1_000_000.0,
    rms_norm_eps=1e-6,
)
TINY = dict(
    QWEN3_0_6B,
    vocab_size=2048,
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
)


def model(config: dict, device: str, dtype: torch.dtype) -> torch.nn.Module:
    import transformers as tf

    torch.manual_seed(0)
    with torch.device(device):  # initialised where it runs: a 0.6 B model's CPU init costs seconds of the lease
        net = tf.Qwen3ForCausalLM(tf.Qwen3Config(**config, bos_token_id=None, eos_token_id=None, pad_token_id=0))
    net.generation_config.eos_token_id = None  # fixed-length samples for every contender
    return net.to(dtype=dtype)


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def rl_loop(optimizer: str, args, device: str, dtype: torch.dtype) -> dict:
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    config = TINY if args.tiny else QWEN3_0_6B
    lora = {"rank": 16, "alpha": 32}
    s = rlnb.connect(
        "local", model=model(config, device, dtype), optimizer=optimizer, lora=lora, device=device, record=False
    )
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
    """rlnb's sampler eager and compiled vs HF ``generate`` on the same weights: tokens/s, compiles, same tokens."""
    from transformers import CompileConfig

    config = TINY if args.tiny else QWEN3_0_6B
    new, per_prompt = (16 if args.tiny else args.max_tokens), 64 // args.prompts
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(10, config["vocab_size"], (32,), generator=g).tolist() for _ in range(args.prompts)]
    hf = model(config, device, dtype).eval()
    ids = torch.tensor(prompts, device=device).repeat_interleave(per_prompt, dim=0)
    sessions = {
        name: rlnb.connect(
            "local", model=model(config, device, dtype), device=device, record=False, compile=name == "compiled"
        )
        for name in ("eager", "compiled")
    }
    threads_before = torch.get_num_threads()

    def ours(s: rlnb.Session):
        def run():
            result = s.sample(prompts, num_samples=per_prompt, max_tokens=new, seed=3).result()
            sync(device)
            return result

        return run

    def generate(**extra):
        def run():
            with torch.no_grad():
                out = hf.generate(
                    input_ids=ids,
                    attention_mask=torch.ones_like(ids),
                    do_sample=True,
                    top_k=0,
                    top_p=1.0,
                    temperature=1.0,
                    max_new_tokens=new,
                    min_new_tokens=new,
                    **extra,
                )
            sync(device)
            return out

        return run

    static = CompileConfig(mode="reduce-overhead") if device == "cuda" else CompileConfig(mode="default")
    static._compile_all_devices = True  # transformers compiles on GPUs only unless told (the --tiny CPU run)
    contenders = {
        "rlnb eager": ours(sessions["eager"]),
        "rlnb compile=True": ours(sessions["compiled"]),
        "generate (default cache)": generate(),
        "generate (static cache + compile)": generate(cache_implementation="static", compile_config=static),
    }
    out: dict = {"completions": 64, "max_tokens": new, "first_call_s": {}, "errors": {}}
    firsts = {}
    for name, fn in list(contenders.items()):
        start = time.perf_counter()
        try:
            firsts[name] = fn()  # compiles where asked
        except Exception as exc:  # noqa: BLE001 - a contender that fails is said; the others are still timed
            out["errors"][name] = describe(exc).splitlines()[0]
            del contenders[name]
        out["first_call_s"][name] = time.perf_counter() - start
    best = take_turns(contenders, max(args.steps, 1))
    tokens = 64 * new
    out["tokens_per_s"] = {name: tokens / t for name, t in best.items()}
    for name, s in sessions.items():
        out[name] = {
            "compiles": s.backend.engine.compiler.compiles if name == "compiled" else [],
            "thread_policy": s.backend.config()["thread_policy"],
        }
    out["threads_unchanged"] = torch.get_num_threads() == threads_before
    mine = {
        name: [q.tokens for r in firsts[f"rlnb {how}"].results for q in r.sequences]
        for name, how in (("eager", "eager"), ("compiled", "compile=True"))
    }
    pairs = [(a, b) for x, y in zip(mine["eager"], mine["compiled"], strict=True) for a, b in zip(x, y, strict=False)]
    out["matching_tokens"] = sum(a == b for a, b in pairs) / max(len(pairs), 1)  # bf16: fused kernels round less
    fastest = min(("rlnb eager", "rlnb compile=True"), key=best.get)
    out["rlnb_fastest"] = fastest
    out["ratios"] = {"compiled_over_eager": best["rlnb eager"] / best["rlnb compile=True"]}
    for name in ("generate (default cache)", "generate (static cache + compile)"):
        if name in best:
            out["ratios"][f"rlnb over {name}"] = best[name] / best[fastest]
    rate = copy_rate(1024, device=device)
    step_bytes = sum(p.numel() * p.element_size() for p in hf.parameters())  # tied: the unembedding reads it all
    bound = 64 * rate / step_bytes
    out["bandwidth"] = {
        "copy_rate_gb_s": rate / 1e9,
        "weight_bytes_per_step": step_bytes,
        "bound_tokens_per_s": bound,
        "fraction": out["tokens_per_s"][fastest] / bound,
    }
    for s in sessions.values():
        s.close()
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

    t_ours = time_it(lambda: ours._muon_apply(ours._muon_updates(hp), hp))
    t_theirs = time_it(theirs.step)
    t_ns = time_it(lambda: [newton_schulz(p.grad, 5, torch.bfloat16) for p in mats])
    return {
        "matrices": len(mats),
        "rlnb_muon_s": t_ours,
        "torch_muon_s": t_theirs,
        "ns_alone_s": t_ns,
        "rlnb_over_torch": t_ours / t_theirs,
    }


SECTIONS = ("adam_loop", "muon_loop", "muon_step", "decode")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tiny", action="store_true", help="a small config, for a CPU smoke run")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--prompts", type=int, default=8, help="prompts per step (64 completions in all)")
    parser.add_argument("--max-tokens", type=int, default=128, help="tokens per completion in decode")
    parser.add_argument("--only", default=",".join(SECTIONS), help="sections to run: " + ", ".join(SECTIONS))
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16
    report = {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "model": "tiny Qwen3" if args.tiny else "Qwen3-0.6B shape, random init",
        "dtype": "bfloat16",
        "lora_rank": 16,
        "completions": 64,
        "max_tokens": 128,
    }
    sections = {
        "adam_loop": lambda: rl_loop("adam", args, device, dtype),
        "muon_loop": lambda: rl_loop("muon", args, device, dtype),
        "muon_step": lambda: ns_vs_torch_muon(args, device),
        "decode": lambda: decode(args, device, dtype),
    }
    failed = []
    for name in args.only.split(","):
        start = time.perf_counter()
        try:
            report[name] = sections[name]()
        except Exception as exc:  # noqa: BLE001 - recorded; the other sections still run
            traceback.print_exc()
            report[name] = {"error": describe(exc)}
            failed.append(name)
        report[name]["section_s"] = time.perf_counter() - start
        print(f"{name}: {json.dumps(report[name])}", flush=True)
        if os.environ.get("OUT"):
            with open(os.path.join(os.environ["OUT"], "gpu_check.json"), "w") as f:
                json.dump(report, f, indent=2)
    print(json.dumps(report, indent=2))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

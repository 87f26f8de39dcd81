"""Time TrainerOptimizer.step against the bare torch optimizers it stands in for.

(a) kind="adam": our step (grad norm, non-finite guard, clipping, AdamW) over bare
    ``clip_grad_norm_`` + ``torch.optim.AdamW.step()`` (both foreach).              target <= 1.05
(b) kind="muon": our step over ``clip_grad_norm_`` + ``torch.optim.Muon`` on the same hidden
    matrices + ``torch.optim.AdamW`` on the rest.                                   target <= 0.1
    Target (b) assumes a CPU without bf16 matmul units, where torch.optim.Muon's bf16 Newton-Schulz
    is tens of times slower than our fp32 one; the "bf16/fp32 matmul" line shows what this CPU does.

Each contender steps its own copy of one model. Fresh random gradients are set before every step,
outside the timed region; contenders take turns step by step so drifts in machine load hit all alike;
the first ``--warmup`` steps are not timed. Reported: the median and the fastest step.

    python bench/bench_optim.py [--size bench|tiny|small] [--reps 30] [--warmup 5]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn

from rlnb.engine.models.tiny import SIZES, TinyConfig, build_model
from rlnb.engine.optim.trainer import TrainerOptimizer
from rlnb.params import AdamHyperparams, MuonHyperparams

BENCH_SIZE = TinyConfig(vocab_size=4096, n_layer=4, n_head=4, n_embd=256)  # ~5.3M params: a step takes milliseconds
MAX_NORM = 1.0  # clipping on: every contender pays for it
ADAM = AdamHyperparams(learning_rate=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1,
                       grad_clip_norm=MAX_NORM)
MUON = MuonHyperparams(learning_rate=0.02, momentum=0.95, newton_schulz_steps=5, weight_decay=0.1,
                       grad_clip_norm=MAX_NORM, adam=ADAM)


def contenders(model: nn.Module, vocab_size: int) -> dict[str, tuple[nn.Module, Callable[[], None]]]:
    """name -> (its own model copy, one optimizer step)."""
    out: dict[str, tuple[nn.Module, Callable[[], None]]] = {}

    m = copy.deepcopy(model)
    ours_adam = TrainerOptimizer(m, "adam")
    out["ours adam"] = m, lambda: ours_adam.step(ADAM)

    m = copy.deepcopy(model)
    adamw = torch.optim.AdamW(m.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1, foreach=True)

    def torch_adam(m: nn.Module = m) -> None:
        torch.nn.utils.clip_grad_norm_(m.parameters(), MAX_NORM)
        adamw.step()

    out["torch adamw"] = m, torch_adam

    m = copy.deepcopy(model)
    ours_muon = TrainerOptimizer(m, "muon")
    out["ours muon"] = m, lambda: ours_muon.step(MUON)

    m = copy.deepcopy(model)
    split = TrainerOptimizer(m, "muon").split  # the same matrices go to Muon
    muon = torch.optim.Muon([p for _, p in split.muon], lr=0.02, weight_decay=0.1, momentum=0.95)
    rest = torch.optim.AdamW([p for _, p in split.adam], lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1, foreach=True)

    def torch_muon(m: nn.Module = m) -> None:
        torch.nn.utils.clip_grad_norm_(m.parameters(), MAX_NORM)
        muon.step()
        rest.step()

    out["torch muon+adamw"] = m, torch_muon
    return out


def matmul_ms(dtype: torch.dtype, n: int = 512, reps: int = 10) -> float:
    x = torch.randn(n, n, dtype=dtype)
    x @ x
    t0 = time.perf_counter()
    for _ in range(reps):
        x @ x
    return (time.perf_counter() - t0) / reps * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="bench", choices=["bench", *SIZES], help="bench = " + repr(BENCH_SIZE))
    ap.add_argument("--reps", type=int, default=30, help="timed steps per contender")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps per contender first")
    args = ap.parse_args()
    if args.reps < 1 or args.warmup < 0:
        raise ValueError("--reps must be >= 1 and --warmup >= 0")

    config = BENCH_SIZE if args.size == "bench" else SIZES[args.size]
    model = build_model(config, seed=0)
    print(f"size {args.size}: {config}")
    print(f"{sum(p.numel() for p in model.parameters()):,} params; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, CPU {torch.backends.cpu.get_cpu_capability()}, "
          f"bf16/fp32 matmul time {matmul_ms(torch.bfloat16) / matmul_ms(torch.float32):.2f}")

    runs = contenders(model, config.vocab_size)
    times: dict[str, list[float]] = {name: [] for name in runs}
    for i in range(args.warmup + args.reps):
        for name, (m, step) in runs.items():
            for p in m.parameters():
                p.grad = torch.randn_like(p) * 1e-3
            t0 = time.perf_counter()
            step()
            if i >= args.warmup:
                times[name].append(time.perf_counter() - t0)

    median = {name: statistics.median(ts) * 1e3 for name, ts in times.items()}
    print(f"\n{'contender':<18} {'median ms':>10} {'min ms':>10}")
    for name, ts in times.items():
        print(f"{name:<18} {median[name]:>10.2f} {min(ts) * 1e3:>10.2f}")
    print()
    for label, ours, theirs, target in (("(a) adam", "ours adam", "torch adamw", 1.05),
                                         ("(b) muon", "ours muon", "torch muon+adamw", 0.1)):
        ratio = median[ours] / median[theirs]
        print(f"{label}: {ours} / {theirs} = {ratio:.3f}  target <= {target}  {'PASS' if ratio <= target else 'FAIL'}")


if __name__ == "__main__":
    main()

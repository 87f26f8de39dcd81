"""Time TrainerOptimizer.step against the bare torch optimizers it stands in for.

(a) kind="adam": our step (grad norm, non-finite guard, clipping, AdamW) over bare
    ``clip_grad_norm_`` + ``torch.optim.AdamW.step()`` (both foreach).              target <= 1.05
(b) kind="muon": our step over ``clip_grad_norm_`` + ``torch.optim.Muon`` on the same hidden
    matrices + ``torch.optim.AdamW`` on the rest.                                   target <= 0.1
    Target (b) assumes a CPU without bf16 matmul units, where torch.optim.Muon's bf16 Newton-Schulz
    is tens of times slower than our fp32 one; the "bf16/fp32 matmul" line shows what this CPU does.
(c) Engine overhead (``--overhead``): forward-backward + optim-step pipelined through ``Session`` (recording
    on, the thread count the policy picks or ``--threads``) against a bare torch loop doing the same maths on
    the same thread count, on ``tiny`` (or ``--model small``), taking turns every 25 steps: wall and CPU time
    per step (CPU: every thread of the process).                                     target <= 1.1
    A third contender splits the overhead: the session's engine called on the main thread (the operations'
    own checks and metrics, without the worker, the envelopes, the history and the run store). Each also
    prints the process's minor page faults a step (freed memory handed back to the system and faulted in
    again: ``rlnb.engine.heap``). A full garbage collection runs before each pair's timed blocks.

Each contender steps its own copy of one model. Fresh random gradients are set before every step,
outside the timed region; contenders take turns step by step so drifts in machine load hit all alike;
the first ``--warmup`` steps are not timed. Reported: the median and the fastest step.

    python bench/bench_optim.py [--size bench|tiny|small] [--reps 30] [--warmup 5]
    python bench/bench_optim.py --overhead [--pairs 5] [--steps 300] [--threads N] [--model tiny|small]
"""

from __future__ import annotations

import argparse
import copy
import gc
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable

import torch
from torch import nn

from rlnb.engine.models.tiny import SIZES, TinyConfig, build_model
from rlnb.engine.optim.trainer import TrainerOptimizer
from rlnb.params import AdamHyperparams, MuonHyperparams

BENCH_SIZE = TinyConfig(vocab_size=4096, n_layer=4, n_head=4, n_embd=256)  # ~5.3M params: a step takes milliseconds
MAX_NORM = 1.0  # clipping on: every contender pays for it
ADAM = AdamHyperparams(learning_rate=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, grad_clip_norm=MAX_NORM)
MUON = MuonHyperparams(
    learning_rate=0.02, momentum=0.95, newton_schulz_steps=5, weight_decay=0.1, grad_clip_norm=MAX_NORM, adam=ADAM
)


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


TEXT = list(b"hello world, this is a training step of rlnb")


def clock() -> tuple[float, float, int]:
    """Wall and process CPU seconds and the process's minor page faults (all threads), for ``since``."""
    return time.perf_counter(), time.process_time(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def since(start: tuple[float, float, int]) -> tuple[float, float, int]:
    now = clock()
    return now[0] - start[0], now[1] - start[1], now[2] - start[2]


BLOCK = 25
"""(c): steps per turn. The Session and the bare loop take turns every BLOCK steps (50 pipelined operations),
so that a change of machine load between turns, seconds long on a shared machine, hits both alike."""


class SessionLoop:
    """The Session side of (c): one session, recording into ``runs``, with a fixed thread count or the policy's."""

    def __init__(self, runs: str, threads: int | None, model: str = "tiny") -> None:
        import rlnb
        from rlnb import samples

        self.batch = [samples.cross_entropy(TEXT)]
        self.hp = rlnb.AdamParams(learning_rate=1e-3)
        self.session = rlnb.connect("local", model=model, device="cpu", runs_dir=runs, threads=threads)
        self.run(20)  # also the policy's timings: each kind of operation keeps its faster count within 20 steps
        config = self.session.backend.config()
        kept = {d["operation"]: d["threads"] for d in config.get("thread_decisions", [])}
        # the forward-backward's count (the step's bulk) is the bare loop's
        self.threads: int = kept.get(rlnb.wire.OperationKind.FORWARD_BACKWARD, config["threads"])

    def run(self, steps: int) -> tuple[float, float, int]:
        """(wall, CPU seconds, minor page faults) of ``steps`` pipelined steps: submitted at once, then waited for."""
        start = clock()
        for _ in range(steps):
            self.session.forward_backward(self.batch)
            self.session.optim_step(self.hp)
        self.session.wait()
        return since(start)

    def run_engine(self, steps: int) -> tuple[float, float, int]:
        """(wall, CPU seconds, minor page faults) of ``steps`` steps of the same session's engine called on this
        thread: each operation's handler as its worker runs it, at this thread's torch count (the bare loop's,
        which is the policy's), without the worker thread, the operation envelopes, the history or the run store."""
        from rlnb import wire
        from rlnb.engine import handlers

        engine, cancelled = self.session.backend.engine, threading.Event()
        fb = wire.ForwardBackwardBody(samples=self.batch, loss=wire.loss_config("cross_entropy", None))
        step = wire.OptimStepBody.model_construct(adam_params=self.hp)
        start = clock()
        for _ in range(steps):
            handlers.run(engine, wire.OperationKind.FORWARD_BACKWARD, fb, cancelled)
            handlers.run(engine, wire.OperationKind.OPTIM_STEP, step, cancelled)
        return since(start)

    def close(self) -> None:
        self.session.close()


class BareLoop:
    """The same maths as a session's step (log-probs, summed loss, grad norm with its host sync, clipping,
    AdamW with the session's defaults), on this thread with ``threads`` torch threads."""

    def __init__(self, threads: int, model: str = "tiny") -> None:
        torch.set_num_threads(threads)
        self.model = build_model(model, 0)
        self.opt = torch.optim.AdamW(
            self.model.parameters(), lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, foreach=True
        )
        self.idx, self.tgt = torch.tensor([TEXT[:-1]]), torch.tensor([TEXT[1:]])
        self.run(20)

    def step(self) -> None:
        lp = torch.log_softmax(self.model(self.idx).float(), -1).gather(-1, self.tgt[..., None])[..., 0]
        (-lp.sum()).backward()
        params = list(self.model.parameters())
        total = torch.nn.utils.get_total_norm([p.grad for p in params])
        total.item()
        torch.nn.utils.clip_grads_with_norm_(params, 1.0, total)
        self.opt.step()
        for p in params:
            p.grad = None

    def run(self, steps: int) -> tuple[float, float, int]:
        start = clock()
        for _ in range(steps):
            self.step()
        return since(start)


def overhead(pairs: int, steps: int, fixed: int | None, model: str) -> None:
    print("command: python " + " ".join(sys.argv))
    print(f"(c) load average {os.getloadavg()[0]:.2f} at the start; torch {torch.__version__}")
    runs = tempfile.mkdtemp()
    rows = []
    for _ in range(pairs):
        session = SessionLoop(runs, fixed, model)
        bare = BareLoop(session.threads, model)
        gc.collect()  # the one full collection of the imports' objects is not a per-step cost: none in a block
        totals = [0.0] * 9  # wall, CPU and faults of: Session, its engine on this thread, bare
        try:
            for done in range(0, steps, BLOCK):  # taking turns, so that a change of load hits all three
                n = min(BLOCK, steps - done)
                for i, took in enumerate((session.run(n), session.run_engine(n), bare.run(n))):
                    for j in range(3):
                        totals[3 * i + j] += took[j]
        finally:
            session.close()
        rows.append((*(x / steps for x in totals), session.threads))
    for s_wall, s_cpu, s_flt, e_wall, e_cpu, e_flt, b_wall, b_cpu, b_flt, threads in rows:
        print(
            f"    {threads} thread(s): Session {s_wall * 1e3:6.2f} ms/step wall, {s_cpu * 1e3:6.2f} CPU;  engine "
            f"alone {e_wall * 1e3:6.2f} wall, {e_cpu * 1e3:6.2f} CPU;  bare {b_wall * 1e3:6.2f} wall, "
            f"{b_cpu * 1e3:6.2f} CPU;  wall {s_wall / b_wall:.2f}x (engine alone {e_wall / b_wall:.2f}x)  "
            f"CPU {s_cpu / b_cpu:.2f}x;  page faults/step {s_flt:.0f} / {e_flt:.0f} / {b_flt:.0f}"
        )
    best = [min(r[i] for r in rows) for i in range(9)]
    best_wall, best_cpu, engine_wall = best[0] / best[6], best[1] / best[7], best[3] / best[6]
    med_wall = statistics.median(r[0] / r[6] for r in rows)
    med_cpu = statistics.median(r[1] / r[7] for r in rows)
    med_engine = statistics.median(r[3] / r[6] for r in rows)
    print(
        f"(c) engine overhead on {model}, {steps} steps pipelined {BLOCK} at a time, {pairs} pairs, threads "
        f"{'as the policy picked' if fixed is None else 'fixed by --threads'} "
        f"({sorted({r[9] for r in rows})}): best/best wall {best_wall:.2f}x, CPU {best_cpu:.2f}x; median of pairs "
        f"wall {med_wall:.2f}x, CPU {med_cpu:.2f}x (target <= 1.1: wall {'PASS' if best_wall <= 1.1 else 'FAIL'}, "
        f"CPU {'PASS' if best_cpu <= 1.1 else 'FAIL'})"
    )
    print(
        f"(c) of which the operations' own work (the engine called on this thread, no worker, envelopes, history "
        f"or run store): best/best wall {engine_wall:.2f}x, median of pairs {med_engine:.2f}x"
    )
    print(
        f"(c) minor page faults a step (the process, every thread), median of pairs: Session "
        f"{statistics.median(r[2] for r in rows):.0f}, engine alone {statistics.median(r[5] for r in rows):.0f}, "
        f"bare {statistics.median(r[8] for r in rows):.0f}"
    )
    print(f"(c) load average {os.getloadavg()[0]:.2f} at the end")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="bench", choices=["bench", *SIZES], help="bench = " + repr(BENCH_SIZE))
    ap.add_argument("--reps", type=int, default=30, help="timed steps per contender")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps per contender first")
    ap.add_argument("--overhead", action="store_true", help="(c) only: Session vs a bare loop")
    ap.add_argument("--pairs", type=int, default=5, help="(c): Session / bare pairs")
    ap.add_argument("--steps", type=int, default=300, help="(c): timed steps per side and pair")
    ap.add_argument("--model", choices=["tiny", "small"], default="tiny", help="(c): the built-in model")
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help="(c): a fixed torch thread count for both loops (default: the count the engine's policy picks)",
    )
    args = ap.parse_args()
    if args.overhead:
        overhead(args.pairs, args.steps, args.threads, args.model)
        return
    if args.reps < 1 or args.warmup < 0:
        raise ValueError("--reps must be >= 1 and --warmup >= 0")

    config = BENCH_SIZE if args.size == "bench" else SIZES[args.size]
    model = build_model(config, seed=0)
    print(f"size {args.size}: {config}")
    print(
        f"{sum(p.numel() for p in model.parameters()):,} params; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, CPU {torch.backends.cpu.get_cpu_capability()}, "
        f"bf16/fp32 matmul time {matmul_ms(torch.bfloat16) / matmul_ms(torch.float32):.2f}"
    )

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
    for label, ours, theirs, target in (
        ("(a) adam", "ours adam", "torch adamw", 1.05),
        ("(b) muon", "ours muon", "torch muon+adamw", 0.1),
    ):
        ratio = median[ours] / median[theirs]
        print(f"{label}: {ours} / {theirs} = {ratio:.3f}  target <= {target}  {'PASS' if ratio <= target else 'FAIL'}")


if __name__ == "__main__":
    main()

"""Same-process A/B of the stacked model's ops: a 16-member stacked ``tiny`` model's forward-backward (48 rows x 12
tokens, the bench's demo step) and its 8 decoding steps after a 5-token prefill, the old and the new way taking
turns, min and median of ``--reps`` each after one warm-up round, in the calling thread's CPU time
(``time.thread_time``: at 1 torch thread the ops run on it, and a loaded machine's waits are not counted) and in wall
time. The load average is printed at the start and the end. Parts (``--part``):

* ``softmax`` (batched8): ``stacked.batched_attention``'s scores laid out queries by keys with the softmax over the
  last dimension (old) against keys by queries with the softmax over dimension -2 (new); first the softmax alone, per
  element, over a last dimension of 5..32 against dimension -2: torch's CPU kernel for a last dimension narrower than
  its vector (16 floats with AVX-512) is the slow one.
* ``fused`` (batched7): vmap's own linear layers and ``losses.logprobs_and_entropy`` (old) against ``fused.linear``
  and ``fused.target_logprobs`` (new); decoding runs the same code in both, a control: its ratio is the machine's
  noise at that time.
* ``gather`` (batched9): ``StackedModel.backward`` gathering the gradients by ``reshape`` and ``cat`` (old: a
  transposed weight's gradient copied twice) against one copy into each parameter's columns of ``grad`` (new);
  decoding is the control.
* ``fill`` (batched9): ``batched_attention``'s mask filled by an out-of-place ``masked_fill`` (old: torch clones every
  score first) against ``masked_fill_`` into the fresh scores (new), in both the forward-backward and decoding.

    python bench/bench_batched_ab.py --part softmax|fused|gather|fill [--reps 15] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import torch
from torch import Tensor

from rlnb.batched import fused, stacked
from rlnb.batched.stacked import StackedModel
from rlnb.engine import losses
from rlnb.engine.models.tiny import CausalSelfAttention, TinyConfig, build_model

K, B, W, PROMPT, TOKENS = 16, 48, 12, 5, 8
Work = dict[str, Callable[[], None]]  # label -> one run of it


def last_dim_attention(
    q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None = None, is_causal: bool = False
) -> Tensor:
    """``batched_attention`` with the scores queries by keys, the softmax over the last dimension (before batched8)."""
    scores = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5
    if is_causal:
        T, S = scores.shape[-2:]
        attn_mask = torch.ones(T, S, dtype=torch.bool, device=q.device).tril()
    if attn_mask is not None:
        scores.masked_fill_(~attn_mask, float("-inf"))  # in place, as batched_attention: the parts do not mix
    return torch.softmax(scores, dim=-1) @ v


def cloned_fill_attention(
    q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None = None, is_causal: bool = False
) -> Tensor:
    """``batched_attention`` with an out-of-place ``masked_fill`` (before batched9)."""
    scores = k @ q.transpose(-2, -1) * q.shape[-1] ** -0.5
    if is_causal:
        T, S = q.shape[-2], k.shape[-2]
        attn_mask = torch.ones(T, S, dtype=torch.bool, device=q.device).tril()
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask.transpose(-2, -1), float("-inf"))
    return torch.softmax(scores, dim=-2).transpose(-2, -1) @ v


def gather_by_cat(model: StackedModel, loss: Tensor) -> None:
    """``StackedModel.backward`` before batched9: each gradient reshaped to a row a member, then one ``cat``."""
    grads = torch.autograd.grad(loss, list(model.params.values()))
    torch.cat([g.reshape(model.members, -1) for g in grads], dim=1, out=model.grad)


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    """(CPU of this thread, wall) seconds of ``fn()``."""
    cpu, wall = time.thread_time(), time.perf_counter()
    fn()
    return time.thread_time() - cpu, time.perf_counter() - wall


def softmax_alone(reps: int) -> None:
    """ns an element of a softmax over ~440k elements, over the last dimension and over dimension -2."""
    for width in (5, 12, 13, 15, 16, 32):
        x = torch.randn(442_368 // width, width)
        xt = x.t().contiguous()
        last = min(timed(lambda: torch.softmax(x, -1))[0] for _ in range(reps)) / x.numel() * 1e9  # noqa: B023
        other = min(timed(lambda: torch.softmax(xt, 0))[0] for _ in range(reps)) / x.numel() * 1e9  # noqa: B023
        print(
            f"    softmax over {width:2d}: last dim {last:5.2f} ns an element, "
            f"dim -2 {other:5.2f} ns ({last / other:.1f}x)"
        )


def stacked_model() -> StackedModel:
    modules = [build_model(TinyConfig(), seed) for seed in range(K)]
    return StackedModel(modules, [n for n, _ in modules[0].named_parameters()])


def old_linear_model() -> StackedModel:
    """A stacked model whose linear layers run vmap's own rule (a ``bmm``, then the bias ``add``)."""
    fused_linear = fused.linear
    fused.linear = lambda layer, x: torch.nn.functional.linear(x, layer.weight, layer.bias)
    try:
        return stacked_model()
    finally:
        fused.linear = fused_linear


def variants(part: str) -> dict[str, Work]:
    """The part's old and new way: each a forward-backward and a decoding."""
    g = torch.Generator().manual_seed(0)
    ids, targets = torch.randint(0, 256, (2, K, B, W), generator=g)
    where = torch.rand(K, B, W, generator=g) < 0.67  # the completion tokens of a 4-token prompt, 8 sampled

    def work(model: StackedModel, fb: Callable[[], None], before: Callable[[], None] = lambda: None) -> Work:
        def decoding() -> None:
            before()
            decoder = model.decoder(B, PROMPT + TOKENS)
            prompt = ids[:, :, :PROMPT].reshape(K * B, PROMPT)
            logits = decoder.prefill(prompt, torch.ones(K * B, PROMPT, dtype=torch.long))
            for _ in range(TOKENS):
                logits = decoder.step(logits.argmax(-1))

        def forward_backward() -> None:
            before()
            fb()

        return {"forward-backward": forward_backward, "decoding": decoding}

    def loss(model: StackedModel) -> Tensor:
        return (model.logprobs(ids, targets, where)[0] * where).sum()

    if part in ("softmax", "fill"):
        model = stacked_model()
        layers = [m for m in model.base.modules() if isinstance(m, CausalSelfAttention)]

        def kernel(fn: Callable[..., Tensor]) -> Callable[[], None]:
            def use() -> None:
                for layer in layers:
                    layer.attention = fn

            return use

        fb = lambda: model.backward(loss(model))  # noqa: E731
        old_kernel = last_dim_attention if part == "softmax" else cloned_fill_attention
        return {
            "old": work(model, fb, kernel(old_kernel)),
            "new": work(model, fb, kernel(stacked.batched_attention)),
        }
    if part == "fused":
        old, new = old_linear_model(), stacked_model()

        def old_fb() -> None:
            lp, _ = losses.logprobs_and_entropy(old._forward(old.params, ids), targets, where)
            old.backward((lp * where).sum())

        return {"old": work(old, old_fb), "new": work(new, lambda: new.backward(loss(new)))}
    model = stacked_model()
    return {
        "old": work(model, lambda: gather_by_cat(model, loss(model))),
        "new": work(model, lambda: model.backward(loss(model))),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("softmax", "fused", "gather", "fill"), required=True)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"part {args.part}, threads {args.threads}, load average {os.getloadavg()[0]:.1f} at the start")
    if args.part == "softmax":
        softmax_alone(args.reps)
    ways = variants(args.part)
    times: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for rep in range(args.reps + 1):  # the first round warms up, untimed
        for name, work in ways.items():
            for label, fn in work.items():
                took = timed(fn)
                if rep:
                    times.setdefault((label, name), []).append(took)
    for label in ways["old"]:
        for clock, i in (("CPU", 0), ("wall", 1)):
            old, new = ([t[i] for t in times[(label, name)]] for name in ("old", "new"))
            print(
                f"    {label} ({clock}): old min {min(old) * 1e3:.1f} ms median {statistics.median(old) * 1e3:.1f}, "
                f"new min {min(new) * 1e3:.1f} median {statistics.median(new) * 1e3:.1f}: new / old "
                f"{min(new) / min(old):.3f} (min), {statistics.median(new) / statistics.median(old):.3f} (median)"
            )
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()

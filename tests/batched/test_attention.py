"""``stacked.batched_attention``: torch's attention values and gradients, with its softmax over a dimension that is not
the last one. torch 2.13's CPU softmax over a last dimension narrower than its vector (16 floats with AVX-512) takes a
slow path, 17-23x an element's time over dimension -2 (``bench/bench_batched_ab.py --part softmax``), and ``tiny``'s
attention rows are 5-13 keys wide in the demo's samples and steps."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from rlnb.batched.stacked import StackedModel, batched_attention
from rlnb.engine.models.tiny import TinyConfig, build_model
from rlnb.testing.ops import OpCounter

SOFTMAXES = (torch.ops.aten._softmax.default, torch.ops.aten._softmax_backward_data.default)


class SoftmaxDims(TorchDispatchMode):
    """The (reduced dimension's size, whether it is the last) of every softmax and softmax backward dispatched."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[int, bool]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func in SOFTMAXES:
            x, dim = args[0], args[1] if func is SOFTMAXES[0] else args[2]
            self.seen.append((x.shape[dim], dim % x.ndim == x.ndim - 1))
        return func(*args, **(kwargs or {}))


def test_batched_attention_gives_sdpas_values_and_gradients():
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(3, 2, 4, 5, 8, generator=g).requires_grad_() for _ in range(3))
    mask = torch.rand(2, 1, 5, 7, generator=g) > 0.3  # (B, 1, T, S) under the leading dim
    mask[..., 0] = True
    kk, vv = (torch.randn(3, 2, 4, 7, 8, generator=g) for _ in range(2))  # more keys than queries
    cases = [((q, k, v), {"is_causal": True}), ((q, kk, vv), {"attn_mask": mask}), ((q, kk, vv), {"is_causal": True})]
    weights = torch.randn(3, 2, 4, 5, 8, generator=g)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    for args, kwargs in cases:
        got, want = batched_attention(*args, **kwargs), sdpa(*args, **kwargs)
        torch.testing.assert_close(got, want)
        grads = [torch.autograd.grad((y * weights).sum(), q) for y in (got, want)]
        torch.testing.assert_close(grads[0], grads[1])


def test_a_stacked_model_never_takes_softmax_over_a_narrow_last_dimension():
    config = TinyConfig()
    names = [n for n, _ in build_model(config, 0).named_parameters()]
    model = StackedModel([build_model(config, seed) for seed in range(2)], names)
    g = torch.Generator().manual_seed(3)
    ids, targets = torch.randint(0, 256, (2, 2, 3, 12), generator=g)
    with SoftmaxDims() as dims:
        lp, _ = model.logprobs(ids, targets)
        model.backward(lp.sum())
        decoder = model.decoder(3, 8)
        decoder.prefill(ids[:, :, :5].reshape(6, 5), torch.ones(6, 5, dtype=torch.long))
        decoder.step(torch.zeros(6, dtype=torch.long))
    assert len(dims.seen) >= 3 * config.n_layer  # forward, backward, decoding: the mode sees the attention
    narrow_last = [size for size, last in dims.seen if last and size < 16]
    assert not narrow_last, f"softmax over a last dimension of {narrow_last} elements"


def test_the_mask_is_filled_into_the_scores_in_place():
    """The scores are a fresh tensor (the scaled product), so the mask is filled into them: torch's out-of-place
    ``masked_fill`` clones every score first (inside the op: a dispatch mode sees one ``masked_fill``), a pass over
    them in each layer of the forward and of every decoding step. The values are the out-of-place fill's."""
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(3, 2, 4, 5, 8, generator=g) for _ in range(3))  # 3 members of (B, nh, T, hs)
    mask = torch.rand(3, 2, 1, 5, 5, generator=g) > 0.3
    mask[..., 0] = True
    causal = torch.func.vmap(lambda q, k, v: batched_attention(q, k, v, is_causal=True))
    masked = torch.func.vmap(lambda q, k, v, m: batched_attention(q, k, v, attn_mask=m))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    for run, kwargs in (
        (lambda: causal(q, k, v), {"is_causal": True}),
        (lambda: masked(q, k, v, mask), {"attn_mask": mask}),
    ):
        with OpCounter() as count:
            got = run()
        fills = count.packets()
        assert fills["aten.masked_fill_"] == 1 and fills["aten.masked_fill"] == 0, dict(fills)
        torch.testing.assert_close(got, sdpa(q, k, v, **kwargs))

"""A prefill needs each row's next-token logits only: ``TinyTransformer.forward(..., last=True)`` runs the final layer
norm and the output head at the last position alone, the whole forward's values at it to float32's rounding (MKL's
product of fewer rows may round a row otherwise: bit for bit at the demo's 48 rows a member, an ulp apart at 3 rows on
an AMD EPYC), and the stacked decoder's prefill multiplies one row of logits a prompt."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from rlnb.batched.stacked import StackedModel
from rlnb.engine.models.tiny import KVCache, TinyConfig, build_model


def test_the_last_positions_logits_are_the_whole_forwards():
    config = TinyConfig()
    model = build_model(config, 4)
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(0, 256, (3, 7), generator=g)
    mask = torch.ones(3, 7, dtype=torch.long)
    mask[0, :2] = 0  # a left-padded row
    with torch.no_grad():
        torch.testing.assert_close(model(ids, last=True), model(ids)[:, -1], rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(model(ids[0], last=True), model(ids[0])[-1], rtol=1e-6, atol=1e-6)
        caches = [KVCache(config, 3, 9, torch.device("cpu"), torch.float32) for _ in range(2)]
        got = model(ids, mask, caches[0], last=True)
        want = model(ids, mask, caches[1])[:, -1]
    assert got.shape == (3, config.vocab_size)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    assert caches[0].length == caches[1].length == 7
    assert all(torch.equal(a, b) for a, b in zip(caches[0].k + caches[0].v, caches[1].k + caches[1].v, strict=True))


class Products(TorchDispatchMode):
    """The shape of every batched product's output (``bmm``: vmap's linear layers and attention)."""

    def __init__(self) -> None:
        super().__init__()
        self.shapes: list[tuple[int, ...]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket in (torch.ops.aten.bmm, torch.ops.aten.baddbmm):
            self.shapes.append(tuple(out.shape))
        return out


def test_the_stacked_prefill_writes_one_row_of_logits_a_prompt():
    config = TinyConfig(n_embd=32, n_head=4)  # no layer 256 wide but the output head
    members, rows, prompt = 2, 3, 6
    model = StackedModel([build_model(config, s) for s in range(members)], [n for n, _ in
                          build_model(config, 0).named_parameters()])  # fmt: skip
    ids = torch.randint(0, 256, (members * rows, prompt), generator=torch.Generator().manual_seed(6))
    decoder = model.decoder(rows, prompt + 2)
    with Products() as products:
        logits = decoder.prefill(ids, torch.ones(members * rows, prompt, dtype=torch.long))
    with torch.no_grad():
        for k in range(members):
            alone = build_model(config, k)(ids[k * rows : (k + 1) * rows])[:, -1]
            torch.testing.assert_close(logits[k * rows : (k + 1) * rows], alone, rtol=1e-5, atol=1e-5)
    heads = [shape for shape in products.shapes if shape[-1] == config.vocab_size]
    assert heads == [(members, rows, config.vocab_size)], f"the output head's products: {heads}"


def test_the_stacked_prefill_runs_each_prompt_once_for_its_samples():
    """``prefill(ids, mask, n)``: each member's prompt once (the head's products one row a prompt), its keys and
    values in the rows of its ``n`` samples, and the first step as a batch prefilled row by row."""
    config = TinyConfig(n_embd=32, n_head=4)
    members, prompts, n, prompt = 2, 2, 3, 5
    model = StackedModel([build_model(config, s) for s in range(members)], [name for name, _ in
                          build_model(config, 0).named_parameters()])  # fmt: skip
    ids = torch.randint(0, 256, (members * prompts, prompt), generator=torch.Generator().manual_seed(7))
    mask = torch.ones(members * prompts, prompt, dtype=torch.long)
    mask[1, :2] = 0  # member 0's second prompt is left-padded
    once, rows = model.decoder(prompts * n, prompt + 2), model.decoder(prompts * n, prompt + 2)
    with Products() as products:
        first = once.prefill(ids, mask, n)
    want = rows.prefill(ids.repeat_interleave(n, 0), mask.repeat_interleave(n, 0))
    heads = [shape for shape in products.shapes if shape[-1] == config.vocab_size]
    assert heads == [(members, prompts, config.vocab_size)], f"the output head's products: {heads}"
    torch.testing.assert_close(first, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(once.k[..., :prompt, :], rows.k[..., :prompt, :], rtol=1e-5, atol=1e-5)
    nxt = torch.arange(members * prompts * n) % 256
    torch.testing.assert_close(once.step(nxt), rows.step(nxt), rtol=1e-5, atol=1e-5)

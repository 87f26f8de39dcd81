"""What a member adds to an ensemble's step, counted in torch ops and in elements copied (deterministic, unlike wall
time on a shared machine): the step's phases run once for all members, so an added member must add few ops (a
Python loop over members in a phase, as the per-member losses were at ~270 ops a member, shows as a count that
grows with K), and decoding must not copy the KV cache at every token."""

from __future__ import annotations

import pytest
import torch

import rlnb
from rlnb.batched import Member, run_batched
from rlnb.batched.ensemble import Ensemble
from rlnb.batched.optim import StackedOptimizer
from rlnb.batched.stacked import StackedModel
from rlnb.engine.models.tiny import TinyConfig, build_model
from rlnb.testing.ops import OpCounter

PER_MEMBER = 9
"""Ops an added member of its own seed may add to a step (here, 8 members and group size 4: 7.4, 12.4 before the
entropy was one dot product a position for all members (``fused.target_logprobs``, no chunks of counted positions),
17.4 before its uniforms were drawn into the other members' buffer (``sampling.seeds_uniforms``: its seed's randint
and a fill a prompt, no allocation, reshape or ``cat`` of its own), 71.4 before the engine made the work before
decoding one op a prompt; 345 before the losses were stacked)."""

PER_MEMBER_ONE_SEED = 3
"""The same for members of one seed (a learning-rate grid), whose uniforms are drawn once for all of them
(``sampler.members_uniforms``): 1.0 here, 6.0 with the entropy's chunks, 17.4 before; ``bench_batched.py --ops``: 0."""


def step_ops(monkeypatch: pytest.MonkeyPatch, members: int, one_seed: bool = True) -> int:
    """Torch ops dispatched by the second step of an ensemble of ``members`` (learning rates apart), all of seed 0
    (``one_seed``) or each of its own."""
    counted: list[int] = []
    step = Ensemble._step

    def counting(self: Ensemble, i: int) -> None:
        if i != 1:
            return step(self, i)
        with OpCounter() as count:
            step(self, i)
        counted.append(sum(count.ops.values()))

    monkeypatch.setattr(Ensemble, "_step", counting)
    trials = [Member(rlnb.AdamParams(learning_rate=1e-3 * (k + 1)), seed=0 if one_seed else k) for k in range(members)]
    results = run_batched("tiny", "adam", trials, steps=2, group_size=4, device="cpu", threads=1)
    assert [r.status for r in results] == ["COMPLETED"] * members
    (ops,) = counted
    return ops


@pytest.mark.slow
def test_an_added_member_adds_few_ops_to_a_step(monkeypatch):
    one, eight, seeds = step_ops(monkeypatch, 1), step_ops(monkeypatch, 8), step_ops(monkeypatch, 8, one_seed=False)
    assert one > 500  # the count sees the step's ops
    assert (seeds - one) / 7 <= PER_MEMBER, f"a step of 1 member: {one} ops, of 8 of their own seeds: {seeds}"
    assert (eight - one) / 7 <= PER_MEMBER_ONE_SEED, f"a step of 1 member: {one} ops, of 8 of one seed: {eight}"


@pytest.mark.slow  # ~2 s at load 7: vmap's first calls, every op through the counting mode
def test_a_decoding_step_does_not_copy_the_members_kv_cache():
    """Each token's vmapped attention reads every member's filled cache slots. With the cache laid out member-major
    (a layer's keys of one member apart from the next member's by the other layers), a batched matmul could not
    fold members and rows into one batch dimension, and copied each layer's keys and values of every member first:
    the whole cache, every token. Layer-major, only the new token's queries are copied."""
    config = TinyConfig(n_layer=2, n_embd=32, n_head=4)
    members, rows, prompt, tokens = 4, 6, 5, 3
    model = StackedModel([build_model(config, seed) for seed in range(members)], [n for n, _ in
                          build_model(config, 0).named_parameters()])  # fmt: skip
    decoder = model.decoder(rows, prompt + tokens)
    decoder.prefill(
        torch.randint(0, 256, (members * rows, prompt)), torch.ones(members * rows, prompt, dtype=torch.long)
    )
    with OpCounter(elements=True) as count:
        for _ in range(tokens):  # which tokens does not matter: the test counts copies, not choices
            logits = decoder.step(torch.zeros(members * rows, dtype=torch.long))
    queries = tokens * config.n_layer * members * rows * config.n_embd  # each token's queries, every layer
    cloned = count.written["aten.clone.default"]  # a strided input made contiguous
    assert count.packets()["aten.bmm"] >= 2 * config.n_layer * tokens  # the count sees the attention's products
    assert cloned <= queries, f"{cloned} elements copied in {tokens} steps; the queries are {queries}"
    assert logits.shape == (members * rows, config.vocab_size)


def test_the_gradients_are_multiplied_only_when_a_member_clips():
    """A clip factor of 1 for every member (no norm past its clip) changes nothing, so the step makes no pass over
    every gradient for it; one member's clip does, and only its row changes."""
    config = TinyConfig(n_layer=1, n_embd=16, n_head=2)
    names = [n for n, _ in build_model(config, 0).named_parameters()]
    model = StackedModel([build_model(config, seed) for seed in range(2)], names)
    optimizer = StackedOptimizer(model, "adam", names)
    model.grad.copy_(torch.randn(model.grad.shape, generator=torch.Generator().manual_seed(0)) * 1e-3)
    norm = float(optimizer.norms().total.max())

    def grad_passes(clips: list[float]) -> tuple[int, list[float]]:
        hps = [rlnb.AdamParams(grad_clip_norm=c).resolved() for c in clips]
        with OpCounter() as count:
            stats = optimizer.step(hps, optimizer.norms())
        return count.packets()["aten.mul_"], [s.clip_coef for s in stats]

    before = model.grad.clone()
    passes, coefs = grad_passes([2 * norm, 2 * norm])
    assert coefs == [1.0, 1.0] and torch.equal(model.grad, before)
    clipped_passes, coefs = grad_passes([2 * norm, norm / 2])
    assert coefs[0] == 1.0 and coefs[1] < 1.0 and clipped_passes == passes + 1
    assert torch.equal(model.grad[0], before[0]) and torch.equal(model.grad[1], before[1] * coefs[1])


def test_adams_update_writes_ten_passes_over_the_weights_and_equals_torchs_adamw_bit_for_bit():
    """AdamW's update of every member: the moments, the denominator, the step and the copy for the forward, 10 passes
    over the weights (11 when the denominator's ``eps`` was a pass of its own); each member's weights are
    ``torch.optim.AdamW(foreach=True)``'s with its own hyperparameters, bit for bit."""
    config = TinyConfig(n_layer=1, n_embd=16, n_head=2)
    modules = [build_model(config, seed) for seed in range(2)]
    names = [n for n, _ in modules[0].named_parameters()]
    model = StackedModel(modules, names)
    optimizer = StackedOptimizer(model, "adam", names)
    params = [rlnb.AdamParams(learning_rate=1e-3, eps=1e-6, grad_clip_norm=0),
              rlnb.AdamParams(learning_rate=3e-2, beta2=0.99, grad_clip_norm=0)]  # fmt: skip
    hps = [p.resolved() for p in params]
    torch_adams = [
        torch.optim.AdamW(m.parameters(), lr=h.learning_rate, betas=(h.beta1, h.beta2), eps=h.eps,
                          weight_decay=h.weight_decay, foreach=True)
        for m, h in zip(modules, hps, strict=True)
    ]  # fmt: skip
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        model.grad.copy_(torch.randn(model.grad.shape, generator=g))
        for k, (module, adam) in enumerate(zip(modules, torch_adams, strict=True)):
            for name, p in module.named_parameters():
                a, b, shape = model.columns[name]
                p.grad = model.grad[k, a:b].view(shape).clone()
            adam.step()
        with OpCounter(elements=True) as count:
            optimizer.step(hps, optimizer.norms())
        for k, module in enumerate(modules):
            assert all(torch.equal(model.state(k)[n], p.detach()) for n, p in module.named_parameters())
    written = sum(count.written.values()) / model.flat.numel()
    assert 9 < written <= 10.05, f"{written:.2f} passes over the weights"


def test_the_backward_writes_each_gradient_into_grad_in_one_pass():
    """A weight used transposed (every linear layer's) gets a strided gradient from autograd: reshaped to a row a
    member it was copied, then copied again by a ``cat`` into ``grad``. One copy into its columns of ``grad`` is one
    pass over the gradients past what autograd writes, with the same values."""
    config = TinyConfig(n_layer=1, n_embd=16, n_head=2)
    names = [n for n, _ in build_model(config, 0).named_parameters()]
    model = StackedModel([build_model(config, seed) for seed in range(3)], names)
    ids, targets = torch.randint(0, 256, (2, 3, 4, 6), generator=torch.Generator().manual_seed(0))

    def loss() -> torch.Tensor:
        return model.logprobs(ids, targets)[0].sum()

    first, second = loss(), loss()
    with OpCounter(elements=True) as autograd_alone:
        grads = torch.autograd.grad(first, list(model.params.values()))
    with OpCounter(elements=True) as backward:
        model.backward(second)
    past = (sum(backward.written.values()) - sum(autograd_alone.written.values())) / model.grad.numel()
    assert 0.99 < past <= 1.0, f"{past:.2f} passes over the gradients past autograd's"
    expected = torch.cat([g.reshape(model.members, -1) for g in grads], dim=1)
    assert torch.equal(model.grad, expected)
    model.keep([2, 0])  # members leave: the gradients go into the rows of the ensemble left
    ids, targets = ids[[2, 0]], targets[[2, 0]]
    grads = torch.autograd.grad(loss(), list(model.params.values()))
    model.backward(loss())
    assert torch.equal(model.grad, torch.cat([g.reshape(2, -1) for g in grads], dim=1))

"""A batched optim-step that raises part way (out of memory): before anything moved, every member keeps its weights and
optimizer state and its failure says so; inside AdamW's own step, the failure says the weights are half-stepped. The
words are the session's (``rlnb.engine.optim.failures``)."""

from __future__ import annotations

import pytest
import torch

import rlnb
from rlnb.batched import Member, run_batched
from rlnb.batched import optim as optim_mod
from rlnb.batched import stacked as stacked_mod
from rlnb.batched.optim import StackedOptimizer, plan
from rlnb.batched.stacked import StackedModel
from rlnb.engine.models.factory import build_adapter
from rlnb.engine.optim.failures import StepFailed
from rlnb.engine.optim.muon import muon_update, shape_scale
from rlnb.params import MuonHyperparams

MEMBERS = [
    Member(rlnb.MuonParams(learning_rate=0.05, adam={"learning_rate": 3e-3}), seed=0),
    Member(rlnb.MuonParams(learning_rate=0.02, newton_schulz_steps=3, adam={"learning_rate": 1e-3}), seed=1),
]
HALF = "half-stepped"
KEPT = "the trial's weights and optimizer state are those of its last completed step"
CODE = "TRAINING_OPERATION_ERROR_CODE_RESOURCE_EXHAUSTED"


def _failing(real, fail_at: int):
    """``real``, raising out of memory on its ``fail_at``-th call."""
    calls = [0]

    def call(*args, **kwargs):
        calls[0] += 1
        if calls[0] == fail_at:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(*args, **kwargs)

    return call


def _spy_grads(monkeypatch) -> list[torch.Tensor]:
    """The gradients the members leave the ensemble with (``StackedModel.keep``)."""
    grads, real_keep = [], stacked_mod.StackedModel.keep

    def keep(self, index):
        grads.append(self.grad.clone())
        return real_keep(self, index)

    monkeypatch.setattr(stacked_mod.StackedModel, "keep", keep)
    return grads


def _optim_errors(result) -> list[str]:
    df = result.history.df
    opt = df[df.kind == "optim-step"]
    assert list(opt.error_code) == [CODE]
    return list(opt.error_message)


@pytest.mark.slow  # one tiny Muon ensemble, one step
def test_a_muon_update_that_runs_out_of_memory_changes_nothing_and_says_so(monkeypatch):
    """The second shape group's Newton-Schulz fails: AdamW's weights and the first group's had moved in silence."""
    monkeypatch.setattr(optim_mod, "muon_update", _failing(muon_update, 2))
    grads = _spy_grads(monkeypatch)
    results = run_batched("tiny", "muon", MEMBERS, steps=2, device="cpu", ns_dtype="float32", keep_weights=True,
                          group_size=4)  # fmt: skip
    for got, member in zip(results, MEMBERS, strict=True):
        assert got.status == "FAILED" and got.steps_done == 0
        start = dict(build_adapter("tiny", seed=member.seed, device="cpu").module.named_parameters())
        assert [n for n, w in got.weights.items() if not torch.equal(w, start[n].detach())] == []  # nothing moved
        assert "out of memory" in got.reason and KEPT in got.reason, got.reason  # no session to train on
        assert KEPT in _optim_errors(got)[0] and "forward-backward" not in got.reason
    assert len(grads) == 1 and not grads[0].any()  # the clipped gradients dropped


@pytest.mark.slow  # one tiny Muon ensemble, one step
def test_an_adamw_step_that_fails_part_way_says_the_weights_are_half_stepped(monkeypatch):
    """AdamW's denominator is allocated after its weights and moments moved: restoring them is the user's."""
    monkeypatch.setattr(optim_mod.torch, "addcdiv", _failing(torch.addcdiv, 1))
    results = run_batched("tiny", "muon", MEMBERS, steps=1, device="cpu", ns_dtype="float32", group_size=4)
    for got in results:
        assert got.status == "FAILED" and "out of memory" in got.reason
        assert HALF in got.reason and "run the trial again" in got.reason and "checkpoint" not in got.reason
        assert HALF in _optim_errors(got)[0]


def _ensemble(K: int) -> tuple[StackedModel, StackedOptimizer]:
    adapters = [build_adapter("tiny", seed=s, device="cpu") for s in range(K)]
    adam, groups = plan(adapters[0].module, "muon", adapters[0].embedding_params())
    model = StackedModel([a.module for a in adapters], adam + [n for g in groups for n in g])
    return model, StackedOptimizer(model, "muon", adam, groups, ns_dtype=torch.float32)


def _muon_in_place(opt: StackedOptimizer, hps: list[MuonHyperparams]) -> None:
    """The reference: each shape group's Muon update computed and applied at once, after AdamW (the momentum moved
    by ``muon_update`` in place, the members that share a Newton-Schulz step count batched)."""
    K, steps = opt.model.members, [hp.newton_schulz_steps for hp in hps]
    for (start, stop, n, rows, cols), buf in zip(opt.groups, opt.momentum, strict=True):
        grad = opt.model.grad[:, start:stop].reshape(K * n, rows, cols)
        beta = torch.tensor([hp.momentum for hp in hps for _ in range(n)], dtype=grad.dtype).view(-1, 1, 1)
        if len(set(steps)) == 1:
            update = muon_update(grad, buf, beta, steps[0], dtype=torch.float32)
        else:
            update = torch.empty_like(grad)
            for count in sorted(set(steps)):
                pick = torch.tensor([k * n + i for k in range(K) if steps[k] == count for i in range(n)])
                sub = buf.index_select(0, pick)
                update[pick] = muon_update(grad[pick], sub, beta[pick], count, dtype=torch.float32)
                buf[pick] = sub
        w = opt.model.flat[:, start:stop].view(K, n, rows, cols)
        w.mul_(torch.tensor([1 - hp.learning_rate * hp.weight_decay for hp in hps], dtype=w.dtype).view(-1, 1, 1, 1))
        scale = shape_scale(rows, cols, "original")
        lr = torch.tensor([-hp.learning_rate * scale for hp in hps], dtype=w.dtype).view(-1, 1, 1, 1)
        w.add_(update.view(K, n, rows, cols) * lr)


@pytest.mark.parametrize("ns_steps", [[5, 3, 5], [5, 5, 5], [4]], ids=["two-counts", "one-count", "one-member"])
def test_a_muon_step_is_bit_for_bit_the_update_applied_in_place(ns_steps):
    """Two steps (momentum carried over): the held updates applied after AdamW give the bits of a step that computes
    and applies each update at once."""
    K = len(ns_steps)
    hps = [
        rlnb.MuonParams(learning_rate=0.02 * (k + 1), momentum=0.8 + 0.05 * k, weight_decay=0.1 * k,
                        newton_schulz_steps=ns_steps[k], grad_clip_norm=0, adam={"learning_rate": 1e-3}).resolved()
        for k in range(K)
    ]  # fmt: skip
    (model, opt), (ref_model, ref) = _ensemble(K), _ensemble(K)
    g = torch.Generator().manual_seed(0)
    for _ in range(2):
        grad = torch.randn(model.grad.shape, generator=g)
        model.grad.copy_(grad)
        ref_model.grad.copy_(grad)
        opt.step(hps, opt.norms())
        ref._adamw([hp.adam for hp in hps])
        _muon_in_place(ref, hps)  # type: ignore[arg-type]
        assert torch.equal(model.flat, ref_model.flat)
        assert all(torch.equal(a, b) for a, b in zip(opt.momentum, ref.momentum, strict=True))
        assert torch.equal(opt.exp_avg, ref.exp_avg) and torch.equal(opt.exp_avg_sq, ref.exp_avg_sq)


def test_a_failed_step_before_anything_moves_leaves_the_stacked_state_as_it_was(monkeypatch):
    """``StepFailed`` (not half) from a Newton-Schulz that fails in the second step: weights, moments, momentum, the
    step count as after the first; the gradients zeroed."""
    K = 2
    hps = [rlnb.MuonParams(learning_rate=0.02, newton_schulz_steps=[5, 3][k]).resolved() for k in range(K)]
    model, opt = _ensemble(K)
    model.grad.normal_()
    opt.step(hps, opt.norms())
    before = [model.flat.clone(), opt.exp_avg.clone(), opt.exp_avg_sq.clone(), *(b.clone() for b in opt.momentum)]
    monkeypatch.setattr(optim_mod, "muon_update", _failing(muon_update, 3))  # the second group's, of 2 step counts
    model.grad.normal_()
    with pytest.raises(StepFailed) as info:
        opt.step(hps, opt.norms())
    assert not info.value.half and info.value.words() == f"; {KEPT}"
    after = [model.flat, opt.exp_avg, opt.exp_avg_sq, *opt.momentum]
    assert all(torch.equal(a, b) for a, b in zip(after, before, strict=True)) and opt.steps == 1
    assert not model.grad.any()


def test_gradient_norms_that_run_out_of_memory_are_a_step_that_changed_nothing(monkeypatch):
    """The norms are the optim-step's first allocations: their failure is the step's, not half, the gradients zeroed."""
    model, opt = _ensemble(2)
    model.grad.normal_()
    monkeypatch.setattr(optim_mod.torch.linalg, "vector_norm", _failing(torch.linalg.vector_norm, 1))
    with pytest.raises(StepFailed) as info:
        opt.norms()
    assert not info.value.half and isinstance(info.value.cause, torch.OutOfMemoryError)
    assert not model.grad.any()

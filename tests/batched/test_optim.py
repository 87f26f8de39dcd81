"""A batched run's optimizer (``rlnb.batched.optim.StackedOptimizer``) clips each member as
``torch.nn.utils.clip_grad_norm_`` clips that member's gradients alone, and refuses what a session's step refuses."""

from __future__ import annotations

import torch

import rlnb
from rlnb.batched.optim import StackedOptimizer, plan
from rlnb.batched.stacked import StackedModel
from rlnb.engine.models.tiny import TinyConfig, build_model
from rlnb.engine.optim.muon import shape_scale


def test_a_clip_within_ten_percent_of_a_members_norm_clips_as_clip_grad_norm_does():
    """Clips 5% under and 5% over each member's norm: the one under clips by its factor, the one over leaves the
    gradients as they are (a factor not capped at 1 scaled them up 5%)."""
    config = TinyConfig(n_layer=1, n_embd=16, n_head=2)
    modules = [build_model(config, seed) for seed in range(2)]
    names = [n for n, _ in modules[0].named_parameters()]
    model = StackedModel(modules, names)
    optimizer = StackedOptimizer(model, "adam", names)
    model.grad.copy_(torch.randn(model.grad.shape, generator=torch.Generator().manual_seed(0)))
    clips, want = [], torch.empty_like(model.grad)
    for k, (factor, module) in enumerate(zip((0.95, 1.05), modules, strict=True)):
        for name, p in module.named_parameters():
            a, b, shape = model.columns[name]
            p.grad = model.grad[k, a:b].view(shape).clone()
        clips.append(factor * torch.nn.utils.get_total_norm([p.grad for p in module.parameters()]).item())
        torch.nn.utils.clip_grad_norm_(module.parameters(), clips[-1])
        for name, p in module.named_parameters():
            a, b, _ = model.columns[name]
            want[k, a:b] = p.grad.flatten()
    stats = optimizer.step([rlnb.AdamParams(grad_clip_norm=c).resolved() for c in clips], optimizer.norms())
    assert [s.clipped for s in stats] == [True, False]
    assert abs(stats[0].clip_coef - 0.95) < 1e-5 and stats[1].clip_coef == 1.0
    torch.testing.assert_close(model.grad, want, rtol=1e-6, atol=0)


def test_a_members_muon_learning_rate_is_bounded_by_the_largest_shape_scale():
    """A session's bound (``StepLimits`` at Muon's largest shape scale s: 2 here, 1 the least): lr 1.1 x float32's
    max / 2 is refused naming the field before the step, 0.9 x that is taken."""
    module = build_model(TinyConfig(n_layer=1, n_embd=16, n_head=2), seed=0)
    roles = [*module.wte.parameters(), *module.wpe.parameters(), *module.lm_head.parameters()]
    adam, groups = plan(module, "muon", roles)
    optimizer = StackedOptimizer(StackedModel([module], adam + [n for g in groups for n in g]), "muon", adam, groups)
    scales = [shape_scale(*optimizer.model.columns[g[0]][2], "original") for g in groups]
    assert max(scales) == 2.0 and min(scales) == 1.0
    limit = torch.finfo(torch.float32).max / 2
    refusal = optimizer.refusal(rlnb.MuonParams(learning_rate=1.1 * limit, weight_decay=0.0).resolved())
    assert refusal is not None and refusal.startswith("muon_params.learning_rate is too large")
    assert optimizer.refusal(rlnb.MuonParams(learning_rate=0.9 * limit, weight_decay=0.0).resolved()) is None

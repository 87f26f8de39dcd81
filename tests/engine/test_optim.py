"""The optimizers behind optim-step (rlnb.engine.optim.trainer) and the built-in model (rlnb.engine.models.tiny)."""

from __future__ import annotations

import copy
import dataclasses
import warnings

import pytest
import torch
from torch import Tensor, nn

from rlnb.engine.models.tiny import TinyConfig, build_model
from rlnb.engine.optim import muon
from rlnb.engine.optim.failures import NonFiniteGradient
from rlnb.engine.optim.muon import NS_COEFFS, newton_schulz
from rlnb.engine.optim.split import split_params
from rlnb.engine.optim.trainer import TrainerOptimizer
from rlnb.errors import InvalidParams
from rlnb.params import ADAM_DEFAULTS, AdamHyperparams, AdamParams, MuonHyperparams, MuonParams

DEFAULT_ADAM = AdamHyperparams(**ADAM_DEFAULTS)  # a Muon step's ``adam`` as a user who never set it has it


def adam_hp(**over: float) -> AdamHyperparams:
    return AdamHyperparams(
        **{"learning_rate": 1e-3, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1, "grad_clip_norm": 1.0}
        | over
    )


def muon_hp(adam: AdamHyperparams | None = None, **over: float) -> MuonHyperparams:
    return MuonHyperparams(
        **{
            "learning_rate": 0.02,
            "momentum": 0.95,
            "newton_schulz_steps": 5,
            "weight_decay": 0.1,
            "grad_clip_norm": 1.0,
            "adam": adam or adam_hp(),
        }
        | over
    )


def hp_for(kind: str, **over: float) -> AdamHyperparams | MuonHyperparams:
    return adam_hp(**over) if kind == "adam" else muon_hp(**over)


def set_grads(model: nn.Module, gen: torch.Generator, scale: float = 1.0) -> list[Tensor]:
    grads = [torch.randn(p.shape, generator=gen) * scale for p in model.parameters()]
    for p, g in zip(model.parameters(), grads, strict=True):
        p.grad = g.clone()
    return grads


def tensors(tree: object) -> list[Tensor]:
    """Every tensor in a nested state dict, in a fixed order."""
    if isinstance(tree, Tensor):
        return [tree]
    if isinstance(tree, dict):
        return [t for k in sorted(tree, key=str) for t in tensors(tree[k])]
    if isinstance(tree, list | tuple):
        return [t for v in tree for t in tensors(v)]
    return []


def ns_reference(G: Tensor, steps: int) -> Tensor:
    """The quintic iteration written out plainly in fp64, without transposing tall matrices.

    For tall X, (X Xᵀ) X = X (Xᵀ X), so the untransposed iteration is the same polynomial in X: this
    also checks that newton_schulz's transposition does not change the answer."""
    a, b, c = NS_COEFFS
    X = G.double() / (G.double().norm() + 1e-7)
    for _ in range(steps):
        A = X @ X.T
        X = a * X + (b * A + c * A @ A) @ X
    return X


# -- AdamW ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("clip", [0.0, 1.0])
def test_adam_kind_equals_torch_adamw(clip: float) -> None:
    model = build_model("tiny", seed=0)
    ref = copy.deepcopy(model)
    opt = TrainerOptimizer(model, "adam")
    ref_opt = torch.optim.AdamW(ref.parameters())
    gen = torch.Generator().manual_seed(1)
    clipped = set()
    for i in range(20):
        grads = set_grads(model, gen, scale=[1e-4, 1e-2][i % 2])  # norms ~0.04 and ~4: both sides of clip=1
        for p, g in zip(ref.parameters(), grads, strict=True):
            p.grad = g.clone()
        hp = adam_hp(
            learning_rate=1e-3 * (1 + i % 3),
            beta1=[0.9, 0.8][i % 2],
            beta2=0.95 + 0.001 * i,
            eps=[1e-8, 1e-6][i % 2],
            weight_decay=[0.0, 0.1][i % 2],
            grad_clip_norm=clip,
        )
        stats = opt.step(hp)
        clipped.add(stats.clipped)
        if clip:
            torch.nn.utils.clip_grad_norm_(ref.parameters(), clip)
        ref_opt.param_groups[0].update(
            lr=hp.learning_rate, betas=(hp.beta1, hp.beta2), eps=hp.eps, weight_decay=hp.weight_decay
        )
        ref_opt.step()
    assert clipped == ({False, True} if clip else {False})
    start = build_model("tiny", seed=0)
    for (name, p), q, p0 in zip(model.named_parameters(), ref.parameters(), start.parameters(), strict=True):
        assert not torch.equal(p, p0), name
        torch.testing.assert_close(p, q, atol=1e-6, rtol=0, msg=name)


# -- Newton-Schulz and Muon ----------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(24, 40), (40, 24)])
def test_newton_schulz_matches_reference(shape: tuple[int, int]) -> None:
    G = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    ref = ns_reference(G, 5)
    torch.testing.assert_close(newton_schulz(G.double(), 5, dtype=torch.float64), ref, atol=1e-12, rtol=0)
    torch.testing.assert_close(newton_schulz(G, 5), ref.float(), atol=1e-5, rtol=0)  # default: fp32 on CPU
    torch.testing.assert_close(newton_schulz(G.T, 5), newton_schulz(G, 5).T)
    stack = torch.stack([G, 2 * G, G.flip(0)])  # a batch is the matrices one by one
    torch.testing.assert_close(newton_schulz(stack, 5), torch.stack([newton_schulz(m, 5) for m in stack]))


def test_newton_schulz_singular_values() -> None:
    G = torch.randn(64, 128, generator=torch.Generator().manual_seed(0))  # rectangular: well conditioned
    assert torch.linalg.svdvals(G).max() / torch.linalg.svdvals(G).min() > 5
    s = torch.linalg.svdvals(newton_schulz(G, 5))
    assert s.min() >= 0.5 and s.max() <= 1.5, s
    with pytest.raises(ValueError, match=r"newton_schulz needs a matrix \[rows, cols\] or a stack"):
        newton_schulz(torch.ones(3), 5)


def one_matrix(rows: int = 32, cols: int = 16) -> nn.Linear:
    """A model that is a single (tall) hidden matrix: everything goes to Muon, nothing to AdamW."""
    torch.manual_seed(0)
    return nn.Linear(cols, rows, bias=False)


@pytest.mark.parametrize("scaling", ["original", "match_adam"])
def test_muon_equals_written_out_update(scaling: str) -> None:
    model = one_matrix()
    W = model.weight.detach().clone()
    opt = TrainerOptimizer(model, "muon", muon_scaling=scaling, ns_dtype=torch.float32)
    assert [n for n, _ in opt.split.muon] == ["weight"] and opt.split.adam == []
    lr, beta, wd = 0.02, 0.9, 0.1
    scale = 2**0.5 if scaling == "original" else 0.2 * 32**0.5
    B = torch.zeros_like(W)
    gen = torch.Generator().manual_seed(1)
    for _ in range(3):
        G = torch.randn(W.shape, generator=gen)
        model.weight.grad = G.clone()
        opt.step(muon_hp(DEFAULT_ADAM, learning_rate=lr, momentum=beta, weight_decay=wd, grad_clip_norm=0.0))
        B = beta * B + (1 - beta) * G
        U = (1 - beta) * G + beta * B  # Nesterov
        W = W * (1 - lr * wd) - lr * scale * ns_reference(U, 5).float()
        torch.testing.assert_close(model.weight.grad, G, atol=0, rtol=0)  # the gradient is not mutated
    torch.testing.assert_close(opt.momentum["weight"], B)
    torch.testing.assert_close(model.weight.detach(), W, atol=1e-5, rtol=0)


@pytest.mark.parametrize(("scaling", "adjust_lr_fn"), [("original", None), ("match_adam", "match_rms_adamw")])
@pytest.mark.parametrize("ns_dtype", [None, torch.bfloat16])
def test_muon_matches_torch_muon(scaling: str, adjust_lr_fn: str | None, ns_dtype: torch.dtype | None) -> None:
    """torch.optim.Muon runs NS in bf16 always. In bf16 too (``ns_dtype``), ours agrees to float rounding; in
    our default fp32 the update differs by bf16's error (~1.5% here), far less than a wrong scale
    (original vs match_adam differ by 20% on this 32x16 matrix).

    Momentum: torch's docstring writes B ← μB + g (accumulation) but its code lerps (an EMA, as KJ and
    ours). Either is fine: the EMA buffer is (1 - μ) times the accumulated one, so the Nesterov input
    is (1 - μ)(g + μB_acc), and NS divides by the Frobenius norm first, so the factor cancels."""
    model = one_matrix()
    ref = copy.deepcopy(model)
    W0 = model.weight.detach().clone()
    opt = TrainerOptimizer(model, "muon", muon_scaling=scaling, ns_dtype=ns_dtype or torch.float32)
    ref_opt = torch.optim.Muon(
        ref.parameters(),
        lr=0.02,
        weight_decay=0.1,
        momentum=0.95,
        nesterov=True,
        ns_coefficients=NS_COEFFS,
        ns_steps=5,
        adjust_lr_fn=adjust_lr_fn,
    )
    gen = torch.Generator().manual_seed(1)
    for _ in range(3):
        G = torch.randn(W0.shape, generator=gen)
        model.weight.grad, ref.weight.grad = G.clone(), G.clone()
        opt.step(muon_hp(DEFAULT_ADAM, learning_rate=0.02, momentum=0.95, weight_decay=0.1, grad_clip_norm=0.0))
        ref_opt.step()
    decayed = W0 * (1 - 0.02 * 0.1) ** 3
    ours, theirs = model.weight.detach() - decayed, ref.weight.detach() - decayed
    if ns_dtype is None:
        assert ((ours - theirs).norm() / theirs.norm()).item() < 0.05
    else:
        torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0)


def test_a_muon_steps_adam_part_with_no_weight_to_move_is_said_once_not_silently_dropped() -> None:
    """A model whose every trainable weight is a Muon matrix (LoRA factors without train_unembed) has no AdamW
    group: ``muon_params.adam`` changes nothing, so a value other than the defaults warns, once per session."""
    model, twin, biased = one_matrix(), one_matrix(), nn.Linear(16, 32)
    opts = [TrainerOptimizer(m, "muon", ns_dtype=torch.float32) for m in (model, twin, biased)]
    chosen = muon_hp(adam_hp(learning_rate=3e-3, weight_decay=0.1))
    for step in range(2):
        for m in (model, twin, biased):
            set_grads(m, torch.Generator().manual_seed(step))
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the defaults, a later step, and a model with an AdamW group: silent
            opts[1].step(muon_hp(DEFAULT_ADAM))
            opts[2].step(chosen)
            if step:
                opts[0].step(chosen)
                continue
        with pytest.warns(
            UserWarning,
            match=r"^muon_params.adam \(learning_rate=0.003\) changes nothing: no "
            r"trainable weight of this model is in the AdamW group",
        ):
            opts[0].step(chosen)
    torch.testing.assert_close(model.weight, twin.weight, atol=0, rtol=0)  # what it said: nothing changed


class Conv1D(nn.Module):
    """transformers' ``Conv1D`` (GPT-2's attention and MLP layers): a linear layer whose weight is stored
    [in, out], ``y = x @ W``."""

    def __init__(self, nf: int, nx: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(nx, nf))

    def forward(self, x: Tensor) -> Tensor:
        return x @ self.weight


@pytest.mark.parametrize("scaling", ["original", "match_adam"])
def test_muon_moves_a_layer_stored_in_out_as_the_linear_layer_it_is(scaling: str) -> None:
    """GPT-2's layers store their weight [in, out]. Muon's "original" scale max(1, rows/cols)^½ read the
    storage, so a widening layer (GPT-2's c_fc, 768 -> 3072) moved half as far as the same layer as an
    nn.Linear, and a narrowing one (c_proj) twice as far. The update is the Linear's, transposed; the
    shapes Find LR converts rates for (``muon_shapes``) are the layers' too."""
    gen = torch.Generator().manual_seed(0)
    weights = [torch.randn(32, 8, generator=gen), torch.randn(8, 32, generator=gen)]  # [out, in]: widen, narrow
    grads = [[torch.randn(w.shape, generator=gen) for w in weights] for _ in range(2)]
    linear = nn.Sequential(nn.Linear(8, 32, bias=False), nn.Linear(32, 8, bias=False))
    conv = nn.Sequential(Conv1D(32, 8), Conv1D(8, 32))
    moved = []
    for model, layout in ((linear, lambda t: t), (conv, lambda t: t.T.contiguous())):
        with torch.no_grad():
            for layer, w in zip(model, weights, strict=True):
                layer.weight.copy_(layout(w))
        opt = TrainerOptimizer(model, "muon", muon_scaling=scaling, ns_dtype=torch.float32)
        for step in grads:
            for layer, g in zip(model, step, strict=True):
                layer.weight.grad = layout(g)
            opt.step(muon_hp(DEFAULT_ADAM, weight_decay=0.0, grad_clip_norm=0.0))
        moved.append([layout(layer.weight.detach()) - w for layer, w in zip(model, weights, strict=True)])
    assert split_params(conv).stored_in_out == {"0.weight", "1.weight"} and not split_params(linear).stored_in_out
    for ours, linears in zip(*moved, strict=True):
        torch.testing.assert_close(ours, linears, atol=1e-6, rtol=1e-5)
    assert split_params(conv).muon_shapes() == split_params(linear).muon_shapes() == [(32, 8), (8, 32)]


def test_split_params_tiny_transformer() -> None:
    model = build_model("tiny", seed=0)  # MLP width 4·64 = 256 = vocab: must not be mistaken for the head
    split = split_params(model)
    muon = {n for n, _ in split.muon}
    adam = {n for n, _ in split.adam}
    assert muon == {
        f"blocks.{i}.{m}.weight" for i in range(2) for m in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")
    }
    assert {
        "wte.weight",
        "wpe.weight",
        "lm_head.weight",
        "ln_f.weight",
        "ln_f.bias",
        "blocks.0.ln_1.weight",
        "blocks.0.attn.c_attn.bias",
        "blocks.1.mlp.c_proj.bias",
    } <= adam
    assert muon | adam == {n for n, _ in model.named_parameters()} and not muon & adam
    assert split_params(model, reversed(list(model.parameters()))).adam  # roles may come in any order
    table = split.describe()
    for name in muon | adam:
        assert name in table
    assert "muon: 8 tensors, 98,304 params" in table


# -- step(): guard, clipping, state ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["adam", "muon"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_gradient_changes_nothing(kind: str, bad: float) -> None:
    model = build_model("tiny", seed=0)
    opt = TrainerOptimizer(model, kind)
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        set_grads(model, gen)
        opt.step(hp_for(kind))
    set_grads(model, gen)
    model.blocks[1].mlp.c_fc.weight.grad[3, 5] = bad
    params = copy.deepcopy(list(model.parameters()))
    grads = [p.grad.clone() for p in model.parameters()]
    state = copy.deepcopy(opt.state_dict())
    with pytest.raises(NonFiniteGradient) as err:
        opt.step(hp_for(kind, grad_clip_norm=0.5))
    assert str(err.value.grad_norm) == str(bad) and err.value.names == ["blocks.1.mlp.c_fc.weight"]
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), params, strict=True))
    for p, g in zip(model.parameters(), grads, strict=True):
        torch.testing.assert_close(p.grad, g, atol=0, rtol=0, equal_nan=True)  # not clipped either
    after = tensors(opt.state_dict())
    assert len(after) == len(tensors(state)) > 0
    assert all(torch.equal(a, b) for a, b in zip(after, tensors(state), strict=True))


def test_a_non_finite_gradient_names_a_few_of_its_weights_not_all() -> None:
    """The error lists where the gradient is not finite; a NaN everywhere named every weight of the model, one line
    of hundreds of names in an operation's error for a real model."""
    model = build_model("tiny", seed=0)
    opt = TrainerOptimizer(model, "adam")
    set_grads(model, torch.Generator().manual_seed(0), scale=float("nan"))
    with pytest.raises(NonFiniteGradient) as err:
        opt.step(adam_hp())
    names = [n for n, _ in model.named_parameters()]
    assert err.value.names == names and len(names) > 5
    first = ", ".join(names[:5])
    assert str(err.value) == f"gradient norm is nan; non-finite gradients in: {first}, ... ({len(names)} in all)"


@pytest.mark.parametrize("kind", ["adam", "muon"])
def test_a_float16_gradient_norm_past_65504_is_clipped_not_a_non_finite_failure(kind: str) -> None:
    """Every gradient finite, their norm 85276: past float16's 65504, so it was inf, the step failed NON_FINITE_LOSS
    ("the norm itself overflowed") and the gradients were dropped. The norm is taken in float32 and clips them as
    ``clip_grad_norm_`` clips a float32 copy."""
    model = nn.Sequential(nn.Linear(100, 100), nn.Linear(100, 100)).half()
    ref = copy.deepcopy(model).float()
    opt = TrainerOptimizer(model, kind, ns_dtype=torch.float32)
    for m in (model, ref):
        for p in m.parameters():
            p.grad = torch.full_like(p, 600.0)
    stats = opt.step(adam_hp(eps=1e-4) if kind == "adam" else muon_hp(adam=adam_hp(eps=1e-4)))  # eps: float16's
    norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0).item()
    assert stats.grad_norm == pytest.approx(norm, rel=1e-6) and norm > 65504 and stats.clipped
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad.float(), q.grad, rtol=1e-3, atol=0)
        assert p.isfinite().all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kind", ["adam", "muon"])
def test_a_gradient_norm_past_float32s_range_is_taken_again_wide_and_clipped(kind: str, dtype: torch.dtype) -> None:
    """Every gradient 1e20 (finite), their norm 1.4e22: past 1.8e19 the sum of squares passes float32's (and bfloat16's)
    3.4e38, so the norm was inf and the step failed NON_FINITE_LOSS ("the norm itself overflowed"). It is taken again
    in float64 and clips the gradients as ``clip_grad_norm_`` clips a float64 copy; with no clip it still fails."""
    model = nn.Sequential(nn.Linear(100, 100), nn.Linear(100, 100)).to(dtype)
    ref = copy.deepcopy(model).double()
    opt = TrainerOptimizer(model, kind, ns_dtype=torch.float32)
    for m in (model, ref):
        for p in m.parameters():
            p.grad = torch.full_like(p, 1e20)
    before = [p.clone() for p in model.parameters()]
    with pytest.raises(NonFiniteGradient, match=r"^gradient norm is inf; non-finite gradients in: none \(the norm "
                       r"itself overflowed, and grad_clip_norm is 0: nothing clips them\)$"):  # fmt: skip
        opt.step(hp_for(kind, grad_clip_norm=0.0))
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before, strict=True))
    stats = opt.step(hp_for(kind, grad_clip_norm=1.0))
    norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0).item()
    assert stats.grad_norm == pytest.approx(norm, rel=1e-2) and norm > 1.8e19 and stats.clipped
    if kind == "muon":  # each group's norm is taken again too
        assert stats.grad_norm_muon == pytest.approx(20000**0.5 * 1e20, rel=1e-2)
        assert stats.grad_norm_adam == pytest.approx(200**0.5 * 1e20, rel=1e-2)
    for p, q, b in zip(model.parameters(), ref.parameters(), before, strict=True):
        torch.testing.assert_close(p.grad.double(), q.grad, rtol=1e-2, atol=0)
        assert p.isfinite().all() and not torch.equal(p, b)


@pytest.mark.parametrize("kind", ["adam", "muon"])
def test_grad_clip(kind: str) -> None:
    model = build_model("tiny", seed=0)
    opt = TrainerOptimizer(model, kind)
    grads = set_grads(model, torch.Generator().manual_seed(0))
    norm = torch.nn.utils.get_total_norm(grads).item()

    stats = opt.step(hp_for(kind, grad_clip_norm=0.0))
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), grads, strict=True))
    assert stats.grad_norm == pytest.approx(norm, rel=1e-6) and not stats.clipped and stats.clip_coef == 1.0

    ref = copy.deepcopy(model)
    for m in (model, ref):
        for p, g in zip(m.parameters(), grads, strict=True):
            p.grad = g.clone()
    stats = opt.step(hp_for(kind, grad_clip_norm=1.0))
    torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
    assert stats.grad_norm == pytest.approx(norm, rel=1e-6)  # reported before clipping
    assert stats.clipped and stats.clip_coef == pytest.approx(1.0 / (norm + 1e-6), rel=1e-6)
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad)
    if kind == "muon":
        assert stats.grad_norm == pytest.approx((stats.grad_norm_muon**2 + stats.grad_norm_adam**2) ** 0.5)
        assert stats.adam_learning_rate == 1e-3 and stats.learning_rate == 0.02
    else:
        assert stats.grad_norm_muon is None and stats.adam_learning_rate is None


@pytest.mark.parametrize("kind", ["adam", "muon"])
@pytest.mark.parametrize("clip", [1e-300, 1e-41, 0.5])
def test_the_clip_coefficient_reported_is_the_one_the_gradients_were_multiplied_by(kind: str, clip: float) -> None:
    """grad_clip_norm 1e-300 is 0 in float32: the gradients became exactly 0 while the step reported 1e-300 / g
    (worked in float64); 1e-41 gives a float32 denormal. The factor reported is the float32 one applied."""
    model = build_model("tiny", seed=0)
    grads = set_grads(model, torch.Generator().manual_seed(0))
    stats = TrainerOptimizer(model, kind).step(hp_for(kind, grad_clip_norm=clip))
    assert stats.clipped and stats.clip_coef == pytest.approx(clip / stats.grad_norm, rel=1e-3, abs=1e-44)
    for p, g in zip(model.parameters(), grads, strict=True):
        assert torch.equal(p.grad, g * stats.clip_coef)
    if clip == 1e-300:
        assert stats.clip_coef == 0.0 and all(not p.grad.any() for p in model.parameters())


@pytest.mark.parametrize("kind", ["adam", "muon"])
@pytest.mark.parametrize("factor", [0.95, 1.05])
def test_a_clip_within_ten_percent_of_the_norm_clips_as_clip_grad_norm_does(kind: str, factor: float) -> None:
    """``clips`` skips the factor's arithmetic only where the clip is well past the norm (``CLIPS_MARGIN``): a
    margin below 1 skipped a clip 5% under the norm, and a factor not capped at 1 scaled gradients up 5%."""
    model = build_model(TinyConfig(n_layer=1, n_embd=16, n_head=2), seed=0)
    grads = set_grads(model, torch.Generator().manual_seed(0))
    ref = copy.deepcopy(model)
    for p, g in zip(ref.parameters(), grads, strict=True):
        p.grad = g.clone()
    clip = factor * torch.nn.utils.get_total_norm(grads).item()
    norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), clip).item()
    stats = TrainerOptimizer(model, kind).step(hp_for(kind, grad_clip_norm=clip))
    assert stats.grad_norm == pytest.approx(norm, rel=1e-6)
    assert stats.clipped == (factor < 1) and stats.clip_coef == pytest.approx(min(1.0, factor), rel=1e-5)
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(model.parameters(), ref.parameters(), strict=True))


@pytest.mark.parametrize("kind", ["adam", "muon"])
def test_state_dict_round_trip(kind: str) -> None:
    model = build_model("tiny", seed=0)
    opt = TrainerOptimizer(model, kind)
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        set_grads(model, gen)
        opt.step(hp_for(kind))
    twin, fresh = copy.deepcopy(model), copy.deepcopy(model)
    twin_opt, fresh_opt = TrainerOptimizer(twin, kind), TrainerOptimizer(fresh, kind)
    twin_opt.load_state_dict(opt.state_dict())
    for _ in range(2):
        grads = set_grads(model, gen)
        for m, o in ((twin, twin_opt), (fresh, fresh_opt)):
            for p, g in zip(m.parameters(), grads, strict=True):
                p.grad = g.clone()
            o.step(hp_for(kind))
        opt.step(hp_for(kind))
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), twin.parameters(), strict=True))
    assert not all(torch.equal(p, q) for p, q in zip(model.parameters(), fresh.parameters(), strict=True))
    with pytest.raises(ValueError, match=f"state is for a {kind!r} optimizer, this one is "):
        TrainerOptimizer(model, "muon" if kind == "adam" else "adam").load_state_dict(opt.state_dict())


def test_the_shape_scale_refuses_a_scaling_it_does_not_know() -> None:
    """Each of ``wire.MUON_SCALING``'s names has its scale; a misspelt one was read as ``match_adam`` in silence."""
    assert muon.shape_scale(4, 4, "original") == 1.0 and muon.shape_scale(16, 4, "original") == 2.0
    assert muon.shape_scale(4, 4, "match_adam") == pytest.approx(0.4)
    with pytest.raises(ValueError, match=r"^muon_scaling must be 'original' or 'match_adam', got 'orignal'$"):
        muon.shape_scale(4, 4, "orignal")  # type: ignore[arg-type]


def test_a_muon_learning_rate_is_bounded_by_its_largest_shape_scale() -> None:
    """The update multiplies by lr x s, up to the largest s of the model's matrices (2 here, 1 the least): lr 1.1 x
    float32's max / 2, taken by a bound at the least s, failed the step half-way (AdamW's weights moved, then torch's
    "cannot be converted to type float without overflow"); it is refused up front, and 0.9 x that steps."""
    model = build_model(TinyConfig(n_layer=1, n_embd=16, n_head=2), seed=0)
    opt = TrainerOptimizer(model, "muon")
    scales = {muon.shape_scale(*opt.split.fan_shape(n, p), "original") for n, p in opt.split.muon}
    assert max(scales) == 2.0 and min(scales) == 1.0
    set_grads(model, torch.Generator().manual_seed(0))
    before = copy.deepcopy(list(model.parameters()))
    limit = torch.finfo(torch.float32).max / max(scales)
    with pytest.raises(ValueError, match=r"^muon_params\.learning_rate is too large: .* past the 3\.4e\+38"):
        opt.step(muon_hp(learning_rate=1.1 * limit, weight_decay=0.0))
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before, strict=True))
    opt.step(muon_hp(learning_rate=0.9 * limit, weight_decay=0.0))
    assert all(p.isfinite().all() for p in model.parameters())
    assert not all(torch.equal(p, q) for p, q in zip(model.parameters(), before, strict=True))


def test_bad_hyperparameters_never_reach_a_step() -> None:
    """Values are refused when the params are built (naming the field); a step takes only resolved
    hyperparameters of its own kind, and anything else changes nothing."""
    bad = [
        (lambda: MuonParams(learning_rate=-1.0), "MuonParams.learning_rate"),
        (lambda: MuonParams(newton_schulz_steps=2.5), "MuonParams.newton_schulz_steps"),
        (lambda: MuonParams(adam={"beta2": 1.0}), "MuonParams.adam.beta2"),
        (lambda: AdamParams(momentum=0.9), "AdamParams.momentum"),
    ]
    for build, field in bad:
        with pytest.raises(InvalidParams, match=field.replace(".", r"\.")):
            build()
    model = build_model("tiny", seed=0)
    opt = TrainerOptimizer(model, "muon")
    set_grads(model, torch.Generator().manual_seed(0))
    before = copy.deepcopy(list(model.parameters()))
    incomplete = {k: v for k, v in dataclasses.asdict(muon_hp()).items() if k != "momentum"}
    for hp in (adam_hp(), dataclasses.asdict(muon_hp()), incomplete):
        with pytest.raises(TypeError, match="a muon optimizer steps with MuonHyperparams"):
            opt.step(hp)  # type: ignore[arg-type]
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before, strict=True))
    with pytest.raises(ValueError, match="kind must be one of adam, muon, got 'sgd'"):
        TrainerOptimizer(model, "sgd")  # type: ignore[arg-type]


# -- model ---------------------------------------------------------------------------------------------------


def test_model_shapes_and_length_limit() -> None:
    model = build_model("tiny", seed=0)
    assert model(torch.randint(0, 256, (5,))).shape == (5, 256)
    assert model(torch.randint(0, 256, (3, 256))).shape == (3, 256, 256)
    with pytest.raises(ValueError, match=r"sequence length 257 must be in \[1, block_size=256\]"):
        model(torch.zeros(257, dtype=torch.long))
    with pytest.raises(ValueError, match="unknown model size 'huge'"):
        build_model("huge", seed=0)


def test_model_is_causal() -> None:
    model = build_model(TinyConfig(n_layer=1), seed=0)
    idx = torch.randint(0, 256, (12,), generator=torch.Generator().manual_seed(0))
    changed = idx.clone()
    changed[7] = (idx[7] + 1) % 256
    a, b = model(idx), model(changed)
    torch.testing.assert_close(a[:7], b[:7], atol=0, rtol=0)
    assert not torch.allclose(a[7:], b[7:])


def test_same_seed_same_weights() -> None:
    torch.manual_seed(123)
    expected_next = torch.rand(1)
    torch.manual_seed(123)
    a, b, c = build_model("tiny", seed=7), build_model("tiny", seed=7), build_model("tiny", seed=8)
    assert torch.equal(torch.rand(1), expected_next)  # the caller's RNG is left alone
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    assert not torch.equal(a.wte.weight, c.wte.weight)


def test_ns_dtype_default_follows_the_hardware() -> None:
    """bf16 where it is fast (CUDA, CPUs with bf16 matmul units), fp32 where it would be 40-100x slower."""
    assert muon.ns_dtype_for(torch.device("cuda")) == torch.bfloat16
    expected = torch.bfloat16 if muon.cpu_has_fast_bf16() else torch.float32
    assert TrainerOptimizer(one_matrix(), "muon").ns_dtype == expected
    assert TrainerOptimizer(one_matrix(), "muon", ns_dtype=torch.float32).ns_dtype == torch.float32

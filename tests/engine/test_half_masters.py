"""Half-precision (bfloat16, float16) full-weight training steps float32 masters with float32 optimizer state: AdamW's
float16 moments underflowed (steps of up to ~760x the learning rate) and bfloat16 weights rounded most updates away
(LayerNorm gains never moved, weight decay did nothing). The weights are the float32 run's, rounded."""

import copy
from collections.abc import Callable

import pytest
import torch
from torch import nn

import rlnb
from rlnb import samples
from rlnb.engine.optim.trainer import TrainerOptimizer
from rlnb.params import AdamParams, MuonParams

HALF = [torch.bfloat16, torch.float16]


def _hp(kind, clip=0.0):
    adam = AdamParams(learning_rate=1e-4, weight_decay=0.1, grad_clip_norm=clip)
    if kind == "adam":
        return adam.resolved()
    return MuonParams(learning_rate=1e-3, weight_decay=0.1, grad_clip_norm=clip, adam=adam).resolved()


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("kind", ["adam", "muon"])
def test_half_weights_are_the_float32_runs_rounded(kind, dtype):
    """The same gradients (half-precision numbers) into a half model and its float32 copy, 5 steps: each master equals
    the float32 run's weight bit for bit, and each weight is that weight rounded to its dtype."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.Linear(32, 8)).to(dtype)
    ref = copy.deepcopy(model).float()
    opt, ref_opt = (TrainerOptimizer(m, kind, ns_dtype=torch.float32) for m in (model, ref))
    start = [p.detach().clone() for p in model.parameters()]
    for _ in range(5):
        for p, q in zip(model.parameters(), ref.parameters(), strict=True):
            p.grad = (torch.randn_like(q) * 1e-3).to(dtype)
            q.grad = p.grad.float()
        opt.step(_hp(kind))
        ref_opt.step(_hp(kind))
        opt.zero_grad()
        ref_opt.zero_grad()
    for (name, p), q, p0 in zip(model.named_parameters(), ref.parameters(), start, strict=True):
        assert torch.equal(opt.masters.of[name], q), name
        assert p.dtype == dtype and torch.equal(p, q.to(dtype)), name
        # every master moved, the LayerNorm's gains too (near 1, 5e-4 is below their bfloat16 half spacing, 2^-9)
        assert (opt.masters.of[name] != p0.float()).all(), name
    moments = [t for s in opt._adamw.state.values() for k, t in s.items() if k != "step"]
    assert moments and all(t.dtype == torch.float32 for t in [*moments, *opt.momentum.values()])
    assert (kind == "muon") == bool(opt.momentum)


@pytest.mark.parametrize("dtype", HALF)
def test_weight_decay_moves_half_weights(dtype):
    """No gradient signal (all 0), decay 0.1 at lr 1e-3: each step multiplies by 1 - 1e-4, below a bfloat16 weight's
    half spacing, so the weights never moved. The masters shrink as float32 does, and the weights follow."""
    model = nn.Linear(8, 8).to(dtype)
    w0 = model.weight.detach().float().clone()
    opt = TrainerOptimizer(model, "adam")
    hp = AdamParams(learning_rate=1e-3, weight_decay=0.1).resolved()
    for _ in range(60):
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        opt.step(hp)
    expected = w0 * (1 - 1e-4) ** 60
    torch.testing.assert_close(opt.masters.of["weight"], expected, rtol=1e-5, atol=0)
    assert torch.equal(model.weight, opt.masters.of["weight"].to(dtype))
    assert (model.weight.float().abs() < w0.abs()).float().mean() > 0.5


def test_float32_weights_have_no_master():
    """A float32 model is stepped as it is: no copy."""
    opt = TrainerOptimizer(nn.Linear(4, 4), "adam")
    assert opt.masters.half == [] and opt.state_dict()["masters"] is None
    assert [p for _, p in opt._adam_stepped] == list(opt._adamw.param_groups[0]["params"])


@pytest.mark.slow  # LoRA loads peft
def test_lora_adapters_on_a_bfloat16_base_have_no_master():
    """LoRA's adapters are float32 on a bfloat16 base: stepped as they are, no second copy."""
    with rlnb.connect("local", model="tiny", dtype="bfloat16", lora={"rank": 2}, device="cpu", record=False) as s:
        optim = s.backend.optim
        assert optim.masters.half == [] and all(p.dtype == torch.float32 for _, p in optim._adam_stepped)


def _session(**kw):
    return rlnb.connect("local", model="tiny", device="cpu", record=False, threads=1, **kw)


def _train(s, steps, params, first=0):
    for i in range(first, first + steps):
        s.forward_backward([samples.cross_entropy(s.encode(f"the cat {i} sat on the mat"))])
        s.optim_step(params)
    s.wait()


def test_a_float16_adamw_step_moves_no_weight_past_its_learning_rate():
    """One AdamW step at lr 1e-4 with eps 1e-6 moved float16 weights by up to 7.6e-2 (the second moment 0 where the
    first was not): each master moves by at most lr, and the weights are the masters rounded."""
    with _session(dtype="float16") as s:
        masters = {n: m.clone() for n, m in s.backend.optim.masters.of.items()}
        _train(s, 1, rlnb.AdamParams(learning_rate=1e-4, eps=1e-6, weight_decay=0.0))
        moved = max((m - masters[n]).abs().max().item() for n, m in s.backend.optim.masters.of.items())
        assert 0.5e-4 < moved <= 1.01e-4  # float32 rounding of a weight near 1 adds up to 6e-8
        for name, p in s.backend.trainer.named_parameters():
            assert torch.equal(p, s.backend.optim.masters.of[name].half()), name


def test_bfloat16_layernorm_gains_move():
    """20 steps at lr 1e-3 left every LayerNorm gain of a bfloat16 ``tiny`` at exactly 1.0 (its half spacing below 1
    is 2^-9 > lr): they move now, as in float32."""
    with _session(dtype="bfloat16") as s:
        _train(s, 20, rlnb.AdamParams(learning_rate=1e-3))
        gains = {n: p for n, p in s.backend.trainer.named_parameters() if "ln" in n and n.endswith("weight")}
        assert gains and all((p != 1).any() for p in gains.values()), list(gains)


@pytest.mark.parametrize("kind", ["adam", "muon"])
def test_a_resumed_bfloat16_run_equals_the_unbroken_one(tmp_path, kind):
    """4 steps straight vs 2, a training checkpoint, a resume and 2 more: the masters and moments are saved and taken
    back, so weights and masters are equal bit for bit. Without its masters (a checkpoint that has none) the resume
    takes them from the checkpoint's weights."""
    params = rlnb.AdamParams(learning_rate=1e-3, weight_decay=0.1) if kind == "adam" else rlnb.MuonParams(
        learning_rate=0.02, weight_decay=0.1, adam={"learning_rate": 1e-3})  # fmt: skip
    kw = dict(
        dtype="bfloat16", optimizer=kind, checkpoint_dir=tmp_path, **({"ns_dtype": "float32"} if kind == "muon" else {})
    )
    with _session(**kw) as s:
        _train(s, 4, params)
        straight = {n: p.detach().clone() for n, p in s.backend.trainer.named_parameters()}
        masters = {n: m.clone() for n, m in s.backend.optim.masters.of.items()}
    with _session(**kw) as s:
        _train(s, 2, params)
        path = s.backend.checkpoint_path(s.save_training_checkpoint().result(timeout=60).checkpoint.id)
    with _session(resume_from=path, **kw) as s:
        _train(s, 2, params, first=2)
        assert all(torch.equal(p, straight[n]) for n, p in s.backend.trainer.named_parameters())
        assert all(torch.equal(m, masters[n]) for n, m in s.backend.optim.masters.of.items())
    state = torch.load(path, weights_only=True)
    assert state["optimizer"]["masters"].keys() == masters.keys()
    state["optimizer"]["masters"] = None
    older = tmp_path / "older.pt"
    torch.save(state, older)
    with _session(resume_from=older, **kw) as s:
        weights = dict(s.backend.trainer.named_parameters())
        assert all(torch.equal(m, weights[n].float()) for n, m in s.backend.optim.masters.synced().items())


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_half_tiny_tracks_its_float32_run(dtype):
    """``tiny`` in half precision and in float32 from the same (half-precision) weights, 5 AdamW steps at lr 1e-4: the
    half weights are the float32 run's rounded, within one ulp, but where the half forward's gradients differ enough to
    turn an Adam step (98%; stepped in their own dtype, 78% of bfloat16's weights and 21% of float16's were)."""
    half, full = _session(dtype=dtype), _session()
    with half, full, torch.no_grad():
        for p, q in zip(half.backend.trainer.parameters(), full.backend.trainer.parameters(), strict=True):
            q.copy_(p.float())
        for s in (half, full):
            _train(s, 5, rlnb.AdamParams(learning_rate=1e-4))
        within = total = 0
        for p, q in zip(half.backend.trainer.parameters(), full.backend.trainer.parameters(), strict=True):
            rounded = q.to(p.dtype)
            ulp = (torch.nextafter(rounded, torch.full_like(rounded, torch.inf)).float() - rounded.float()).abs()
            within += int(((p.float() - rounded.float()).abs() <= ulp).sum())
            total += p.numel()
        assert within > 0.98 * total, (within, total)


def _zero_stepped(fill: float | None = None) -> tuple[nn.Linear, TrainerOptimizer, Callable[[], None]]:
    """A bfloat16 ``nn.Linear`` (its weight ``fill``-ed, if given), its AdamW optimizer, and a step on zero gradients:
    Adam moves nothing on one (no decay), so a master changes only by an edit from outside the step."""
    model = nn.Linear(4, 4).to(torch.bfloat16)
    if fill is not None:
        with torch.no_grad():
            model.weight.fill_(fill)
    opt = TrainerOptimizer(model, "adam")
    hp = AdamParams(learning_rate=1e-3, weight_decay=0.0).resolved()

    def step() -> None:
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        opt.step(hp)

    return model, opt, step


def test_a_half_weight_written_between_steps_is_its_masters_new_value():
    """A weight written from outside the step (a notebook's edit, a resume's copy) is taken as its master at the next
    step, not overwritten by the master it no longer rounds from; one rewritten with its own value keeps its master."""
    model, opt, step = _zero_stepped(fill=1.0)
    step()
    opt.masters.of["weight"].add_(1e-4)  # below bfloat16's half spacing at 1 (2^-8): the weight is the master rounded
    with torch.no_grad():
        model.weight.copy_(model.weight.clone())
    kept = opt.masters.of["weight"].clone()
    step()
    assert torch.equal(opt.masters.of["weight"], kept)
    with torch.no_grad():
        model.weight.fill_(0.5)
    step()
    assert torch.equal(opt.masters.of["weight"], torch.full((4, 4), 0.5)) and (model.weight == 0.5).all()


@pytest.mark.parametrize("how", ["data.copy_", "data =", "data.fill_"])
def test_a_half_weight_written_through_data_is_its_masters_new_value(how):
    """A write through ``.data`` leaves the weight's version counter as it was: the next step wrote the stale master
    back over the edit, for half-precision weights only. The weight is compared with its master rounded instead."""
    model, opt, step = _zero_stepped()
    step()
    new = torch.full((4, 4), 0.5, dtype=torch.bfloat16)
    if how == "data.copy_":
        model.weight.data.copy_(new)
    elif how == "data =":
        model.weight.data = new
    else:
        model.weight.data.fill_(0.5)
    step()
    assert torch.equal(opt.masters.of["weight"], torch.full((4, 4), 0.5)) and (model.weight == 0.5).all()


def test_a_data_edit_of_a_bfloat16_weight_is_saved_and_resumed_as_it_trains_on(tmp_path):
    """A ``p.data.copy_`` edit between steps, then a training checkpoint: the checkpoint's master is the edited weight
    (the stale master was saved, so the resumed run and the unbroken one parted), and one more step after the resume
    equals one more step of the unbroken run, bit for bit."""
    params = rlnb.AdamParams(learning_rate=1e-3, weight_decay=0.1)
    with _session(dtype="bfloat16", checkpoint_dir=tmp_path) as s:
        _train(s, 2, params)
        name, weight = next((n, p) for n, p in s.backend.trainer.named_parameters() if p.dim() == 2)
        weight.data.copy_(torch.full_like(weight, 0.25))
        path = s.backend.checkpoint_path(s.save_training_checkpoint().result(timeout=60).checkpoint.id)
        _train(s, 1, params, first=2)
        straight = {n: p.detach().clone() for n, p in s.backend.trainer.named_parameters()}
    saved = torch.load(path, weights_only=True)["optimizer"]["masters"][name]
    assert torch.equal(saved, torch.full_like(saved, 0.25))
    with _session(dtype="bfloat16", checkpoint_dir=tmp_path, resume_from=path) as s:
        _train(s, 1, params, first=2)
        assert all(torch.equal(p, straight[n]) for n, p in s.backend.trainer.named_parameters())

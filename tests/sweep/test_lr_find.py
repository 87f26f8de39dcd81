"""The learning-rate range test: exponential growth sent step by step, the suggestion, a copy of a local
session's weights or a fresh remote session, Muon's scaling conventions, and the builder's button."""

import math

import numpy as np
import pytest
import torch
from matplotlib.lines import Line2D
from torch import nn

import rlnb
from rlnb import samples
from rlnb.engine.optim.split import split_params
from rlnb.engine.optim.trainer import TrainerOptimizer
from rlnb.history import History
from rlnb.sweep import convert_muon_lr, lr_find, muon_shapes
from rlnb.widgets import OptimizerBuilder, RunPanel

TOKENS = list(b"the digits 0123456789 and more text")


def ce_step(session, params):
    """A real training step (cross-entropy on a fixed text) with the params the range test chose."""
    fb = session.forward_backward([samples.cross_entropy(TOKENS)])
    session.optim_step(params).result()
    return fb.result().loss


def sigmoid_reward(center: float = 1e-2):
    """A step function whose objective is a known curve of the learning rate it was given: a sigmoid in
    log10(lr), rising fastest at ``center``."""

    def step(session, params, i):
        ce_step(session, params)
        return 1 / (1 + math.exp(-3 * (math.log10(params.learning_rate) - math.log10(center))))

    return step


def forward_loss(session) -> float:
    return session.forward_backward([samples.cross_entropy(TOKENS)], forward_only=True).result().loss


def test_rates_grow_exponentially_and_the_suggestion_is_the_steepest_rise(tmp_path):
    result = lr_find(
        rlnb.AdamParams(weight_decay=0.0), start_lr=1e-5, end_lr=1.0, steps=41, step_fn=sigmoid_reward(1e-2),
        runs_dir=tmp_path,
    )  # fmt: skip
    assert len(result.lrs) == 41 and result.lrs[0] == pytest.approx(1e-5) and result.lrs[-1] == pytest.approx(1.0)
    np.testing.assert_allclose(np.diff(np.log10(result.lrs)), 5 / 40)
    sent = History.load(result.run_path).steps.learning_rate  # every step sent its own rate
    np.testing.assert_allclose(sent, result.lrs)
    # The forward-backward EMA has no lag: the steepest rise is found at 1e-2, within one step (1/8 decade).
    assert abs(math.log10(result.suggestion) + 2) <= 0.125 + 1e-9
    assert result.reason.startswith("steepest ascent") and result.muon_scaling is None
    ax = result.plot()
    marks = [ln for ln in ax.lines if ln.get_label().startswith("suggested")]
    assert len(marks) == 1 and marks[0].get_xdata()[0] == result.suggestion and ax.get_xscale() == "log"


def test_a_diverging_loss_ends_the_test_early(tmp_path):
    """A loss with its minimum at 1e-3 that explodes above it: the test stops once the smoothed loss is
    4x its best, and suggests the steepest descent before the minimum."""

    def step(session, params, i):
        ce_step(session, params)
        return 1 + (math.log10(params.learning_rate) + 3) ** 4

    result = lr_find(
        rlnb.AdamParams(), start_lr=1e-6, end_lr=1.0, steps=25, step_fn=step, objective="loss", runs_dir=tmp_path
    )
    assert len(result.values) < 25 and "diverged at lr" in result.reason
    assert result.suggestion is not None and result.suggestion < 1e-3
    assert result.reason.startswith("steepest descent")


def test_a_local_session_is_copied_and_left_untouched(tmp_path):
    session = rlnb.connect("local", optimizer="adam", seed=3, device="cpu", record=False)
    for _ in range(2):
        ce_step(session, rlnb.AdamParams(learning_rate=1e-2))
    before = forward_loss(session)
    seen = []

    def step(copy, params, i):
        if i == 0:
            seen.append((forward_loss(copy), copy.step))
        return ce_step(copy, params)

    result = lr_find(rlnb.AdamParams(), session, steps=5, step_fn=step, objective="loss", runs_dir=tmp_path)
    assert seen == [(pytest.approx(before, rel=1e-6), 0)]  # the same weights, a fresh optimizer at step 0
    assert session.step == 2 and forward_loss(session) == pytest.approx(before, rel=1e-6)
    assert len(result.values) == 5
    session.close()


@pytest.mark.parametrize("scaling", ["original", "match_adam"])
def test_muon_rates_are_in_the_sessions_convention(tmp_path, scaling):
    session = rlnb.connect("local", optimizer="muon", muon_scaling=scaling, device="cpu", record=False)
    result = lr_find(rlnb.MuonParams(), session, steps=5, step_fn=sigmoid_reward(), runs_dir=tmp_path)
    assert result.muon_scaling == scaling and result.optimizer == "muon"
    assert result.lrs[0] == pytest.approx({"original": 1e-3, "match_adam": 1e-5}[scaling])
    assert History.load(result.run_path).config["muon_scaling"] == scaling
    fresh = lr_find(rlnb.MuonParams(), steps=5, step_fn=sigmoid_reward(), muon_scaling=scaling, runs_dir=tmp_path)
    assert fresh.muon_scaling == scaling
    session.close()


def test_a_remote_session_gets_a_fresh_one_on_the_same_service(server, tmp_path):
    remote = rlnb.connect(server, optimizer="adam", base_model="rlnb/tiny", record=False)
    result = lr_find(rlnb.AdamParams(weight_decay=0.0), remote, steps=5, runs_dir=tmp_path)  # real RL steps
    config = History.load(result.run_path).config
    assert config["backend"] == "remote" and config["session_id"] != remote.id and config["model"] == "rlnb/tiny"
    assert len(result.values) == 5 and all(0 <= v <= 1 for v in result.values) and remote.step == 0
    remote.close()


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="steps must be >= 5"):
        lr_find(rlnb.AdamParams(), steps=3)
    with pytest.raises(ValueError, match="start_lr < end_lr"):
        lr_find(rlnb.AdamParams(), start_lr=1.0, end_lr=0.1, steps=5, runs_dir=tmp_path)
    session = rlnb.connect("local", optimizer="adam", record=False, device="cpu")
    with pytest.raises(ValueError, match="session's optimizer is adam"):
        lr_find(rlnb.MuonParams(), session, steps=5)
    session.close()


def test_converting_muon_rates_gives_the_same_update():
    """One 192x64 matrix: a Muon step at lr in "original" units and at the converted lr in
    "match_adam" units moves the weights identically (the backend's real optimizer)."""
    lr = 0.02
    converted = convert_muon_lr(lr, "original", "match_adam", [(192, 64)])
    assert converted == pytest.approx(lr * 3**0.5 / (0.2 * 192**0.5))
    weights = []
    for scaling, rate in (("original", lr), ("match_adam", converted)):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(64, 192, bias=False), nn.Linear(192, 10, bias=False))
        head = split_params(model, roles=[model[1].weight])  # the output head's role, declared
        opt = TrainerOptimizer(model, "muon", head, muon_scaling=scaling)
        assert [tuple(p.shape) for _, p in opt.split.muon] == [(192, 64)]
        torch.manual_seed(1)
        for p in model.parameters():
            p.grad = torch.randn_like(p)
        opt.step(rlnb.MuonParams(learning_rate=rate, grad_clip_norm=0.0, adam={"learning_rate": 1e-3}).resolved())
        weights.append(model[0].weight.detach().clone())
    torch.testing.assert_close(weights[0], weights[1])


def test_converting_for_several_shapes_weights_by_size():
    shapes = muon_shapes("tiny")
    assert shapes == [(192, 64), (64, 64), (256, 64), (64, 256)] * 2
    ratio = {(192, 64): 3**0.5 / (0.2 * 192**0.5), (64, 64): 1 / 1.6, (256, 64): 2 / 3.2, (64, 256): 1 / 3.2}
    sizes = {s: s[0] * s[1] for s in ratio}
    expected = math.exp(sum(sizes[s] * math.log(ratio[s]) for s in ratio) / sum(sizes.values()))
    assert convert_muon_lr(1.0, "original", "match_adam") == pytest.approx(expected)
    there = convert_muon_lr(0.02, "original", "match_adam", "tiny")
    assert convert_muon_lr(there, "match_adam", "original", "tiny") == pytest.approx(0.02)
    with pytest.raises(ValueError, match="'original' or 'match_adam'"):
        convert_muon_lr(0.02, "original", "spectral")
    with pytest.raises(ValueError, match="learning_rate"):
        convert_muon_lr(-1.0, "original", "match_adam")


def test_find_lr_button_fills_the_learning_rate():
    b = OptimizerBuilder("adam")
    assert b.lr_finder.plot.layout.display == "none"  # no broken-image icon before a range test
    b.lr_finder.options = {"steps": 21, "start_lr": 1e-5, "end_lr": 1.0, "step_fn": sigmoid_reward(1e-3)}
    b.lr_finder.button.click()
    b.lr_finder.join(120)
    result = b.lr_finder.result
    assert b.lr_finder.error is None and result.suggestion is not None
    assert b.params.learning_rate == pytest.approx(result.suggestion) and b.adam["learning_rate"].slider.value > 0
    assert "suggested" in b.lr_finder.status.value and len(b.lr_finder.plot.value) > 1000
    assert b.lr_finder.plot.layout.display is None
    assert not b.lr_finder.button.disabled


def test_find_lr_button_shows_errors_in_the_panel():
    b = OptimizerBuilder("adam")
    b.lr_finder.options = {"steps": 2}
    b.lr_finder.button.click()
    b.lr_finder.join(60)
    assert isinstance(b.lr_finder.error, ValueError) and "steps must be" in b.lr_finder.status.value
    assert not b.lr_finder.button.disabled


def test_muon_units_switch_converts_the_rate():
    b = OptimizerBuilder("muon")
    b.muon["learning_rate"].value = 0.02
    b.lr_finder.scaling.value = "match_adam"
    assert b.params.learning_rate == pytest.approx(convert_muon_lr(0.02, "original", "match_adam", "tiny"))
    b.lr_finder.scaling.value = "original"
    assert b.params.learning_rate == pytest.approx(0.02)


def test_run_panel_find_lr_copies_its_session():
    session = rlnb.connect("local", optimizer="muon", muon_scaling="match_adam", record=False, device="cpu")
    panel = RunPanel(session, n_steps=5, every=0.05)
    assert panel.builder.lr_finder.session is session
    panel.builder.lr_finder.options = {"steps": 6}  # real RL steps of the demo task
    panel.builder.lr_finder.button.click()
    panel.builder.lr_finder.join(120)
    result = panel.builder.lr_finder.result
    assert panel.builder.lr_finder.error is None and session.step == 0
    assert result.muon_scaling == "match_adam" and panel.builder.lr_finder.scaling.value == "match_adam"
    if result.suggestion is not None:
        assert panel.builder.params.learning_rate == pytest.approx(result.suggestion)
    assert any(isinstance(a, Line2D) for a in result.plot().lines)
    panel.close()
    session.close()

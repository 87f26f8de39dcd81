"""The learning-rate range test: exponential growth sent step by step (Muon's two rates together), the
suggestion to two significant figures or none on a flat curve, a copy of a session's current weights
(local or remote), Muon's scaling conventions for a session's own shapes, and the builder's controls:
nothing applied before Apply, disabled while the form is invalid."""

import errno
import html
import math
import os
import re
import time
import types

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
from rlnb.sweep.lr import curve
from rlnb.sweep.lr import find as find_lr_module
from rlnb.sweep.lr.curve import FLAT, Diverging, rise, significant, smooth, suggest
from rlnb.sweep.lr.find import LRFind
from rlnb.tasks import digits_task, rl_step
from rlnb.testing import FakeBackend
from rlnb.widgets import OptimizerBuilder, RunPanel
from rlnb.widgets.finder import LRFinderControls
from rlnb.widgets.presets import DEFAULT_PRESET, PRESETS

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


def test_no_suggestion_when_the_objective_improves_fastest_at_the_top_of_the_range(tmp_path):
    """A reward still rising fastest at end_lr (its sigmoid centred past the range): where it would stop is not
    measured, and the last rate is no upper edge of anything (a 5-step test suggested end_lr itself)."""
    result = lr_find(
        rlnb.AdamParams(), start_lr=1e-4, end_lr=1e-2, steps=9, step_fn=sigmoid_reward(1.0), runs_dir=tmp_path
    )
    assert result.suggestion is None and result.params is None
    assert result.reason == (
        "no clear suggestion: the smoothed reward improved fastest at the end of the range "
        "(lr 0.01): try a larger end_lr or more steps"
    )


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


def descent(x: float, center: float) -> float:
    """A loss falling from 2 to 1 as log10(lr) ``x`` grows, fastest at ``center`` (flat at the range's start)."""
    return 1 + 1 / (1 + math.exp(3 * (x - center)))


def test_a_diverging_loss_ends_the_test_early(tmp_path):
    """A loss with its minimum at 1e-3 that explodes above it: the test stops once the smoothed loss is
    4x its best, and suggests the steepest descent before the minimum."""

    def step(session, params, i):
        ce_step(session, params)
        x = math.log10(params.learning_rate)
        return 1 + (x + 3) ** 4 if x > -3 else descent(x, -4.5)

    result = lr_find(
        rlnb.AdamParams(), start_lr=1e-6, end_lr=1.0, steps=25, step_fn=step, objective="loss", runs_dir=tmp_path
    )
    assert len(result.values) < 25 and "diverged at lr" in result.reason
    assert result.suggestion is not None and result.suggestion < 1e-3
    assert result.reason.startswith("steepest descent")
    steps = History.load(result.run_path).steps  # the objective is logged beside the steps table's own loss
    assert steps.lr_find_loss.tolist() == result.values and "loss" in steps


def test_a_loss_that_turns_nan_still_gives_the_curve_and_suggestion_before_it(tmp_path):
    """A step_fn whose loss is NaN past 0.03 (a supervised step that blew up): one NaN in the EMA made every
    smoothed point NaN, and the test said "the smoothed loss is flat" with no suggestion."""

    def step(session, params, i):
        ce_step(session, params)
        x = math.log10(params.learning_rate)
        return math.nan if x > math.log10(0.03) else 1 + (x + 2) ** 2 if x > -2 else descent(x, -3.5)

    result = lr_find(
        rlnb.AdamParams(), start_lr=1e-6, end_lr=1.0, steps=25, step_fn=step, objective="loss", runs_dir=tmp_path
    )
    assert math.isnan(result.values[-1]) and all(math.isfinite(v) for v in result.values[:-1])
    assert math.isnan(result.smoothed[-1]) and all(math.isfinite(v) for v in result.smoothed[:-1])
    assert result.reason.startswith("steepest descent") and "diverged at lr" in result.reason
    assert "loss nan" in result.reason
    assert result.suggestion is not None and result.suggestion < 1e-2  # before the minimum


@pytest.mark.parametrize(
    "answer", [None, {"loss": 1.0}, True, 10**400, torch.ones(2)], ids=["none", "dict", "bool", "huge", "tensor2"]
)
def test_a_step_fn_that_returns_no_number_is_named(tmp_path, answer):
    """A step_fn without ``return`` raised float()'s "argument must be a string or a real number, not
    'NoneType'", which names neither step_fn nor the step; True counted as an objective of 1.0; an int past a
    float's range raised float()'s bare ``OverflowError``."""

    def step(session, params, i):
        ce_step(session, params)
        return answer

    with pytest.raises(TypeError, match=r"step_fn returned .* at step 0 \(lr 1e-05\): it must return the objective"):
        lr_find(rlnb.AdamParams(), steps=5, step_fn=step, objective="loss", runs_dir=tmp_path)
    assert (
        lr_find(rlnb.AdamParams(), steps=5, step_fn=lambda s, p, i: torch.tensor(2.0), runs_dir=tmp_path).values
        == [2.0] * 5
    )  # a one-element tensor is a number


def test_a_local_session_is_copied_and_left_untouched(tmp_path):
    """The copy starts from the session's weights with a fresh optimizer; the checkpoint that carried them is deleted
    once loaded (each Find LR click left weights and optimizer state behind, GBs on a real model)."""
    kept = tmp_path / "checkpoints"
    session = rlnb.connect("local", optimizer="adam", seed=3, device="cpu", record=False, checkpoint_dir=kept)
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
    assert list(kept.iterdir()) == []  # Find LR's checkpoint is gone; one the user saves stays
    ckpt = session.save_training_checkpoint().result().checkpoint
    assert session.backend.checkpoint_path(ckpt.id).is_file()
    session.close()


@pytest.mark.parametrize("record", [True, False])
def test_a_copy_records_where_the_session_records_and_lets_its_run_go(tmp_path, monkeypatch, record):
    """Without ``runs_dir``, the copy's run goes beside the session's (it went to ./rlnb-runs in whatever folder
    Python ran in, the notebook's); a session kept in memory only gets a copy kept so too."""
    monkeypatch.delenv("RLNB_RUNS_DIR")
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    mine = tmp_path / "mine"
    session = rlnb.connect("local", optimizer="adam", device="cpu", runs_dir=mine, run_id="user", record=record)
    result = lr_find(rlnb.AdamParams(), session, steps=5, step_fn=lambda s, p, i: ce_step(s, p), objective="loss")
    session.close()
    assert list((tmp_path / "cwd").iterdir()) == []
    if not record:
        assert result.run_path is None and not mine.exists()
        return
    assert os.path.dirname(result.run_path) == str(mine) and len(History.load(result.run_path).steps) == 5
    assert sorted(p.name for p in mine.iterdir()) == sorted(["user", os.path.basename(result.run_path)])
    with pytest.warns(rlnb.history.RunContinuedWarning):  # its run.lock was let go: a session may continue it
        copy = rlnb.connect("local", optimizer="adam", device="cpu", runs_dir=mine,
                            run_id=os.path.basename(result.run_path))  # fmt: skip
    copy.close()


def test_a_copy_checkpoint_that_cannot_be_deleted_is_named_in_a_warning(tmp_path, monkeypatch):
    """Find LR's copy of the weights could not be deleted: nothing said so (GBs left behind at every click)."""
    kept = tmp_path / "checkpoints"
    real_unlink = os.unlink

    def refused(path, *args, **kwargs):
        if os.fspath(path).startswith(str(kept / "ckpt-")):  # the copy, not its save's partial file
            raise PermissionError(errno.EACCES, "Permission denied", path)
        real_unlink(path, *args, **kwargs)

    session = rlnb.connect("local", optimizer="adam", device="cpu", record=False, checkpoint_dir=kept)
    monkeypatch.setattr(os, "unlink", refused)
    with pytest.warns(RuntimeWarning, match=r"^Find LR: checkpoint ckpt-train-\w+ could not be deleted: .*\.pt: "):
        step = lambda copy, params, i: ce_step(copy, params)  # noqa: E731
        result = lr_find(rlnb.AdamParams(), session, steps=5, step_fn=step, objective="loss", runs_dir=tmp_path)
    monkeypatch.undo()
    assert len(result.values) == 5 and len(list(kept.iterdir())) == 1
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


def test_a_remote_session_is_copied_on_the_same_service(server, tmp_path):
    remote = rlnb.connect(server, optimizer="adam", base_model="rlnb/tiny", record=False)
    for _ in range(2):
        ce_step(remote, rlnb.AdamParams(learning_rate=1e-2))
    before = forward_loss(remote)
    seen = []

    def step(copy, params, i):
        if i == 0:
            seen.append((forward_loss(copy), copy.step))
        return ce_step(copy, params)

    result = lr_find(rlnb.AdamParams(weight_decay=0.0), remote, steps=5, step_fn=step, runs_dir=tmp_path)
    config = History.load(result.run_path).config
    assert config["backend"] == "remote" and config["session_id"] != remote.id and config["model"] == "rlnb/tiny"
    assert seen == [(pytest.approx(before, rel=1e-5), 0)]  # its current weights, a fresh optimizer
    assert remote.step == 2 and forward_loss(remote) == pytest.approx(before, rel=1e-5)
    assert len(result.values) == 5
    remote.close()


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match=r"steps must be an integer in \[5, 10000\], got 3"):
        lr_find(rlnb.AdamParams(), steps=3)
    with pytest.raises(ValueError, match="start_lr must be < end_lr"):
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


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_find_lr_suggests_and_applies_nothing_until_apply():
    b = OptimizerBuilder("adam")
    before = b.params.learning_rate
    finder = b.lr_finder
    assert finder.plot.layout.display == "none" and finder.apply_button.disabled  # nothing to show or apply yet
    finder.options = {"steps": 21, "start_lr": 1e-5, "end_lr": 1.0, "step_fn": sigmoid_reward(1e-3)}
    finder.button.click()
    finder.join(120)
    result = finder.result
    assert finder.error is None and result.suggestion == significant(result.suggestion)
    assert b.params.learning_rate == before  # shown, not applied
    assert f"suggested lr {result.suggestion:g}" in finder.status.value and "upper edge" in finder.status.value
    # what Apply sets (review39a F2: "sweep below it. Apply sets it" set the edge); no first_letter figure beside a
    # step_fn's suggestion (review39e L4)
    assert "which Apply sets: what it does held constant for 40 steps on your step_fn is not measured" in (
        html.unescape(finder.status.value)
    )
    assert len(finder.plot.value) > 1000 and finder.plot.layout.display is None
    assert not finder.button.disabled and not finder.apply_button.disabled
    finder.apply_button.click()
    assert b.params.learning_rate == result.suggestion and b.adam["learning_rate"].slider.value > 0
    assert finder.apply_button.disabled and f"applied lr {result.suggestion:g}" in finder.status.value
    assert "the edge itself — sweep below it for a run" in html.unescape(finder.status.value)


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


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
@pytest.mark.usefixtures("undrawn_live_view")  # reads no picture of the live view
def test_run_panel_find_lr_copies_its_session_in_its_units():
    session = rlnb.connect("local", optimizer="muon", muon_scaling="match_adam", record=False, device="cpu")
    panel = RunPanel(session, n_steps=5, every=0.05)
    finder = panel.builder.lr_finder
    assert finder.session is session and finder.scaling.value == "match_adam" and finder.scaling.disabled
    preset = PRESETS[DEFAULT_PRESET]["muon"]["learning_rate"]  # the preset's rate, converted to the session's units
    converted = panel.builder.params.learning_rate
    assert converted == pytest.approx(convert_muon_lr(preset, "original", "match_adam", session))
    finder.options = {"steps": 6}  # real RL steps of the demo task
    finder.button.click()
    finder.join(120)
    result = finder.result
    assert finder.error is None and session.step == 0 and result.muon_scaling == "match_adam"
    assert panel.builder.params.learning_rate == converted  # nothing applied
    assert any(isinstance(a, Line2D) for a in result.plot().lines)
    panel.close()
    session.close()


def test_muon_sweeps_both_rates_at_their_ratio(tmp_path):
    base = rlnb.MuonParams(learning_rate=0.05, adam={"learning_rate": 0.01, "weight_decay": 0.0})
    sent = []

    def step(session, params, i):
        sent.append((params.learning_rate, params.adam.learning_rate, params.adam.weight_decay))
        return sigmoid_reward(0.05)(session, params, i)

    result = lr_find(base, steps=9, step_fn=step, runs_dir=tmp_path)
    assert [muon for muon, _, _ in sent] == pytest.approx(result.lrs)
    assert [adam / muon for muon, adam, _ in sent] == pytest.approx([0.2] * 9)  # together, at base's ratio
    assert {wd for _, _, wd in sent} == {0.0}  # the other fields are base's
    ops = History.load(result.run_path).df
    bodies = ops[ops.kind == "optim-step"].params
    assert [b["adam"]["learning_rate"] / b["learning_rate"] for b in bodies] == pytest.approx([0.2] * 9)
    assert result.adam_ratio == pytest.approx(0.2)
    assert list(result.frame.columns[:2]) == ["learning_rate", "adam_learning_rate"]
    assert result.params.learning_rate == result.suggestion == significant(result.suggestion)
    assert result.params.adam.learning_rate == significant(0.2 * result.suggestion)
    assert "AdamW part at 0.2× it" in result.reason and "AdamW part at 0.2×" in result.plot().get_xlabel()


def test_a_flat_curve_gives_no_clear_suggestion(tmp_path):
    result = lr_find(rlnb.AdamParams(), steps=12, step_fn=lambda s, p, i: ce_step(s, p) * 0 + 1.0, runs_dir=tmp_path)
    assert result.suggestion is None and result.params is None
    assert result.reason.startswith("no clear suggestion: the smoothed reward is flat")
    assert "suggested" not in [ln.get_label()[:9] for ln in result.plot().lines]
    title = result.plot().get_title()  # the figure alone says why (it said "no clear suggestion" only)
    assert title.replace("\n", " ").startswith("no clear suggestion: the smoothed reward is flat (it improves 0.0%")
    # the threshold: a rise of 4% of the curve's size is flat, 6% is not (rewards or losses)
    lrs = [10 ** (-5 + i / 4) for i in range(20)]
    for objective, sign in (("reward", 1), ("loss", -1)):
        for step, clear in ((0.04, False), (0.06, True)):
            curve = [sign * (1 + step * min(max(i - 4, 0), 10) / 10) for i in range(20)]
            assert rise(curve, objective) == pytest.approx(step / (1 + step))
            assert (suggest(lrs, curve, objective)[0] is not None) is clear
    assert rise([], "reward") == 0.0 and rise([0.0] * 6, "reward") == 0.0 and FLAT == 0.05
    for objective in ("reward", "loss"):  # all zeros (a task never scored on, the loss of rewards all 1): flat
        flat = f"no clear suggestion: the smoothed {objective} is flat"
        assert suggest(lrs, [0.0] * 20, objective)[1].startswith(flat)


def test_find_lr_is_disabled_while_the_form_is_invalid_and_says_why():
    b = OptimizerBuilder("adam")
    finder = b.lr_finder
    assert not finder.button.disabled and finder.status.value == ""
    b.adam["beta1"].value = 1.5
    assert finder.button.disabled and "Find LR needs a valid config" in finder.status.value
    assert "beta1" in finder.status.value
    finder.start()  # a click on a disabled button (or from code) does nothing, and says why
    assert finder._thread is None and "beta1" in finder.status.value
    with pytest.raises(ValueError, match="beta1"):
        finder.run()
    b.adam["beta1"].value = 0.9
    assert not finder.button.disabled and finder.status.value == ""


@pytest.mark.parametrize("model", [5, None, b"tiny"])
def test_muon_shapes_of_what_is_no_model_names_the_argument(model):
    """``OptimizerBuilder(model=5)`` (or ``muon_shapes``, ``convert_muon_lr``): ``AttributeError: 'int' object has
    no attribute 'parameters'`` from deep in the optimizer split."""
    with pytest.raises(TypeError, match=r"model must be a built-in model's name \['small', 'tiny'\], an nn.Module"):
        muon_shapes(model)
    with pytest.raises(TypeError, match=f"got {type(model).__name__} "):
        OptimizerBuilder("muon", model=model)


@pytest.mark.usefixtures("undrawn_live_view")  # reads no picture of the live view
def test_muon_shapes_of_a_session_are_its_own():
    session = rlnb.connect("local", optimizer="muon", model="tiny", record=False, device="cpu")
    assert muon_shapes(session) == muon_shapes("tiny")
    assert convert_muon_lr(0.02, "original", "match_adam", session) == convert_muon_lr(0.02, "original", "match_adam")
    session.close()
    fake = rlnb.Session(FakeBackend("muon"), record=False)  # remote-like: no model here, not a built-in
    with pytest.raises(ValueError, match="shapes of fake's model are not known here"):
        muon_shapes(fake)
    panel = RunPanel(fake, every=0.05)
    assert panel.builder.lr_finder.shapes is None and panel.builder.lr_finder.scaling.disabled
    panel.close()
    fake.close()


@pytest.mark.slow
@pytest.mark.usefixtures("undrawn_live_view")  # reads no picture of the live view
def test_a_hugging_face_session_converts_with_its_own_shapes(hf_dirs):
    session = rlnb.connect("local", optimizer="muon", model=hf_dirs["llama"], muon_scaling="match_adam",
                           record=False, device="cpu")  # fmt: skip
    own = [(int(p.shape[0]), int(p.shape[1])) for _, p in session.backend.optim.split.muon]
    assert muon_shapes(session) == own and own != muon_shapes("tiny")
    want = convert_muon_lr(0.05, "original", "match_adam", own)
    assert convert_muon_lr(0.05, "original", "match_adam", session) == pytest.approx(want)
    assert want != pytest.approx(convert_muon_lr(0.05, "original", "match_adam", "tiny"))
    panel = RunPanel(session, every=0.05)  # the preset's 0.05 "original", in this session's units and shapes
    assert panel.builder.params.learning_rate == pytest.approx(want)
    panel.close()
    session.close()


def digits_session(steps):
    """A Muon session (seed 0; Muon 0.05, AdamW 1e-2, cosine over 30 steps) after ``steps`` RL steps of the
    digits task, which it solves (reward 1 on every sample) by step 40."""
    session = rlnb.connect("local", optimizer="muon", seed=0, record=False, device="cpu")
    builder = OptimizerBuilder("muon", total_steps=30)
    builder.muon_adam["learning_rate"].value = 1e-2
    for i in range(steps):
        rl_step(session, digits_task(), builder.params_at(session.step), seed=i)
    return session, builder


@pytest.mark.slow
def test_early_in_a_muon_run_it_suggests_a_rate_that_learns(tmp_path):
    """The old sweep (Muon's rate alone, AdamW fixed at 1e-2) suggested 0.0026 here; 0.05 learns."""
    session, builder = digits_session(6)
    result = lr_find(builder.params, session, steps=30, runs_dir=tmp_path)
    assert 0.02 <= result.suggestion <= 0.2 and result.params.adam.learning_rate == significant(result.suggestion * 0.2)
    session.close()


@pytest.mark.slow
def test_a_converged_session_gives_no_clear_suggestion(tmp_path):
    session, builder = digits_session(40)
    result = lr_find(builder.params, session, steps=30, runs_dir=tmp_path)
    assert min(result.values) == 1.0  # a copy of the converged weights: the reward stays at 1
    assert result.suggestion is None and "flat" in result.reason
    session.close()


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"start_lr": 1.0, "end_lr": 1e-5}, "start_lr must be < end_lr, got start_lr=1.0, end_lr=1e-05"),
        ({"start_lr": 2.0}, "start_lr must be < end_lr, got start_lr=2.0, end_lr=1.0"),  # Adam's default end
        ({"start_lr": 0.0, "end_lr": 1e-2}, "start_lr must be a finite number > 0 .*got 0.0"),  # not the default
        ({"end_lr": 0}, "end_lr must be a finite number > 0 .*got 0"),
        ({"end_lr": math.inf}, "end_lr must be a finite number > 0 .*got inf"),
        ({"start_lr": math.nan}, "start_lr must be a finite number > 0 .*got nan"),
        ({"start_lr": "1e-3"}, "start_lr must be a finite number > 0 .*got '1e-3'"),
        ({"steps": 5.5}, r"steps must be an integer in \[5, 10000\], got 5.5"),
        ({"steps": True}, r"steps must be an integer in \[5, 10000\], got True"),
        ({"steps": 10**9}, r"steps must be an integer in \[5, 10000\], got 1000000000"),
        ({"seed": 2**44}, r"seed must be None or an integer in \[-9223344366821, 9223344366821\], got 17592186044416"),
    ],
)
def test_a_bad_range_is_refused_before_anything_is_opened_or_sent(tmp_path, kwargs, words):
    """Refused before a session is opened, a run folder made, or a checkpoint saved on the user's session."""
    session = rlnb.connect("local", optimizer="adam", device="cpu", runs_dir=tmp_path, run_id="user")
    runs = tmp_path / "lr-find"
    with pytest.raises(ValueError, match=words):
        lr_find(rlnb.AdamParams(), session, **{"steps": 5, **kwargs}, runs_dir=runs)
    with pytest.raises(ValueError, match=words):
        lr_find(rlnb.AdamParams(), **{"steps": 5, **kwargs}, runs_dir=runs)
    assert len(session.history) == 0 and not runs.exists()
    session.close()


def test_the_range_test_settings_can_be_one_group_and_a_name_wins_over_it(tmp_path):
    """``range_test=RangeTestOptions(...)`` given whole (reused across calls, as sweep's groups are); a setting
    given by name replaces the group's; the group refuses a bad field when it is built, naming it."""
    from rlnb.sweep import RangeTestOptions

    group = RangeTestOptions(start_lr=1e-4, end_lr=1e-2, steps=6, step_fn=sigmoid_reward(1e-3), objective="reward")
    result = lr_find(rlnb.AdamParams(), range_test=group, runs_dir=tmp_path)
    assert len(result.lrs) == 6 and result.lrs[0] == pytest.approx(1e-4) and result.lrs[-1] == pytest.approx(1e-2)
    result = lr_find(rlnb.AdamParams(), range_test=group, steps=7, end_lr=1e-1, runs_dir=tmp_path)
    assert len(result.lrs) == 7 and result.lrs[-1] == pytest.approx(1e-1) and result.lrs[0] == pytest.approx(1e-4)
    with pytest.raises(ValueError, match=r"steps must be an integer in \[5, 10000\], got 4"):
        RangeTestOptions(steps=4)
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\): stepz"):  # not a group's: connect's
        lr_find(rlnb.AdamParams(), range_test=group, stepz=7, runs_dir=tmp_path)


@pytest.mark.parametrize("task", [lambda prompt, completion: 1.0, "first_letter"])
def test_a_task_that_is_no_task_is_refused_before_a_session_is_copied(tmp_path, task):
    """``lr_find(..., task=reward)`` (as ``sweep`` takes one) copied the user's session through a checkpoint, opened
    the copy and made its run folder, then failed its first step: ``'function' object has no attribute ...``."""
    session = rlnb.connect("local", optimizer="adam", device="cpu", runs_dir=tmp_path, run_id="user")
    runs = tmp_path / "lr-find"
    with pytest.raises(TypeError, match="task must be a Task, such as first_letter_task"):
        lr_find(rlnb.AdamParams(), session, steps=5, task=task, runs_dir=runs)
    assert len(session.history) == 0 and not runs.exists()
    session.close()


def test_muon_defaults_are_known_before_a_session_is_opened(tmp_path):
    """Muon's default range depends on its scaling: read from ``muon_scaling=`` (or the session's) first."""
    runs = tmp_path / "lr-find"
    with pytest.raises(ValueError, match="start_lr must be < end_lr, got start_lr=2.0, end_lr=1.0"):
        lr_find(rlnb.MuonParams(), start_lr=2.0, muon_scaling="match_adam", steps=5, runs_dir=runs)
    with pytest.raises(ValueError, match="start_lr must be < end_lr, got start_lr=20.0, end_lr=10.0"):
        lr_find(rlnb.MuonParams(), start_lr=20.0, steps=5, runs_dir=runs)  # local: "original"
    assert not runs.exists()


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
@pytest.mark.usefixtures("undrawn_live_view")  # reads no picture of the live view
def test_a_find_lr_in_flight_is_ended_by_the_panels_stop_and_close():
    """Nothing could end a range test: the panel's Stop was disabled during one, and closing the panel left it
    training out of sight for all its steps (on the cores the next run would use)."""
    session = rlnb.connect("local", record=False, device="cpu")
    panel = RunPanel(session, every=0.05)
    finder = panel.builder.lr_finder
    finder.options.update(steps=5000, step_fn=lambda s, p, i: ce_step(s, p) * 0 + 1.0)

    def started():
        finder.button.click()
        deadline = time.monotonic() + 60
        while "/5000 steps" not in finder.status.value:  # its progress shows
            assert time.monotonic() < deadline and finder.running, finder.status.value
            time.sleep(0.01)

    started()
    assert not panel.stop_button.disabled
    panel.stop_button.click()
    assert finder.join(60) and not finder.running and finder.error is None
    assert len(finder.result.values) < 5000 and "ended early: stopped after" in finder.status.value
    assert not panel.run_button.disabled
    started()
    panel.close(timeout=60)  # stops it and waits for it
    assert not finder.running and "ended early: stopped after" in finder.result.reason
    session.close()


def test_a_suggestion_says_when_its_test_ended_early():
    """From the result's fields, whatever else its reason says between them (where the loss diverged)."""
    found = LRFind([1e-3, 1e-2], [0.0, 1.0], [0.0, 1.0], 0.01, "reward", "adam", None,
                   "steepest ascent of the smoothed reward; judged up to lr 0.01; ended early: stopped after 2 steps",
                   chosen="steepest ascent of the smoothed reward", ended="stopped after 2 steps")  # fmt: skip
    said = LRFinderControls.describe(found, "", [])
    assert said.startswith("suggested lr 0.01 — steepest ascent of the smoothed reward (ended early: stopped after 2 "
                           "steps); the upper edge")  # fmt: skip


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
@pytest.mark.usefixtures("undrawn_live_view")  # reads no picture of the live view
def test_find_lr_names_the_task_it_probes(monkeypatch):
    """A builder on its own probes lr_find's default, the digits task, which its docstrings called "the demo's" (the
    demo trains first_letter) and its status line never named; a RunPanel's probes the panel's task."""
    seen = []

    def fake_lr_find(base, session, **options):
        options["progress"](1, 30)
        seen.append((getattr(options.get("task"), "name", None), finder.status.value))
        return LRFind([1e-3, 1e-2], [0.0, 1.0], [0.0, 1.0], 0.01, "reward", "adam", None, "steepest ascent of it")

    monkeypatch.setattr(rlnb.sweep, "lr_find", fake_lr_find)
    finder = OptimizerBuilder("adam").lr_finder
    finder.run()
    assert seen[-1] == (None, "range test of the digits task running … 1/30 steps")  # lr_find's default: digits
    assert finder.status.value.startswith("suggested lr 0.01 on the digits task — steepest ascent of it")
    with rlnb.Session(FakeBackend("adam"), record=False) as session:
        panel = RunPanel(session, every=0.05)
        finder = panel.builder.lr_finder
        finder.run()
        assert seen[-1] == ("first_letter", "range test of the first_letter task running … 1/30 steps")
        assert "suggested lr 0.01 on the first_letter task" in finder.status.value
        finder.options["step_fn"] = lambda s, p, i: 1.0
        finder.run()
        assert seen[-1][1] == "range test of your step_fn running … 1/30 steps"
        panel.close()


@pytest.mark.slow  # a Muon range test (~2 s)
def test_apply_puts_a_muon_suggestion_in_the_units_the_form_is_in_now():
    """A suggestion found in "original" units, applied after the units were switched to "match_adam", went in
    unconverted: another step size (2x on the tiny model; 10x and more on wide ones)."""
    b = OptimizerBuilder("muon")
    finder = b.lr_finder
    finder.options = {"steps": 21, "start_lr": 1e-3, "end_lr": 10.0, "step_fn": sigmoid_reward(0.1)}
    found = finder.run()
    assert found.muon_scaling == "original" and found.suggestion is not None
    finder.scaling.value = "match_adam"
    finder.apply_button.click()
    want = significant(convert_muon_lr(found.suggestion, "original", "match_adam", "tiny"))
    assert b.params.learning_rate == want != found.suggestion
    assert b.params.adam.learning_rate == found.params.adam.learning_rate  # AdamW's rate has one convention
    assert f"applied lr {want:g} in match_adam units (found as {found.suggestion:g} in original units)" in (
        finder.status.value
    )


def test_apply_says_which_tab_it_set_when_another_is_shown():
    b = OptimizerBuilder("adam")
    finder = b.lr_finder
    finder.options = {"steps": 21, "start_lr": 1e-5, "end_lr": 1.0, "step_fn": sigmoid_reward(1e-3)}
    found = finder.run()
    b.kind = "muon"
    sent = b.params.request_body()
    finder.apply()
    assert b.adam["learning_rate"].value == found.suggestion and b.params.request_body() == sent
    assert "on the Adam tab, the optimizer of the test, not the one shown" in finder.status.value


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_a_range_test_of_rl_steps_logs_each_reward_once(tmp_path):
    """rl_step logs the step's reward, and the range test logged it again: two reward rows per step."""
    result = lr_find(rlnb.AdamParams(learning_rate=1e-3), steps=5, runs_dir=tmp_path)
    logged = History.load(result.run_path).logged
    assert list(logged.step[logged.reward.notna()]) == [1, 2, 3, 4, 5]
    assert list(logged.reward.dropna()) == pytest.approx(result.values)
    assert list(logged.lr_find_lr.dropna()) == pytest.approx(result.lrs)


def test_what_its_rl_steps_cannot_sample_is_refused_before_a_session_is_copied(tmp_path):
    """A task's group past the engine's 256 samples per prompt, or trainer-only sessions: the session was copied
    (a checkpoint saved, a session and run folder opened), then the first step failed. A ``step_fn`` may not
    sample at all: trainer-only is its business."""
    from rlnb.tasks import Task

    session = rlnb.connect("local", optimizer="adam", device="cpu", runs_dir=tmp_path, run_id="user")
    runs = tmp_path / "lr-find"
    wide = Task("wide", ["n="], lambda prompt, completion: 0.0, group_size=1000)
    with pytest.raises(ValueError, match=r"Task.group_size must be in \[2, 256\] for target 'local'.*got 1000"):
        lr_find(rlnb.AdamParams(), session, steps=5, task=wide, runs_dir=runs)
    with pytest.raises(ValueError, match="num_generator_replicas=0 starts a trainer-only session"):
        lr_find(rlnb.AdamParams(), steps=5, num_generator_replicas=0, runs_dir=runs)
    assert len(session.history) == 0 and not runs.exists()
    session.close()
    found = lr_find(
        rlnb.AdamParams(), steps=5, step_fn=lambda s, p, i: ce_step(s, p), num_generator_replicas=0, runs_dir=runs
    )
    assert len(found.values) == 5


@pytest.mark.parametrize(
    ("prompt", "match"),
    [
        ("", r"task 'bad': prompts\[1\] encodes to no tokens: a prompt needs at least one$"),
        ("a" * 300, r"task 'bad': prompts\[1\]: 300 tokens \+ max_tokens 8 exceed the model's context of 256$"),
        ("a\ud800=", r"task 'bad': prompts\[1\] holds a lone surrogate, '\\ud800' at position 1"),
    ],
)
def test_a_prompt_the_model_cannot_read_is_refused_before_a_session_is_copied_or_opened(tmp_path, prompt, match):
    """An empty prompt, one past the context or a lone surrogate failed only the first step, once the session had
    been copied (a checkpoint saved, a session and a run folder opened) or a new one opened. Beside a ``step_fn``,
    which reads no task, a task is refused as such, not for its prompts."""
    from rlnb.tasks import Task

    bad = Task("bad", ["n=", prompt], lambda prompt, completion: 0.0)
    session = rlnb.connect("local", optimizer="adam", device="cpu", runs_dir=tmp_path, run_id="user")
    runs = tmp_path / "lr-find"
    with pytest.raises(ValueError, match=match):
        lr_find(rlnb.AdamParams(), session, steps=5, task=bad, runs_dir=runs)
    with pytest.raises(ValueError, match=match):
        lr_find(rlnb.AdamParams(), steps=5, task=bad, runs_dir=runs)
    assert len(session.history) == 0 and not runs.exists()
    session.close()
    with pytest.raises(ValueError, match=r"task= and step_fn= both say what a step of the range test runs"):
        lr_find(rlnb.AdamParams(), steps=5, task=bad, step_fn=lambda s, p, i: ce_step(s, p), runs_dir=runs)
    assert not runs.exists()


def test_no_suggestion_when_the_objective_improves_fastest_at_the_bottom_of_the_range(tmp_path):
    """A reward already rising fastest at start_lr and slower ever after (a parabola in log10(lr) peaking at 0.1):
    the steepest point is below the range, and one of the first rates read (lr 4.4e-05) was suggested as the answer."""

    def step(session, params, i):
        ce_step(session, params)
        return -((math.log10(params.learning_rate) + 1) ** 2)

    result = lr_find(rlnb.AdamParams(), start_lr=1e-5, end_lr=1.0, steps=40, step_fn=step, runs_dir=tmp_path)
    assert result.suggestion is None and result.params is None
    assert result.reason == (
        "no clear suggestion: the smoothed reward already improved near its fastest at the start "
        "of the range (lr 3.26e-05): try a smaller start_lr or more steps"
    )
    lrs = [10 ** (-5 + i * 5 / 19) for i in range(20)]  # a rise 0.8 decades above start_lr is still read
    rising = [1 / (1 + math.exp(-3 * (math.log10(lr) + 4))) for lr in lrs]
    assert suggest(lrs, smooth(smooth(rising)[::-1])[::-1], "reward")[0] == lrs[4]  # as measured: lr_find rounds it
    coarse = [10 ** (-5 + i * 5 / 4) for i in range(5)]  # 5 steps over 5 decades: the smoothing spans them all
    rising = [1 / (1 + math.exp(-3 * (math.log10(lr) + 3))) for lr in coarse]
    assert suggest(coarse, smooth(smooth(rising)[::-1])[::-1], "reward")[1].endswith("or more steps")


def test_numpy_rates_are_numbers(tmp_path):
    """``start_lr=np.float32(1e-4)`` (a rate taken from an array) was refused as "must be a finite number > 0"."""
    found = lr_find(rlnb.AdamParams(), start_lr=np.float32(1e-4), end_lr=np.int64(1), steps=5,
                    step_fn=lambda s, p, i: 1.0, runs_dir=tmp_path)  # fmt: skip
    assert found.lrs[0] == pytest.approx(1e-4) and found.lrs[-1] == 1.0 and type(found.lrs[0]) is float
    with pytest.raises(ValueError, match="start_lr must be a finite number > 0 .*got np.float32"):
        lr_find(rlnb.AdamParams(), start_lr=np.float32("nan"), steps=5, step_fn=lambda s, p, i: 1.0, runs_dir=tmp_path)


def test_a_range_of_many_decades_is_spaced_without_overflow(tmp_path):
    """start_lr=1e-300, end_lr=1e300: end / start is inf, and the test failed at its second step (InvalidParams,
    learning_rate = inf), its session already opened."""
    found = lr_find(rlnb.AdamParams(weight_decay=0.0), start_lr=1e-300, end_lr=1e300, steps=5,
                    step_fn=lambda s, p, i: 1.0, runs_dir=tmp_path)  # fmt: skip
    assert found.lrs == [1e-300, pytest.approx(1e-150, rel=1e-9), pytest.approx(1.0), pytest.approx(1e150), 1e300]


def test_a_range_ends_at_the_rate_the_sessions_weights_cannot_take(tmp_path):
    """The engine's limits are asked before a step is sent (``Session.check_params``): a rate whose step passes the
    weights' float32 ends the range there, as the decay rule does, with the steps measured (it raised a ValueError
    from rl_step once the session asked them; before that, its batch was sampled and trained, then refused)."""
    found = lr_find(rlnb.AdamParams(weight_decay=0.0), start_lr=1e-3, end_lr=1e300, steps=5, runs_dir=tmp_path)
    assert found.lrs == [1e-3]
    assert "stopped at lr 5.62e+72: adam_params.learning_rate is too large" in found.reason, found.reason


def test_a_range_ends_at_the_rate_whose_decay_would_erase_the_weights(tmp_path):
    """Params whose learning_rate * weight_decay >= 1 are refused (the decay erased the weights, or flipped them):
    the range test stops at the first such rate with the steps measured, and refuses a range that starts there
    (before it opens anything: ``test_lr_find_rates_up_front``)."""
    seen = []
    found = lr_find(rlnb.AdamParams(weight_decay=0.5), start_lr=1e-3, end_lr=10.0, steps=5,
                    step_fn=lambda s, p, i: seen.append(p.learning_rate) or 1.0, runs_dir=tmp_path)  # fmt: skip
    assert seen == pytest.approx([1e-3, 1e-2, 1e-1, 1.0]) and found.lrs == seen
    assert "ended early: stopped at lr 10: AdamParams.weight_decay = 0.5 is invalid: learning_rate * weight_decay " \
           "must be < 1, got 10 * 0.5 = 5" in found.reason  # fmt: skip
    with pytest.raises(ValueError, match=r"start_lr=4 is refused .* must be < 1, got 4 \* 0.5 = 2; the rates"):
        lr_find(rlnb.AdamParams(weight_decay=0.5), start_lr=4.0, end_lr=10.0, steps=5, step_fn=lambda s, p, i: 1.0,
                runs_dir=tmp_path)  # fmt: skip


def test_a_ctrl_c_mid_test_keeps_the_steps_measured(tmp_path):
    """A KeyboardInterrupt in step 12 of 20 (Ctrl-C in a cell) lost the 12 steps measured: as ``stop``, they are
    the result, with the suggestion from them and the reason saying so."""

    def step(session, params, i):
        if i == 12:
            raise KeyboardInterrupt
        return sigmoid_reward(1e-3)(session, params, i)

    found = lr_find(rlnb.AdamParams(), start_lr=1e-5, end_lr=1.0, steps=20, step_fn=step, runs_dir=tmp_path)
    assert len(found.values) == 12 and found.suggestion is not None
    assert found.reason.endswith("; ended early: interrupted after 12 steps")


def test_a_curve_of_noise_gives_no_clear_suggestion(tmp_path):
    """Rewards drawn at random whatever the rate: the smoothed noise rose 20-50% of its size somewhere, and 3 tests
    of 4 suggested a rate ("steepest ascent") from it. A noisy sigmoid is still read."""
    rng = np.random.default_rng(1)
    found = lr_find(rlnb.AdamParams(), steps=40, step_fn=lambda s, p, i: float(rng.uniform()), runs_dir=tmp_path)
    assert found.suggestion is None and found.params is None
    assert "under 3× the per-step noise" in found.reason and "the curve may be noise" in found.reason
    lrs = [10 ** (-5 + i / 8) for i in range(41)]
    for seed in range(3):
        rewards = [1 / (1 + math.exp(-3 * (math.log10(lr) + 2))) for lr in lrs]
        rewards += np.random.default_rng(seed).normal(0, 0.15, len(lrs))
        suggestion, _ = suggest(lrs, smooth(smooth(list(rewards))[::-1])[::-1], "reward", list(rewards))
        assert suggestion is not None and abs(math.log10(suggestion) + 2) < 0.5


def test_a_loss_that_rises_from_the_first_rate_is_not_called_flat(tmp_path):
    """A model diverging from the first rate (its loss 1, 2, 3, ... until the test stops it): the reason said "the
    smoothed loss is flat ... nothing here learns faster at one rate than another" beside a plot rising 6x."""
    found = lr_find(rlnb.AdamParams(), steps=10, step_fn=lambda s, p, i: 1.0 + i, objective="loss", runs_dir=tmp_path)
    assert found.suggestion is None and "flat" not in found.reason
    assert found.reason.startswith(
        "no clear suggestion: the smoothed loss only gets worse after its best point, at "
        "the start of the range (lr 1e-05): try a smaller start_lr; ended early: diverged"
    )


@pytest.mark.parametrize("shapes", [[(4, 0)], [(0, 0)], [(-4, 4)], [(4.5, 4)], [(4,)], 5, [(4, 4), (0, 8)]])
def test_converting_for_shapes_that_are_no_matrices_names_shapes(shapes):
    """(4, 0) raised ZeroDivisionError, (-4, 4) converted as if it were a matrix, 5 "'int' object is not iterable"."""
    with pytest.raises(ValueError, match=r"shapes must be a list of \(rows, cols\), integers >= 1"):
        convert_muon_lr(0.02, "original", "match_adam", shapes)


@pytest.mark.parametrize("lr", ["0.02", True, None])
def test_converting_a_rate_that_is_no_number_names_it(lr):
    """ "0.02" raised "'>' not supported between instances of 'str' and 'int'"; True converted as 1."""
    with pytest.raises(ValueError, match=f"learning_rate = {re.escape(repr(lr))} is invalid: must be a finite number"):
        convert_muon_lr(lr, "original", "match_adam")
    assert convert_muon_lr(np.float32(0.02), "original", "match_adam", [(np.int64(8), 8)]) == pytest.approx(
        0.02 / (0.2 * 8**0.5)
    )


def test_converting_for_a_generator_of_shapes_reads_it_once():
    """The shapes' check read a generator, and the conversion found it spent."""
    shapes = ((8, 8) for _ in range(2))
    assert convert_muon_lr(0.02, "original", "match_adam", shapes) == pytest.approx(0.02 / (0.2 * 8**0.5))


def test_a_session_closed_mid_test_keeps_the_steps_measured(tmp_path):
    """The session closed under the test at step 8 of 12 (``SessionClosed``; a remote one timing out or losing
    its service raises an ``RlnbError`` too): the 8 steps measured were lost with the traceback."""

    def step(session, params, i):
        if i == 8:
            session.close()
        return sigmoid_reward(1e-3)(session, params, i)

    found = lr_find(rlnb.AdamParams(), start_lr=1e-5, end_lr=1.0, steps=12, step_fn=step, runs_dir=tmp_path)
    assert len(found.values) == 8 and found.run_path is not None
    assert "; ended early: SessionClosed at lr 0.0433: session " in found.reason and "is closed" in found.reason
    with pytest.raises(rlnb.InvalidParams):  # a rate the params refuse is no failure of the session: raised
        lr_find(rlnb.AdamParams(), steps=5, step_fn=lambda s, p, i: rlnb.AdamParams(beta1=2.0), runs_dir=tmp_path)


@pytest.mark.slow
def test_an_operation_that_times_out_ends_the_test_without_waiting_for_it(tmp_path):
    """A step_fn whose wait times out (a hung service): the test ended early, then waited for that very operation
    with no limit before closing. It closes at once (the close stops it), with the steps measured."""

    def step(session, params, i):
        if i < 6:
            return sigmoid_reward(1e-3)(session, params, i)
        session.backend.engine.op_delay = 120.0  # from now on each operation takes 120 s: a hung service
        session.forward_backward([samples.cross_entropy([1, 2, 3])]).result(timeout=0.2)
        return 0.0

    t0 = time.monotonic()
    found = lr_find(rlnb.AdamParams(), steps=12, step_fn=step, runs_dir=tmp_path, model="tiny")
    assert len(found.values) == 6 and "ended early: OperationTimeout at lr" in found.reason
    assert time.monotonic() - t0 < 60  # the operation it gave up on takes 120 s


def test_a_long_test_does_not_smooth_every_value_again_at_each_step(tmp_path):
    """10,000 steps (the most allowed) of a cheap step_fn: the whole curve was smoothed again after each step
    (quadratic: ~27 s of the test's own time). The divergence check keeps its EMA as it goes, and stops as before."""
    calls = []
    real = curve.smooth

    def lr_curve_smooth(values, *a):
        calls.append(len(values))
        return real(values, *a)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(find_lr_module, "smooth", lr_curve_smooth)
        found = lr_find(rlnb.AdamParams(), steps=2000, step_fn=lambda s, p, i: 1.0, objective="loss",
                        runs_dir=tmp_path)  # fmt: skip
    assert len(found.values) == 2000 and len(calls) <= 3  # the final curve only
    check = Diverging("loss")  # the run stops where the smoothed loss passes 4x its best, from the third step
    assert [check(v) for v in (1.0, 1.0, 1.0, 5.0, 30.0)] == [False, False, False, False, True]


@pytest.mark.parametrize(
    ("base", "session", "words"),
    [
        (None, None, "base must be an OptimizerParams, such as rlnb.AdamParams.* got None"),
        ({"learning_rate": 1e-3}, None, r"base must be an OptimizerParams.* got \{'learning_rate': 0.001\}"),
        (rlnb.AdamParams, None, "base must be an OptimizerParams.* got <class"),
        (rlnb.AdamParams(), "local", r"session must be a Session or None \(a fresh one; target= names .*got 'local'"),
    ],
)
def test_a_base_or_session_of_the_wrong_type_is_named(tmp_path, base, session, words):
    """An AttributeError ("'dict' object has no attribute 'resolved'", "'str' object has no attribute 'history'")
    named neither argument; ``lr_find(params, "local")`` passes the target where the session goes."""
    with pytest.raises(TypeError, match=words):
        lr_find(base, session, steps=5, step_fn=lambda s, p, i: 1.0, runs_dir=tmp_path / "runs")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [({"stop": True}, r"stop must be None or a threading.Event \(set it to stop the test\), got True"),
     # as sweep and run_batched check it (the three checks differed): an Event sets and reads its flag
     ({"stop": types.SimpleNamespace(is_set=lambda: False)}, r"stop must be None or a threading.Event .*namespace"),
     ({"progress": 5}, r"progress must be a callable progress\(done, total\), False or None .*, got 5"),
     ({"progress": True}, r"progress must be .* False or None \(lr_find draws no progress bar\), got True"),
     ({"opened": lambda: None}, r"opened must be a callable opened\(session\) or None, got <function")],
)  # fmt: skip
def test_a_stop_or_progress_of_the_wrong_type_is_named_before_a_run_folder_is_made(tmp_path, kwargs, words):
    """``stop=True`` raised "'bool' object has no attribute 'is_set'" at the first step, ``progress=5`` "'int' object
    is not callable" after it: each with a run folder made and a session opened."""
    with pytest.raises(TypeError, match=words):
        lr_find(rlnb.AdamParams(), steps=5, step_fn=lambda s, p, i: 1.0, runs_dir=tmp_path / "runs", **kwargs)
    assert not (tmp_path / "runs").exists()


def test_opened_is_called_with_the_session_of_the_test_before_its_first_step(tmp_path):
    """``opened``: the widgets' Find LR follows a remote copy's server from it (``rlnb.widgets.outage.watch_find``)."""
    seen: list = []

    def step(session, params, i):
        seen.append(("step", session))
        return 1.0

    lr_find(rlnb.AdamParams(), steps=5, step_fn=step, runs_dir=tmp_path, opened=lambda s: seen.append(("opened", s)))
    assert [what for what, _ in seen] == ["opened"] + ["step"] * 5
    assert len({id(s) for _, s in seen}) == 1, seen


@pytest.mark.slow
def test_the_loss_of_rl_steps_is_noise_and_gets_no_suggestion(tmp_path):
    """objective="loss" of the default RL steps: a policy-gradient loss of ~1e-10 at every rate (float rounding),
    from which a rate was suggested before the noise check."""
    found = lr_find(rlnb.AdamParams(weight_decay=0.0), steps=30, objective="loss", runs_dir=tmp_path, device="cpu")
    assert max(abs(v) for v in found.values) < 1e-6
    assert found.suggestion is None and "the curve may be noise" in found.reason


@pytest.mark.parametrize("target", [None, "http://127.0.0.1:9"])
def test_a_misspelt_option_lists_every_option_of_lr_finds_own(target):
    """The refusal of an unknown keyword listed lr_find's own options without ``runs_dir``, which it takes (and
    ``connect`` does not, since lr_find pops it): each of lr_find's documented keywords is in its list."""
    options = {"stepz": 5} if target is None else {"stepz": 5, "target": target}
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\): stepz; its options are ") as info:
        lr_find(rlnb.AdamParams(), **options)
    own = str(info.value).split("its options are ")[1].split(", and those of ")[0].split(", ")
    assert {"runs_dir", "target", "range_test", "stop", "progress", "steps", "start_lr"} <= set(own), own

"""Widgets driven as a person would, through `.value` and `.click()`, on sessions of ``FakeBackend``: what the
widgets send and show, not what the engine computes."""

import html
import json
import math
import re
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

import rlnb
from rlnb import wire
from rlnb.params.schedule import Schedule
from rlnb.tasks import EVAL_ACCURACY, MAX_STEPS, digits_task, first_letter_task, rl_step
from rlnb.tasks.lesson import LessonRun
from rlnb.testing import FakeBackend
from rlnb.widgets import LESSONS, PRESETS, OptimizerBuilder, RunPanel
from rlnb.widgets.controls import INVALID
from rlnb.widgets.find_probe import step_options
from rlnb.widgets.presets import DEFAULT_PRESET, TOO_HIGH
from tests.support.fake_api import BASE, FAST_POLL, KEY, FakeAPI, quick

pytestmark = pytest.mark.usefixtures("undrawn_live_view")  # reads no picture of the live view


def preview_json(b: OptimizerBuilder) -> dict:
    return json.loads(re.search(r"<pre[^>]*>(.*)</pre>", b.preview.value, re.S).group(1))


@pytest.mark.usefixtures("unplotted_schedule")  # reads no schedule plot
def test_every_adam_control_reaches_the_params_and_the_preview():
    b = OptimizerBuilder("adam")
    values = {"beta1": 0.8, "beta2": 0.99, "eps": 1e-7, "weight_decay": 0.02, "grad_clip_norm": 0.0}
    for name, v in values.items():
        b.adam[name].value = v
    b.adam["learning_rate"].text.value = 2.5e-4
    p = b.params
    assert isinstance(p, rlnb.AdamParams)
    assert p.model_dump() == {**values, "learning_rate": 2.5e-4}
    assert preview_json(b) == p.request_body()


@pytest.mark.usefixtures("unplotted_schedule")  # reads no schedule plot
def test_the_request_body_preview_says_it_is_at_the_base_rate_a_schedule_scales():
    """Titled "request body (JSON)", the preview showed lr 0.002 under a warmup whose first step sends 0.0005: no step
    sends that body. Its title says which rate it holds."""
    b = OptimizerBuilder("adam")
    b.sched_kind.value, b.warmup.value, b.total.value = "linear", 4, 20
    assert preview_json(b) == b.params.request_body() and preview_json(b)["adam_params"]["learning_rate"] == 0.002
    assert b.params_at(0).learning_rate == 0.0005  # what the first step sends
    assert b.json.get_title(0) == "request body (JSON) at the base rate: the schedule scales its learning_rate"


@pytest.mark.usefixtures("unplotted_schedule")  # reads no schedule plot
def test_every_muon_control_and_its_adam_sub_params():
    b = OptimizerBuilder("muon")
    b.muon["learning_rate"].text.value = 0.03
    b.muon["momentum"].value = 0.9
    b.muon["newton_schulz_steps"].value = 3
    b.muon["weight_decay"].value = 0.01
    b.muon["grad_clip_norm"].value = 2.0
    b.muon_adam["learning_rate"].text.value = 5e-4
    b.muon_adam["eps"].value = 1e-10
    p = b.params
    assert isinstance(p, rlnb.MuonParams) and isinstance(p.adam, rlnb.AdamParams)
    assert (p.learning_rate, p.momentum, p.newton_schulz_steps, p.weight_decay, p.grad_clip_norm) == (
        0.03,
        0.9,
        3,
        0.01,
        2.0,
    )
    assert (p.adam.learning_rate, p.adam.eps) == (5e-4, 1e-10)
    assert preview_json(b) == p.request_body()
    # no clip of its own: a Muon step clips one global norm by Muon's grad_clip_norm (the adam one was never read)
    assert "grad_clip_norm" not in b.muon_adam and "grad_clip_norm" not in p.request_body()["muon_params"]["adam"]


def test_switching_tabs_switches_the_optimizer():
    b = OptimizerBuilder("adam")
    assert "adam_params" in preview_json(b)
    b.tabs.selected_index = 1
    assert b.kind == "muon" and "muon_params" in preview_json(b)


@pytest.mark.usefixtures("unplotted_schedule")  # reads no schedule plot
def test_learning_rate_slider_and_text_stay_in_step():
    b = OptimizerBuilder("adam")
    lr = b.adam["learning_rate"]
    lr.slider.value = 1e-3
    assert lr.text.value == pytest.approx(1e-3) and b.params.learning_rate == pytest.approx(1e-3)
    lr.text.value = 3.3e-5  # exact entry
    assert lr.slider.value == pytest.approx(3.3e-5) and b.params.learning_rate == 3.3e-5


@pytest.mark.usefixtures("unplotted_schedule")  # reads no schedule plot
def test_presets_fill_every_field():
    b = OptimizerBuilder("muon")
    for name, values in PRESETS.items():
        b.preset.value = name
        body = b.params.request_body()["muon_params"]
        assert {k: body[k] for k in values["muon"]} == values["muon"]
        assert body["adam"] == values["muon.adam"]
        b.kind = "adam"
        assert b.params.request_body()["adam_params"] == values["adam"]
        b.kind = "muon"
    b.preset.value = "Too high (teaching)"
    assert b.params.learning_rate == 50.0 and b.params.grad_clip_norm == 0


@pytest.mark.parametrize(
    "group,field,value,words",
    [
        ("adam", "beta1", 1.0, "AdamParams.beta1 = 1.0 is invalid: must be a finite number, >= 0 and < 1"),
        ("adam", "eps", 0.0, "AdamParams.eps = 0.0 is invalid"),
        ("adam", "weight_decay", -0.1, "AdamParams.weight_decay"),
        ("adam", "grad_clip_norm", -1.0, "AdamParams.grad_clip_norm"),
        ("muon", "momentum", 1.2, "MuonParams.momentum = 1.2"),
        ("muon", "newton_schulz_steps", 0, "MuonParams.newton_schulz_steps = 0 is invalid: must be an integer"),
        ("muon_adam", "beta2", -0.5, "MuonParams.adam.beta2 = -0.5"),
    ],
)
def test_validation_names_the_field_and_blocks_sending(group, field, value, words):
    b = OptimizerBuilder("adam" if group == "adam" else "muon")
    getattr(b, group)[field].value = value
    assert not b.valid and any(words in e for e in b.errors), b.errors
    assert words.split(" = ")[0] in b.message.value
    assert "not sendable" in b.preview.value
    with pytest.raises(rlnb.InvalidParams):
        _ = b.params
    getattr(b, group)[field].value = PRESETS["Together docs"][
        "muon.adam" if group == "muon_adam" else "adam" if group == "adam" else "muon"
    ][field]
    assert b.valid and "valid" in b.message.value
    assert not any(
        INVALID in c._dom_classes for c in [*b.adam.values(), *b.muon.values()] if hasattr(c, "_dom_classes")
    )


def test_negative_learning_rate_typed_in_is_rejected():
    b = OptimizerBuilder("adam")
    b.adam["learning_rate"].text.value = -1e-3
    assert any("AdamParams.learning_rate = -0.001" in e for e in b.errors)


def test_schedule_values_and_params_at():
    b = OptimizerBuilder("adam")
    b.adam["learning_rate"].text.value = 1e-3
    b.sched_kind.value = "linear"
    b.warmup.value = 4
    b.total.value = 14
    b.min_ratio.value = 0.0
    assert any("min_lr_ratio" in e and "(0, 1]" in e for e in b.errors)  # a zero rate cannot be sent
    b.min_ratio.value = 0.1
    assert [b.schedule(s) for s in (0, 3)] == pytest.approx([2.5e-4, 1e-3])
    assert b.schedule(9) == pytest.approx(0.55e-3) and b.schedule(14) == pytest.approx(1e-4)
    assert b.schedule(99) == pytest.approx(1e-4)
    assert b.params_at(14).learning_rate == pytest.approx(1e-4)  # the last steps are still sendable
    b.sched_kind.value = "cosine"
    assert b.schedule(9) == pytest.approx(0.55e-3) and b.schedule(4) == pytest.approx(1e-3)
    b.sched_kind.value = "constant"
    assert b.schedule(100) == pytest.approx(1e-3)
    assert b.schedule_plot.value[:8] == b"\x89PNG\r\n\x1a\n"
    b.kind = "muon"
    b.sched_kind.value = "linear"
    at = b.params_at(9)
    assert at.learning_rate == pytest.approx(b.params.learning_rate * 0.55)
    assert at.adam.learning_rate == pytest.approx(b.params.adam.learning_rate * 0.55)
    b.warmup.value = -1
    assert any("warmup_steps" in e for e in b.errors)


def test_a_step_before_the_first_is_refused_naming_step():
    b = OptimizerBuilder("adam")
    b.adam["learning_rate"].text.value = 1e-3
    b.sched_kind.value, b.warmup.value = "cosine", 0
    for step in (-5, -1, 1.5, True):
        with pytest.raises(ValueError, match=rf"step must be an integer >= 0 .*got {step!r}"):
            b.params_at(step)
        with pytest.raises(ValueError, match="step must be an integer >= 0"):
            Schedule("linear", warmup_steps=3).multiplier(step)
    assert b.params_at(0).learning_rate == b.params.learning_rate  # step 0 is the first, at the full rate


def test_schedule_is_a_pure_function():
    s = Schedule("cosine", warmup_steps=2, total_steps=12, min_lr_ratio=0.1)
    assert [round(s.multiplier(i), 6) for i in (0, 1, 2, 7, 12, 20)] == [0.5, 1.0, 1.0, 0.55, 0.1, 0.1]
    with pytest.raises(ValueError, match="kind"):
        Schedule("step")


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"total_steps": math.nan}, "Schedule.total_steps = nan is invalid: must be an integer >= 1"),
        ({"total_steps": 2.5}, "Schedule.total_steps = 2.5 is invalid: must be an integer >= 1"),
        ({"total_steps": True}, "Schedule.total_steps = True is invalid: must be an integer >= 1"),
        ({"warmup_steps": math.nan}, "Schedule.warmup_steps = nan is invalid: must be an integer >= 0"),
        ({"warmup_steps": 1.5}, "Schedule.warmup_steps = 1.5 is invalid: must be an integer >= 0"),
        ({"min_lr_ratio": "0.5"}, r"Schedule.min_lr_ratio = '0.5' is invalid: must be a number in \(0, 1\]"),
        ({"min_lr_ratio": math.nan}, r"Schedule.min_lr_ratio = nan is invalid: must be a number in \(0, 1\]"),
        ({"min_lr_ratio": True}, r"Schedule.min_lr_ratio = True is invalid"),
    ],
)
def test_schedule_step_counts_are_integers(kwargs, words):
    """NaN passed every comparison: total_steps=nan gave a multiplier of -3.5, a negative learning rate."""
    with pytest.raises(ValueError, match=words):
        Schedule("linear", **kwargs)


@pytest.mark.parametrize("base_lr", [math.nan, -1e-3, math.inf, True, "1e-3", None])
def test_a_schedule_refuses_a_base_rate_no_step_can_use(base_lr):
    """NaN, -1e-3 and True gave NaN, a negative rate and 0.97 at step 3; "1e-3" raised "can't multiply sequence by
    non-int of type 'float'", naming nothing."""
    with pytest.raises(ValueError, match=rf"base_lr = {re.escape(repr(base_lr))} is invalid: must be a finite number"):
        Schedule("cosine", warmup_steps=2, total_steps=10)(3, base_lr)
    assert Schedule()(np.int64(3), np.float32(0.5)) == 0.5 and type(Schedule()(3, np.float32(0.5))) is float


def test_a_schedule_takes_a_numpy_floor():
    """``min_lr_ratio=np.float32(0.5)`` was refused: "must be a number in (0, 1]"."""
    s = Schedule("linear", total_steps=10, min_lr_ratio=np.float32(0.5))
    assert s.multiplier(20) == 0.5 and type(s.min_lr_ratio) is float


@pytest.mark.usefixtures("unplotted_schedule")  # reads no schedule plot
@pytest.mark.parametrize(("kind", "warmup", "total"), [("cosine", 3, 30), ("linear", 0, 5), ("cosine", 0, 1),
                                                       ("linear", 3, 3)])  # fmt: skip
def test_the_step_the_summary_names_is_the_last_that_decays_numbered_as_the_panel_numbers_steps(kind, warmup, total):
    """The summary said "cosine to 0.1× at step 30", steps numbered from 1 as the panel and ``history.steps`` number
    them, while step 30 (optim-step 29) got 0.1025× and the floor came at step 31. The step it names is read here:
    it is the last step that decays, and every step after it gets the floor (``Schedule.misfit``: a run of that many
    steps ends at the schedule's end)."""
    b = OptimizerBuilder("adam", total_steps=total)
    b.sched_kind.value, b.warmup.value = kind, warmup
    named = int(re.search(r"to 0\.1× after step (\d+)", b.summary).group(1))
    lr = b.params.learning_rate
    assert b.schedule(named - 1) > 0.1 * lr  # the named step, optim-step named - 1: not yet the floor
    assert b.schedule(named) == b.schedule(named + 5) == 0.1 * lr  # the next one, and every one after: the floor
    assert b.get_schedule().misfit(named) == "" and b.get_schedule().past_end(named - 1) == ""
    assert b.get_schedule().misfit(named + 1).startswith(f"step {named + 1} of {named + 1} is past the end")
    b.close()


@pytest.mark.usefixtures("unplotted_schedule")  # reads no schedule plot
def test_the_builder_folds_to_one_line_that_says_what_will_be_sent():
    b = OptimizerBuilder("muon", total_steps=30)
    assert b.fold.selected_index is None  # folded by default: the summary is its title
    assert b.summary == "muon · lr 0.05, AdamW 0.002 · constant · preset Learns in 40 steps"
    # a schedule set in another cell (as notebook 05 does) shows on the line, not only inside the fold
    b.sched_kind.value, b.warmup.value = "cosine", 3
    unmeasured = " — lesson not measured for this schedule"  # measured at a constant rate (review39a F1)
    cosine = "cosine to 0.1× after step 30, warmup 3"
    assert b.summary == f"muon · lr 0.05, AdamW 0.002 · {cosine} · preset Learns in 40 steps{unmeasured}"
    b.muon["learning_rate"].value = 0.02
    assert "lr 0.02, AdamW 0.002" in b.summary and b.summary.endswith(
        f"preset Learns in 40 steps (modified){unmeasured}"
    )
    b.muon["momentum"].value = 1.5
    assert b.summary.startswith("✗ 1 problem — open to fix · muon · ") and "lr " not in b.summary
    b.kind = "adam"  # the Muon tab's edits are not sent: the Adam config sent is the preset's
    assert b.summary == f"adam · lr 0.002 · {cosine} · preset Learns in 40 steps{unmeasured}"
    assert OptimizerBuilder("adam", expanded=True).fold.selected_index == 0


def test_the_opener_beside_the_summary_opens_and_folds_the_form_and_follows_it():
    """The accordion's title takes no keyboard focus: a button beside it (Tab, Enter) does what a click on it does,
    and shows whether the form is open however it was opened (``test_browser_narrow`` presses it in Chromium)."""
    b = OptimizerBuilder("muon")
    assert b.opener in b.widget.children[1].children and b.opener.value is False
    b.opener.value = True
    assert b.fold.selected_index == 0
    b.opener.value = False
    assert b.fold.selected_index is None
    b.fold.selected_index = 0  # a click on the summary, or code
    assert b.opener.value is True
    b.fold.selected_index = None
    assert b.opener.value is False
    assert OptimizerBuilder("adam", expanded=True).opener.value is True
    b.json_opener.value = True  # the JSON body's fold has one too
    assert b.json.selected_index == 0
    b.json.selected_index = None
    assert b.json_opener.value is False


def test_the_schedule_line_numbers_the_next_step_as_the_steps_table_will(panel_session):
    """The line and its warning counted from 0 ("step 5 / 5 of the cosine schedule · lr 0.005", "step 5 is past the
    end"), the steps table and ``history.steps`` from 1: at one moment the panel showed two rates for "step 5"."""

    def ce_step(session, params):
        session.forward_backward([rlnb.samples.cross_entropy(list(b"a step"))])
        session.optim_step(params).result()

    builder = OptimizerBuilder("adam", total_steps=4)
    builder.sched_kind.value, builder.warmup.value = "cosine", 2
    panel = RunPanel(panel_session, builder, step_fn=ce_step, every=0.05)
    said = []
    for _ in range(6):
        line = re.sub("<[^>]+>", "", panel.schedule_line.value)
        number, lr = re.match(r"step (\d+) / (?:warmup )?\d+ .*· lr ≈?([\d.e-]+)$", line).groups()
        said.append((int(number), float(lr), list(panel.warnings)))
        panel.step_button.click()
        assert panel.join(60) and panel.error is None
    table = panel_session.history.steps
    assert [n for n, _, _ in said] == list(table.step) == [1, 2, 3, 4, 5, 6]
    assert [lr for _, lr, _ in said] == pytest.approx(list(table.learning_rate), rel=1e-3)  # the step named's rate
    first_past = next(n for n, _, warned in said if warned)
    assert first_past == 5 and said[4][2][0].startswith("⚠ step 5 is past the end of the cosine schedule")
    assert table.learning_rate[table.step == 5].item() == pytest.approx(2e-4)  # the floor: the first step past
    assert table.learning_rate[table.step == 4].item() > 2e-4
    panel.close()


def test_the_panel_shows_the_schedule_and_warns_once_past_its_end(panel_session):
    def ce_step(session, params):
        session.forward_backward([rlnb.samples.cross_entropy(list(b"a step"))])
        session.optim_step(params).result()

    builder = OptimizerBuilder("adam", total_steps=3)
    panel = RunPanel(panel_session, builder, step_fn=ce_step, every=0.05)
    assert "constant schedule · lr 0.002" in panel.schedule_line.value and panel.warnings == []
    builder.sched_kind.value = "linear"
    assert "step 1 / 3 of the linear schedule · lr 0.002" in panel.schedule_line.value
    panel.n.value = 5
    panel.run_button.click()
    assert panel.join(60) and panel_session.step == 5
    assert "step 6 / 3 of the linear schedule · lr 0.0002" in panel.schedule_line.value
    assert "#b45309" in panel.schedule_line.value  # orange past the end
    assert len(panel.warnings) == 1 and panel.warning.layout.display is None  # once, though 2 steps went past
    assert "step 4 is past the end of the linear schedule (total steps 3)" in panel.warnings[0]  # the floor from 4
    assert "0.1× the base rate (lr 0.0002)" in panel.warnings[0] and panel.warnings[0] in panel.warning.value
    sent = panel_session.history.steps.learning_rate
    assert list(sent) == pytest.approx([2e-3, 1.4e-3, 8e-4, 2e-4, 2e-4])  # the last two at the floor
    builder.total.value = 6  # raised: not past the end any more
    assert panel.warning.layout.display == "none" and "step 6 / 6" in panel.schedule_line.value
    panel.step_button.click()
    assert panel.join(60) and len(panel.warnings) == 1  # passed the new end: said once more, the current one only
    assert "(total steps 6)" in panel.warnings[0] and panel.warning.layout.display is None
    panel.close()


def test_an_edit_that_leaves_the_schedule_and_rate_alone_draws_no_new_plot(monkeypatch):
    import rlnb.widgets.describe as describe

    drawn = []
    png = describe.png
    monkeypatch.setattr(describe, "png", lambda fig: drawn.append(fig) or png(fig))
    describe.schedule_png.cache_clear()
    b = OptimizerBuilder("adam")
    assert len(drawn) == 1
    b.adam["beta1"].value = 0.8  # the preview and the summary change; the schedule's plot does not
    assert len(drawn) == 1 and '"beta1": 0.8' in b.preview.value
    b.adam["learning_rate"].text.value = 2 * b.params.learning_rate
    assert len(drawn) == 2


def test_on_change_callback():
    b = OptimizerBuilder("adam")
    seen = []
    b.on_change(lambda builder: seen.append(builder.valid))
    b.adam["beta2"].value = 2.0
    b.adam["beta2"].value = 0.9
    assert seen == [False, True]


# -- RunPanel ------------------------------------------------------------------------------------


@pytest.fixture
def panel_session():
    s = rlnb.Session(FakeBackend("adam"), record=False)
    yield s
    s.close()


def test_run_panel_step_sends_the_builder_params(panel_session):
    panel = RunPanel(panel_session, n_steps=5, every=0.05)
    panel.builder.adam["learning_rate"].text.value = 2e-3
    panel.step_button.click()
    panel.join(60)
    assert panel_session.step == 1 and panel.progress.value == 1 and panel.error is None
    ops = panel_session.history.df
    opt = ops[ops.kind == "optim-step"].iloc[-1]
    assert opt.status == "TRAINING_OPERATION_STATUS_COMPLETED" and opt.learning_rate == pytest.approx(2e-3)
    assert "reward" in panel_session.history.logged
    steps = panel.live.steps_table.value  # one row per optimizer step: reward, grad norm, lr
    assert re.search(r"<td[^>]*>1</td><td[^>]*>0\.\d+</td>", steps) and "0.002" in steps
    panel.live.tables.selected_index = 1  # the raw operations, one click away
    assert "optim-step" in panel.live.ops_table.value and "completed" in panel.live.ops_table.value
    assert "step 1" in panel.status.value
    panel.close()


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_run_panel_run_n_then_stop_stops_early(panel_session):
    started = []

    def slow_step(session, params):
        started.append(params.learning_rate)
        session.forward_backward([rlnb.samples.cross_entropy(list(b"slow step"))])
        session.optim_step(params).result()
        time.sleep(0.05)
        return {"n": float(len(started))}

    panel = RunPanel(panel_session, step_fn=slow_step, n_steps=500, every=0.05)
    panel.run_button.click()
    assert panel.running and panel.stop_button.disabled is False and panel.step_button.disabled
    while len(started) < 3:
        time.sleep(0.01)
    panel.stop_button.click()
    panel.join(60)
    assert not panel.running and 3 <= panel_session.step < 500
    assert "stopped early" in panel.status.value and panel.step_button.disabled is False
    assert list(panel_session.history.logged.n)[:3] == [1.0, 2.0, 3.0]
    panel.close()


def test_run_panel_shows_a_failed_operation_without_a_traceback():
    def failing_step(session, params):
        session.forward_backward([rlnb.samples.cross_entropy([1, 2, 3])]).result()

    session = rlnb.Session(FakeBackend(fail={"forward-backward": "INVALID_INPUT"}), record=False)
    panel = RunPanel(session, step_fn=failing_step, every=0.05)
    panel.run_button.click()
    panel.join(60)
    assert isinstance(panel.error, rlnb.OperationFailed)
    assert "INVALID_INPUT" in panel.status.value and "fails forward-backward at step 0" in panel.status.value
    assert "Traceback" not in panel.status.value
    panel.close()
    session.close()


def test_the_panel_trains_and_probes_the_verifiable_task_by_default(panel_session):
    panel = RunPanel(panel_session, every=0.05)
    finder = panel.builder.lr_finder
    assert panel.task.name == "first_letter" and step_options(panel.builder, finder.options, None)["task"] is panel.task
    mine = rlnb.tasks.addition_task()
    other = RunPanel(panel_session, OptimizerBuilder(panel_session.optimizer), task=mine, every=0.05)
    assert step_options(other.builder, other.builder.lr_finder.options, None)["task"] is mine
    panel.close()
    other.close()


def test_run_panel_buttons_follow_validation(panel_session):
    panel = RunPanel(panel_session, every=0.05)
    panel.builder.adam["beta1"].value = 3.0
    assert panel.step_button.disabled and panel.run_button.disabled
    panel.step_button.click()  # a disabled button's click is refused by the panel too
    assert panel_session.step == 0
    panel.builder.adam["beta1"].value = 0.9
    assert not panel.step_button.disabled
    panel.close()


def test_run_panel_shows_every_exception_of_a_step(panel_session):
    def broken_step(session, params):
        raise ValueError("my reward function broke")

    panel = RunPanel(panel_session, step_fn=broken_step, every=0.05)
    assert panel.start(3)
    assert panel.join(60)
    assert isinstance(panel.error, ValueError) and not panel.running
    assert "ValueError" in panel.status.value and "my reward function broke" in panel.status.value
    assert not panel.step_button.disabled and panel.stop_button.disabled
    panel.close()


def test_a_step_or_range_test_that_exits_is_shown_not_lost(panel_session, monkeypatch):
    """A step whose code calls ``sys.exit`` (argparse reading the kernel's argv raises ``SystemExit(2)``): the run's
    thread ended silently (threading ignores SystemExit), the status line stayed green and ``error`` None."""
    import rlnb.sweep

    def exiting(*_args, **_kwargs):
        raise SystemExit(2)

    panel = RunPanel(panel_session, step_fn=exiting, every=0.05)
    assert panel.start(3)
    assert panel.join(60)
    assert isinstance(panel.error, SystemExit) and "<b>SystemExit</b> — 2" in panel.status.value
    assert "#b00020" in panel.status.value and not panel.running and not panel.step_button.disabled
    monkeypatch.setattr(rlnb.sweep, "lr_find", exiting)
    finder = panel.builder.lr_finder
    finder.button.click()
    assert finder.join(30) and isinstance(finder.error, SystemExit) and "SystemExit: 2" in finder.status.value
    panel.close()


def test_run_panel_stops_on_a_figure_named_like_a_steps_column(panel_session):
    """A step function returning ``loss`` (the forward-backwards' own column) stops the run, saying so; the
    steps table still builds."""
    panel = RunPanel(panel_session, step_fn=lambda s, p: {"loss": 0.5}, every=0.05)
    assert panel.start(3)
    assert panel.join(60)
    assert isinstance(panel.error, ValueError) and "'loss' is a column of the steps table" in panel.status.value
    assert panel_session.history.logged.empty and "loss" in panel_session.history.steps
    panel.close()


@pytest.mark.parametrize(
    "returned, said", [(0.5, "float 0.5"), ([("acc", 1.0)], "list [('acc', 1.0)]"), ({5: 1.0}, "dict {5: 1.0}")]
)
def test_run_panel_names_the_step_function_that_returns_no_dict_of_figures(panel_session, returned, said):
    """A ``step_fn`` returning the loss as a bare number: "History.log() argument after ** must be a mapping, not
    float" (or "keywords must be strings" for a number as a name), naming neither ``step_fn`` nor the fix."""
    panel = RunPanel(panel_session, step_fn=lambda s, p: returned, every=0.05)
    assert panel.start(3)
    assert panel.join(60)
    assert isinstance(panel.error, TypeError)
    assert str(panel.error).startswith("step_fn must return None or a dict of figures to log")
    assert str(panel.error).endswith(f"got {said}") and "step_fn must return" in panel.status.value
    panel.close()


@pytest.mark.parametrize(
    "option, value, said",
    [
        (
            "n_steps",
            2.5,
            rf"n_steps must be an integer in \[1, {MAX_STEPS}\], got 2.5",
        ),  # taken as 2
        ("n_steps", 0, rf"n_steps must be an integer in \[1, {MAX_STEPS}\], got 0"),  # total steps 0 and no Run
        (
            "n_steps",
            MAX_STEPS + 1,
            rf"n_steps must be an integer in \[1, {MAX_STEPS}\] .*, got {MAX_STEPS + 1}",
        ),  # taken
        ("every", math.inf, r"every must be a finite number of seconds in \[0, 86400\], got inf"),  # a frozen view
        # accepted; Run then failed "'str' object has no attribute 'group_size'" / "'str' object is not callable"
        ("task", "first_letter", r"task must be a Task, such as first_letter_task\(\), or None .*got 'first_letter'"),
        ("task", lambda prompt, completion: 1.0, "task must be a Task"),
        ("step_fn", "ce", "step_fn must be None or a function step_fn\\(session, params\\), got 'ce'"),
        # lr_find's kind (session, params, i): Run failed its first step, "missing 1 required positional argument"
        ("step_fn", lambda session, params, i: 0.0, "step_fn must be None or a function step_fn\\(session, params\\)"),
        ("builder", rlnb.AdamParams(), "builder must be an OptimizerBuilder or None, got AdamParams"),  # no 'lock'
    ],
)
@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_run_panel_refuses_bad_options_before_it_touches_the_builder(panel_session, muon_session, option, value, said):
    b = OptimizerBuilder("muon")
    held = RunPanel(muon_session, b, every=0.05)  # the builder is the muon session's panel's
    with pytest.raises(ValueError if option in ("n_steps", "every") else TypeError, match=said):
        RunPanel(panel_session, **{"builder": b, option: value})
    assert b.locked == "muon" and b.lr_finder.session is muon_session and b.panel is held  # not taken by the refused
    held.close()


def test_run_panel_refuses_a_task_beside_a_step_fn_naming_both():
    """``RunPanel(session, task=..., step_fn=...)``: the step_fn runs and reads no task, so the task was dropped in
    silence (the person believed the panel trained on it), as ``lr_find`` refuses the pair."""
    both = r"task= and step_fn= both say what a step of the panel runs .*: pass one"
    with rlnb.Session(FakeBackend("adam"), record=False) as session, pytest.raises(ValueError, match=both):
        RunPanel(session, task=first_letter_task(), step_fn=lambda session, params: None)


def test_run_panel_and_find_lr_take_turns_on_the_session(panel_session):
    """A range test checkpoints the panel's session and trains beside it: while a run goes, Find LR waits
    (disabled, saying why); while a range test goes, Step and Run wait."""
    release = threading.Event()
    panel = RunPanel(panel_session, step_fn=lambda s, p: release.wait(30) and None, every=0.05)
    finder = panel.builder.lr_finder
    assert panel.start(1)
    assert finder.button.disabled and "Find LR waits: a run is going" in finder.status.value
    finder.button.click()
    assert not finder.running  # refused while the run goes
    release.set()
    assert panel.join(60) and not finder.button.disabled and "waits" not in finder.status.value
    release.clear()
    finder.run = lambda: release.wait(30)  # a range test that takes its time
    finder.options["objective"] = "loss"  # the step_fn returns nothing: Find LR refused to probe it, told nothing
    finder.button.click()
    assert finder.running and panel.step_button.disabled and panel.run_button.disabled
    assert panel.start(1) is False and "Find LR is running on this session" in panel.status.value
    release.set()
    finder.join(60)
    assert not finder.running and not panel.step_button.disabled and not panel.run_button.disabled
    panel.close()


def test_run_panel_refuses_a_bool_or_non_integer_n_and_a_start_after_close(panel_session):
    panel = RunPanel(panel_session, step_fn=lambda s, p: {"x": 1.0}, every=0.05)
    for n in (True, False, 2.0, "3", 0, -1):
        assert panel.start(n) is False and not panel.running  # True is not one step
        said = str(panel.error)
        assert isinstance(panel.error, ValueError) and said.startswith(f"N must be an integer in [1, {MAX_STEPS}]")
        assert said.endswith(f"got {n!r}")
        assert "not started" in panel.status.value
    assert panel_session.step == 0
    panel.close()
    with pytest.raises(RuntimeError, match="this RunPanel is closed"):
        panel.start(1)
    assert panel_session.step == 0 and not panel.running


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_join_and_close_wait_for_the_end_of_the_run(panel_session):
    panel = RunPanel(panel_session, step_fn=lambda s, p: {"x": 1.0}, every=0.05)
    refresh, finished = panel.live.refresh, []

    def slow_last_refresh():
        time.sleep(0.4)
        refresh()
        finished.append(True)

    panel.live.refresh = slow_last_refresh
    panel.start(1)
    deadline = time.monotonic() + 30
    while "1 done" not in panel.status.value:  # the step is over; the run's last redraw is not
        assert time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(0.05)
    ended = panel.join(30)
    assert finished == [True]  # join() returned after the run's last redraw, not before
    assert ended and not panel.running
    panel.close()


def test_close_has_a_deadline_while_a_step_hangs(panel_session):
    release = threading.Event()
    panel = RunPanel(panel_session, step_fn=lambda s, p: release.wait(30) and None, every=0.05)
    panel.start(1)
    with pytest.raises(TimeoutError, match="still going"):
        panel.close(timeout=0.2)
    release.set()
    panel.close()
    assert not panel.running


@pytest.fixture
def muon_session():
    s = rlnb.Session(FakeBackend("muon"), record=False)
    yield s
    s.close()


def test_the_tab_of_the_other_optimizer_is_disabled_and_says_why(muon_session):
    panel = RunPanel(muon_session, every=0.05)
    b = panel.builder
    assert b.kind == "muon" and b.tabs.get_title(0) == "Adam (locked)"
    assert all(c.disabled for c in b.adam.values())
    b.tabs.selected_index = 0  # a person clicks the Adam tab
    assert not b.valid and "this session's optimizer is muon" in b.message.value
    assert panel.step_button.disabled and panel.run_button.disabled
    assert panel.start(1) is False and "this session's optimizer is muon" in panel.status.value
    assert len(muon_session.history) == 0  # nothing was submitted: no orphan forward-backward
    b.tabs.selected_index = 1
    assert b.valid and not panel.step_button.disabled
    panel.step_button.click()
    assert panel.join(60) and panel.error is None and muon_session.step == 1
    panel.close()


def test_rl_step_checks_the_params_before_it_submits_anything(muon_session):
    with pytest.raises(TypeError, match="this session's optimizer is muon: pass MuonParams, not AdamParams"):
        rl_step(muon_session, digits_task(), rlnb.AdamParams(learning_rate=1e-3))
    assert len(muon_session.history) == 0


@pytest.mark.parametrize("n", [0, -3, 2.5, MAX_STEPS + 1, 10**30])
def test_n_out_of_range_is_refused_not_clamped(panel_session, n):
    """Past ``MAX_STEPS`` too, the one bound of every entry that runs steps: N had no upper bound (10**12 was taken,
    a run whose later steps would sample with the next seed's seeds). The seed-stride reason explains the top bound
    only, and is said only past it (review42c L5: N = 0 gave it too)."""
    panel = RunPanel(panel_session, every=0.05)
    panel.n.value = n
    assert panel.n.value == n and panel.run_button.disabled and INVALID in panel.n._dom_classes
    why = "(step i of seed s samples with seed s * 1000003 + i: more steps would sample with the next seed's seeds)"
    said = f"N must be an integer in [1, {MAX_STEPS}]" + (f" {why}" if n > MAX_STEPS else "") + f", got {n}"
    assert html.unescape(re.sub(r"<[^>]+>", "", panel.status.value)) == said
    assert panel.status.value.endswith(f"got {n}</span>")
    assert panel.start(n) is False and panel_session.step == 0 and str(panel.error).endswith(f"got {n}")
    panel.n.value = MAX_STEPS  # the bound itself is a run's N
    assert not panel.run_button.disabled and "ready" in panel.status.value
    panel.close()


def test_the_panel_is_compact_and_made_for_rl(panel_session):
    panel = RunPanel(panel_session, every=0.05)
    top = panel.widget.children[0]
    assert panel.step_button in top.children and panel.run_button in top.children  # above the fold
    assert panel.builder.json.selected_index is None  # the JSON body starts collapsed
    assert list(panel.live.panels) == ["reward", "grad_norm"]  # no GRPO loss (≈0 by construction)
    panel.close()
    custom = RunPanel(panel_session, step_fn=lambda s, p: {"accuracy": 0.5}, every=0.05)
    assert "loss" in custom.live.panels
    custom.step_button.click()
    assert custom.join(60)
    custom.live.refresh()
    assert "accuracy" in custom.live.panels  # every figure the step returns gets its panel
    custom.close()


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_the_panel_draws_the_held_out_accuracy_its_steps_measure(panel_session):
    """Notebook 05 and docs/tasks.md: the panel measures the held-out accuracy every 10 steps and the live view
    draws it beside the reward. It was drawn nowhere: seen for one step in the status line, then gone."""
    panel = RunPanel(panel_session, every=0.05)
    assert panel.start(10) and panel.join(60) and panel.error is None
    panel.live.refresh()
    reward = panel.live.panels["reward"]
    x, y = reward.lines[EVAL_ACCURACY].get_data()
    logged = panel_session.history.logged[EVAL_ACCURACY].dropna().tolist()
    assert list(x) == [10] and list(y) == logged and len(logged) == 1
    assert reward.lines[EVAL_ACCURACY].get_visible() and reward.ax.get_legend() is not None
    assert list(panel.live.panels) == ["reward", "grad_norm"]  # on the reward's axes: the panel still fits a laptop
    panel.close()


def test_notebook_05_says_what_the_panels_live_view_draws(panel_session):
    """Notebook 05 said the live view shows the learning rate: the panel draws no such plot (two plots side by
    side keep it on a laptop's screen: a third, measured in Lab, made it 800 px tall during a run, over 700); the
    rate is in the schedule line and the steps table's lr column."""
    cells = json.loads((Path(__file__).parents[2] / "notebooks" / "05-widgets.ipynb").read_text())["cells"]
    said = next(t for t in ("".join(c["source"]) for c in cells) if "The live view draws" in t)
    drawn = said.split("The live view draws")[1].split("— not")[0]
    assert "reward" in drawn and "held-out accuracy" in drawn and "gradient norm" in drawn
    assert "learning" not in drawn and "rate is in the line beside the status" in said and "`lr` column" in said
    panel = RunPanel(panel_session, every=0.05)
    assert panel.start(1) and panel.join(60)
    panel.live.refresh()
    assert list(panel.live.panels) == ["reward", "grad_norm"]
    assert ">lr</th>" in panel.live.steps_table.value and "lr " in panel.schedule_line.value
    panel.close()


# -- the builder's small ones ----------------------------------------------------------------------


def test_slider_values_are_rounded_for_display():
    b = OptimizerBuilder("adam")
    b.adam["learning_rate"].slider.value = 10**-0.5
    assert b.adam["learning_rate"].text.value == 0.316 and b.params.learning_rate == 0.316
    assert '"learning_rate": 0.316,' in b.preview.value


def test_the_bad_field_itself_turns_red():
    b = OptimizerBuilder("muon")
    b.muon["momentum"].value = 1.5
    b.muon_adam["beta2"].value = -0.5
    marked = {n for n, c in b.muon.items() if INVALID in getattr(c, "_dom_classes", ())}
    marked |= {"adam." + n for n, c in b.muon_adam.items() if INVALID in getattr(c, "_dom_classes", ())}
    assert marked == {"momentum", "adam.beta2"}  # both parts are checked, every bad field is named
    assert "MuonParams.momentum = 1.5" in b.message.value and "MuonParams.adam.beta2 = -0.5" in b.message.value
    b.muon_adam["learning_rate"].text.value = -1.0
    assert INVALID in b.muon_adam["learning_rate"].text._dom_classes
    b.muon["momentum"].value, b.muon_adam["beta2"].value, b.muon_adam["learning_rate"].text.value = 0.9, 0.95, 1e-3
    assert b.valid and INVALID not in b.muon["momentum"]._dom_classes


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_a_preset_shows_modified_once_edited():
    b = OptimizerBuilder("adam")
    assert b.preset.value == DEFAULT_PRESET and not b.modified
    b.warmup.value = 3  # the schedule is not part of a preset
    assert not b.modified
    b.adam["beta1"].value = 0.8
    assert b.modified and b.preset.value == f"{DEFAULT_PRESET} (modified)"
    b.adam["beta1"].value = 0.9  # back to the preset's value
    assert not b.modified and b.preset.value == DEFAULT_PRESET
    b.adam["beta1"].value = 0.8
    b.preset.value = DEFAULT_PRESET  # picking it again restores it
    assert not b.modified and b.adam["beta1"].value == 0.9 and list(b.preset.options) == list(PRESETS)


@pytest.mark.usefixtures("unplotted_schedule")  # reads no schedule plot
def test_each_preset_says_what_to_expect_for_the_optimizer_shown():
    """Together's example and Keller Jordan's defaults are about one optimizer each: an Adam session was told
    "lr 1e-4 is far too small" under Muon 0.02, a Muon one "AdamW at 3e-4 holds the head back" of plain AdamW."""
    assert set(LESSONS) == set(PRESETS)
    for kind in ("adam", "muon"):
        b = OptimizerBuilder(kind)
        for name in PRESETS:
            b.preset.value = name
            assert html.escape(LESSONS[name].text(kind), quote=False) in b.lesson.value
    b = OptimizerBuilder("adam", preset="Keller Jordan Muon")
    assert "AdamW lr 0.0003" in b.lesson.value and "here on every weight" in b.lesson.value
    b.kind = "muon"  # the tab switched: its lesson
    assert "Muon lr 0.02, AdamW 0.0003" in b.lesson.value and "every weight" not in b.lesson.value
    assert "Together's example for Adam (AdamW lr 0.0001" in LESSONS["Together docs"].text("adam")
    assert LESSONS["Together docs"].text("muon").startswith("Muon lr 0.02, AdamW 0.0001 for the rest")
    with pytest.raises(ValueError, match="kind must be one of adam, muon, got 'sgd'"):
        LESSONS[DEFAULT_PRESET].text("sgd")


def test_too_high_counts_only_a_non_finite_loss_as_the_collapse():
    """Any failure passed the lesson: a run refused as INVALID_INPUT, or a worker out of memory, at step 1 is no
    sign that the rate was too high; only a non-finite loss is (review36c)."""
    chance = first_letter_task().chance
    for code in [*wire.OperationErrorCode, wire.OperationStatus.FAILED.name]:  # FAILED.name: no code given (train)
        run = LessonRun(accuracy={0: 0.0}, rewards=[], failed=code)
        assert LESSONS[TOO_HIGH].holds(run, chance) is (code is wire.OperationErrorCode.NON_FINITE_LOSS), code
    assert "non-finite" in LESSONS[TOO_HIGH].text("adam") and "the run fails" not in LESSONS[TOO_HIGH].text("adam")


def test_each_lesson_text_claims_what_its_check_verifies():
    """The "Too high" text said "held-out accuracy ends at chance or below" while its check allows chance + 0.1;
    "stays below 0.05 for 40 steps" while the check reads the mean of the last 5 steps."""
    chance = first_letter_task().chance
    edge = LessonRun(accuracy={40: chance + 0.1}, rewards=[0.3] * 40, distinct=1.5)
    assert LESSONS[TOO_HIGH].holds(edge, chance)  # what the check lets through, the text must allow
    early = LessonRun(accuracy={40: 0.3}, rewards=[0.5] + [0.0] * 39, distinct=3.0)
    assert LESSONS["Together docs"].holds(early, chance)  # a reward of 0.5 at step 1 passes
    for kind in ("adam", "muon"):
        text = LESSONS[TOO_HIGH].text(kind)
        assert "≤ 0.35 (chance 0.25 + 0.1)" in text and "chance or below" not in text
        assert "at most 1.5 distinct completions per group of 16" in text and "non-finite" in text
        for name in ("Together docs", "Keller Jordan Muon"):
            said = LESSONS[name].text(kind)
            assert "stays" not in said and "at step 40 the training reward (the mean of the last 5 steps)" in said
        assert "held-out accuracy ≥ 0.8 and training reward (the mean of the last 5 steps) ≥ 0.4" in (
            LESSONS[DEFAULT_PRESET].text(kind)
        )


def test_valid_is_never_shown_next_to_an_error():
    b = OptimizerBuilder("adam")
    b.min_ratio.value = 0.0
    assert "min_lr_ratio" in b.message.value and "valid" not in b.message.value.replace("invalid", "")
    assert INVALID in b.min_ratio._dom_classes


def test_ns_steps_keeps_what_was_typed():
    b = OptimizerBuilder("muon")
    b.muon["newton_schulz_steps"].value = 2.5
    assert b.muon["newton_schulz_steps"].value == 2.5  # not 25, not 2
    assert any("MuonParams.newton_schulz_steps = 2.5 is invalid: must be an integer" in e for e in b.errors)
    b.muon["newton_schulz_steps"].value = 3
    assert b.valid and b.params.newton_schulz_steps == 3 and isinstance(b.params.newton_schulz_steps, int)
    b.muon["newton_schulz_steps"].value = 1e300  # as an int, a 301-digit number in the error line and the summary
    assert b.errors[0].startswith("MuonParams.newton_schulz_steps = 1e+300 is invalid") and len(b.errors[0]) < 200


def test_warmup_longer_than_the_run_is_refused():
    with pytest.raises(ValueError, match=r"warmup_steps = 50 is invalid: must be <= total_steps \(30\)"):
        Schedule("cosine", warmup_steps=50, total_steps=30)
    b = OptimizerBuilder("adam", total_steps=30)
    b.warmup.value = 50
    assert not b.valid and INVALID in b.warmup._dom_classes


def test_a_second_panel_on_a_session_waits_for_the_first_ones_run_and_its_stop_ends_it(panel_session):
    """Running the cell ``panel = RunPanel(session)`` again makes a new panel while the old one's run goes on,
    out of sight: two runs interleaved their operations on the session (a sample of one, the forward-backward
    and optim-step of the other)."""
    release, steps = threading.Event(), []

    def blocking_step(session, params):
        steps.append(session.step)
        release.wait(30)
        session.forward_backward([rlnb.samples.cross_entropy(list(b"a step"))])
        session.optim_step(params).result()

    old = RunPanel(panel_session, step_fn=blocking_step, every=0.05)
    assert old.start(50)
    new = RunPanel(panel_session, step_fn=blocking_step, every=0.05)  # the same cell, run again
    assert new.start(1) is False and isinstance(new.error, RuntimeError) and not new.running
    assert "a run of another RunPanel is going on this session" in new.status.value
    new.builder.lr_finder.button.click()
    assert not new.builder.lr_finder.running and "Find LR waits" in new.builder.lr_finder.status.value
    assert not new.stop_button.disabled  # the only Stop on screen reaches the old run
    new.stop_button.click()
    release.set()
    assert old.join(60) and "stopped early after 1 of 50" in old.status.value
    assert panel_session.step == 1 and steps == [0]
    assert new.start(1) and new.join(60) and new.error is None and panel_session.step == 2
    old.close()
    new.close()


def test_the_status_says_running_from_the_start_not_the_last_runs_error(panel_session):
    """Until its first step ended, a new run's status line still showed the last run's red error (or "ready")."""
    release, calls = threading.Event(), []

    def step(session, params):
        calls.append(session.step)
        if len(calls) == 1:
            raise ValueError("my reward function broke")
        release.wait(30)

    panel = RunPanel(panel_session, step_fn=step, every=0.05)
    assert panel.start(1) and panel.join(60) and "my reward function broke" in panel.status.value
    assert panel.start(5) and panel.running
    assert "running: 0/5 done" in panel.status.value and "broke" not in panel.status.value
    assert "#b00020" not in panel.status.value
    panel.stop()
    release.set()
    assert panel.join(60)
    panel.close()


@pytest.mark.slow  # ten RL steps and a held-out check through the panel (~3 s)
def test_the_default_step_logs_each_figure_once(panel_session):
    """rl_step logs the step's reward, and the panel logged it again: two rows per step in history.logged, the
    run folder and every sink."""
    panel = RunPanel(panel_session, every=0.05)
    assert panel.start(10) and panel.join(120) and panel.error is None
    logged = panel_session.history.logged
    assert list(logged.step[logged.reward.notna()]) == list(range(1, 11))
    assert list(logged.step[logged["eval/accuracy"].notna()]) == [10]  # the held-out check, every 10 steps
    panel.close()


def test_a_kind_that_is_no_optimizer_is_refused_not_taken_for_muon():
    b = OptimizerBuilder("adam")
    for kind in ("Adam", "adamw", "sgd", None):
        with pytest.raises(ValueError, match=f"kind must be one of adam, muon, got {kind!r}"):
            b.kind = kind  # "Adam" selected the Muon tab
        assert b.kind == "adam" and "adam_params" in preview_json(b)
    b.kind = "muon"
    assert b.kind == "muon"


def test_apply_preset_of_a_name_that_is_no_preset_names_the_presets():
    """``b.apply_preset(b.preset.value)`` after an edit (the dropdown then reads "<preset> (modified)"), or a
    misspelt name: a bare ``KeyError`` from the presets' dict."""
    b = OptimizerBuilder("adam")
    b.adam["learning_rate"].value = 0.0123
    before = preview_json(b)
    for name in (b.preset.value, "nope", None):
        said = f"preset must be one of '{re.escape(DEFAULT_PRESET)}'.*got {re.escape(repr(name))}"
        with pytest.raises(ValueError, match=said):
            b.apply_preset(name)
        assert preview_json(b) == before  # the form is as it was
    with pytest.raises(ValueError, match="preset must be one of"):
        OptimizerBuilder("adam", preset=["x"])  # an unhashable name: TypeError from the dict
    b.apply_preset(DEFAULT_PRESET)
    assert not b.modified


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_a_builder_locked_again_to_another_session_unlocks_its_tab(panel_session, muon_session):
    """A builder given to an Adam session's panel, then to a Muon session's: every control stayed disabled and
    both tabs said locked."""
    b = OptimizerBuilder("adam")
    first = RunPanel(panel_session, b, every=0.05)
    second = RunPanel(muon_session, b, every=0.05)
    assert b.kind == "muon" and (b.tabs.get_title(0), b.tabs.get_title(1)) == ("Adam (locked)", "Muon")
    assert not any(c.disabled for c in [*b.muon.values(), *b.muon_adam.values()])
    assert all(c.disabled for c in b.adam.values())
    second.step_button.click()
    assert second.join(60) and second.error is None and muon_session.step == 1
    first.close()
    second.close()


def test_a_figure_named_with_markup_shows_as_its_name(panel_session):
    release = threading.Event()

    def step(session, params):
        if session.history.logged.empty:
            return {"acc<b>test</b> & more": 0.5}
        release.wait(30)

    panel = RunPanel(panel_session, step_fn=step, every=0.05)
    assert panel.start(2)
    deadline = time.monotonic() + 60
    while "1/2 done" not in panel.status.value:
        assert time.monotonic() < deadline and panel.running, panel.status.value
        time.sleep(0.01)
    assert "acc&lt;b&gt;test&lt;/b&gt; &amp; more 0.5" in panel.status.value
    release.set()
    assert panel.join(60)
    panel.close()


def test_find_lr_run_from_a_cell_waits_for_the_panels_run_too(panel_session):
    """The button is refused while a run goes; lr_finder.run() from a cell (the kernel is free during a run)
    checkpointed the running session and trained beside it."""
    release = threading.Event()
    panel = RunPanel(panel_session, step_fn=lambda s, p: release.wait(30) and None, every=0.05)
    assert panel.start(1)
    with pytest.raises(RuntimeError, match="Find LR waits: a run is going on this session"):
        panel.builder.lr_finder.run()
    release.set()
    assert panel.join(60)
    assert [op for op in panel_session.history.df.kind] == []  # nothing was checkpointed or sent
    panel.close()


def test_find_lr_run_from_a_cell_waits_for_the_buttons_range_test(panel_session, monkeypatch):
    """lr_finder.run() from a cell while the Find LR button's test goes (the kernel is free meanwhile): a second
    range test copied the session and trained beside the first, and the first one's end cleared the stop."""
    import rlnb.sweep

    release, calls = threading.Event(), []
    monkeypatch.setattr(rlnb.sweep, "lr_find", lambda *a, **k: calls.append(a) or release.wait(30) and None)
    panel = RunPanel(panel_session, every=0.05)
    finder = panel.builder.lr_finder
    finder.button.click()
    assert finder.running
    with pytest.raises(RuntimeError, match=r"Find LR waits: a range test is going \(the Find LR button's\)"):
        finder.run()
    release.set()
    assert finder.join(30) and len(calls) == 1
    panel.close()


def test_the_schedule_plot_of_a_billion_steps_is_drawn_from_a_few_hundred(monkeypatch):
    """The plot evaluated every step: 0.65 s per edit at a million total steps, a hung kernel at a billion (a
    finger held on 0 in the total steps box)."""
    import rlnb.widgets.describe as describe

    calls, call = [], Schedule.__call__
    monkeypatch.setattr(Schedule, "__call__", lambda self, step, base: calls.append(step) or call(self, step, base))
    describe.schedule_png.cache_clear()
    b = OptimizerBuilder("adam")
    b.sched_kind.value, b.warmup.value = "cosine", 3
    calls.clear()
    b.total.value = 10**6
    assert 0 < len(calls) <= describe.PLOT_STEPS + 2 and {0, 3, 10**6, 1_100_000} <= set(calls)
    b.total.value = MAX_STEPS  # the longest a schedule may be (a run's most steps)
    assert b.valid and b.schedule_plot.value[:8] == b"\x89PNG\r\n\x1a\n" and f"after step {MAX_STEPS}" in b.summary


def test_the_schedule_plot_of_the_largest_total_steps_plots_no_negative_step(monkeypatch):
    """``total steps`` 2**63 - 1 (the box takes it): numpy's int64 cast of the evenly spaced steps wrapped the last
    ones to -2**63 ("invalid value encountered in cast"), plotted as the curve's start. ``Schedule`` now refuses a
    total past a run's most steps (``MAX_STEPS``): the form says so, and its observer raises nothing."""
    import rlnb.widgets.describe as describe

    calls, call = [], Schedule.__call__
    monkeypatch.setattr(Schedule, "__call__", lambda self, step, base: calls.append(step) or call(self, step, base))
    describe.schedule_png.cache_clear()
    b = OptimizerBuilder("adam")
    b.sched_kind.value = "cosine"
    calls.clear()
    b.total.value = MAX_STEPS
    assert b.valid and calls and min(calls) == 0 and max(calls) == int(MAX_STEPS * 1.1) and MAX_STEPS in calls
    for total in (2**63 - 1, 10**30, 10**400):  # numpy's linspace raised UFuncTypeError from the observer at 10**30
        b.total.value = total
        assert not b.valid and f"<= {MAX_STEPS} (the most steps a run takes)" in b.errors[0]
    for total in (2.5, "10", math.nan, 0, MAX_STEPS + 1):  # 2.5 was taken as 2, "10" as 10; NaN was a TraitError
        # past MAX_STEPS the form opened marked invalid
        rule = f"total_steps must be an integer in [1, {MAX_STEPS}] (the most steps a run takes), got "
        with pytest.raises(ValueError, match=re.escape(rule + repr(total))):
            OptimizerBuilder("adam", total_steps=total)
    assert OptimizerBuilder("adam", total_steps=MAX_STEPS).valid


def test_a_remote_server_that_goes_away_mid_run_is_said_in_the_status(monkeypatch):
    """The run's error handler read the session's step, a GET to the server that had just gone: that failed too,
    escaped the run's thread (to the kernel's log) and the status line still said the last step went well."""

    class Dying(FakeAPI):
        dead = False

        def __call__(self, request):
            if self.dead:
                raise httpx.ConnectError("connection refused")
            return super().__call__(request)

    escaped, hook = [], threading.excepthook
    monkeypatch.setattr(threading, "excepthook", lambda args: escaped.append(args.exc_value) or hook(args))
    fake = Dying()
    session = rlnb.connect(BASE, api_key=KEY, transport=httpx.MockTransport(fake), ready_timeout=5,
                           poll_failure_window=2, **FAST_POLL, **quick({}))  # fmt: skip

    def step(session, params):
        session.forward_backward([rlnb.samples.cross_entropy([1, 2, 3, 4])])
        session.optim_step(params).result()
        fake.dead = session.step >= 2  # the server goes away after the second step
        return {"x": 1.0}

    panel = RunPanel(session, step_fn=step, every=0.05)
    assert panel.start(5) and panel.join(60)
    assert isinstance(panel.error, rlnb.APIConnectionError) and escaped == []
    assert "#b00020" in panel.status.value and "stopped: <b>APIConnectionError</b>" in panel.status.value
    assert "connection refused" in panel.status.value and KEY not in panel.status.value
    panel.close()
    fake.dead = False  # back, to stop the session
    session.close()


@pytest.mark.slow  # a remote session's run, then a stop against retries (~1-2 s)
def test_editing_the_form_asks_no_server_for_the_step():
    """Each edit read the session's step, a GET on the kernel's thread: against a server that had gone, one edit
    took ~13 s of retries and then raised from the field's observer. The panel shows the step it last read."""
    fake = FakeAPI()
    session = rlnb.connect(BASE, api_key=KEY, transport=httpx.MockTransport(fake), ready_timeout=5, **FAST_POLL)

    def step(session, params):
        session.forward_backward([rlnb.samples.cross_entropy([1, 2, 3, 4])])
        session.optim_step(params).result()
        return {"x": 1.0}

    panel = RunPanel(session, step_fn=step, every=0.05)
    assert panel.start(2) and panel.join(60) and panel.error is None
    asked = []
    fake.route = lambda request: asked.append(request) or httpx.Response(503)  # type: ignore[method-assign]
    panel.builder.adam["beta1"].value = 0.8
    panel.n.value = 7
    assert asked == [] and "step 2 · ready" in panel.status.value
    panel.close()
    del fake.route  # the class's own again, to stop the session
    session.close()


@pytest.mark.slow  # one RL step in the second panel (~1-2 s)
def test_closing_a_panel_leaves_a_builder_it_was_given_open_and_free(panel_session):
    """panel.close() closed every widget of a builder the user had passed in: it could not be shown again."""
    b = OptimizerBuilder("adam")
    panel = RunPanel(panel_session, b, every=0.05)
    panel.close()
    assert panel.step_button.comm is None and panel.live.widget.comm is None
    assert b.widget.comm is not None and b.tabs.comm is not None
    panel._sync_buttons = lambda: pytest.fail("a closed panel still follows the builder")  # type: ignore[method-assign]
    b.adam["beta1"].value = 0.8
    assert b.valid and b.lr_finder.busy() is None
    again = RunPanel(panel_session, b, every=0.05)  # given to a new panel, it works there
    assert again.start(1) and again.join(60) and again.error is None
    again.close()
    own = RunPanel(panel_session, every=0.05)
    own.close()
    assert own.builder.widget.comm is None  # a panel's own builder goes with it


def test_a_closed_session_is_refused_at_start():
    s = rlnb.Session(FakeBackend("adam"), record=False)
    panel = RunPanel(s, every=0.05)
    s.close()
    assert s.closed and not panel.start(3)  # accepted before, then failed at its first step
    assert isinstance(panel.error, rlnb.SessionClosed) and "is closed: connect a new one" in panel.status.value
    panel.close()


def test_a_rate_near_the_largest_float_leaves_the_form_up_to_date(panel_session):
    """lr 1e308 (valid for the API): drawing its schedule raised from the field's observer, before the summary,
    Find LR and the panel's buttons were updated, so the summary still named the rate before. A builder on its own
    takes it (no weights to refuse it); a panel's on a local session refuses it, naming the field, its weights' float32
    too small for the step (tests/widgets/test_engine_refusals.py)."""
    b = OptimizerBuilder("adam")
    b.adam["learning_rate"].value = -1.0
    assert not b.valid
    b.adam["learning_rate"].value = 1e308
    assert b.valid and "lr 1e+308" in b.summary
    assert b.schedule_plot.layout.display == "none"  # no plot rather than a wrong one
    b.adam["learning_rate"].value = 1e-3
    assert b.schedule_plot.layout.display is None and "lr 0.001" in b.summary
    b.close()
    panel = RunPanel(panel_session, every=0.05)
    panel.builder.adam["learning_rate"].value = 1e308
    assert "AdamParams.learning_rate is too large" in panel.builder.message.value and panel.run_button.disabled
    panel.builder.adam["learning_rate"].value = 1e-3
    assert "lr 0.001" in panel.builder.summary and not panel.run_button.disabled
    panel.close()

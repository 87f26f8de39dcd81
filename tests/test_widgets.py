"""Widgets driven as a person would, through `.value` and `.click()`."""

import json
import re

import pytest

import rlnb
from rlnb.schedule import Schedule
from rlnb.widgets import PRESETS, OptimizerBuilder


def preview_json(b: OptimizerBuilder) -> dict:
    return json.loads(re.search(r"<pre[^>]*>(.*)</pre>", b.preview.value, re.S).group(1))


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


def test_switching_tabs_switches_the_optimizer():
    b = OptimizerBuilder("adam")
    assert "adam_params" in preview_json(b)
    b.tabs.selected_index = 1
    assert b.kind == "muon" and "muon_params" in preview_json(b)


def test_learning_rate_slider_and_text_stay_in_step():
    b = OptimizerBuilder("adam")
    lr = b.adam["learning_rate"]
    lr.slider.value = 1e-3
    assert lr.text.value == pytest.approx(1e-3) and b.params.learning_rate == pytest.approx(1e-3)
    lr.text.value = 3.3e-5  # exact entry
    assert lr.slider.value == pytest.approx(3.3e-5) and b.params.learning_rate == 3.3e-5


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
    assert b.params.learning_rate == 5.0 and b.params.grad_clip_norm == 0


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


def test_schedule_is_a_pure_function():
    s = Schedule("cosine", warmup_steps=2, total_steps=12, min_lr_ratio=0.1)
    assert [round(s.multiplier(i), 6) for i in (0, 1, 2, 7, 12, 20)] == [0.5, 1.0, 1.0, 0.55, 0.1, 0.1]
    with pytest.raises(ValueError, match="kind"):
        Schedule("step")


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
    s = rlnb.connect("local", record=False, device="cpu")
    yield s
    s.close()


def test_run_panel_step_sends_the_builder_params(panel_session):
    from rlnb.widgets import RunPanel

    panel = RunPanel(panel_session, n_steps=5, every=0.05)
    panel.builder.adam["learning_rate"].text.value = 2e-3
    panel.step_button.click()
    panel.join(60)
    assert panel_session.step == 1 and panel.progress.value == 1 and panel.error is None
    ops = panel_session.history.df
    opt = ops[ops.kind == "optim-step"].iloc[-1]
    assert opt.status == "TRAINING_OPERATION_STATUS_COMPLETED" and opt.learning_rate == pytest.approx(2e-3)
    assert "reward" in panel_session.history.logged
    panel.live.refresh()
    assert "optim-step" in panel.live.table.value and "completed" in panel.live.table.value
    assert "step 1" in panel.status.value
    panel.close()


def test_run_panel_run_n_then_stop_stops_early(panel_session):
    from rlnb.widgets import RunPanel

    started = []

    def slow_step(session, params):
        started.append(params.learning_rate)
        session.forward_backward([rlnb.samples.cross_entropy(list(b"slow step"))])
        session.optim_step(params).result()
        import time

        time.sleep(0.05)
        return {"n": float(len(started))}

    panel = RunPanel(panel_session, step_fn=slow_step, n_steps=500, every=0.05)
    panel.run_button.click()
    assert panel.running and panel.stop_button.disabled is False and panel.step_button.disabled
    while len(started) < 3:
        pass
    panel.stop_button.click()
    panel.join(60)
    assert not panel.running and 3 <= panel_session.step < 500
    assert "stopped early" in panel.status.value and panel.step_button.disabled is False
    assert list(panel_session.history.logged.n)[:3] == [1.0, 2.0, 3.0]
    panel.close()


def test_run_panel_shows_a_failed_operation_without_a_traceback(panel_session):
    from rlnb.widgets import RunPanel

    def failing_step(session, params):
        session.forward_backward([rlnb.samples.cross_entropy([1, 2, 999])]).result()  # 999 is outside the vocab

    panel = RunPanel(panel_session, step_fn=failing_step, every=0.05)
    panel.run_button.click()
    panel.join(60)
    assert isinstance(panel.error, rlnb.OperationFailed)
    assert "INVALID_INPUT" in panel.status.value and "target_tokens" in panel.status.value
    assert "Traceback" not in panel.status.value
    panel.close()


def test_run_panel_buttons_follow_validation(panel_session):
    from rlnb.widgets import RunPanel

    panel = RunPanel(panel_session, every=0.05)
    panel.builder.adam["beta1"].value = 3.0
    assert panel.step_button.disabled and panel.run_button.disabled
    panel.step_button.click()  # a disabled button's click is refused by the panel too
    assert panel_session.step == 0
    panel.builder.adam["beta1"].value = 0.9
    assert not panel.step_button.disabled
    panel.close()

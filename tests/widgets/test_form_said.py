"""Why Step and Run are off is on the panel's line: an invalid form says so there (it said "ready", or a run's end
line, while Step and Run were off, the folded summary the only sign). Widgets driven through ``.value`` and
``.click()``."""

import html
import re

import pytest

import rlnb
import rlnb.sweep
from rlnb.params import AdamParams
from rlnb.sweep.lr.result import LRFind
from rlnb.testing import FakeBackend
from rlnb.widgets import OptimizerBuilder, RunPanel

pytestmark = pytest.mark.usefixtures("undrawn_live_view")


def text(value: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", value))


@pytest.fixture
def panel():
    s = rlnb.Session(FakeBackend("adam"), record=False)
    p = RunPanel(s, step_fn=lambda session, params: session.optim_step(params).result() and {})
    yield p
    p.close()
    s.close()


def test_an_invalid_form_is_the_reason_on_the_line_and_ready_comes_back(panel):
    lr = panel.builder.adam["learning_rate"]
    lr.text.set_state({"value": "1,5"})  # as typed in the browser
    said = text(panel.status.value)
    assert panel.step_button.disabled and panel.run_button.disabled
    assert said.startswith("step 0 · fix the optimizer form: AdamParams.learning_rate = '1,5' is invalid"), said
    assert "ready" not in said
    panel.builder.adam["beta1"].value = 1.5  # a second problem: the line names both
    assert "AdamParams.beta1 = 1.5 is invalid" in text(panel.status.value)
    lr.value, panel.builder.adam["beta1"].value = 1e-3, 0.9
    assert text(panel.status.value) == "step 0 · ready" and not panel.step_button.disabled


def test_a_run_that_ends_with_the_form_invalid_says_why_step_is_off(panel):
    ran = []

    def step_fn(session, params):
        if not ran:  # an edit mid-run, as a person's: invalid
            panel.builder.adam["beta1"].value = 1.5
        ran.append(params)
        session.optim_step(params).result()
        return {}

    panel.step_fn = step_fn
    assert panel.start(2) and panel.join(60)
    said = text(panel.status.value)
    assert said.startswith("step 2 · 2 done · fix the optimizer form: AdamParams.beta1 = 1.5 is invalid"), said
    assert panel.step_button.disabled and panel.run_button.disabled and len(ran) == 2
    panel.builder.adam["beta1"].value = 0.9
    assert text(panel.status.value) == "step 2 · ready" and not panel.step_button.disabled


def test_find_lrs_result_stays_shown_and_apply_is_off_while_the_form_is_invalid(monkeypatch):
    """The line said only "Find LR needs a valid config", the suggestion gone, while Apply stayed on and set a rate
    into the form that could not be sent."""
    found = LRFind([1e-3, 1e-2], [0.0, 1.0], [0.0, 1.0], 0.01, "reward", "adam", None, "steepest ascent of it",
                   params=AdamParams(learning_rate=0.01))  # fmt: skip
    monkeypatch.setattr(rlnb.sweep, "lr_find", lambda p, s, **k: found)
    b = OptimizerBuilder()
    try:
        finder = b.lr_finder
        finder.run()
        assert not finder.apply_button.disabled and "suggested lr 0.01" in text(finder.status.value)
        b.adam["beta1"].value = 1.5
        said = text(finder.status.value)
        assert "suggested lr 0.01" in said and "Find LR needs a valid config — AdamParams.beta1 = 1.5" in said, said
        assert finder.apply_button.disabled
        b.adam["beta1"].value = 0.9
        assert not finder.apply_button.disabled
        finder.apply_button.click()
        assert b.adam["learning_rate"].value == 0.01 and finder.apply_button.disabled
        b.adam["beta2"].value = 0.99  # an edit after Apply: its suggestion is in the form already
        assert finder.apply_button.disabled and "applied lr 0.01" in text(finder.status.value)
    finally:
        b.close()


def test_ns_steps_shows_a_whole_count_and_a_typed_fraction_is_refused():
    b = OptimizerBuilder("muon")
    try:
        ns = b.muon["newton_schulz_steps"]
        assert ns.get_state()["value"] == "5" and b.params.request_body()["muon_params"]["newton_schulz_steps"] == 5
        ns.set_state({"value": "2.5"})  # as typed in the browser: checked as 2.5, not cut to 2
        assert any(e.startswith("MuonParams.newton_schulz_steps = 2.5 is invalid") for e in b.errors), b.errors
        ns.set_state({"value": "7"})
        assert b.valid and b.params.request_body()["muon_params"]["newton_schulz_steps"] == 7
    finally:
        b.close()


def test_typing_0_after_minus_0_checks_the_form_again():
    """traitlets takes -0.0 == 0.0 for no change: the message went on naming -0.0 while the box showed 0."""
    b = OptimizerBuilder("adam")
    try:
        b.min_ratio.set_state({"value": "-0"})
        assert b.errors == ["Schedule.min_lr_ratio = '-0' is invalid: must be a number in (0, 1]"]
        b.min_ratio.set_state({"value": "0"})
        assert b.min_ratio.get_state()["value"] == "0"
        assert b.errors == ["Schedule.min_lr_ratio = '0' is invalid: must be a number in (0, 1]"]
    finally:
        b.close()

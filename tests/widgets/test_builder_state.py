"""The optimizer builder's state is never stale or misleading: what it shows (the folded summary, the slider, the
"(modified)" mark, the panel's warning past the schedule's end, a preset's rates) follows what will be sent.
Widgets driven as a person would, through ``.value`` and ``.click()``."""

import html
import re

import pytest

import rlnb
from rlnb.sweep import convert_muon_lr
from rlnb.testing import FakeBackend
from rlnb.widgets import PRESETS, OptimizerBuilder, RunPanel
from rlnb.widgets.describe import scheduled_rate
from rlnb.widgets.presets import DEFAULT_PRESET

pytestmark = pytest.mark.usefixtures("undrawn_live_view", "unplotted_schedule")  # reads no picture


@pytest.fixture
def adam_session():
    s = rlnb.Session(FakeBackend("adam"), record=False)
    yield s
    s.close()


def ce_step(session, params):
    session.forward_backward([rlnb.samples.cross_entropy(list(b"a step"))])
    session.optim_step(params).result()


@pytest.mark.parametrize("sent", [0.00125, 100.0, 1e-9, 3e-4, 0.0123456789, 2.5e-7])
def test_the_summary_names_the_rate_that_is_sent_not_a_rounded_one(sent):
    """Two significant figures: 0.00125 showed as 0.0013, 100 as 1e+2 — a rate other than the one sent."""
    b = OptimizerBuilder("muon")
    b.muon["learning_rate"].value, b.muon_adam["learning_rate"].value = sent, sent * 3
    shown = re.search(r"lr (\S+), AdamW (\S+) ·", b.summary)
    assert shown is not None, b.summary
    assert float(shown.group(1)) == b.params.learning_rate == sent
    assert float(shown.group(2)) == b.params.adam.learning_rate == sent * 3
    b.kind = "adam"
    b.adam["learning_rate"].value = sent
    assert float(re.search(r"lr (\S+) ·", b.summary).group(1)) == b.params.learning_rate == sent


def test_the_slider_shows_where_a_typed_rate_beyond_its_range_is():
    """1000 or 1e-9 typed in the box (valid rates, sent) left the slider where it was: it showed 0.002."""
    b = OptimizerBuilder("adam")
    lr = b.adam["learning_rate"]
    lo, hi = 10.0**lr.slider.min, 10.0**lr.slider.max
    lr.text.value = 1000.0
    assert b.params.learning_rate == 1000.0 and lr.slider.value == hi and lr.text.value == 1000.0
    assert "1000 is above the slider's range" in lr.slider.tooltip and f"{hi:g}" in lr.slider.tooltip
    lr.text.value = 1e-9
    assert b.params.learning_rate == 1e-9 and lr.slider.value == lo and lr.text.value == 1e-9
    assert "1e-09 is below the slider's range" in lr.slider.tooltip
    lr.text.value = -1.0  # refused: the slider at its low end, the box marked, the form says why
    assert lr.slider.value == lo and not b.valid and "learning_rate" in b.message.value
    lr.text.value = 0.01
    assert lr.slider.value == 0.01 and lr.slider.tooltip is None and b.params.learning_rate == 0.01
    lr.text.value = 1000.0
    lr.slider.value = 0.5  # dragged back into range: the box follows
    assert lr.text.value == 0.5 and b.params.learning_rate == 0.5 and lr.slider.tooltip is None


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_the_warning_past_the_schedules_end_follows_every_change(adam_session):
    """Once shown, the warning kept naming the total steps, floor and rate it was first said with, and stayed up
    while the schedule was invalid."""
    builder = OptimizerBuilder("adam", total_steps=3)
    builder.sched_kind.value = "linear"
    panel = RunPanel(adam_session, builder, step_fn=ce_step, n_steps=5, every=0.05)
    panel.run_button.click()
    assert panel.join(60) and adam_session.step == 5 and len(panel.warnings) == 1
    assert "(total steps 3)" in panel.warning.value and panel.warning.layout.display is None
    builder.total.value = 4  # still past the end: said anew, with the new end
    assert "step 6 / 4 of the linear schedule" in panel.schedule_line.value
    assert "step 6 is past the end of the linear schedule (total steps 4)" in panel.warning.value
    assert panel.warning.layout.display is None and panel.warnings[-1] in panel.warning.value
    builder.min_ratio.value = 0.5
    assert "0.5× the base rate (lr 0.001)" in panel.warning.value
    builder.adam["learning_rate"].value = 4e-3
    assert "0.5× the base rate (lr 0.002)" in panel.warning.value
    assert panel.warnings == [panel.warnings[-1]] and "(lr 0.002)" in panel.warnings[0]  # the current one only
    builder.total.value = 0  # no valid schedule: nothing to warn about
    assert not builder.valid and panel.warning.layout.display == "none" and panel.warnings == []
    builder.total.value = 4
    assert panel.warning.layout.display is None and "(total steps 4)" in panel.warning.value
    builder.sched_kind.value = "constant"  # nothing to pass the end of
    assert panel.warning.layout.display == "none"
    builder.sched_kind.value = "cosine"
    assert panel.warning.layout.display is None and "the cosine schedule (total steps 4)" in panel.warning.value
    n = len(panel.warnings)
    builder.adam["beta1"].value = 0.8  # neither the schedule nor the rate: nothing new to say
    assert len(panel.warnings) == n
    builder.total.value = 10
    assert panel.warning.layout.display == "none" and "step 6 / 10" in panel.schedule_line.value
    assert panel.warnings == []
    panel.close()


def test_modified_describes_the_tab_that_is_sent():
    """The Muon tab edited while Adam was selected marked the Adam config, sent as the preset has it, "(modified)"."""
    b = OptimizerBuilder("adam")
    b.muon["momentum"].value = 0.5
    b.muon_adam["beta1"].value = 0.5
    assert not b.modified and b.preset.value == DEFAULT_PRESET and not b.summary.endswith("(modified)")
    assert b.params.request_body() == OptimizerBuilder("adam").params.request_body()
    b.kind = "muon"  # now the edited fields are sent
    assert b.modified and b.preset.value == f"{DEFAULT_PRESET} (modified)" and b.summary.endswith("(modified)")
    b.tabs.selected_index = 0  # a person clicks the Adam tab
    assert not b.modified and b.preset.value == DEFAULT_PRESET and b.summary.endswith(f"preset {DEFAULT_PRESET}")
    b.adam["beta1"].value = 0.8
    assert b.modified and b.summary.endswith("(modified)")


def test_presets_load_in_the_sessions_muon_units():
    """On a ``muon_scaling="match_adam"`` session a fresh panel said "(modified)" (its rate converted from the
    preset's), and picking a preset loaded its "original" rate as is: another, larger step size."""
    session = rlnb.connect("local", optimizer="muon", muon_scaling="match_adam", record=False, device="cpu")
    panel = RunPanel(session, every=0.05)
    b = panel.builder
    try:
        assert b.lr_finder.scaling.value == "match_adam"
        assert not b.modified and b.preset.value == DEFAULT_PRESET and b.summary.endswith(f"preset {DEFAULT_PRESET}")
        in_units = convert_muon_lr(PRESETS[DEFAULT_PRESET]["muon"]["learning_rate"], "original", "match_adam", session)
        assert b.params.learning_rate == in_units
        for name in PRESETS:
            b.preset.value = name
            muon = PRESETS[name]["muon"]
            assert b.params.learning_rate == convert_muon_lr(muon["learning_rate"], "original", "match_adam", session)
            assert b.params.momentum == muon["momentum"]  # only the rate has units
            assert b.params.adam.learning_rate == PRESETS[name]["muon.adam"]["learning_rate"]  # AdamW's: none
            assert not b.modified and b.preset.value == name
        b.muon["learning_rate"].value = 0.5
        assert b.modified and b.preset.value == f"{name} (modified)"
    finally:
        panel.close()
        session.close()


def test_presets_follow_the_units_picked_in_the_form():
    b = OptimizerBuilder("muon")
    b.lr_finder.scaling.value = "match_adam"  # converts the form's rate: the preset's still, in other units
    assert not b.modified and b.preset.value == DEFAULT_PRESET
    b.preset.value = "Together docs"
    given = PRESETS["Together docs"]["muon"]["learning_rate"]
    assert b.params.learning_rate == convert_muon_lr(given, "original", "match_adam", "tiny")
    assert not b.modified
    b.lr_finder.scaling.value = "original"  # and back: the preset's own rate, to float rounding
    assert b.params.learning_rate == pytest.approx(given, rel=1e-12)
    assert not b.modified and b.preset.value == "Together docs"


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_the_warnings_hold_the_current_warning_not_every_version_said(adam_session):
    """``panel.warnings`` grew by one stale warning per edit while past the schedule's end (a person typing a
    rate digit by digit left one per digit), without bound."""
    builder = OptimizerBuilder("adam", total_steps=2)
    builder.sched_kind.value = "linear"
    panel = RunPanel(adam_session, builder, step_fn=ce_step, n_steps=3, every=0.05)
    panel.run_button.click()
    assert panel.join(60) and len(panel.warnings) == 1
    for digits in range(1, 40):  # a rate typed, and retyped, while past the end: each edit says it anew
        builder.adam["learning_rate"].value = digits * 1e-4
    builder.total.value = 1
    assert len(panel.warnings) == 1 and panel.warnings[0] in panel.warning.value
    assert "(total steps 1)" in panel.warnings[0] and f"(lr {scheduled_rate(39 * 1e-4 * 0.1)})" in panel.warnings[0]
    panel.close()


@pytest.mark.parametrize("lr", [0.00125, 3e-4, 0.0123456789])
def test_the_schedule_line_and_warning_show_the_rate_as_sent_as_the_summary_does(adam_session, lr):
    """The line and the warning showed 0.00125 as 1.3e-03 while the summary showed 0.00125, the rate sent."""
    builder = OptimizerBuilder("adam", total_steps=1)
    builder.sched_kind.value = "linear"
    builder.warmup.value = 0
    builder.adam["learning_rate"].value = lr
    panel = RunPanel(adam_session, builder, step_fn=ce_step, n_steps=2, every=0.05)
    assert f"lr {lr}" in builder.summary and f"linear schedule · lr {lr}<" in panel.schedule_line.value
    panel.run_button.click()
    assert panel.join(60)
    sent = list(adam_session.history.steps.learning_rate)
    floor = scheduled_rate(sent[-1])  # as sent, or ≈ 4 figures where float arithmetic made it long
    assert float(sent[-1]) == lr * 0.1 and f"(lr {floor})" in panel.warning.value
    assert f"step 3 / 1 of the linear schedule · lr {floor}<" in panel.schedule_line.value
    panel.close()


def test_a_preset_rate_left_unconverted_is_not_summarised_as_the_preset():
    """A remote match_adam session whose shapes are unknown here: the form kept the preset's Muon 0.05, in "original"
    units (another step size to this session), and the summary said ``preset Learns in 40 steps``, unmodified."""
    fake = rlnb.Session(FakeBackend("muon"), record=False)  # remote-like: no model here, not a built-in
    fake.history.config["muon_scaling"] = "match_adam"
    panel = RunPanel(fake, every=0.05)
    b, note = panel.builder, "— its Muon lr in original units, not converted to match_adam"
    model = "— lesson not measured for this model"  # the fake backend's pretend model is not tiny
    assert b.lr_finder.shapes is None and "not converted to match_adam" in b.lr_finder.status.value
    assert b.params.learning_rate == 0.05 and not b.modified  # as the docs say: loaded as is, and said
    assert b.summary.endswith(f"preset {DEFAULT_PRESET} {note} {model}") and note in b.lesson.value
    b.muon["learning_rate"].value = 0.01  # the person's own rate, in the session's units: nothing to convert
    assert b.modified and b.summary.endswith(f"preset {DEFAULT_PRESET} (modified) {model}")
    assert note not in b.lesson.value
    b.preset.value = "Together docs"
    assert b.params.learning_rate == 0.02 and b.summary.endswith(f"preset Together docs {note} {model}")
    panel.close()
    fake.close()


def test_the_units_of_a_sessions_form_stay_the_sessions_when_set_in_code():
    """The units dropdown is disabled on a match_adam session, but set in code it converted the form's rate to
    "original" units, which the session reads as match_adam: another step size, the summary unchanged. No units at
    all (``index = None``) raised from the observer, and every preset picked after raised too."""
    session = rlnb.connect(
        "local", optimizer="muon", model="tiny", muon_scaling="match_adam", record=False, device="cpu"
    )
    panel = RunPanel(session, every=0.05)
    finder, sent = panel.builder.lr_finder, panel.builder.params.learning_rate
    assert sent == pytest.approx(convert_muon_lr(0.05, "original", "match_adam", "tiny"))
    finder.scaling.value = "original"
    assert finder.scaling.value == "match_adam" and panel.builder.params.learning_rate == sent
    assert "this session's units: match_adam" in html.unescape(finder.status.value)
    panel.close()
    session.close()
    b = OptimizerBuilder("muon")
    b.lr_finder.scaling.index = None
    assert b.lr_finder.scaling.value == "original" and "'original' or 'match_adam'" in html.unescape(
        b.lr_finder.status.value
    )
    b.preset.value = "Together docs"
    assert b.params.learning_rate == 0.02 and b.summary.endswith("preset Together docs")


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_a_schedule_whose_smallest_rate_is_zero_in_float_is_refused_by_the_form(adam_session):
    """A min lr ratio of 1e-320 (or a warmup of a million steps on a rate of 1e-320): the form said valid, and the
    run stopped at the first step whose rate underflowed to 0 ("learning_rate = 0.0 is invalid")."""
    builder = OptimizerBuilder("adam", total_steps=1)
    builder.sched_kind.value = "linear"
    builder.adam["learning_rate"].value = 1e-9
    builder.min_ratio.value = 1e-320
    assert not builder.valid and builder.errors == [
        "Schedule.min_lr_ratio = 1e-320 is invalid: times the learning rate it is 0 in float, which no optim-step "
        "takes; raise it"
    ]
    assert "rlnb-invalid" in builder.min_ratio._dom_classes and builder.summary.startswith("✗ 1 problem")
    panel = RunPanel(adam_session, builder, step_fn=ce_step, n_steps=3, every=0.05)
    assert panel.run_button.disabled and not panel.start(3) and adam_session.step == 0
    builder.min_ratio.value = 1e-300  # 1e-309: small, yet a rate
    assert builder.valid and panel.start(3) and panel.join(60) and adam_session.step == 3 and panel.error is None
    builder.sched_kind.value = "constant"  # no floor: the ratio is not used
    builder.min_ratio.value = 1e-320
    assert builder.valid
    builder.adam["learning_rate"].value, builder.total.value, builder.warmup.value = 1e-320, 10**6, 10**6
    assert not builder.valid and "Schedule.warmup_steps = 1000000 is invalid" in builder.errors[0]
    assert "rlnb-invalid" in builder.warmup._dom_classes
    panel.close()


def test_a_muon_sessions_schedule_line_and_warning_name_both_rates_sent():
    """The line and the warning named Muon's rate alone ("lr 0.05") while each step also sends a scheduled AdamW
    rate, which the summary names ("lr 0.05, AdamW 0.002")."""
    session = rlnb.Session(FakeBackend("muon"), record=False)
    builder = OptimizerBuilder("muon", total_steps=1)
    builder.sched_kind.value = "linear"
    builder.warmup.value = 0
    panel = RunPanel(session, builder, step_fn=ce_step, n_steps=2, every=0.05)
    assert "lr 0.05, AdamW 0.002 ·" in builder.summary
    assert "step 1 / 1 of the linear schedule · lr 0.05, AdamW 0.002<" in panel.schedule_line.value
    assert panel.start(2) and panel.join(60) and panel.error is None
    floor = f"lr {scheduled_rate(0.05 * 0.1)}, AdamW {scheduled_rate(0.002 * 0.1)}"
    assert f"step 3 / 1 of the linear schedule · {floor}<" in panel.schedule_line.value
    assert f"0.1× the base rate ({floor})" in panel.warnings[0]
    builder.muon_adam["learning_rate"].value = 0.004  # the AdamW rate alone: said anew
    assert f"AdamW {scheduled_rate(0.004 * 0.1)})" in panel.warnings[0] and len(panel.warnings) == 1
    panel.close()
    session.close()


def test_a_rate_a_schedule_computed_reads_in_four_figures_said_approximate():
    """Rates as sent put ``lr 0.04864308396768294, AdamW 0.0019457233587073174`` (a cosine's step) or
    ``0.005000000000000001`` (0.05 x 0.1) in the panel's line. A computed rate of more than 10 significant figures
    is now ``≈`` and 4 of them; a rate that reads back in 10 or fewer is written as sent."""
    assert [scheduled_rate(v) for v in (0.04864308396768294, 0.05 * 0.1, 0.0003 * 0.1, 1.2345678e-5)] == [
        "≈0.04864", "≈0.005", "≈3e-5", "1.2345678e-5"]  # fmt: skip
    as_sent = (0.00125, 100.0, 1e-9, 0.0123456789)
    assert [scheduled_rate(v) for v in as_sent] == ["0.00125", "100", "1e-9", "0.0123456789"]


def test_no_tab_selected_in_code_is_put_back_and_said(adam_session):
    """``tabs.selected_index = None`` (code only) left no tab selected, and the builder read it as Muon: it built,
    summarised and would send Muon params, and on an Adam session said the Muon tab could not be sent."""
    b = OptimizerBuilder("adam")
    b.tabs.selected_index = None
    assert b.tabs.selected_index == 0 and b.kind == "adam" and b.valid
    assert b.params.request_body() == OptimizerBuilder("adam").params.request_body()
    assert b.summary.startswith("adam · lr 0.002")
    said = html.unescape(b.message.value)
    assert "tabs.selected_index = None selects no optimizer: put back to Adam, the tab selected before" in said
    b.kind = "muon"
    b.tabs.selected_index = None
    assert b.kind == "muon" and "put back to Muon" in html.unescape(b.message.value)
    b.muon["momentum"].value = 0.9  # the next change clears the notice
    assert "selected_index" not in b.message.value and "✓ valid" in b.message.value
    panel = RunPanel(adam_session, step_fn=ce_step, n_steps=3, every=0.05)
    panel.builder.tabs.selected_index = None  # locked: back to the session's optimizer
    assert panel.builder.kind == "adam" and panel.builder.valid and not panel.step_button.disabled
    assert "put back to Adam, this session's optimizer" in html.unescape(panel.builder.message.value)
    panel.close()


@pytest.mark.parametrize("edited", [False, True])
def test_no_preset_selected_in_code_is_put_back_and_said(edited):
    """``preset.index = None`` (code) left the dropdown blank while the summary named the preset (or, after the next
    change, "preset None"): the form holds the preset (or its edit) still, so the dropdown says so again."""
    b = OptimizerBuilder("adam")
    if edited:
        b.adam["beta1"].value = 0.5
    label = f"{DEFAULT_PRESET} (modified)" if edited else DEFAULT_PRESET
    sent = b.params
    b.preset.index = None
    assert b.preset.value == label and b.summary.endswith(f"preset {label}") and b.modified is edited
    assert b.params == sent and b.valid
    assert f"no preset selected (None, set in code): put back to {label}" in html.unescape(b.message.value)
    b.adam["beta2"].value = 0.9  # a later edit: still the preset's label, never "None"
    assert b.summary.endswith(f"preset {DEFAULT_PRESET} (modified)") and "no preset" not in b.message.value
    b.preset.value = "Together docs"  # a preset picked after is applied as before
    assert b.params.learning_rate == 1e-4 and b.summary.endswith("preset Together docs")


def test_the_tabs_follow_the_wire_catalogue_of_optimizer_kinds(monkeypatch):
    """The tabs were written out ("Adam", "Muon"; ``0 if optimizer == "adam" else 1``) while the selection reads the
    kind of a tab from ``wire.OPTIMIZERS``: built from it, a kind's tab is where the selection looks for it."""
    from rlnb import wire

    monkeypatch.setattr(wire, "OPTIMIZERS", ("muon", "adam"))
    b = OptimizerBuilder("muon")
    assert b.tabs.titles == ("Muon", "Adam") and b.tabs.selected_index == 0 and b.kind == "muon"
    assert b.muon["momentum"] in _inside(b.tabs.children[0]) and b.adam["beta1"] in _inside(b.tabs.children[1])
    b.tabs.selected_index = 1
    assert b.kind == "adam" and b.params.request_body() == OptimizerBuilder("adam").params.request_body()


def _inside(box) -> list:
    """Every widget in ``box``, at any depth."""
    return [box, *(w for child in getattr(box, "children", ()) for w in _inside(child))]

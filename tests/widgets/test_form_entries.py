"""The builder's form as a person edits it field by field: what it shows is what the form holds now, or nothing."""

import time

import pytest

from rlnb.widgets import OptimizerBuilder


@pytest.mark.parametrize(
    ("field", "bad"),
    [("total", 0), ("warmup", 200), ("min_ratio", float("nan")), ("rate", float("nan")), ("beta1", 1.5)],
)
def test_an_invalid_form_shows_no_schedule_plot_of_the_config_before(field, bad):
    """Total steps 0 (on the way to 20), a NaN rate or an out-of-range beta: the form said ✗, but its schedule plot
    kept the last valid schedule and rate, a curve the form no longer held, beside the message naming the field."""
    b = OptimizerBuilder(expanded=True)
    b.sched_kind.value = "cosine"
    assert b.valid and b.schedule_plot.layout.display is None and b.schedule_plot.value[:4] == b"\x89PNG"
    controls = {"total": b.total, "warmup": b.warmup, "min_ratio": b.min_ratio, "beta1": b.adam["beta1"]}
    (controls.get(field) or b.adam["learning_rate"]).value = bad
    assert not b.valid and b.schedule_plot.layout.display == "none"
    b.apply_preset("Learns in 40 steps")
    b.total.value, b.warmup.value, b.min_ratio.value = 100, 0, 0.1
    assert b.valid and b.schedule_plot.layout.display is None  # shown again, with the form's schedule


@pytest.mark.slow  # a range test of real steps on the tiny model
def test_find_lr_on_a_builder_alone_has_a_stop_while_it_runs():
    """A builder shown on its own (no RunPanel): once Find LR was clicked, nothing in its widgets could end the range
    test (Find LR disabled, no Stop) until its last step, minutes on a larger model."""
    b = OptimizerBuilder(expanded=True)
    finder = b.lr_finder
    finder.options["steps"] = 400
    assert finder.stop_button.layout.display == "none"
    finder.button.click()
    deadline = time.monotonic() + 120
    while "running … 1/400" not in finder.status.value:  # a step done
        assert time.monotonic() < deadline and finder.running, finder.status.value
        time.sleep(0.02)
    assert finder.button.disabled and finder.stop_button.layout.display is None and not finder.stop_button.disabled
    finder.stop_button.click()
    assert finder.join(120) and finder.error is None and not finder.running
    assert "ended early: stopped after" in finder.status.value and finder.stop_button.layout.display == "none"
    assert not finder.button.disabled


@pytest.mark.slow  # real steps, each waiting for the test's word
def test_n_made_invalid_mid_run_is_said_after_the_runs_line_and_after_its_end():
    """N set to 0 during a run (on the way to 50): its error replaced the run's progress line until the next step (a
    first step can take minutes), and after the run Run N stayed off while the line said only ``step 3 · 3 done``."""
    import rlnb
    from rlnb.widgets import RunPanel
    from tests.support.gated_steps import Gate, text

    session = rlnb.connect("local", model="tiny", optimizer="adam", record=False, device="cpu")
    gate = Gate()
    panel = RunPanel(session, step_fn=gate, every=0.05)
    try:
        assert panel.start(3)
        gate.called(1)
        panel.n.value = 0
        n_said = "N must be an integer in [1, 1000003]"
        said = text(panel.status)
        assert said == f"running: 0/3 done … · {n_said}, got 0", said  # no reason: it explains the top bound
        panel.n.value = 10**9
        assert text(panel.status) == f"running: 0/3 done … · {n_said}, got 1000000000"  # not repeated after the run's
        panel.n.value = 0
        for k in (2, 3):
            gate.release()
            gate.called(k)
        assert text(panel.status).startswith("step 2 · 2/3 done · " + n_said)
        gate.release()
        assert panel.join(60) and panel.error is None
        assert text(panel.status).startswith("step 3 · 3 done · " + n_said) and panel.run_button.disabled
        panel.n.value = 5
        assert text(panel.status) == "step 3 · ready" and not panel.run_button.disabled
    finally:
        for _ in range(3):
            gate.release()
        panel.close()
        session.close()


@pytest.mark.parametrize("typed", ["1e400", "", "fast", "nan"])
def test_a_number_the_browser_sends_that_a_float_cannot_hold_is_refused_naming_the_field_as_typed(typed):
    """The text a browser sends (``set_state``, as the widget's comm does): FloatText's front end put back the old
    value for 1e400 or an empty box, without a word. The box keeps what was typed, the field is refused by name,
    quoting what was typed where it would say another value (``= inf`` for "1e400", a number nobody typed)."""
    said = "nan" if typed == "nan" else repr(typed)  # "nan" is said as typed: no quotes needed
    b = OptimizerBuilder()
    box = b.adam["learning_rate"].text
    box.set_state({"value": typed})
    assert box.get_state()["value"] == typed  # not put back to 0.002
    assert b.errors == [
        f"AdamParams.learning_rate = {said} is invalid: must be a finite number, > 0; or unset for the default"
    ]
    b.total.set_state({"value": "1e5"})  # a count typed as a number: 100000, the box as typed
    box.set_state({"value": " 1e-3 "})
    assert b.valid and b.params.learning_rate == 0.001 and b.get_schedule().total_steps == 100000
    assert box.get_state()["value"] == " 1e-3 " and b.total.get_state()["value"] == "1e5"
    b.adam["learning_rate"].value = 0.002  # set from code: the box shows it
    assert box.get_state()["value"] == "0.002"
    b.close()


@pytest.mark.parametrize("kind", ["adam", "muon"])
def test_a_refusal_quotes_the_text_typed_escaped_in_the_forms_lines(kind):
    """ "1e400" in total steps and "<b>nan" in a rate (Muon's AdamW part too): the form said ``= inf`` / ``= nan``, a
    value nobody typed. It quotes the text, escaped in the form's HTML lines; a value set from code is said as set."""
    b = OptimizerBuilder(kind)
    rates = [b.adam["learning_rate"].text] if kind == "adam" else [b.muon["learning_rate"].text,
                                                                  b.muon_adam["learning_rate"].text]  # fmt: skip
    for box in rates:
        box.set_state({"value": "<b>nan"})
    b.total.set_state({"value": "1e400"})
    b.min_ratio.set_state({"value": "2e0"})  # read 2.0: the schedule's first refusal is the total's
    owner = "AdamParams" if kind == "adam" else "MuonParams"
    fields = ["learning_rate"] if kind == "adam" else ["learning_rate", "adam.learning_rate"]
    rate_lines = [f"{owner}.{f} = '<b>nan' is invalid: must be a finite number, > 0" for f in fields]
    assert [e.partition("; or unset")[0] for e in b.errors[:-1]] == rate_lines
    assert b.errors[-1].startswith("Schedule.total_steps = '1e400' is invalid: must be an integer >= 1")
    assert f"{owner}.learning_rate = '&lt;b&gt;nan' is invalid" in b.message.value
    assert "<b>nan" not in b.message.value and "= '1e400' is invalid" in b.message.value
    b.total.value = 10**400  # set from code: said as set, not as the text typed before
    assert "Schedule.total_steps = 1000000000000" in b.errors[-1]
    b.total.set_state({"value": "100"})
    assert b.errors[-1].startswith("Schedule.min_lr_ratio = '2e0' is invalid: must be a number in (0, 1]")
    b.min_ratio.set_state({"value": "3.0"})  # said as typed without quotes: the value reads as it is written
    assert b.errors[-1].startswith("Schedule.min_lr_ratio = 3.0 is invalid")
    b.close()

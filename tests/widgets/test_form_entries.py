"""The builder's form as a person edits it field by field: what it shows is what the form holds now, or nothing."""

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

"""The optimizer builder's state is never stale or misleading: what it shows (the folded summary, the slider, the
"(modified)" mark, the panel's warning past the schedule's end, a preset's rates) follows what will be sent.
Widgets driven as a person would, through ``.value`` and ``.click()``."""

import re

import pytest

from rlnb.widgets import OptimizerBuilder


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

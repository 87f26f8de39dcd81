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

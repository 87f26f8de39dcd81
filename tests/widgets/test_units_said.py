"""Muon's lr units as the form says them: the preset's line names the rate sent, a rate that cannot be converted is
said in the form, and a round trip between the units gives back the rate typed. Driven through ``.value``."""

import html
import math

import pytest

from rlnb.sweep import convert_muon_lr
from rlnb.widgets import OptimizerBuilder
from rlnb.widgets.describe import rate


def test_the_presets_line_names_the_muon_rate_the_form_sends_in_match_adam_units():
    """On match_adam units the line said "Muon lr 0.05" while the form (and the summary) sent 0.0248."""
    b = OptimizerBuilder("muon")
    assert "Muon lr 0.05, AdamW 0.002" in b.lesson.value
    b.lr_finder.scaling.value = "match_adam"
    sent = b.params.learning_rate
    assert sent == convert_muon_lr(0.05, "original", "match_adam", "tiny") and not b.modified
    said = html.unescape(b.lesson.value)
    assert f"Muon lr {rate(sent)} (0.05 in original units), AdamW 0.002" in said and "Muon lr 0.05," not in said
    b.lr_finder.scaling.value = "original"
    assert "Muon lr 0.05, AdamW 0.002" in b.lesson.value

"""Find LR's suggestion to two significant figures, and the decay rule (learning_rate * weight_decay < 1): a range
test ends before the first rate the params refuse, so a rate it ran and suggests must be one they accept."""

import math

import pytest

import rlnb
from rlnb.sweep import lr_find
from rlnb.sweep.lr.curve import significant


def steep_rise(center: float):
    """A step function whose reward is a sharp sigmoid in log10 of the rate it is given, steepest at ``center``."""

    def step(session, params, i):
        x = math.log10(params.learning_rate) - math.log10(center)
        return 1 / (1 + math.exp(-400 * x))

    return step


def test_significant_rounds_to_nearest_or_down():
    assert [significant(v) for v in (0.0106, 0.0104, 0.0999)] == [0.011, 0.01, 0.1]
    assert [significant(v, down=True) for v in (0.0106, 0.0109, 0.0999, 0.099, 0.01, 1.35)] == [
        0.01, 0.01, 0.099, 0.099, 0.01, 1.3,
    ]  # fmt: skip


def test_a_suggestion_just_under_one_over_the_weight_decay_is_rounded_down_not_past_it(tmp_path):
    """weight_decay 92: rates from 1 / 92 = 0.01087 on are refused, and the range ended there. Its steepest rise was
    at lr 0.0106, which two significant figures made 0.011 (0.011 * 92 = 1.012): lr_find raised InvalidParams for
    its own suggestion and the steps measured were lost. Now it suggests 0.01, which the params accept."""
    found = lr_find(rlnb.AdamParams(weight_decay=92.0), start_lr=0.01, end_lr=0.0115, steps=40,
                    step_fn=steep_rise(0.0106), runs_dir=tmp_path)  # fmt: skip
    assert max(found.lrs) < 1 / 92 and "ended early: stopped at lr 0.0109" in found.reason
    assert found.suggestion == found.params.learning_rate == 0.01
    assert found.params.learning_rate * found.params.weight_decay < 1


def test_muons_adam_part_is_rounded_down_when_its_own_decay_would_refuse_it(tmp_path):
    """Muon's AdamW part at 0.2x Muon's rate, its weight_decay 460 (refused from 1 / 460 = 0.002174 on): Muon's
    suggestion rounded to 0.011, and 0.2x it (0.0022) was refused for the AdamW part."""
    base = rlnb.MuonParams(learning_rate=0.01, weight_decay=0.0, adam={"learning_rate": 0.002, "weight_decay": 460.0})
    found = lr_find(base, start_lr=0.01, end_lr=0.0115, steps=40, step_fn=steep_rise(0.0106), runs_dir=tmp_path)
    assert found.suggestion == found.params.learning_rate == pytest.approx(0.011)
    assert found.params.adam.learning_rate == 0.0021  # 0.2 x the rate measured, rounded down
    assert found.params.adam.learning_rate * 460 < 1 and "AdamW part at 0.2× it: 0.0021" in found.reason

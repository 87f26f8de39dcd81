"""``lr.curve.suggest`` on synthetic curves, smoothed as ``lr_find`` smooths them: which advice each shape gets when
there is no clear suggestion, and that a normal curve (a rise, then a collapse) keeps its suggestion."""

import math

import numpy as np
import pytest

from rlnb.sweep.lr.curve import smooth, spaced, suggest


def read(values, objective="reward", start_lr=1e-5, end_lr=1.0):
    """``suggest`` on ``values`` measured at rates ``start_lr`` → ``end_lr``, as lr_find reads them."""
    lrs = spaced(start_lr, end_lr, len(values))
    return suggest(lrs, smooth(smooth(values)[::-1])[::-1], objective, values)


def test_the_smoothing_is_the_bias_corrected_ema():
    """fastai's EMA divided by 1 - beta**i (the first points not dragged towards 0), as it was written by hand."""
    values = list(np.random.default_rng(0).normal(size=200))
    ema, avg = [], 0.0
    for i, v in enumerate(values, 1):
        avg = 0.6 * avg + 0.4 * v
        ema.append(avg / (1 - 0.6**i))
    np.testing.assert_allclose(smooth(values, 0.6), ema, rtol=1e-12, atol=1e-13)
    assert (smooth([]), smooth([3.0])) == ([], [3.0])


@pytest.mark.parametrize("steps", [10, 30, 100])
@pytest.mark.parametrize("objective", ["reward", "loss"])
def test_a_straight_rise_across_the_range_is_told_to_widen_it_both_ways(steps, objective):
    """A reward rising (a loss falling) at one rate per decade from start_lr to end_lr has no steepest point in the
    range: a 30-step test suggested a rate in the middle, 10 and 100 steps were told "try a smaller start_lr" (the
    start edge was checked first) and never that the curve was still improving at end_lr."""
    values = [i / (steps - 1) if objective == "reward" else 1 - i / (steps - 1) for i in range(steps)]
    suggestion, reason = read(values, objective)
    assert suggestion is None
    assert reason.startswith(f"no clear suggestion: the smoothed {objective} improved at about one rate across the "
                             "whole range (lr ")  # fmt: skip
    assert reason.endswith("to 1): try a wider range (a smaller start_lr and a larger end_lr)")


def test_a_rise_near_its_steepest_at_end_lr_is_told_a_larger_end_lr():
    """A sigmoid centred at end_lr in a 40-step test: its steepest step was the one before the last (smoothing),
    and that rate (0.74) was suggested, where the curve still climbs as fast at end_lr."""
    values = [1 / (1 + math.exp(-3 * math.log10(lr))) for lr in spaced(1e-5, 1.0, 40)]
    assert read(values) == (None, "no clear suggestion: the smoothed reward improved near its fastest at the end of "
                                  "the range (lr 1): try a larger end_lr or more steps")  # fmt: skip


def test_a_fall_past_the_noise_from_a_best_at_the_start_is_told_a_smaller_start_lr():
    """A noisy reward best among the first rates read, then falling 6x its per-step noise to the end: the noise
    check came first and said "the curve may be noise" (its gain before the best point is small)."""
    steps = 30
    values = [0.30, 0.36, 0.40] + [0.40 - 0.4 * j / (steps - 3) for j in range(1, steps - 2)]
    values = [v + (0.03 if i % 2 else -0.03) for i, v in enumerate(values)]
    suggestion, reason = read(values)
    assert suggestion is None and "may be noise" not in reason
    assert reason == (
        "no clear suggestion: no improvement before the best point (at lr 3.29e-05): try a smaller start_lr"
    )


def test_pure_noise_is_not_told_it_only_gets_worse():
    """Rewards drawn at random: a curve whose best fell among the first rates read was told "only gets worse after
    its best point ...: try a smaller start_lr" (18 of these 100 curves), its fall within the noise. Now a fall past
    3x the noise only (one curve of the 100, by chance)."""
    told = [read(np.random.default_rng(seed).normal(0.5, 0.1, 30).tolist())[1] for seed in range(100)]
    assert sum("only gets worse" in reason for reason in told) <= 2
    assert read(np.random.default_rng(1).normal(0.5, 0.1, 30).tolist())[1].startswith(
        "no clear suggestion: the smoothed reward is flat"
    )
    # a loss rising from the first rate, past the noise (none here): still told so
    assert "only gets worse after its best point" in read([1.0 + i for i in range(10)], "loss")[1]


@pytest.mark.parametrize("steps", [20, 30, 40, 100])
@pytest.mark.parametrize("center", [1e-4, 1e-3, 1e-2, 1e-1])
def test_a_normal_curve_keeps_its_suggestion(steps, center):
    """A reward rising (a sigmoid centred at ``center``) then collapsing a decade and a half above it: the steepest
    ascent is suggested, within a step of ``center``, whatever the advice on other shapes."""
    above = [math.log10(lr / center) for lr in spaced(1e-5, 1.0, steps)]  # decades above the centre
    values = [min(1.0, max(0.0, 1 - 2 * (d - 1.5))) / (1 + math.exp(-3 * d)) for d in above]
    suggestion, reason = read(values)
    assert reason == "steepest ascent of the smoothed reward"
    assert abs(math.log10(suggestion) - math.log10(center)) <= 5 / (steps - 1) + 0.1

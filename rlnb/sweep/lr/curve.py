"""The curve of a learning-rate range test: its smoothing, when a loss run has diverged (``Diverging``), when the curve
is flat, and the suggestion read from it."""

from __future__ import annotations

import itertools
import math
import textwrap
from collections.abc import Sequence
from decimal import ROUND_FLOOR, Decimal

import numpy as np
import pandas as pd

from rlnb.tasks.verified import CHANCE_MARGIN

from ..trial import Objective

SMOOTHING = 0.6
"""EMA factor on the per-step objective (bias-corrected), as fastai's ``lr_find`` (0.98 over 100 steps;
tens of steps here want far less memory). During the run the EMA is causal (to stop on divergence);
the curve shown and used for the suggestion is the EMA run forward and then backward, which has no
lag — a causal EMA trails the raw curve by ~1/(1 - β) steps and would shift the suggestion towards
larger rates."""
DIVERGE = 4.0
"""A loss run stops once the smoothed loss exceeds this many times its best."""
NOISE = 3.0
"""No clear suggestion when the smoothed curve's rise before its best point is under this many times the
per-step noise (the robust spread of step-to-step changes, / √2): on pure noise (30-40 steps, 500 seeds) the
rise is under 3× it 99% of the time — and a suggestion was made on 3 curves of 4 —, on a sigmoid with noise
1/7 of its height over 95%."""
EDGE = 0.9
"""No clear suggestion when the smoothed curve's slope at the first rate read is already this fraction of its
steepest: it improves about as fast from the start, so where it improves fastest may be below ``start_lr``
(a parabola in log(lr) was given its first rates as the answer; it reads 0.9998 there, a sigmoid centred
in a 9-step test 0.55, one centred 0.8 decades above ``start_lr`` in a 20-step test 0.84)."""
FLAT = 0.05
"""The smoothed curve is flat — no clear suggestion — when its rise before the best point is below this
fraction of its largest magnitude. Measured by ``bench/bench_find_lr.py`` (30-step tests of the digits-era
preset on the digits task, seeds 0-4): fresh and notebook-05 sessions rise 0.68-0.96; sessions trained
40 steps to reward 1.0 rise 0.000 (every group's rewards equal: no gradient at any rate)."""


def significant(value: float, digits: int = 2, down: bool = False) -> float:
    """``0.0025929437974046674`` → ``0.0026``: a rate as a person would write it; ``down``: ``0.0025``, for a rate
    that must stay under a bound the rate to nearest would reach (``rates.with_lr``)."""
    if not down:
        return float(f"{value:.{digits}g}")
    exact = Decimal(repr(value))  # its shortest decimal: 0.099 stays 0.099 (binary 0.0989999... floored to 0.098)
    return float(exact.quantize(Decimal(1).scaleb(exact.adjusted() - digits + 1), rounding=ROUND_FLOOR))


def spaced(start: float, end: float, steps: int) -> list[float]:
    """``steps`` rates from ``start`` to ``end``, evenly spaced in log: end / start overflowed to inf
    (start_lr=1e-300, end_lr=1e300) and every rate past the first was inf, refused at step 1."""
    lo, hi = math.log(start), math.log(end)
    return [start, *(math.exp(lo + (hi - lo) * i / (steps - 1)) for i in range(1, steps - 1)), end]


def smooth(values: Sequence[float], beta: float = SMOOTHING) -> list[float]:
    """Bias-corrected EMA (fastai's; pandas' adjusted EWM is the same): the first points are not dragged towards 0."""
    return pd.Series(values, dtype=float).ewm(alpha=1 - beta, adjust=True).mean().tolist()


class Diverging:
    """Fed each step's objective, whether a loss run has diverged: from its third step, its causal (bias-corrected)
    EMA past ``DIVERGE`` × its best so far, that best > 0. Kept as it goes: smoothing every value again at each step
    was quadratic, ~4 s of a 4000-step test's own time."""

    def __init__(self, objective: Objective) -> None:
        self.objective, self.avg, self.n, self.best = objective, 0.0, 0, math.inf

    def __call__(self, value: float) -> bool:
        self.n += 1
        self.avg = SMOOTHING * self.avg + (1 - SMOOTHING) * value
        now = self.avg / (1 - SMOOTHING**self.n)
        self.best = min(self.best, now)
        return self.objective == "loss" and self.n >= 3 and self.best > 0 and now > DIVERGE * self.best


def rise(smoothed: Sequence[float], objective: Objective) -> float:
    """How far the smoothed curve improves up to its best point, as a fraction of its largest magnitude up to there
    (0 for an empty or all-zero curve): what ``FLAT`` is compared with. Not of the whole curve's: a loss that blew up
    past its best was the scale, and a 38% fall read as flat (a reward in [0, 1] reads the same either way)."""
    y = (1.0 if objective == "reward" else -1.0) * np.asarray(smoothed, dtype=float)
    if not len(y) or np.isnan(y).all():
        return 0.0
    best = int(np.nanargmax(y))
    scale = float(np.nanmax(np.abs(y[: best + 1])))
    return float((y[best] - np.nanmin(y[: best + 1])) / scale) if scale > 0 else 0.0


def diverged_from(values: Sequence[float], objective: Objective) -> int:
    """How many of ``values`` a loss run measured before it diverged: up to the first over ``DIVERGE`` × the lowest
    before it, that lowest > 0 and below the first (the loss fell before it rose: one rising from the start is judged
    whole, "only gets worse"), the stop rule's threshold on the values themselves; all of them for a reward. The curve
    is judged up to there, as fastai's and pytorch-lr-finder's are (they stop at a divergence threshold and judge the
    curve without its last steps): judged whole, the zero-lag smoothing carries a blow-up back over the fall before it,
    and a loss that falls 38% and then blows up 37× reads as flat. A rise the loss comes back from, below that lowest
    (one noisy batch), is no divergence: the stop rule, on the smoothed values, runs past it, and the better rates
    after it are measured."""
    later = list(itertools.accumulate(reversed(values), min))[::-1]  # later[i]: the lowest from i on
    low = math.inf
    for i, value in enumerate(values):
        if objective == "loss" and 0 < low < values[0] and low < value / DIVERGE and later[i] >= low:
            return i
        low = min(low, value)
    return len(values)


def noise(values: Sequence[float]) -> float:
    """The per-step noise of ``values``: the median absolute deviation of their step-to-step changes, as a
    standard deviation (× 1.4826) of one value (/ √2): a trend or one jump (a diverging step) barely moves it."""
    d = np.diff(np.asarray(values, dtype=float))
    return float(1.4826 * np.median(np.abs(d - np.median(d))) / np.sqrt(2)) if len(d) else 0.0


def suggest(
    lrs: Sequence[float],
    smoothed: Sequence[float],
    objective: Objective,
    values: Sequence[float] | None = None,
    stopped: bool = False,
) -> tuple[float | None, str]:
    """The rate of fastest improvement per decade of learning rate, before the best point (the steepest
    descent of the loss, the steepest ascent of the reward), as measured (``lr_find`` rounds it). The first 10%
    of steps are skipped: the EMA has too little history there. None, saying why, when the curve is flat
    (see ``FLAT``), within the noise of ``values`` (the per-step objective, see ``NOISE``) or does not
    improve, or improves fastest at either edge of what is read (the steepest point may lie outside the range).
    A fall past the noise from a best among the first rates read is a finding (a smaller start_lr, not "may be
    noise"); a curve rising at one rate throughout, or near its steepest at both edges, is told to widen both.
    ``stopped``: the test was stopped at ``lrs[-1]``, short of its range: nothing is said of the rates past it."""
    sign = 1.0 if objective == "reward" else -1.0
    y = sign * np.asarray(smoothed, dtype=float)
    if len(y) < 5:
        return None, f"no clear suggestion: too few steps ({len(y)}) to suggest a rate"
    improved = rise(smoothed, objective)
    best, skip = int(np.nanargmax(y)), max(1, len(y) // 10)
    size, jitter = float(np.nanmax(y) - np.nanmin(y)), noise(values) if values is not None else 0.0
    gain, fall = float(y[best] - np.nanmin(y[: best + 1])), float(y[best] - np.nanmin(y[best:]))
    significant_fall = fall >= NOISE * jitter and size > 0 and size >= FLAT * np.nanmax(np.abs(y))
    if improved < FLAT and best <= skip and significant_fall:  # not on pure noise (18% of 30-step curves were)
        return None, (  # not flat: worse at every rate past the first few (a model diverging from the start)
            f"no clear suggestion: the smoothed {objective} only gets worse after its best point, at the start of "
            f"the range (lr {lrs[best]:.3g}): try a smaller start_lr"
        )
    if improved < FLAT and stopped:  # "nothing here learns faster" would judge rates it never reached
        return None, (
            f"no clear suggestion: the smoothed {objective} is flat up to lr {lrs[-1]:.3g}, where the test was stopped "
            f"(it improves {improved:.1%} of its size before its best point; below {FLAT:.0%} counts as flat): the "
            "rates past it were not measured"
        )
    if improved < FLAT:
        return None, (
            f"no clear suggestion: the smoothed {objective} is flat (it improves {improved:.1%} of its size before "
            f"its best point; below {FLAT:.0%} counts as flat) — nothing here learns faster at one rate than another"
        )
    if best <= skip and max(gain, fall) >= NOISE * jitter:  # was after the noise check, which told it "may be noise"
        where = f"at lr {lrs[best]:.3g}"
        return None, f"no clear suggestion: no improvement before the best point ({where}): try a smaller start_lr"
    if gain < NOISE * jitter:  # every curve whose best is among the first rates read ends here or above
        return None, (
            f"no clear suggestion: the smoothed {objective} improves {gain:.3g} before its best point, under "
            f"{NOISE:g}× the per-step noise ({jitter:.3g}): the curve may be noise — try more steps or another "
            "objective"
        )
    x = np.log10(np.asarray(lrs[: best + 1]))
    slope = np.gradient(y[: best + 1], x)
    i = skip + int(np.nanargmax(slope[skip:]))
    if not slope[i] > 0:
        return None, "no clear suggestion: the objective did not improve: try a wider range or more steps"
    start = slope[skip] >= EDGE * slope[i]  # improving about as fast at the first rate read: the steepest may be below
    end = best == len(y) - 1 and slope[best] >= EDGE * slope[i]  # and at the last: where it would stop is above
    even = best == len(y) - 1 and (y[best] - y[skip]) / (x[best] - x[skip]) >= EDGE * slope[i]  # one slope throughout
    if stopped and (even or end):  # not "a larger end_lr", nor "a wider range": the range was not run to its end
        return None, (
            f"no clear suggestion: the smoothed {objective} still improved at lr {lrs[best]:.3g}, where the test was "
            "stopped: run the whole range"
        )
    if even or start and end:  # either edge alone was half the advice: a straight rise was told "a smaller start_lr"
        return None, (
            f"no clear suggestion: the smoothed {objective} improved at about one rate across the whole range (lr "
            f"{lrs[skip]:.3g} to {lrs[best]:.3g}): try a wider range (a smaller start_lr and a larger end_lr)"
        )
    if start:
        return None, (
            f"no clear suggestion: the smoothed {objective} already improved near its fastest at the start of the "
            f"range (lr {lrs[skip]:.3g}): try a smaller start_lr or more steps"
        )
    if end:
        return None, (
            f"no clear suggestion: the smoothed {objective} improved {'' if i == best else 'near its '}fastest at the "
            f"end of the range (lr {lrs[best]:.3g}): try a larger end_lr or more steps"
        )
    return lrs[i], f"steepest {'ascent' if sign > 0 else 'descent'} of the smoothed {objective}"


def at_chance(smoothed: Sequence[float], chance: float | None) -> str:
    """Why a reward that rose is no sign of learning, or ``""``: its best is within ``CHANCE_MARGIN`` of ``chance``
    (a ``VerifiedTask``'s: the best constant answer's score), which a policy that gives one answer for every prompt
    earns. A range test diverging onto one letter of first_letter read "improved" and drew a bare plateau."""
    finite = [v for v in smoothed if math.isfinite(v)]
    if not chance or not finite or max(finite) > chance + CHANCE_MARGIN or rise(finite, "reward") < FLAT:
        return ""
    return (f"the smoothed reward rose only to a constant answer's score ({max(finite):.2g}, chance {chance:.2g}): "
            "one answer for every prompt earns that — no sign of learning")  # fmt: skip


def why_none(reason: str) -> str:
    """A figure's title for a test with no clear suggestion, wrapped: why, and what to try (a figure saved or shown
    alone said "no clear suggestion" and nothing more)."""
    return textwrap.fill(reason.replace(" — ", ": "), 64, max_lines=4, placeholder=" …")

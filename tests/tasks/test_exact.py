"""``rlnb.tasks.exact``'s stdev and pstdev give ``statistics``' bits: group advantages, ``reward_std`` and the
zero-std flag are logged in every history, and a batched member's must equal its trial's alone (issue 20)."""

from __future__ import annotations

import math
import random
import statistics
import struct
import sys

import pytest

from rlnb.tasks import exact, group_advantages, step_metrics
from rlnb.tasks.rollouts import Rollout

TINY = 5e-324
HUGE = sys.float_info.max


def outcome(fn, values):  # type: ignore[no-untyped-def]
    """The float's bits, or the exception's type (a root past a float's largest overflows in both)."""
    try:
        return fn(values).hex()
    except OverflowError:
        return "OverflowError"


def assert_same_bits(values: list[float]) -> None:
    assert outcome(exact.stdev, values) == outcome(statistics.stdev, values), values
    assert outcome(exact.pstdev, values) == outcome(statistics.pstdev, values), values


def any_float(rng: random.Random) -> float:
    """A finite float of any exponent, subnormals included: 64 random bits read as a double."""
    while True:
        x = struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0]
        if math.isfinite(x):
            return x


def draw(rng: random.Random, kind: int, n: int) -> list[float]:
    if kind == 0:  # anything: magnitudes from 5e-324 to 1.8e308 mixed
        return [any_float(rng) for _ in range(n)]
    if kind == 1:  # rewards in [0, 1]
        return [rng.random() for _ in range(n)]
    if kind == 2:  # few distinct values, as a digits reward's k / 8 (many equal)
        return [rng.randrange(9) / 8 for _ in range(n)]
    if kind == 3:  # subnormals and zeros
        return [rng.choice([0.0, -0.0, TINY, -TINY, rng.random() * 2.2e-308]) for _ in range(n)]
    if kind == 4:  # huge, both signs: sums and squares far past a float's largest
        return [rng.choice([-1.0, 1.0]) * HUGE * rng.uniform(0.5, 1.0) for _ in range(n)]
    if kind == 5:  # all equal, or one ulp apart
        x = any_float(rng)
        return [rng.choice([x, math.nextafter(x, math.inf)]) for _ in range(n)]
    return [rng.choice([TINY, HUGE, -HUGE, 1.0, 1e-300]) for _ in range(n)]  # extremes together


def test_stdev_and_pstdev_are_statistics_bit_for_bit_on_seeded_random_floats():
    rng = random.Random(20)
    for case in range(700):
        assert_same_bits(draw(rng, case % 7, rng.randint(2, 64)))


def test_exact_edges_and_errors():
    assert_same_bits([0.0, 0.0])
    assert_same_bits([TINY, 0.0])  # the root of (5e-324)**2 / 2: a subnormal
    assert_same_bits([HUGE, -HUGE])  # overflows in both
    assert_same_bits([1, 2, 4])  # ints, as statistics takes them
    assert exact.pstdev([3.5]) == 0.0
    assert exact.stdev([True, False]) == statistics.stdev([True, False])
    with pytest.raises(statistics.StatisticsError, match="at least two"):
        exact.stdev([1.0])
    with pytest.raises(statistics.StatisticsError, match="at least one"):
        exact.pstdev([])
    with pytest.raises(ValueError, match="NaN"):
        exact.stdev([math.nan, 1.0])
    with pytest.raises(OverflowError, match="Infinity"):
        exact.stdev([math.inf, 1.0])


@pytest.mark.slow
def test_stdev_and_pstdev_are_statistics_bit_for_bit_under_hypothesis():
    """hypothesis' search (imported here: its import costs the fast tier's collection seconds)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    floats = st.one_of(
        st.floats(allow_nan=False, allow_infinity=False),
        st.floats(0.0, 1.0),
        st.floats(-1e-300, 1e-300, allow_subnormal=True),
        st.sampled_from([0.0, TINY, -TINY, HUGE, -HUGE, 1.0, 0.5]),
    )

    @settings(max_examples=5000, derandomize=True, deadline=None)
    @given(st.lists(floats, min_size=2, max_size=64))
    def check(values: list[float]) -> None:
        assert_same_bits(values)

    check()


GROUPS = [[0.25, 0.5, 0.125, 0.0, 0.375, 0.25, 0.625, 0.5], [0.1, 0.2, 0.3, 0.7], [1.0, 0.0]]
"""Rewards of three groups; the bits below are what ``statistics`` gave for them before ``exact`` (808bdca)."""


def test_group_advantages_and_reward_std_keep_their_bits():
    assert [a.hex() for a in group_advantages(GROUPS[0])][:4] == [
        "-0x1.7ba33d6c08826p-2", "0x1.a199f6c3a2f5dp-1", "-0x1.ed876972d7dcbp-1", "-0x1.8e9e9a17d5bc2p+0"
    ]  # fmt: skip
    assert [a.hex() for a in group_advantages(GROUPS[1], "population_std")] == [
        "-0x1.f9cb3094a810cp-1", "-0x1.18ff1afd40ecdp-1", "-0x1.c1982b2ece483p-4", "0x1.a57ea87be1633p+0"
    ]  # fmt: skip
    groups = [[Rollout(i, "p", "c", (1,), False, w, 0.0) for w in g] for i, g in enumerate(GROUPS)]
    assert step_metrics(groups, None)["reward_std"].hex() == "0x1.25afc951fb37dp-2"
    rng = random.Random(5)  # rewards in [0, 1] as tasks give them: TRL's formula over statistics', bit for bit
    for case in range(300):
        rewards = draw(rng, 1 + case % 2, rng.randint(2, 16))
        if min(rewards) < max(rewards):
            mean, std = statistics.fmean(rewards), statistics.stdev(rewards)
            assert group_advantages(rewards) == [(r - mean) / (std + 1e-4) for r in rewards], rewards
            assert group_advantages(rewards, "population_std") == [
                (r - mean) / statistics.pstdev(rewards) for r in rewards
            ], rewards

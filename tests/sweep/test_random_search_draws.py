"""``random_search`` keeps ``n`` distinct draws; each draw was compared with every earlier config (``config not in
configs``): 10,000 configs from a space of a few thousand points took 200,000 draws × thousands of comparisons,
minutes before its error. Counted here as ``==`` calls between the space's values."""

import pytest

from rlnb.sweep import Int, random_search


class Counted(float):
    calls = 0

    def __eq__(self, other):
        Counted.calls += 1
        return float(self) == float(other)

    __hash__ = float.__hash__


def test_random_search_finds_repeated_draws_by_hash_not_by_comparing_every_config():
    choices = [Counted(1e-4 * (1 + i)) for i in range(400)]
    Counted.calls = 0
    configs = random_search(300, learning_rate=choices)
    assert len({c["learning_rate"] for c in configs}) == 300
    assert Counted.calls < 3000  # a repeated draw is one lookup (every pair of 300: ~45,000)


def test_random_search_of_unhashable_choices_still_draws_distinct_configs():
    configs = random_search(2, seed=1, momentum=[[0.9], [0.95]])
    assert sorted(c["momentum"] for c in configs) == [[0.9], [0.95]]
    with pytest.raises(ValueError, match=r"3 distinct configs asked, but 60 draws .* gave 2"):
        random_search(3, momentum=[[0.9], [0.95]])


def test_a_log_int_range_is_drawn_log_uniformly_as_optuna_draws_it():
    """``Int(1, 20, log=True)`` was drawn uniformly (about 20% of draws at or below 4) where Optuna's sampler over
    the same space draws log-uniformly (about 54%): one space, two distributions."""
    draws = [random_search(1, seed=s, newton_schulz_steps=Int(1, 20, log=True))[0]["newton_schulz_steps"]
             for s in range(600)]  # fmt: skip
    assert set(draws) == set(range(1, 21))  # every end reachable
    assert 0.45 < sum(v <= 4 for v in draws) / len(draws) < 0.65

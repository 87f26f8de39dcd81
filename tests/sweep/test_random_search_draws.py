"""``random_search`` keeps ``n`` distinct draws; each draw was compared with every earlier config (``config not in
configs``): 10,000 configs from a space of a few thousand points took 200,000 draws × thousands of comparisons,
minutes before its error. Counted here as ``==`` calls between the space's values."""

import pytest

from rlnb.errors import InvalidParams
from rlnb.sweep import Float, Int, random_search


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


@pytest.mark.parametrize(
    ("space", "said"),
    [
        ({"learning_rate": (-1, 0.1)}, r"space\['learning_rate'\]: AdamParams\.learning_rate = -1\.0 is invalid: "
                                       r"must be a finite number, > 0"),
        ({"adam.learning_rate": (1e-4, 1e-2), "momentum": Float(0.5, 1.5)},
         r"space\['momentum'\]: MuonParams\.momentum = 1\.5 is invalid"),
        ({"beta1": (0.5, 1.0)}, r"space\['beta1'\]: AdamParams\.beta1 = 1\.0 is invalid"),
    ],
)  # fmt: skip
def test_a_range_the_field_cannot_take_is_refused_naming_it_not_a_drawn_config(space, said):
    """``random_search(4, learning_rate=(-1, 0.1))`` drew negative rates, and the sweep then blamed one of them
    (``configs[0]: AdamParams.learning_rate = -0.0711... is invalid``), not the range."""
    with pytest.raises(InvalidParams, match=said):
        random_search(2, **space)


def test_a_range_valid_for_one_optimizer_and_a_pair_rule_are_left_to_the_sweep():
    """Muon takes a learning rate of 200 (Adam with its default weight decay would not: lr × wd, a rule of two
    fields that the sweep checks against its base)."""
    assert len(random_search(3, learning_rate=(1.0, 200.0))) == 3

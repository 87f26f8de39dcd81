"""A set given as a grid axis or a ``Categorical``'s choices: its order is the hash seed's, another in each kernel, so
the same cell made other configs (or other random draws) there and a ``resume=`` after a Ctrl-C was refused."""

import os
import subprocess
import sys
from collections.abc import Iterator, Set

import pytest

import rlnb
from rlnb.sweep import Categorical, grid, random_search, sweep

BASE = rlnb.AdamParams(learning_rate=3e-3, weight_decay=0.0)


class SetInOrder(Set):
    """A set iterating in the order it is given: two of them with the same members stand for one set in two
    kernels (the builtin set's order is ``PYTHONHASHSEED``'s)."""

    def __init__(self, members: list[object]):
        self.members = members

    def __contains__(self, x: object) -> bool:
        return x in self.members

    def __iter__(self) -> Iterator[object]:
        return iter(self.members)

    def __len__(self) -> int:
        return len(self.members)


def test_a_set_axis_of_a_grid_gives_the_same_configs_whatever_its_order():
    one, other = SetInOrder(["muon", "adam"]), SetInOrder(["adam", "muon"])
    assert grid(optimizer=one, learning_rate=SetInOrder([2e-3, 1e-3])) == grid(
        optimizer=other, learning_rate=SetInOrder([1e-3, 2e-3])
    )
    assert grid(optimizer=one) == [{"optimizer": "adam"}, {"optimizer": "muon"}]


def test_a_set_of_choices_draws_the_same_configs_whatever_its_order():
    draw = {"optimizer": Categorical(SetInOrder(["muon", "adam"])), "learning_rate": (1e-4, 1e-2, "log")}
    again = {"optimizer": Categorical(SetInOrder(["adam", "muon"])), "learning_rate": (1e-4, 1e-2, "log")}
    assert random_search(6, seed=3, **draw) == random_search(6, seed=3, **again)


def test_a_list_keeps_its_order():
    """Guard: the order a person lists is the trials' order."""
    assert grid(learning_rate=[2e-3, 1e-3]) == [{"learning_rate": 2e-3}, {"learning_rate": 1e-3}]


@pytest.mark.slow  # two interpreters (~2 s)
def test_a_builtin_set_gives_the_same_grid_under_any_hash_seed():
    code = "from rlnb.sweep import grid; print(grid(optimizer={'adam', 'muon'}))"
    outs = set()
    for seed in ("1", "2"):  # 1: adam first, 2: muon first (CPython's string hash)
        env = {**os.environ, "PYTHONHASHSEED": seed}
        run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        outs.add(run.stdout)
    assert outs == {"[{'optimizer': 'adam'}, {'optimizer': 'muon'}]\n"}


def test_a_set_of_variant_names_is_refused_before_the_folder(tmp_path):
    """``sweep(base, configs, variants={"low", "high"})``: each config took whichever name the hash seed put in its
    place (the learning rate 1e-3 named "high" in one kernel and "low" in the next)."""
    configs = [{"learning_rate": 1e-3}, {"learning_rate": 2e-3}]
    with pytest.raises(TypeError, match=r"variants must be a list of names, one per config \(a set has no order"):
        sweep(BASE, configs, variants=SetInOrder(["low", "high"]), steps=1, runs_dir=tmp_path, progress=False)
    assert list(tmp_path.iterdir()) == []

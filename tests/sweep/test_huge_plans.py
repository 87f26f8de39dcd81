"""Plans too large to hold: ``seeds`` of a million and more, and configs × seeds past the most trials one sweep runs.
Each is refused naming the field and the limit before the seeds are read whole or any trial spec is built (a
million seeds took seconds to check and minutes, and gigabytes, to plan), and before the sweep folder is made."""

import threading
from collections.abc import Sequence

import numpy as np
import pytest
import torch

import rlnb
from rlnb.sweep import TrialOptions, ablate, sweep
from rlnb.sweep.space import MAX_CONFIGS, MAX_TRIALS

BASE = rlnb.AdamParams(learning_rate=3e-3, weight_decay=0.0)


class Seeds(Sequence):
    """``range(n)`` that says so when it is read past ``MAX_CONFIGS + 1`` items (a whole read of a huge one)."""

    def __init__(self, n: int):
        self.n, self.read = n, 0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        if isinstance(i, slice):
            raise AssertionError("sliced")
        self.read += 1
        if self.read > MAX_CONFIGS + 1 or not 0 <= i < self.n:
            raise IndexError(i) if i >= self.n else AssertionError(f"read {self.read} seeds of {self.n}")
        return i


def test_more_seeds_than_a_sweep_runs_are_refused_before_they_are_read():
    with pytest.raises(ValueError, match=r"seeds holds 1000000000 seeds: at most 10000"):
        TrialOptions(seeds=Seeds(10**9))
    assert TrialOptions(seeds=Seeds(3)).seeds == (0, 1, 2)


def test_more_trials_than_a_sweep_runs_are_refused_before_the_folder(tmp_path):
    """400 configs × 251 seeds = 100,400 trials: each was planned (and with ``stop`` set, recorded STOPPED)."""
    configs = [{"learning_rate": 1e-4 * (1 + i / 1000)} for i in range(400)]
    stop = threading.Event()
    stop.set()
    said = rf"sweep has 100400 trials \(400 configs × 251 seeds\): at most {MAX_TRIALS}"
    with pytest.raises(ValueError, match=said):
        sweep(BASE, configs, seeds=range(251), steps=1, runs_dir=tmp_path, progress=False, stop=stop)
    changes = {f"v{i}": {"learning_rate": 1e-4 * (1 + i / 1000)} for i in range(399)}  # and the baseline: 400
    with pytest.raises(ValueError, match=said):
        ablate(BASE, changes, seeds=range(251), steps=1, runs_dir=tmp_path, progress=False, stop=stop)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("seeds", [np.int64(5), torch.tensor(5), np.array(5)])
def test_one_seed_as_a_numpy_or_torch_scalar_is_refused_as_an_int_is(seeds):
    """``seeds=rng.integers(10)`` (one seed, not a list): ``TypeError: object of type 'numpy.int64' has no len()``."""
    with pytest.raises(ValueError, match=r"seeds must be a non-empty sequence of integers, such as \(0, 1\), got "):
        TrialOptions(seeds=seeds)

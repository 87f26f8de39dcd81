"""How many trials run at once on threads: ``max_concurrent``, else 1, whichever executor was asked for. Under the
default ``executor="auto"`` a trial that cannot be batched (a Hugging Face model, LoRA, ``compile=``) went to
threads beside up to 32 others: 32 sessions, each loading its model."""

import threading

import pytest

import rlnb
from rlnb.sweep import executors, grid, sweep

BASE = rlnb.AdamParams(learning_rate=3e-3, weight_decay=0.0)
CONFIGS = grid(learning_rate=[1e-3, 2e-3, 3e-3])


def peak_trials(monkeypatch, **options) -> tuple[int, list]:
    """The most trials inside ``run_trial`` at once in a sweep of ``CONFIGS``, and the sweep's table."""
    real, lock, inside, most = executors.run_trial, threading.Lock(), [0], [0]

    def counted(spec, runs_dir, control):
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        try:
            return real(spec, runs_dir, control)
        finally:
            with lock:
                inside[0] -= 1

    monkeypatch.setattr(executors, "run_trial", counted)
    trials = sweep(BASE, CONFIGS, steps=1, progress=False, compile=False, **options)
    return most[0], trials


@pytest.mark.slow  # three trials, one after another (~2 s here)
@pytest.mark.parametrize("executor", ["auto", "threads"])
def test_trials_that_cannot_be_batched_run_one_at_a_time_by_default(tmp_path, monkeypatch, executor):
    most, trials = peak_trials(monkeypatch, executor=executor, runs_dir=tmp_path)
    assert most == 1 and list(trials.status) == ["COMPLETED"] * 3 and (trials.executor == "threads").all()


@pytest.mark.slow  # as above
def test_max_concurrent_sets_how_many_run_at_once_on_threads_under_auto(tmp_path, monkeypatch):
    most, trials = peak_trials(monkeypatch, max_concurrent=2, runs_dir=tmp_path)
    assert most <= 2 and list(trials.status) == ["COMPLETED"] * 3

"""How many trials run at once on threads (``max_concurrent``, else 1, whichever executor was asked for), and why
their rows say they ran there. Under the default ``executor="auto"`` a trial that cannot be batched (a Hugging Face
model, LoRA, ``compile=``) went to threads beside up to 32 others: 32 sessions, each loading its model."""

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


@pytest.mark.slow  # two one-trial Optuna studies (~2 s here)
def test_an_optuna_trials_row_under_auto_says_why_it_ran_on_a_thread(tmp_path):
    """Under the default ``executor="auto"`` each row said ``executor='threads' was asked for``: nobody asked."""
    kwargs = {"search": "optuna", "space": {"learning_rate": (1e-4, 1e-2, "log")}, "n_trials": 1, "steps": 1,
              "pruner": None, "runs_dir": tmp_path, "progress": False}  # fmt: skip
    auto = sweep(BASE, **kwargs)
    assert list(auto.executor) == ["threads"] and list(auto.not_batched) == [
        "search='optuna' asks its trials one at a time"
    ]
    asked = sweep(BASE, executor="threads", **kwargs)
    assert list(asked.not_batched) == ["executor='threads' was asked for"]

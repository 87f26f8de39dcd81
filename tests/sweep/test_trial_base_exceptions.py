"""A reward on a sweep's thread raising a ``BaseException`` that is neither ``KeyboardInterrupt`` nor ``SystemExit``
(a library's own subclass, a stray ``GeneratorExit``): its trial is a FAILED row like any other failure, with the
history it recorded, and the other trials train on."""

from pathlib import Path

import pytest

import rlnb
from rlnb.sweep import grid, histories, sweep
from tests.support.tasks import raising_once_task

BASE = rlnb.AdamParams(learning_rate=3e-3, weight_decay=0.0)


class Abort(BaseException):
    """A library's way out that is no ``Exception`` (as gevent's ``GreenletExit`` or trio's ``Cancelled`` are)."""


@pytest.mark.parametrize(("exc", "reason"), [(Abort("verifier gone"), "Abort: verifier gone"),
                                             (GeneratorExit(), "GeneratorExit")])  # fmt: skip
def test_a_reward_raising_another_base_exception_on_a_thread_is_its_trials_row_with_its_history(tmp_path, exc, reason):
    """It escaped ``run_trial``: the row was the thread's "the trial's thread: Abort: ..." (a bug's wording), without
    the run it had recorded (``run_path`` None, so ``histories`` left it out)."""
    trials = sweep(BASE, grid(learning_rate=[1e-3, 2e-3]), steps=2, task=raising_once_task(exc), executor="threads",
                   runs_dir=tmp_path, progress=False)  # fmt: skip
    assert list(trials.status) == ["FAILED", "COMPLETED"] and list(trials.steps_done) == [0, 2]
    assert trials.reason[0].startswith(reason)
    assert Path(trials.run_path[0]).is_dir() and len(histories(trials)) == 2


@pytest.mark.parametrize("exc", [Abort("verifier gone"), GeneratorExit()], ids=["Abort", "GeneratorExit"])
def test_a_reward_raising_another_base_exception_in_a_batched_sweep_fails_its_member_alone(tmp_path, exc):
    """In a batched ensemble (on the sweep's thread) it was no member's own error: it failed every member of the
    ensemble, its trials' rows naming the ensemble's error."""
    trials = sweep(BASE, grid(learning_rate=[1e-3, 2e-3]), steps=2, task=raising_once_task(exc), executor="batched",
                   runs_dir=tmp_path, progress=False)  # fmt: skip
    assert sorted(trials.status) == ["COMPLETED", "FAILED"]
    assert trials.reason[list(trials.status).index("FAILED")].startswith(type(exc).__name__)

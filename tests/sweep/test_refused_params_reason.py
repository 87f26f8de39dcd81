"""A trial whose optim-step the engine refuses (an ``eps`` that is 0 in the weights' float32) ends FAILED, its row's
reason naming the field, never advising to submit an optim-step again: the trial has ended, and its session with it.
``rl_step`` asks the session's engine before it samples (``Session.check_params``), and a batched member's params are
refused by the ensemble's weights before its step is sampled, as alone: nothing was sent, no gradients were kept, and
both executors give the trial one row."""

import pytest

import rlnb
from rlnb import params
from rlnb.sweep import grid, sweep

BASE = rlnb.AdamParams(learning_rate=3e-3, weight_decay=0.0)


@pytest.mark.parametrize("executor", ["threads", "batched"])
def test_a_trial_refused_its_params_gives_no_advice_to_its_ended_session(tmp_path, executor):
    trials = sweep(
        BASE, grid(eps=[1e-50]), steps=2, executor=executor, runs_dir=tmp_path, progress=False,
    )  # fmt: skip
    (reason,) = trials.reason
    assert list(trials.status) == ["FAILED"] and "adam_params.eps 1e-50 is 0 in float32" in reason, reason
    assert reason.startswith("ValueError: ") and params.GRADIENTS_KEPT not in reason, reason
    assert "submit an optim-step again" not in reason, reason
    assert list(trials.steps_done) == [0]

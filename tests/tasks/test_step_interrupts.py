"""A Ctrl-C that lands while ``rl_step`` submits its forward-backward, optim-step and weights-sync: the three are one
step, sent whole or not at all."""

from __future__ import annotations

import signal

import pytest

import rlnb
from rlnb import wire
from rlnb.history import History
from rlnb.tasks import Task, rl_step
from rlnb.testing import FakeBackend

TASK = Task("bytes", ["ab", "cd"], lambda p, c: float(sum(map(ord, c)) % 7), max_tokens=3, group_size=2)


def test_a_ctrl_c_as_rl_step_submits_its_forward_backward_sends_the_whole_step(tmp_path):
    """The forward-backward was queued and the optim-step never sent: the next step's optim-step applied both steps'
    gradients (its ``history.steps`` row summing both losses), the step turn that keeps steps apart notwithstanding."""
    s = rlnb.Session(FakeBackend("adam"), runs_dir=tmp_path, run_id="r")
    real = s._forward_backward_built  # how rl_step sends each piece's body

    def ctrl_c_as_it_is_sent(*args, **kwargs):
        op = real(*args, **kwargs)
        signal.raise_signal(signal.SIGINT)  # Python's handler runs at once, on this (the main) thread
        return op

    s._forward_backward_built = ctrl_c_as_it_is_sent  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        rl_step(s, TASK, rlnb.AdamParams(learning_rate=1e-3), seed=0)
    s._forward_backward_built = real  # type: ignore[method-assign]
    s.wait(30)
    kinds = ["sample", "forward-backward", "optim-step", "weights-sync"]
    assert list(s.history.df.kind) == kinds and s.step == 1
    assert set(s.history.df.status) == {wire.OperationStatus.COMPLETED}
    s.close()
    assert len(History.load(tmp_path / "r").completions) == 4  # the step's completions kept
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_ctrl_c_held_until_the_step_is_sent_keeps_its_completions_under_the_step_its_optim_step_made(tmp_path):
    """The held Ctrl-C, raised once the three were sent, kept the completions under the session's step + 1: where the
    optim-step had finished by then, one step past the step it made (step 2 for step 1)."""
    s = rlnb.Session(FakeBackend("adam"), runs_dir=tmp_path, run_id="r")
    real = s.weights_sync

    def ctrl_c_once_the_optim_step_ended(*args, **kwargs):
        s.wait(30)  # the optim-step before it has finished
        signal.raise_signal(signal.SIGINT)  # held until the step is sent
        return real(*args, **kwargs)

    s.weights_sync = ctrl_c_once_the_optim_step_ended  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        rl_step(s, TASK, rlnb.AdamParams(learning_rate=1e-3), seed=0)
    s.weights_sync = real  # type: ignore[method-assign]
    s.wait(30)
    assert s.step == 1
    s.close()
    assert set(History.load(tmp_path / "r").completions.step) == {1}

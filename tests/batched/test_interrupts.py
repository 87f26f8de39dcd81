"""A Ctrl-C while an ensemble's step updates and records its members lands after the step, not inside it."""

import math
import signal
from typing import Any

import torch

import rlnb
from rlnb.batched import Member, recorder, run_batched
from rlnb.batched.ensemble import Ensemble
from rlnb.history import History
from rlnb.tasks import Task

TASK = Task("t", ["n="], lambda p, c: float(c.count("1")), group_size=2, max_tokens=2)


def test_a_ctrl_c_while_the_members_step_is_recorded_stops_them_after_it_with_nothing_lost(tmp_path, monkeypatch):
    """A real SIGINT arrives while member 0's trained step 2 is being recorded: member 0's step was recorded whole
    and member 1's optim-step and weights-sync COMPLETED, but its reward, completions and result's step were lost
    (``steps_done`` 1, "stopped after 1 of 3 steps", beside a History of 2 steps and weights trained twice)."""
    real, calls = recorder.completion_rows, []

    def rows(rollouts: object) -> object:
        calls.append(1)
        if len(calls) == 3:  # step 2, member 0: the update has run, nothing of it is recorded for member 1
            signal.raise_signal(signal.SIGINT)
        return real(rollouts)

    monkeypatch.setattr(recorder, "completion_rows", rows)
    members = [Member(rlnb.AdamParams(learning_rate=1e-2), seed=s, run_id=f"m{s}") for s in range(2)]
    results = run_batched("tiny", "adam", members, steps=3, task=TASK, runs_dir=tmp_path, device="cpu")
    for result, run in zip(results, ("m0", "m1"), strict=True):
        assert (result.status, result.reason) == ("STOPPED", "stopped after 2 of 3 steps")
        back = History.load(tmp_path / run)
        assert len(result.rewards) == len(back.steps) == 2
        assert list(back.steps.reward) == result.rewards  # each trained step's reward is logged
        assert sorted(set(back.completions.step)) == [1, 2]
        assert set(back.df.status) == {"TRAINING_OPERATION_STATUS_COMPLETED"}
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # Python's own handler is back


def test_a_ctrl_c_while_a_member_leaves_the_stack_stops_the_others_each_with_its_own_weights(monkeypatch):
    """A real SIGINT between the model dropping a pruned member's row and the optimizer dropping it: the stopping that
    followed dropped rows again from a model and an optimizer that no longer agreed, and ``run_batched`` raised
    ``IndexError: index out of range in self``."""
    from rlnb.batched.stacked import StackedModel

    members = [Member(rlnb.AdamParams(learning_rate=1e-2), seed=s) for s in range(3)]
    alone = run_batched("tiny", "adam", members, steps=1, task=TASK, device="cpu", keep_weights=True)
    want = [r.weights for r in alone]  # each member's weights after its one step
    real = StackedModel.keep

    def keep(self: StackedModel, index: list[int]) -> None:
        real(self, index)
        if len(index) == 2:  # member 1 leaves, pruned
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(StackedModel, "keep", keep)
    results = run_batched("tiny", "adam", members, steps=3, task=TASK, device="cpu", keep_weights=True,
                          on_step=lambda i, report: "pruned" if i == 1 else None)  # fmt: skip
    assert [(r.status, r.reason) for r in results] == [
        ("STOPPED", "stopped after 1 of 3 steps"), ("PRUNED", "pruned"), ("STOPPED", "stopped after 1 of 3 steps")
    ]  # fmt: skip
    for got, expected in zip(results, want, strict=True):
        assert got.weights is not None and expected is not None
        assert all(torch.equal(got.weights[name], w) for name, w in expected.items())


def test_a_ctrl_c_in_the_step_a_member_fails_still_tells_on_done_of_every_member_once(monkeypatch):
    """Member 1's gradient at step 2 is not finite (its optim-step fails NON_FINITE_LOSS in the step's update, as its
    session's would), while a SIGINT arrives as member 0's step 2 is recorded: member 1 is FAILED, and ``on_done``
    hears of it too."""
    real, calls, fb = recorder.completion_rows, [], Ensemble._forward_backward

    def poisoned(self: Ensemble, *args: Any) -> Any:
        out = fb(self, *args)
        if 1 in self.live and len(self.rewards[1]) == 1:  # step 2
            self.model.grad[self.live.index(1), 0] = math.nan
        return out

    def rows(rollouts: object) -> object:
        calls.append(1)
        if len(calls) == 4:  # step 1: members 0, 1 and 2; step 2: member 0 (member 1 has failed)
            signal.raise_signal(signal.SIGINT)
        return real(rollouts)

    monkeypatch.setattr(recorder, "completion_rows", rows)
    monkeypatch.setattr(Ensemble, "_forward_backward", poisoned)
    members = [Member(rlnb.AdamParams(), seed=s) for s in range(3)]
    done: list[int] = []
    results = run_batched("tiny", "adam", members, steps=3, task=TASK, device="cpu",
                          on_done=lambda i, result: done.append(i))  # fmt: skip
    assert sorted(done) == [0, 1, 2]
    assert [r.status for r in results] == ["STOPPED", "FAILED", "STOPPED"]
    reason = results[1].reason
    assert reason is not None and reason.startswith("TRAINING_OPERATION_ERROR_CODE_NON_FINITE_LOSS"), reason

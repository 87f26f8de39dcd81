"""A Ctrl-C while an ensemble's step updates and records its members lands after the step, not inside it."""

import signal

import rlnb
from rlnb.batched import Member, ensemble, run_batched
from rlnb.history import History
from rlnb.tasks import Task

TASK = Task("t", ["n="], lambda p, c: float(c.count("1")), group_size=2, max_tokens=2)


def test_a_ctrl_c_while_the_members_step_is_recorded_stops_them_after_it_with_nothing_lost(tmp_path, monkeypatch):
    """A real SIGINT arrives while member 0's trained step 2 is being recorded: member 0's step was recorded whole
    and member 1's optim-step and weights-sync COMPLETED, but its reward, completions and result's step were lost
    (``steps_done`` 1, "stopped after 1 of 3 steps", beside a History of 2 steps and weights trained twice)."""
    real, calls = ensemble.completion_rows, []

    def rows(rollouts: object) -> object:
        calls.append(1)
        if len(calls) == 3:  # step 2, member 0: the update has run, nothing of it is recorded for member 1
            signal.raise_signal(signal.SIGINT)
        return real(rollouts)

    monkeypatch.setattr(ensemble, "completion_rows", rows)
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

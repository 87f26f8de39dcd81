"""The timings behind the thread policy: which count each operation runs at, what is kept, and when it is
timed again."""

import threading

import pytest
import torch

from rlnb import samples, wire
from rlnb.engine import tuner
from rlnb.engine.threads import ThreadPolicy, ThreadUse
from rlnb.engine.tuner import Tuner, work

KEY = ("forward-backward", 64)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run(t: Tuner, seconds: dict[int, float], n: int, key=KEY, guess: int = 2, cap: int = 2) -> list[int]:
    """``n`` operations of ``key``, each taking ``seconds[count]``; the counts they ran at."""
    used = []
    for _ in range(n):
        count = t.choose(key, guess, cap)
        used.append(count)
        t.record(key, count, seconds[count], 1.0)
    return used


@pytest.mark.parametrize(("seconds", "fast"), [({1: 0.010, 2: 0.012}, 1), ({1: 0.012, 2: 0.010}, 2)])
def test_the_first_is_untimed_then_both_in_turns_then_the_faster(seconds, fast):
    used = run(Tuner(), seconds, 1 + 2 * tuner.TRIALS + 4)
    assert used[0] == 2  # the guess, untimed
    assert used[1 : 1 + 2 * tuner.TRIALS] == [2, 1] * tuner.TRIALS
    assert used[1 + 2 * tuner.TRIALS :] == [fast] * 4


@pytest.mark.parametrize(("seconds", "fast"), [({1: 0.010, 2: 0.016}, 1), ({1: 0.016, 2: 0.010}, 2)])
def test_a_clearly_slower_count_loses_after_one_timing(seconds, fast):
    assert run(Tuner(), seconds, 6) == [2, 2, 1] + [fast] * 3


def test_the_median_survives_one_outlier():
    t = Tuner()
    t.choose(KEY, 2, 2)
    t.record(KEY, 2, 1.0, 1.0)  # untimed
    for two, one in [(0.010, 0.012), (0.5, 0.012), (0.010, 0.012)]:  # one stall of the 2-thread runs
        t.record(KEY, t.choose(KEY, 2, 2), two, 1.0)
        decision = t.record(KEY, t.choose(KEY, 2, 2), one, 1.0)
    assert decision is not None and decision.threads == 2 and decision.timed == {2: 0.010, 1: 0.012}


def test_a_decision_stands_for_keep_seconds_then_both_are_timed_again():
    clock = Clock()
    t = Tuner(clock)
    run(t, {1: 0.010, 2: 0.012}, 1 + 2 * tuner.TRIALS)
    clock.now += tuner.KEEP - 1
    assert run(t, {1: 0.012, 2: 0.010}, 2) == [1, 1]  # kept, although 2 is now the faster
    clock.now += 1
    assert run(t, {1: 0.012, 2: 0.010}, 2 * tuner.TRIALS + 2) == [2, 1] * tuner.TRIALS + [2, 2]  # no untimed one


def test_keys_and_caps():
    t = Tuner()
    assert run(t, {1: 0.01}, 3, cap=1) == [1, 1, 1]  # nothing to choose
    run(t, {1: 0.010, 2: 0.012}, 1 + 2 * tuner.TRIALS)
    other = ("sample", 1024)
    assert run(t, {1: 0.012, 2: 0.010}, 1 + 2 * tuner.TRIALS + 1, key=other)[-1] == 2  # timed on its own
    assert t.choose(KEY, 2, 2) == 1
    assert run(t, {1: 0.010, 2: 0.011, 4: 0.012}, 2 * tuner.TRIALS + 1, cap=4)[:2] == [4, 2]  # a new cap: timed anew
    assert t.choose(KEY, 1, 4) == 2  # a new guess alone does not restart the timings


def test_work_keys_operations_by_kind_and_size():
    fb = wire.ForwardBackwardBody(
        samples=[samples.cross_entropy(list(range(41)))] * 2, loss=wire.loss_config("cross_entropy")
    )
    assert work(wire.OperationKind.FORWARD_BACKWARD, fb) == (("forward-backward", 128), 80.0)
    sp = wire.SampleBody(
        model_inputs=[wire.ModelInput.from_tokens([1, 2])] * 3,
        num_samples=4,
        sampling_params=wire.SamplingParams(max_tokens=10),
    )
    assert work(wire.OperationKind.SAMPLE, sp) == (("sample", 128), 120.0)
    unset = wire.SampleBody(model_inputs=[wire.ModelInput.from_tokens([1])])
    assert work(wire.OperationKind.SAMPLE, unset)[1] == wire.DEFAULT_MAX_TOKENS
    assert work(wire.OperationKind.OPTIM_STEP, None) == (("optim-step", 1), 1.0)


class Load:
    def __call__(self) -> float:
        return 0.0


def test_a_failed_operation_is_not_timed_and_a_fixed_count_is_never_timed():
    use = ThreadUse(torch.device("cpu"), None, ThreadPolicy(cpus=2, meter=Load()))
    body = wire.ForwardBackwardBody(samples=[samples.cross_entropy([1, 2, 3])], loss=wire.loss_config("cross_entropy"))
    for _ in range(1 + 2 * tuner.TRIALS):
        use.before(0, wire.OperationKind.FORWARD_BACKWARD, body)
        use.after(ok=False)
    key, _ = work(wire.OperationKind.FORWARD_BACKWARD, body)
    assert key not in use.lease.tuner._seen and not use.decisions  # not even the untimed first one counted
    use.close()
    fixed = ThreadUse(torch.device("cpu"), 1, ThreadPolicy(cpus=2, meter=Load()))
    fixed.before(0, wire.OperationKind.FORWARD_BACKWARD, body)
    fixed.after()
    assert fixed.lease.tuner._states == {} and torch.get_num_threads() == 1
    fixed.close()


FB_64 = wire.ForwardBackwardBody(
    samples=[samples.cross_entropy(list(range(41)))], loss=wire.loss_config("cross_entropy")
)
"""A forward-backward of ``KEY`` (40 tokens: the size bucket 64)."""


def test_a_kept_count_is_read_without_asking_and_answers_what_asking_does(monkeypatch):
    """``ThreadUse.before`` reads a count the timings kept through ``Tuner.standing`` alone: no ``threads`` call while
    the decision and the policy's stand, and the count ``threads`` answers at each turn: kept, timed again after
    ``KEEP``, and a cap lowered by a second busy worker."""
    policy = ThreadPolicy(cpus=2, meter=Load())
    use = ThreadUse(torch.device("cpu"), None, policy)
    lease = use.lease
    clock = lease.tuner._clock = Clock()
    asked, threads = [], type(lease).threads
    monkeypatch.setattr(type(lease), "threads", lambda self, key=None: asked.append(key) or threads(self, key))

    def op(seconds: dict[int, float]) -> int:
        use.before(0, wire.OperationKind.FORWARD_BACKWARD, FB_64)
        count = torch.get_num_threads()
        assert count == threads(lease, KEY)
        lease.tuner.record(KEY, count, seconds[count], 1.0)
        return count

    previous = torch.get_num_threads()
    try:
        assert work(wire.OperationKind.FORWARD_BACKWARD, FB_64)[0] == KEY
        assert [op({1: 0.010, 2: 0.012}) for _ in range(1 + 2 * tuner.TRIALS)] == [2] + [2, 1] * tuner.TRIALS
        assert len(asked) == 1 + 2 * tuner.TRIALS and lease.tuner.kept[KEY][0] == 1
        asked.clear()
        assert [op({1: 0.010, 2: 0.012}) for _ in range(5)] == [1] * 5
        assert asked == []  # kept: read, not asked
        clock.now += tuner.KEEP  # the decision lapses: both timed again, asked each time
        assert op({1: 0.012, 2: 0.010}) == 2 and asked == [KEY] and KEY not in lease.tuner.kept
        for _ in range(2 * tuner.TRIALS):
            op({1: 0.012, 2: 0.010})
        assert lease.tuner.kept[KEY][0] == 2
        asked.clear()
        other = policy.lease()  # a second worker, busy: the cap is 1, asked (and 1) from the next operation
        assert op({1: 0.012, 2: 0.010}) == 1 and asked == [KEY]
        other.release()
    finally:
        use.close()
        torch.set_num_threads(previous)


def test_standing_is_the_kept_count_choose_answers_until_it_lapses_or_the_cap_moves():
    clock = Clock()
    t = Tuner(clock)
    run(t, {1: 0.010, 2: 0.012}, 1 + 2 * tuner.TRIALS)
    assert t.standing(KEY, 2) == t.choose(KEY, 2, 2) == 1
    assert t.standing(KEY, 4) is None and t.standing(("sample", 64), 2) is None  # another cap, another key
    clock.now += tuner.KEEP - 1
    assert t.standing(KEY, 2) == 1
    clock.now += 1  # lapsed: choose times both again
    assert t.standing(KEY, 2) is None and t.choose(KEY, 2, 2) == 2 and KEY not in t.kept


def test_a_kept_count_is_read_with_the_policys_decision_under_its_lock():
    """The fast path reads the policy's decision and cap under the policy's lock (``limits`` writes them there): a
    worker whose count is kept waits while another thread holds that lock."""
    policy = ThreadPolicy(cpus=2, meter=Load())
    use = ThreadUse(torch.device("cpu"), None, policy)
    previous = torch.get_num_threads()
    try:
        use.lease.tuner.kept[KEY] = (1, use.lease.tuner._clock(), policy.limits()[1])
        worker = threading.Thread(target=use.before, args=(0, wire.OperationKind.FORWARD_BACKWARD, FB_64))
        with policy._lock:
            worker.start()
            worker.join(0.3)
            assert worker.is_alive()  # waiting for the lock
        worker.join(30)
        assert not worker.is_alive() and use._count == 1
    finally:
        use.close()
        torch.set_num_threads(previous)

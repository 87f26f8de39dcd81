"""The thread policy: the rule, its decisions as workers come and go, the count each session runs with, and
what its run records."""

import json
import threading
import time

import pytest
import torch
from torch import nn

import rlnb
from rlnb import samples, wire
from rlnb.batched import Member, run_batched
from rlnb.engine import threads, tuner
from rlnb.engine.threads import CpuMeter, ThreadPolicy, ThreadUse, auto_threads


class Load:
    """A fake meter: the cores' worth of CPU other processes use, set by the test."""

    def __init__(self, other: float = 0.0) -> None:
        self.value = other

    def __call__(self) -> float:
        return self.value


class Counting(nn.Module):
    """Token ids to logits, noting the torch thread count of the thread that runs each forward."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(16, 4)
        self.head = nn.Linear(4, 16)
        self.seen: list[int] = []

    def forward(self, idx):
        self.seen.append(torch.get_num_threads())
        return self.head(self.emb(idx))


@pytest.fixture
def policy(monkeypatch):
    """The process's policy replaced by one of 2 cores over a fake meter."""
    load = Load()
    fake = ThreadPolicy(cpus=2, meter=load)
    monkeypatch.setattr(threads, "POLICY", fake)
    fake.load = load
    return fake


@pytest.mark.parametrize(
    ("cores", "busy", "other", "want"),
    [
        (2, 1, 0.0, 2),  # one session on an idle machine: every core
        (2, 1, 0.3, 2),  # background noise does not take a core
        (2, 1, 0.6, 1),  # a competing process holds (more than half of) one core
        (2, 2, 0.0, 1),  # two busy workers on two cores: one each
        (2, 3, 0.0, 1),  # more workers than cores: still one each, never zero
        (8, 2, 1.0, 3),  # 7 free cores shared by 2
        (2, 1, 5.0, 1),  # an overloaded machine: one
    ],
)
def test_the_rule(cores, busy, other, want):
    assert auto_threads(cores, busy, other) == want


def test_decisions_follow_workers_and_load(monkeypatch):
    policy = ThreadPolicy(cpus=4, meter=Load())
    policy.load = policy._meter
    a = policy.lease()
    assert a.threads() == 4  # alone on an idle machine
    b = policy.lease()
    assert a.threads() == b.threads() == 2  # a second worker starts: the cores are shared at once
    fixed = policy.lease(fixed=3)
    assert fixed.threads() == 3 and a.threads() == 1  # a fixed session counts as busy too
    fixed.release()
    b.release()
    assert a.threads() == 4
    policy.load.value = 2.0  # another process takes two cores: seen at the next re-decision
    assert a.threads() == 4
    monkeypatch.setattr(threads, "RECHECK", 0.0)
    assert a.threads() == 2


def test_an_idle_worker_stops_counting(policy, monkeypatch):
    a, b = policy.lease(), policy.lease()
    assert a.threads() == 1
    monkeypatch.setattr(threads, "RECHECK", 0.0)
    monkeypatch.setattr(threads, "BUSY_FOR", 0.0)
    a.running = True  # a runs an operation; b has done nothing since it started
    assert a.threads() == 2
    b.release()


def test_before_sets_the_count_of_the_calling_thread(policy):
    use = ThreadUse(torch.device("cpu"), 1, policy)
    seen = []

    def work():
        use.before(0)
        seen.append(torch.get_num_threads())

    t = threading.Thread(target=work)
    t.start()
    t.join()
    use.close()
    assert seen == [1]


class SlowAt(Counting):
    """``Counting`` that also takes 200 ms longer per forward at one thread count: far more than a busy machine
    (the fast tier's other worker) adds to a 1 ms operation at either count."""

    def __init__(self, slow: int) -> None:
        super().__init__()
        self.slow = slow

    def forward(self, idx):
        if torch.get_num_threads() == self.slow:
            time.sleep(0.2)
        return super().forward(idx)


@pytest.mark.parametrize("slow", [2, 1])
def test_a_session_times_both_counts_keeps_the_faster_and_records_it(policy, tmp_path, slow):
    model = SlowAt(slow)
    s = rlnb.connect("local", model=model, device="cpu", runs_dir=tmp_path, run_id="r")
    assert s.history.config["threads"] == 2 and s.history.config["thread_policy"] == "auto"
    batch = [samples.cross_entropy([1, 2, 3, 4])]
    for _ in range(1 + 2 * tuner.TRIALS + 3):
        s.forward_backward(batch).result()
    s.close()
    fast = 3 - slow
    timed = model.seen[-(1 + 2 * tuner.TRIALS + 3) :]
    assert timed[:3] == [2, 2, 1]  # the first, untimed, at the rule's guess (one session, idle machine); then both
    assert timed[3:] == [fast] * (len(timed) - 3)  # 200 ms on a 1 ms operation is clearly slower: the faster only
    written = json.loads((tmp_path / "r" / "config.json").read_text())
    [decision] = written["thread_decisions"]
    assert decision["operation"] == wire.OperationKind.FORWARD_BACKWARD and decision["size"] == 4
    assert decision["threads"] == fast
    assert decision["ms_per_unit"][str(slow)] > decision["ms_per_unit"][str(fast)] + 200 / 3 / 2  # 200 ms / 3 tokens


def test_threads_fixes_a_sessions_count(policy, tmp_path):
    model = Counting()
    with rlnb.connect("local", model=model, device="cpu", threads=1, runs_dir=tmp_path, run_id="r") as s:
        s.forward_backward([samples.cross_entropy([1, 2, 3])]).result()
    assert model.seen[-1] == 1
    written = json.loads((tmp_path / "r" / "config.json").read_text())
    assert (written["threads"], written["thread_policy"]) == (1, "fixed") and "thread_decisions" not in written


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_threads_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match=r"threads must be None .* or an integer >= 1"):
        rlnb.connect("local", model="tiny", device="cpu", threads=bad, record=False)


def test_cuda_sessions_take_no_lease(policy):
    use = ThreadUse(torch.device("cuda"), None)
    assert use.lease is None and not policy._leases
    use.before(0)  # touches nothing
    assert use.config() == {"threads": None, "thread_policy": "off", "malloc": None}


def test_batched_trials_record_and_restore_the_count(policy, tmp_path):
    before = torch.get_num_threads()
    members = [Member(rlnb.AdamParams(learning_rate=1e-3), seed=s, run_id=f"m{s}") for s in (0, 1)]
    results = run_batched("tiny", "adam", members, steps=1, device="cpu", threads=1, runs_dir=tmp_path)
    assert [r.history.config["threads"] for r in results] == [1, 1]
    assert results[0].history.config["thread_policy"] == "fixed"
    assert torch.get_num_threads() == before and not policy._leases


def test_the_meter_reads_other_processes_load():
    meter = CpuMeter()
    other = meter.other()  # the first reading waits out its window
    if other is None:
        pytest.skip("no /proc/stat on this system")
    assert 0.0 <= other <= threads.cores() + 0.5
    assert meter.other() is None  # a second reading at once has no window to measure

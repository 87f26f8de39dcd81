"""An ensemble's memory is checked before its members' models are built (``rlnb.batched.memory``)."""

import re
from pathlib import Path
from typing import Any

import pytest

import rlnb
from rlnb.batched import Member, memory, run_batched
from rlnb.engine.models.tiny import SIZES
from rlnb.tasks import Task

TASK = Task("t", ["n="], lambda p, c: 0.0, group_size=2, max_tokens=2)


def three_trials(executor) -> list[dict]:
    """Three one-step Adam trials through a ``BatchedExecutor``, their rows once all three came back (or the deadline
    passed)."""
    import time

    from rlnb.sweep.trial import TrialSpec

    for i in range(3):
        executor.submit(TrialSpec(i, {}, rlnb.AdamParams(), i, f"t{i}", 1, TASK, options={"device": "cpu"}))
    rows: list[dict] = []
    deadline = time.monotonic() + 120  # the machine is shared: ample room
    while len(rows) < 3 and time.monotonic() < deadline:
        rows += executor.poll(0.5)
    executor.close()
    return rows


def test_an_ensemble_larger_than_the_free_memory_is_refused_naming_members_and_the_most_that_fit(tmp_path, monkeypatch):
    """An ensemble far past the memory (10,000 ``tiny`` members: ~130 GiB at once) was not checked up front: it
    built a model per member, and where Linux overcommits memory the kernel killed it. Here the memory free is set
    to 50 members' worth: 51 are refused before a run folder is made, naming ``members`` and 50; one trains."""
    each = memory.member_bytes(SIZES["tiny"], 149_248, rows=2, tokens=4)  # TASK: 1 prompt x 2, "n=" + 2 tokens
    monkeypatch.setattr(memory, "free_memory", lambda device: 50 * each + each // 2)
    members = [Member(rlnb.AdamParams(), seed=s, run_id=f"m{s}") for s in range(51)]
    with pytest.raises(ValueError, match=r"^members: an ensemble of 51 'tiny' members holds ~[\d.]+ GiB at once "
                                         r"\(~[\d.]+ MiB each: .*\), more than the [\d.]+ GiB free on cpu: "
                                         r"at most 50 members here; pass fewer"):  # fmt: skip
        run_batched("tiny", "adam", members, steps=1, task=TASK, runs_dir=tmp_path, device="cpu")
    assert list(tmp_path.iterdir()) == []
    results = run_batched("tiny", "adam", members[:1], steps=1, task=TASK, runs_dir=tmp_path, device="cpu")
    assert [r.status for r in results] == ["COMPLETED"]


def test_the_estimate_grows_with_members_rows_and_tokens_and_is_skipped_where_free_memory_is_unknown(monkeypatch):
    """Where the free memory cannot be read (None) nothing is refused, as a sample's KV-cache check."""
    small = memory.member_bytes(SIZES["tiny"], 149_248, rows=48, tokens=13)
    assert 12 * 2**20 < small < 14.4 * 2**20  # under the measured peak growth of a digits-task member (14.4 MiB)
    assert memory.member_bytes(SIZES["tiny"], 149_248, rows=96, tokens=13) > small
    monkeypatch.setattr(memory, "free_memory", lambda device: None)
    (result,) = run_batched("tiny", "adam", [Member(rlnb.AdamParams())], steps=1, task=TASK, device="cpu")
    assert result.status == "COMPLETED"


@pytest.mark.slow  # a sweep trains two ensembles (~2 s)
def test_a_sweep_runs_trials_that_do_not_fit_one_ensemble_as_smaller_ones_that_do(tmp_path, monkeypatch):
    """With memory for 2 members and 4 trials, every trial of the sweep was FAILED with the ensemble's refusal; now
    they train as ensembles of 2, each trial as it would alone."""
    from rlnb.sweep import grid, histories, sweep

    each = memory.member_bytes(SIZES["tiny"], 149_248, rows=2, tokens=4)
    monkeypatch.setattr(memory, "free_memory", lambda device: 2 * each + each // 2)
    base = rlnb.AdamParams(weight_decay=0.0)
    trials = sweep(base, grid(learning_rate=[1e-3, 2e-3]), seeds=[0, 1], steps=2, task=TASK, runs_dir=tmp_path,
                   progress=False, device="cpu")  # fmt: skip
    assert list(trials.status) == ["COMPLETED"] * 4 and (trials.executor == "batched").all()
    sizes = sorted((h.config["batched"]["members"], h.config["batched"]["ensemble"]) for h in histories(trials))
    assert [n for n, _ in sizes] == [2] * 4 and len({e for _, e in sizes}) == 2


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads Linux's VmSize")
def test_an_ensemble_past_what_ulimit_v_leaves_the_process_is_refused_naming_the_limit(tmp_path, monkeypatch):
    """Under ``ulimit -v`` (the address space a process may map) the free memory is no bound: 400 ``tiny`` members
    under 3 GB all ended FAILED ``RESOURCE_EXHAUSTED`` after 26 s of building and sampling. The limit less what the
    process maps now is read too: here it leaves room for ~100 members, and 1000 are refused up front."""
    import resource

    real = resource.getrlimit
    with open("/proc/self/status") as status:
        mapped = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))
    each = memory.member_bytes(SIZES["tiny"], 149_248, rows=2, tokens=4)
    limit = mapped + 100 * each
    monkeypatch.setattr(resource, "getrlimit", lambda which: (limit, resource.RLIM_INFINITY)
                        if which == resource.RLIMIT_AS else real(which))  # fmt: skip
    monkeypatch.setattr(memory, "free_memory", lambda device: 2**50)  # the host has plenty
    members = [Member(rlnb.AdamParams(), seed=s) for s in range(1000)]
    match = r"^members: .* 1000 'tiny' members .* more than the [\d.]+ GiB this process may still map \(ulimit -v\): "
    with pytest.raises(ValueError, match=match + r"at most \d+ members here"):
        run_batched("tiny", "adam", members, steps=1, task=TASK, runs_dir=tmp_path, device="cpu")
    assert list(tmp_path.iterdir()) == []


def shrinking(monkeypatch, first: int, then: int) -> list[int]:
    """``free_memory`` reads ``first`` bytes at the ensemble's check, ``then`` at every later read; the reads, kept."""
    reads: list[int] = []

    def free(device: object) -> int:
        reads.append(first if not reads else then)
        return reads[-1]

    monkeypatch.setattr(memory, "free_memory", free)
    return reads


def test_members_the_memory_no_longer_holds_when_they_are_built_fail_alone_naming_it(tmp_path, monkeypatch):
    """The check at the ensemble's start is one snapshot: memory another ensemble or a thread's trial took after it
    left the last members to exhaust it, failing (or killing) the whole ensemble. Each member is checked again as its
    model is built: here the memory shrinks to 2.5 members' worth after the start, so members 2 and 3 end FAILED
    naming it, unbuilt, each told on_done, and members 0 and 1 train."""
    each = memory.member_bytes(SIZES["tiny"], 149_248, rows=2, tokens=4)
    reads = shrinking(monkeypatch, 10 * each, 5 * each // 2)
    done: list[tuple[int, str]] = []
    members = [Member(rlnb.AdamParams(), seed=s, run_id=f"m{s}") for s in range(4)]
    results = run_batched("tiny", "adam", members, steps=2, task=TASK, runs_dir=tmp_path, device="cpu",
                          on_done=lambda i, r: done.append((i, r.status)))  # fmt: skip
    assert len(reads) == 3  # the start, before member 1, before member 2 (which is refused: 3 is not tried)
    assert [r.status for r in results] == ["COMPLETED", "COMPLETED", "FAILED", "FAILED"]
    assert sorted(done) == [(0, "COMPLETED"), (1, "COMPLETED"), (2, "FAILED"), (3, "FAILED")]
    reason = results[2].reason
    assert reason is not None and reason == results[3].reason
    assert reason.startswith(
        "TRAINING_OPERATION_ERROR_CODE_RESOURCE_EXHAUSTED: member 2's model was not built: with "
        "it the 3 members built so far need ~"
    )
    assert "GiB free on cpu now (the memory shrank since the ensemble's start); members 2 to 3 did not train" in reason
    assert [r.steps_done for r in results] == [2, 2, 0, 0]
    assert [r.built for r in results] == [True, True, False, False]
    assert results[2].history.config["run_id"] == "m2" and results[2].history.df.empty  # in memory: config, no step
    assert [r.history.config["batched"]["members"] for r in results] == [2] * 4  # the ensemble that trained
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m0", "m1"]  # the unbuilt made no folder


def test_members_not_built_run_again_with_their_run_ids_as_new_runs(tmp_path, monkeypatch):
    """Run again as their reason says, the members not built start their runs afresh: their folders, made with only
    a config, were continued (``continued_at``: two sessions in one run, the first of no operation)."""
    each = memory.member_bytes(SIZES["tiny"], 149_248, rows=2, tokens=4)
    shrinking(monkeypatch, 10 * each, 3 * each // 2)
    members = [Member(rlnb.AdamParams(), seed=s, run_id=f"m{s}") for s in range(2)]
    first = run_batched("tiny", "adam", members, steps=1, task=TASK, runs_dir=tmp_path, device="cpu")
    assert [(r.status, r.built) for r in first] == [("COMPLETED", True), ("FAILED", False)]
    (again,) = run_batched("tiny", "adam", members[1:], steps=1, task=TASK, runs_dir=tmp_path, device="cpu")
    assert again.status == "COMPLETED" and again.built
    config = rlnb.History.load(tmp_path / "m1").config
    assert "continued_at" not in config and config["batched"]["members"] == 1


@pytest.mark.slow  # a sweep of two ensembles (~1.5 s)
def test_sweep_trials_the_memory_no_longer_holds_run_in_a_later_ensemble_and_say_so(tmp_path, monkeypatch):
    """The members the memory no longer held were FAILED rows naming "member 2" (an index in an ensemble the trials
    table does not show), to be run again by hand. Now they wait until their ensemble has freed its memory and train
    as the next one: every row COMPLETED, the deferred two saying so and naming the trials they did not fit beside,
    their runs those of the second ensemble, each a run of one session."""
    from rlnb.sweep import grid, histories, sweep

    each = memory.member_bytes(SIZES["tiny"], 149_248, rows=2, tokens=4)
    shrinking(monkeypatch, 10 * each, 5 * each // 2)
    trials = sweep(rlnb.AdamParams(weight_decay=0.0), grid(learning_rate=[1e-3, 2e-3]), seeds=[0, 1], steps=2,
                   task=TASK, runs_dir=tmp_path, progress=False, device="cpu")  # fmt: skip
    assert list(trials.status) == ["COMPLETED"] * 4 and list(trials.steps_done) == [2] * 4
    deferred = trials[trials.reason.notna()]
    assert sorted(deferred.trial) == [2, 3] and (deferred.executor == "batched").all()
    assert set(deferred.reason) == {"deferred: the memory no longer held its model beside trial(s) 0, 1 as their "
                                    "ensemble was built; it waited for a later one"}  # fmt: skip
    configs = {h.config["trial"]: h.config for h in histories(trials)}
    assert all("continued_at" not in c for c in configs.values())
    ensembles = [(c["batched"]["ensemble"], c["batched"]["members"]) for _, c in sorted(configs.items())]
    assert ensembles[0] == ensembles[1] != ensembles[2] == ensembles[3] and ensembles[2][1] == 2


def test_deferred_trials_the_memory_never_holds_end_failed_rows_naming_the_memory_and_the_trials(tmp_path, monkeypatch):
    """Where the memory holds not one more member, the deferred trials' later ensemble is refused: FAILED rows with
    the refusal and why they waited, not deferred again and again (each ensemble builds a member or is refused)."""
    import threading

    from rlnb.sweep.batched_executor import BatchedExecutor

    each = memory.member_bytes(SIZES["tiny"], 149_248, rows=2, tokens=4)
    shrinking(monkeypatch, 10 * each, each // 2)
    executor = BatchedExecutor(tmp_path, threading.Event())
    rows = three_trials(executor)
    by_trial = {r["trial"]: r for r in rows}
    assert sorted(by_trial) == [0, 1, 2] and by_trial[0]["status"] == "COMPLETED" and by_trial[0]["reason"] is None
    for trial in (1, 2):
        assert by_trial[trial]["status"] == "FAILED"
        assert re.fullmatch(r"EnsembleTooLarge: members: an ensemble of 2 'tiny' members .* at most 0 members here; "
                            r".*; deferred: the memory no longer held its model beside trial\(s\) 0 as their ensemble "
                            r"was built; it waited for a later one", by_trial[trial]["reason"])  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t0"]


def test_a_trial_deferred_twice_names_both_ensembles_it_did_not_fit_beside(tmp_path, monkeypatch):
    """Trial 2 does not fit beside trial 0, then (in the next ensemble) beside trial 1: its row kept only the first
    note. It now names both, and trial 1's names the one."""
    import threading

    from rlnb.sweep.batched_executor import BatchedExecutor

    each = memory.member_bytes(SIZES["tiny"], 149_248, rows=2, tokens=4)
    script = [10 * each, 3 * each // 2, 10 * each, 3 * each // 2]  # each ensemble's start, then its second member
    reads: list[int] = []

    def free(device: object) -> int:
        reads.append(script[len(reads)] if len(reads) < len(script) else 10 * each)
        return reads[-1]

    monkeypatch.setattr(memory, "free_memory", free)
    by_trial = {r["trial"]: r for r in three_trials(BatchedExecutor(tmp_path, threading.Event()))}
    assert [by_trial[t]["status"] for t in range(3)] == ["COMPLETED"] * 3 and by_trial[0]["reason"] is None
    assert by_trial[1]["reason"] == ("deferred: the memory no longer held its model beside trial(s) 0 as their "
                                     "ensemble was built; it waited for a later one")  # fmt: skip
    assert by_trial[2]["reason"] == ("deferred: the memory no longer held its model beside trial(s) 0, then beside "
                                     "trial(s) 1 as their ensemble was built; it waited for a later one")  # fmt: skip


def test_a_member_whose_model_runs_out_of_memory_as_it_is_built_fails_with_those_after_it(monkeypatch):
    """Building member 1's model raises MemoryError (the check passed: the memory went between): members 1 and 2
    end FAILED naming it, member 0 trains; the error was run_batched's own, every member lost."""
    from rlnb.batched import ensemble

    monkeypatch.setattr(memory, "free_memory", lambda device: None)
    real, built = ensemble.build_adapter, []

    def build(*args: Any, **kwargs: Any) -> object:
        built.append(1)
        if len(built) == 2:
            raise MemoryError("out of memory")
        return real(*args, **kwargs)

    monkeypatch.setattr(ensemble, "build_adapter", build)
    members = [Member(rlnb.AdamParams(), seed=s) for s in range(3)]
    results = run_batched("tiny", "adam", members, steps=1, task=TASK, device="cpu")
    assert [(r.status, r.built) for r in results] == [("COMPLETED", True), ("FAILED", False), ("FAILED", False)]
    said = (
        "TRAINING_OPERATION_ERROR_CODE_RESOURCE_EXHAUSTED: member 1's model could not be built (MemoryError: out "
        "of memory); members 1 to 2 did not train: run them again, or fewer at once"
    )
    assert results[1].reason == results[2].reason == said


@pytest.mark.slow  # two ensembles on the executor's thread (~1.3 s)
def test_the_executor_s_capacity_is_a_cap_and_its_trials_past_what_fits_wait_their_turn(tmp_path, monkeypatch):
    """``capacity()`` is read before any trial exists, so it cannot be a memory figure (a member's bytes depend on the
    trials' model, task and group size): with memory for 2 members it still lets 3 trials in, and they train as
    ensembles that fit (2, then 1), every row COMPLETED, none out of memory."""
    import threading

    from rlnb.sweep.batched_executor import MAX_MEMBERS, BatchedExecutor

    each = memory.member_bytes(SIZES["tiny"], 149_248, rows=2, tokens=4)
    monkeypatch.setattr(memory, "free_memory", lambda device: 2 * each + each // 2)
    executor = BatchedExecutor(tmp_path, threading.Event(), max_members=3)
    assert executor.capacity() == 3 <= MAX_MEMBERS
    rows = three_trials(executor)
    assert sorted((r["trial"], r["status"]) for r in rows) == [(0, "COMPLETED"), (1, "COMPLETED"), (2, "COMPLETED")]
    sizes = [rlnb.History.load(tmp_path / f"t{i}").config["batched"]["members"] for i in range(3)]
    assert sizes == [2, 2, 1]


def test_a_member_whose_build_meets_torch_s_cpu_allocator_error_fails_with_those_after_it(monkeypatch):
    """Torch's CPU allocator has no error type of its own: it raises a plain ``RuntimeError`` ("DefaultCPUAllocator:
    can't allocate memory"), which the build's handler (``MemoryError``, CUDA's ``OutOfMemoryError``) let through,
    failing every member, the built ones too. Read by ``rlnb.engine.oom.out_of_memory`` as the rest of the engine
    does: members 1 and 2 end FAILED RESOURCE_EXHAUSTED naming it, member 0 trains."""
    from rlnb.batched import ensemble
    from tests.support.no_room import ALLOCATOR, no_room

    monkeypatch.setattr(memory, "free_memory", lambda device: None)
    real, built = ensemble.build_adapter, []

    def build(*args: Any, **kwargs: Any) -> object:
        built.append(1)
        return no_room() if len(built) == 2 else real(*args, **kwargs)

    monkeypatch.setattr(ensemble, "build_adapter", build)
    members = [Member(rlnb.AdamParams(), seed=s) for s in range(3)]
    results = run_batched("tiny", "adam", members, steps=1, task=TASK, device="cpu")
    assert [(r.status, r.built) for r in results] == [("COMPLETED", True), ("FAILED", False), ("FAILED", False)]
    said = (
        f"TRAINING_OPERATION_ERROR_CODE_RESOURCE_EXHAUSTED: member 1's model could not be built (RuntimeError: "
        f"{ALLOCATOR}); members 1 to 2 did not train: run them again, or fewer at once"
    )
    assert results[1].reason == results[2].reason == said
    assert len(built) == 2  # member 2 was not tried after member 1 ran out


def test_a_member_whose_build_fails_otherwise_is_not_read_as_out_of_memory(monkeypatch):
    """Only running out of memory fails the members alone: another error in a member's build (a bug) is raised."""
    from rlnb.batched import ensemble

    monkeypatch.setattr(memory, "free_memory", lambda device: None)
    real, built = ensemble.build_adapter, []

    def build(*args: Any, **kwargs: Any) -> object:
        built.append(1)
        if len(built) == 2:
            raise RuntimeError("my build bug")
        return real(*args, **kwargs)

    monkeypatch.setattr(ensemble, "build_adapter", build)
    with pytest.raises(RuntimeError, match="my build bug"):
        run_batched("tiny", "adam", [Member(rlnb.AdamParams(), seed=s) for s in range(3)], steps=1, task=TASK,
                    device="cpu")  # fmt: skip

"""An ensemble's memory is checked before its members' models are built (``rlnb.batched.memory``)."""

from pathlib import Path

import pytest

import rlnb
from rlnb.batched import Member, memory, run_batched
from rlnb.engine.models.tiny import SIZES
from rlnb.tasks import Task

TASK = Task("t", ["n="], lambda p, c: 0.0, group_size=2, max_tokens=2)


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

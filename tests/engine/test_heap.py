"""glibc's malloc keeps freed memory while CPU engines run (``rlnb.engine.heap``). The page-fault check runs in
child processes (the setting is the process's): a slow test; the bookkeeping checks run here."""

import json
import os
import platform
import subprocess
import sys

import pytest

import rlnb
from rlnb.engine import heap

STEPS = """
import json, resource, rlnb
from rlnb import samples
with rlnb.connect("local", model="small", device="cpu", record=False, threads=1) as s:
    batch = [samples.cross_entropy(list(range(1, LENGTH)))] * COUNT
    def steps(n):
        for _ in range(n):
            s.forward_backward(batch)
            s.optim_step()
        s.wait()
    steps(5)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    steps(20)
    print(json.dumps([s.backend.config()["malloc"], resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before]))
"""


WORKLOADS = ((60, 1), (250, 1), (120, 4))
"""Batches (tokens, samples) the fault check trains on, each in a child of its own. Whether glibc's defaults give a
step's buffers back depends on where the step's last long-lived allocation lands in the heap (only the heap's top is
trimmed): one sample of 119 tokens faulted 13,977 times in 20 steps, then 96 after a change to the attention's Python
that left every tensor op the same; these three each fault 3,404-11,913 times with the defaults (6 Dec 2026, before
and after that change) and 62-313 with the heap kept."""


def steps(length: int, count: int, **env: str) -> tuple[str, int]:
    """What the child's session recorded as ``malloc``, and its page faults over 20 training steps on ``small``
    with a batch of ``count`` samples of ``length - 1`` tokens.

    The child runs with torch's own OpenMP thread count, as a user's process does, not the conftest's
    ``OMP_NUM_THREADS=1``: with one OpenMP thread glibc raises its threshold by itself within the five warm-up
    steps, and its defaults then fault no more than the kept heap (107 and 139 faults, session 25)."""
    user = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    code = STEPS.replace("LENGTH", str(length)).replace("COUNT", str(count))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300,
                         env={**user, **env})  # fmt: skip
    malloc, faults = json.loads(out.stdout.strip().splitlines()[-1])
    return malloc, faults


@pytest.mark.slow
@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt only")
def test_training_steps_reuse_freed_memory_instead_of_faulting_it_back():
    """With glibc's defaults a step's buffers are faulted in again (it gave them back); kept, next to none. Summed
    over three batches: one alone can leave a long-lived allocation at the heap's top, and then neither faults."""
    kept = [steps(*w) for w in WORKLOADS]
    default = [steps(*w, RLNB_MALLOC="default") for w in WORKLOADS]
    assert {m for m, _ in kept} == {"keep freed"} and {m for m, _ in default} == {"default"}
    kept_faults, default_faults = sum(f for _, f in kept), sum(f for _, f in default)
    assert kept_faults * 5 < default_faults, (kept, default)


def test_without_glibc_malloc_is_left_alone(monkeypatch):
    monkeypatch.setattr(heap, "_is_glibc", lambda: False)
    monkeypatch.delenv(heap.ENV, raising=False)
    monkeypatch.setattr(heap, "_users", 0)  # whatever engines other tests left open
    assert heap.acquire() == "not glibc" and heap._users == 0


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt only")
def test_the_last_session_to_close_gives_the_memory_back(monkeypatch):
    """Each CPU session holds the setting; when the last one closes, glibc's defaults return (and a trim)."""
    monkeypatch.delenv(heap.ENV, raising=False)
    calls = []
    monkeypatch.setattr(heap, "_set", lambda mmap, trim: calls.append((mmap, trim)) or True)
    monkeypatch.setattr(heap, "_users", 0)  # whatever engines other tests left open
    a = rlnb.connect("local", model="tiny", device="cpu", record=False)
    b = rlnb.connect("local", model="tiny", device="cpu", record=False)
    assert a.backend.config()["malloc"] == b.backend.config()["malloc"] == "keep freed"
    assert heap._users == 2
    a.close()
    a.close()  # twice: counted once
    assert heap._users == 1
    b.close()
    assert heap._users == 0
    assert calls == [(heap.MMAP_THRESHOLD, heap.TRIM_THRESHOLD), (heap.DEFAULT_THRESHOLD, heap.DEFAULT_THRESHOLD)]
    assert b.backend.config()["malloc"] == "keep freed"  # the run records what it ran with


@pytest.mark.parametrize("bad", ["off", "0", "DEFAULT", ""])
def test_rlnb_malloc_takes_keep_or_default_only(monkeypatch, bad):
    from rlnb.engine.threads import POLICY

    monkeypatch.setenv(heap.ENV, bad)
    users, leases = heap._users, len(POLICY._leases)
    with pytest.raises(ValueError, match="RLNB_MALLOC must be 'keep' .* or 'default'"):
        rlnb.connect("local", model="tiny", device="cpu", record=False)
    assert (heap._users, len(POLICY._leases)) == (users, leases)  # the refused session holds nothing


def test_rlnb_malloc_default_leaves_malloc_alone(monkeypatch):
    monkeypatch.setenv(heap.ENV, "default")
    with rlnb.connect("local", model="tiny", device="cpu", record=False) as s:
        assert s.backend.config()["malloc"] == "default"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("MALLOC_MMAP_THRESHOLD_", "67108864"),
        ("MALLOC_TRIM_THRESHOLD_", "0"),
        ("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=1024"),
    ],
)
def test_thresholds_the_environment_sets_are_left_alone(monkeypatch, name, value):
    """The user's own values: rlnb could neither read them back nor restore them, so it changes nothing."""
    monkeypatch.setattr(heap, "_is_glibc", lambda: True)
    monkeypatch.setattr(heap, "_set", lambda mmap, trim: pytest.fail("mallopt called"))
    monkeypatch.delenv(heap.ENV, raising=False)
    monkeypatch.setenv(name, value)
    users = heap._users
    assert heap.acquire() == "tuned by the environment" and heap._users == users

"""A sweep whose ensemble was stopped resumes with each member as planned: its seed, a run of its own, each step
once (docs/sweeps.md's resume, checked for trials on threads in tests/sweep, here for batched ones)."""

import json
import threading
from pathlib import Path

import numpy as np
import pytest

import rlnb
from rlnb.sweep import grid, histories, sweep
from rlnb.tasks import Task


@pytest.mark.slow  # three sweeps of a 4-member ensemble (~6 s)
def test_a_stopped_ensemble_resumes_each_member_with_its_seed_and_its_steps_once(tmp_path):
    stop, calls = threading.Event(), []

    def reward(prompt: str, completion: str) -> float:
        calls.append(1)
        if len(calls) == 9:  # step 2 of the first sweep (4 members x 2 samples a step): each stops after it
            stop.set()
        return float(completion.count("1"))

    task = Task("ones", ["n="], reward, group_size=2, max_tokens=3)
    base, configs = rlnb.AdamParams(weight_decay=0.0), grid(learning_rate=[1e-3, 2e-2])
    options = {"seeds": [0, 1], "steps": 4, "task": task, "progress": False, "device": "cpu"}
    first = sweep(base, configs, runs_dir=tmp_path / "a", stop=stop, **options)
    assert list(first.status) == ["STOPPED"] * 4 and list(first.steps_done) == [2] * 4
    assert (first.executor == "batched").all()
    again = sweep(base, configs, resume=first.attrs["path"], **options)
    fresh = sweep(base, configs, runs_dir=tmp_path / "b", **options)
    assert list(again.status) == ["COMPLETED"] * 4 and list(again.seed) == list(fresh.seed) == [0, 1, 0, 1]
    assert all(Path(p).name.endswith("-r2") for p in again.run_path)  # each in a run of its own, not continued
    for h, seed in zip(histories(again), again.seed, strict=True):
        assert h.config["seed"] == seed and list(h.steps.step) == [1, 2, 3, 4]  # every step once
    np.testing.assert_array_equal(again.final_reward, fresh.final_reward)  # the same trials, from the start
    np.testing.assert_allclose(again.final_loss, fresh.final_loss, atol=1e-7)
    for stopped in first.run_path:  # the stopped runs keep their 2 steps, not continued by the resume
        assert len(rlnb.History.load(stopped).steps) == 2
    rows = [json.loads(line) for line in (Path(first.attrs["path"]) / "trials.jsonl").read_text().splitlines()]
    assert sorted((r["trial"], r["status"]) for r in rows) == sorted(
        [(t, "STOPPED") for t in range(4)] + [(t, "COMPLETED") for t in range(4)]
    )

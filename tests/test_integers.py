"""Numpy integers are integers: ``seeds=np.arange(3)``, ``steps=np.int64(5)``, ``panel.start(np.int64(5))`` were
refused as "must be an integer". Each entry point takes them and keeps a plain int (JSON refuses numpy's)."""

import json
from pathlib import Path

import numpy as np
import pytest

import rlnb
from rlnb._input.checks import check_int, is_integer
from rlnb.engine.threads import check_threads
from rlnb.params.schedule import Schedule
from rlnb.sweep import TrialOptions, grid, sweep
from rlnb.tasks import Task
from rlnb.testing import FakeBackend
from rlnb.widgets import RunPanel


def test_numpy_integers_pass_and_come_back_as_plain_ints():
    for value in (np.int64(5), np.int32(5), np.uint8(5), 5):
        out = check_int("n", value, 1)
        assert out == 5 and type(out) is int
    assert check_int("n", None, 1, optional=True) is None
    for bad in (True, np.bool_(True), 5.0, np.float64(5), "5", None):
        assert not is_integer(bad)
        with pytest.raises(ValueError, match="n must be an integer >= 1"):
            check_int("n", bad, 1)
    with pytest.raises(ValueError, match=r"n must be an integer in \[1, 3\], got np.int64\(4\)"):
        check_int("n", np.int64(4), 1, 3)


def test_option_groups_and_schedules_keep_plain_ints():
    options = TrialOptions(seeds=np.arange(3), steps=np.int64(2))
    assert options.seeds == (0, 1, 2) and all(type(s) is int for s in options.seeds) and type(options.steps) is int
    schedule = Schedule("linear", warmup_steps=np.int64(1), total_steps=np.int64(10))
    assert type(schedule.total_steps) is int and type(schedule.warmup_steps) is int
    assert schedule(np.int64(10), 1.0) == pytest.approx(0.1)
    task = Task("t", ["a"], lambda p, c: 0.0, max_tokens=np.int64(4), group_size=np.int64(2))
    assert type(task.max_tokens) is int and type(task.group_size) is int
    assert check_threads(np.int64(2)) == 2 and type(check_threads(np.int64(2))) is int
    with pytest.raises(ValueError, match="seeds must be a non-empty sequence of integers"):
        TrialOptions(seeds=np.array([0.0, 1.0]))
    with pytest.raises(ValueError, match="seeds must be a non-empty sequence of integers"):
        TrialOptions(seeds=np.array([], dtype=int))


@pytest.mark.slow
def test_a_sweep_with_numpy_seeds_and_steps_records_plain_json(tmp_path):
    trials = sweep(rlnb.AdamParams(), grid(learning_rate=[1e-3]), seeds=np.arange(2), steps=np.int64(1),
                   runs_dir=tmp_path, progress=False, executor="threads")  # fmt: skip
    assert list(trials.status) == ["COMPLETED", "COMPLETED"]
    stored = json.loads((Path(trials.attrs["path"]) / "sweep.json").read_text())
    assert stored["seeds"] == [0, 1] and stored["steps"] == 1


@pytest.mark.usefixtures("undrawn_live_view")  # reads no picture of the live view
def test_a_run_panel_starts_numpy_steps():
    session = rlnb.Session(FakeBackend("adam"), record=False)
    panel = RunPanel(session, step_fn=lambda s, p: (s.optim_step().result(), None)[1], every=0.05)
    try:
        assert panel.start(np.int64(2)), panel.error
        assert panel.join(60) and panel.error is None and session.step == 2
    finally:
        panel.close()
        session.close()


@pytest.mark.parametrize("seed", [42.0, "42", np.float64(2.0), True, 2**63])
def test_a_sample_seed_is_an_int64_not_a_float_or_a_string(seed):
    """docs/concepts.md: floats such as 5.0 are refused wherever an integer is asked for (42.0 and "42" ran as 42)."""
    session = rlnb.Session(FakeBackend("adam"), record=False)
    try:
        with pytest.raises(ValueError, match=r"seed must be None or an integer in \[-9223372036854775808, 9223"):
            session.sample([[1, 2]], max_tokens=1, seed=seed)
        assert session.sample([[1, 2]], max_tokens=1, seed=np.int64(42)).result().results
    finally:
        session.close()


def test_every_options_threads_is_kept_as_a_plain_int():
    """docs/concepts.md: a numpy integer is kept as a plain int (``connect(threads=np.int64(1))`` wrote "1")."""
    from rlnb.batched.options import EngineOptions
    from rlnb.engine.options import ComputeOptions

    assert type(ComputeOptions(threads=np.int32(2)).threads) is int
    assert type(EngineOptions(threads=np.int64(2)).threads) is int


def test_a_remote_clients_integers_are_plain_ints_and_floats_are_refused():
    """``ClientOptions(max_retries=np.int64(2))`` kept numpy's, ``max_retries=2.0`` and ``max_response_bytes=2.5``
    were taken."""
    from rlnb.remote.calls import Caller
    from rlnb.remote.client import ClientOptions

    options = ClientOptions(max_retries=np.int64(2), max_response_bytes=np.int64(4096))
    assert type(options.max_retries) is int and type(options.max_response_bytes) is int
    with pytest.raises(ValueError, match=r"max_retries must be None or an integer >= 0, got 2\.0"):
        ClientOptions(max_retries=2.0)
    with pytest.raises(ValueError, match=r"max_response_bytes must be None or an integer >= 1, got 2\.5"):
        ClientOptions(max_response_bytes=2.5)
    with pytest.raises(ValueError, match=r"max_response_bytes must be None or an integer >= 1, got 2\.5"):
        Caller("http://localhost:1", max_response_bytes=2.5)  # the client checks the same, without the group

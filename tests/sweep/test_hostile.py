"""A careless or hostile user of ``sweep``: trial code that raises what is not an ``Exception``, options that are
the wrong kind, extras that are not installed. Each is a row or one clear error, never a lost trial."""

import os
import subprocess
import sys
import threading

import pytest

import rlnb
from rlnb.sweep import grid, sweep
from rlnb.tasks import Task
from tests.support.tasks import UnprintableError, raising_once_task, raising_task

BASE = rlnb.AdamParams(learning_rate=3e-3, weight_decay=0.0)


@pytest.mark.parametrize(
    ("exc", "reason"), [(KeyboardInterrupt(), "KeyboardInterrupt"), (SystemExit(3), "SystemExit: 3")]
)
def test_a_reward_raising_keyboard_interrupt_or_exit_on_a_thread_is_a_failed_row(tmp_path, exc, reason):
    """Not a Ctrl-C (that reaches the main thread only): the trial's row was dropped and the sweep stopped (or
    ``SystemExit`` escaped ``sweep``)."""
    trials = sweep(
        BASE, grid(learning_rate=[1e-3, 2e-3]), steps=2, task=raising_task(exc),
        executor="threads", runs_dir=tmp_path, progress=False,
    )  # fmt: skip
    assert list(trials.status) == ["FAILED", "FAILED"]
    assert trials.reason.str.startswith(reason).all() and (trials.steps_done == 0).all()


@pytest.mark.parametrize("executor", ["threads", "batched"])
@pytest.mark.parametrize(
    ("exc", "reason"), [(KeyboardInterrupt(), "KeyboardInterrupt"), (SystemExit(3), "SystemExit: 3")]
)
def test_a_reward_raising_keyboard_interrupt_or_exit_once_fails_that_trial_alone(tmp_path, executor, exc, reason):
    """Batched: the reward's ``KeyboardInterrupt`` set the sweep's stop (every trial STOPPED, later groups "stopped
    before it started") and its ``SystemExit`` failed every member of the group; on threads only its trial failed."""
    stop = threading.Event()
    trials = sweep(
        BASE, grid(learning_rate=[1e-3, 2e-3]), steps=2, task=raising_once_task(exc),
        executor=executor, runs_dir=tmp_path, progress=False, stop=stop,
    )  # fmt: skip
    assert list(trials.status) == ["FAILED", "COMPLETED"] and list(trials.steps_done) == [0, 2]
    assert trials.reason[0].startswith(reason) and (trials.executor == executor).all()
    assert not stop.is_set()


@pytest.mark.parametrize("executor", ["threads", "batched"])
def test_a_reward_error_whose_str_raises_is_a_failed_row_named_by_its_type(tmp_path, executor):
    """On threads the reason's ``str()`` raised out of ``run_trial``: the sweep raised and ``trials.jsonl`` was
    empty, the other trial's row lost with it."""

    def reward(prompt, completion):
        raise UnprintableError()

    task = Task("unprintable", [[104, 105]], reward, group_size=4)
    trials = sweep(BASE, grid(learning_rate=[1e-3, 2e-3]), steps=1, task=task, executor=executor, max_concurrent=2,
                   runs_dir=tmp_path, progress=False)  # fmt: skip
    assert list(trials.status) == ["FAILED", "FAILED"]
    assert trials.reason.str.startswith("UnprintableError (its message could not be made); raised by task").all()
    assert len((tmp_path / trials.attrs["path"] / "trials.jsonl").read_text().splitlines()) == 2


def test_a_failure_escaping_run_trial_is_that_trials_row_and_the_others_are_kept(tmp_path, monkeypatch):
    """A bug past ``run_trial``'s own handling: ``poll``'s ``fut.result()`` raised it, every row gathered with it was
    dropped and the sweep ended."""
    from rlnb.sweep import executors

    real = executors.run_trial

    def buggy(spec, runs_dir, control):
        if spec.trial == 0:
            raise RuntimeError("a bug past run_trial")
        return real(spec, runs_dir, control)

    monkeypatch.setattr(executors, "run_trial", buggy)
    trials = sweep(BASE, grid(learning_rate=[1e-3, 2e-3]), steps=1, executor="threads", max_concurrent=2,
                   runs_dir=tmp_path, progress=False)  # fmt: skip
    assert list(trials.status) == ["FAILED", "COMPLETED"]
    assert trials.reason[0] == "the trial's thread: RuntimeError: a bug past run_trial"


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"executor": "ray", "resources_per_trial": ["cpu"]}, r"resources_per_trial must be a dict"),
        ({"executor": "ray", "resources_per_trial": {"cpu": float("nan")}}, r"\['cpu'\] must be a finite number"),
        ({"executor": "ray", "resources_per_trial": {"gpu": float("inf")}}, r"\['gpu'\] must be a finite number"),
        ({"executor": "ray", "resources_per_trial": {"cpu": "1"}}, r"\['cpu'\] must be a finite number"),
        ({"executor": "ray", "resources_per_trial": {"cpu": True}}, r"\['cpu'\] must be a finite number"),
        ({"executor": "ray", "address": 5}, "address must be None or a Ray address"),
        ({"executor": "threads", "resources_per_trial": {"gpu": 1}}, "need executor='ray'"),  # was ignored
        ({"address": "auto"}, "need executor='ray'"),
    ],
)
def test_ray_options_of_the_wrong_kind_are_refused_naming_them_before_ray_or_a_folder(tmp_path, kwargs, words):
    """Before Ray is started or imported: NaN CPUs failed in ``int()`` after a local Ray started and the sweep folder
    was made; a GPU asked of threads was silently not given."""
    with pytest.raises(ValueError, match=words):
        sweep(BASE, steps=1, runs_dir=tmp_path, progress=False, **kwargs)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("space", "words"),
    [
        ({"beta1": (0.5, 0.9, "int")}, r"space\['beta1'\]: an Int range needs integer ends, got 0.5, 0.9"),  # Int(0, 0)
        ({"learning_rate": ("a", 1.0, "log")}, r"space\['learning_rate'\]: a Float range needs number ends"),
        ({"learning_rate": rlnb.sweep.Float("a", 1.0)}, r"space\['learning_rate'\]: a Float range needs number ends"),
        ({"learning_rate": rlnb.sweep.Float(True, 1.0)}, r"needs number ends, got True"),
        ({"learning_rate": rlnb.sweep.Float(1e-4, 1e-2, log="no")}, r"space\['learning_rate'\].log must be True or "),
    ],
)
def test_a_space_range_whose_ends_are_not_numbers_is_refused_naming_the_field(tmp_path, space, words):
    with pytest.raises(ValueError, match=words):
        sweep(BASE, space=space, search="optuna", n_trials=1, steps=1, runs_dir=tmp_path, progress=False)
    assert not list(tmp_path.iterdir())


def test_a_missing_optuna_names_the_extra_not_sqlalchemy(tmp_path, monkeypatch):
    """Optuna brings SQLAlchemy: without the extra, the study's URL was built first and raised "No module named
    'sqlalchemy.engine'" (the existing test hid only ``optuna``)."""
    for module in ("optuna", "sqlalchemy", "sqlalchemy.engine"):
        monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(ImportError, match=r"pip install 'rlnb\[optuna\]'"):
        sweep(BASE, space={"learning_rate": (1e-4, 1e-2)}, search="optuna", n_trials=1, steps=1, runs_dir=tmp_path,
              progress=False)  # fmt: skip
    assert not list(tmp_path.iterdir())


UNREACHABLE_SCRIPT = """
import sys, time
import rlnb
from rlnb.sweep import sweep
start = time.monotonic()
try:
    sweep(rlnb.AdamParams(), steps=1, executor="ray", address="127.0.0.1:1", runs_dir=sys.argv[1], progress=False)
except ConnectionError as exc:
    print("REFUSED", round(time.monotonic() - start), exc)
"""


@pytest.mark.slow  # a new Python process with torch
def test_a_ray_address_where_nothing_listens_is_refused_in_seconds(tmp_path):
    """``ray.init`` waited minutes (past 150 s here) for a GCS at a mistyped port."""
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    out = subprocess.run(
        [sys.executable, "-c", UNREACHABLE_SCRIPT, str(tmp_path)], capture_output=True, text=True, env=env, timeout=120
    )
    assert "REFUSED" in out.stdout and "address='127.0.0.1:1': no Ray answers there" in out.stdout, out.stderr[-2000:]
    assert not list(tmp_path.rglob("trial-*"))


@pytest.mark.skipif(sys.platform == "win32", reason="flock is POSIX")
def test_a_killed_ray_trials_temporary_folder_is_removed_by_the_next_trial_on_its_node(tmp_path, monkeypatch):
    """A Ray trial ran in a ``TemporaryDirectory``: a worker killed mid-trial (out of memory, a node drained) left
    the folder, its run and checkpoints in, in the node's /tmp for ever. A trial's folder is now held while it runs,
    and the next trial on the node removes those whose holder is gone; a live trial's is kept."""
    from rlnb._files import release
    from rlnb.engine import held
    from rlnb.sweep.ray_task import TRIAL_PREFIX, trial_folder

    monkeypatch.setattr(held.tempfile, "tempdir", str(tmp_path))
    killed, lock = held.scratch_folder(TRIAL_PREFIX)
    (killed / "run").mkdir()
    release(lock)  # the killed worker's lock went with it
    alive, alive_lock = held.scratch_folder(TRIAL_PREFIX)
    with trial_folder() as folder:
        assert folder.is_dir() and not killed.exists() and alive.exists()
        (folder / "run").mkdir()
    assert not folder.exists()
    assert sorted(tmp_path.iterdir()) == [alive]
    release(alive_lock)


@pytest.mark.parametrize("executor", ["threads", "batched"])
def test_a_failed_rows_reason_keeps_what_the_task_noted_on_the_rewards_error(tmp_path, executor):
    """A reward's error carries a note naming the task, the prompt and the completion (``rl_step``); a sweep's
    FAILED row said the error alone (``errors.describe`` dropped the notes)."""
    trials = sweep(
        BASE, grid(learning_rate=[1e-3, 2e-3]), steps=2, task=raising_once_task(KeyError("kaboom")),
        executor=executor, runs_dir=tmp_path, progress=False,
    )  # fmt: skip
    assert list(trials.status) == ["FAILED", "COMPLETED"]
    assert trials.reason[0].startswith("KeyError: 'kaboom'; raised by task 'raises once': reward(")


def test_a_ray_sweeps_dead_mailbox_neither_raises_from_stop_nor_from_pruning(tmp_path):
    """The mailbox actor lost (its node gone, out of memory): ``stop`` (Stop, Ctrl-C, an error's drain) and the
    pruner's service raised Ray's ``RayActorError`` out of the sweep, and the rows of the trials still running were
    lost. Its tasks read a dead mailbox as Stop (``ray_task``), so nothing is cancelled:
    each ends STOPPED and its row comes back. A stand-in for Ray whose every ``get`` of the mailbox raises (importing
    Ray takes seconds; a real dead mailbox: tests/sweep/test_ray.py)."""
    from types import SimpleNamespace

    from rlnb.sweep.ray_executor import RayExecutor

    class RayActorError(Exception):
        """Ray's error for a call to a dead actor (a ``RayError``)."""

    def dead(*args, **kwargs):
        raise RayActorError("The actor died unexpectedly before finishing this task.")

    cancelled: list[str] = []
    call = SimpleNamespace(remote=lambda *args: "ref")
    ray = SimpleNamespace(get=dead, cancel=lambda ref, force=False: cancelled.append(ref),
                          exceptions=SimpleNamespace(RayError=RayActorError))  # fmt: skip
    ex = object.__new__(RayExecutor)  # as __init__ leaves it, two trials submitted
    ex._ray, ex._office, ex._key = ray, SimpleNamespace(stop=call, take=call), "k"
    ex._collected, ex._stop_deadline = [], None
    ex._reporter = lambda spec, step, value: None
    ex._refs = {"task-0": SimpleNamespace(trial=0), "task-1": SimpleNamespace(trial=1)}
    ex._serve()  # the pruner's service: no report came, none is answered
    assert ex.stop() == [] and cancelled == [] and ex.running() == 2  # each comes back as its own STOPPED row
    assert ex._stop_deadline is not None  # and is force-cancelled STOP_GRACE seconds on if it does not


@pytest.mark.slow  # trials on threads, one of them stuck in its reward until the sweep gives up on it
@pytest.mark.parametrize("executor", ["threads", "batched"])
def test_a_stopped_sweep_stops_waiting_for_a_reward_that_never_returns(tmp_path, monkeypatch, executor):
    """``stop=`` (a Stop button, which has no second press) while a reward hangs: the sweep waited for the trial's
    next step, which never came, for ever (a second Ctrl-C was the only way out). It now waits ``STOP_WAIT_S``
    (here cut short) and returns, the stuck trial a STOPPED row saying so."""
    from rlnb.sweep import dispatch

    monkeypatch.setattr(dispatch, "STOP_WAIT_S", 0.5, raising=False)
    entered, release, stop = threading.Event(), threading.Event(), threading.Event()

    def stuck(prompt, completion):
        if not entered.is_set():
            entered.set()
            threading.Timer(60, release.set).start()  # the test's own deadline: without the fix, the trial then ends
            stop.set()  # Stop is pressed while the reward is stuck
        release.wait()
        return 0.0

    try:
        trials = sweep(BASE, grid(learning_rate=[1e-3, 2e-3]), steps=2, task=Task("stuck", ["a="], stuck), stop=stop,
                       executor=executor, max_concurrent=1, runs_dir=tmp_path, progress=False)  # fmt: skip
    finally:
        release.set()  # the abandoned thread ends on its own
    assert list(trials.status) == ["STOPPED", "STOPPED"]
    assert trials.reason.iloc[0].startswith("abandoned 60 s after the stop: it was still in a step")
    assert trials.reason.iloc[1] in ("stopped before it started", trials.reason.iloc[0])  # batched: one ensemble
    for thread in threading.enumerate():
        if thread.name.startswith("rlnb-sweep"):
            thread.join(120)


@pytest.mark.parametrize("port", ["99999", "65536", "²", "٣"])
def test_a_ray_address_whose_port_is_no_port_is_refused_naming_the_address(port):
    """A port past 65535 escaped ``check_reachable`` as a bare ``OverflowError`` from the socket, and ``²`` (a
    ``str.isdigit`` digit ``int`` refuses) as a bare ``ValueError`` about ``int()``."""
    from rlnb.sweep.ray_checks import check_reachable

    with pytest.raises(ValueError, match=rf"address='127.0.0.1:{port}': the port must be a whole number 0-65535"):
        check_reachable(f"127.0.0.1:{port}")

"""Sweeps on Ray: trials as tasks on a local Ray instance (2 CPUs), histories back in the sweep folder,
failures as rows, Stop and Ctrl-C cancel what is outstanding and keep what finished, pruning across
processes. Ray writes nothing to $HOME: token auth and usage stats are off, its files in a temp dir."""

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import optuna
import pytest

import rlnb
from rlnb.history import History
from rlnb.sweep import grid, histories, sweep
from rlnb.tasks import Task
from tests.support.tasks import raising_task

pytestmark = pytest.mark.slow  # starts a local Ray cluster

ROOT = Path(__file__).resolve().parents[2]
BASE = rlnb.AdamParams(learning_rate=3e-3, weight_decay=0.0)


@pytest.fixture(scope="module")
def local_ray():
    import ray

    env = {
        "RAY_AUTH_MODE": "disabled",  # else Ray writes a token to ~/.ray/auth_token
        "RAY_USAGE_STATS_ENABLED": "0",
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),  # tests.* in workers
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    home_ray = Path.home() / ".ray"
    had_home_ray = home_ray.exists()
    temp = tempfile.mkdtemp(prefix="rlnb-ray-")  # short: Ray's socket paths must stay under 108 bytes
    ray.init(
        num_cpus=2, object_store_memory=80 * 1024**2, include_dashboard=False, logging_level="error",
        log_to_driver=False, _temp_dir=temp,
    )  # fmt: skip
    try:
        yield ray
    finally:
        ray.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(temp, ignore_errors=True)
    assert had_home_ray or not home_ray.exists(), "Ray wrote to ~/.ray"


def stop_once_made(marker: Path) -> tuple[threading.Event, threading.Thread]:
    """A Stop set once ``marker`` exists (a trial's reward made it in a worker), or after 60 s; its watcher thread."""
    stop = threading.Event()

    def watch() -> None:
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        stop.set()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    return stop, watcher


def test_trials_run_as_ray_tasks_and_their_histories_come_back(local_ray, tmp_path):
    trials = sweep(
        BASE, grid(learning_rate=[1e-3, 3e-3]), seeds=[0, 1], steps=2, executor="ray", runs_dir=tmp_path,
        progress=False,
    )  # fmt: skip
    assert (trials.status == "COMPLETED").all() and (trials.executor == "ray").all()
    folder = Path(trials.attrs["path"])
    assert all(Path(p).parent == folder for p in trials.run_path)
    loaded = histories(trials)
    assert [len(h.steps) for h in loaded] == [2, 2, 2, 2]
    assert [h.config["sweep_config"]["learning_rate"] for h in loaded] == [1e-3, 1e-3, 3e-3, 3e-3]
    assert [h.config["seed"] for h in loaded] == [0, 1, 0, 1]
    assert trials.final_reward.between(0, 1).all() and trials.host.notna().all()


def _crash_once(marker: str):
    def reward(prompt, completion):
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL)  # the first call in any worker wins
        except FileExistsError:
            return 0.5
        os.close(fd)
        os._exit(1)  # the worker process dies mid-trial

    return reward


def test_a_crashed_worker_is_a_failed_row_and_the_rest_go_on(local_ray, tmp_path):
    task = Task("crash", [[104, 105]], _crash_once(str(tmp_path / "crashed")))
    trials = sweep(
        BASE, grid(learning_rate=[1e-3, 3e-3]), steps=2, task=task, executor="ray", runs_dir=tmp_path, progress=False
    )
    assert sorted(trials.status) == ["COMPLETED", "FAILED"]
    failed = trials[trials.status == "FAILED"].iloc[0]
    assert "WorkerCrashedError" in failed.reason or "ActorDiedError" in failed.reason or "died" in failed.reason
    ok = trials[trials.status == "COMPLETED"].iloc[0]
    assert len(History.load(ok.run_path).steps) == 2


def test_stop_ends_running_trials_at_their_next_step(local_ray, tmp_path):
    """Stop is set once a trial has taken its first reward (the worker leaves a file). Every trial ends
    STOPPED: one that was running at its next step, with the steps it ran back in the sweep folder;
    one that had not started, before it started."""
    marker = tmp_path / "rewarded"

    def reward(prompt, completion):
        marker.touch()
        return float(len(completion)) / 8

    stop, watcher = stop_once_made(marker)
    start = time.monotonic()
    trials = sweep(
        BASE, grid(learning_rate=[1e-3, 2e-3, 3e-3]), steps=40, task=Task("mark", [[104, 105]], reward),
        executor="ray", stop=stop, runs_dir=tmp_path, progress=False,
    )  # fmt: skip
    watcher.join()
    assert time.monotonic() - start < 60 and list(trials.status) == ["STOPPED"] * 3
    ran = trials[trials.reason.str.match(r"stopped after \d+ of 40 steps")]
    assert len(ran) >= 1 and ran.steps_done.max() >= 1
    for _, row in ran.iterrows():
        assert len(History.load(row.run_path).steps) == row.steps_done < 40  # what ran came back
    assert (trials.drop(ran.index).reason == "stopped before it started").all()
    assert trials.reason.iloc[2] == "stopped before it started"  # never submitted: two run at a time


def test_a_trial_that_does_not_stop_within_the_grace_is_force_cancelled(local_ray, tmp_path, monkeypatch):
    """A reward that does not return: after Stop the trial never reaches its next step, and its task is force-cancelled
    ``STOP_GRACE`` seconds on (1 s here), its row STOPPED saying so, the sweep returned. A Ray trial is local
    (``executor="ray"`` refuses a remote target: test_refused_up_front.py), so no kept model resource (``KeptResource``,
    a remote trial's) is left running by the cancel; the killed worker's temporary folder is the next trial's to
    remove (test_hostile.py)."""
    from rlnb.sweep import ray_executor

    monkeypatch.setattr(ray_executor, "STOP_GRACE", 1.0)
    marker = tmp_path / "stuck"

    def reward(prompt, completion):
        if marker.exists():
            return 0.0
        marker.touch()
        deadline = time.monotonic() + 120  # a cancel that does not come: the trial ends on its own, STOPPED at its
        while time.monotonic() < deadline:  # next step, and the test fails
            time.sleep(0.1)
        return 0.0

    stop, watcher = stop_once_made(marker)
    trials = sweep(BASE, steps=3, task=Task("stuck", [[104, 105]], reward), executor="ray", stop=stop,
                   runs_dir=tmp_path, progress=False)  # fmt: skip
    watcher.join()
    assert marker.exists()
    assert list(trials.status) == ["STOPPED"] and list(trials.reason) == ["cancelled: did not stop within 1 s"]


def test_stop_cancels_tasks_still_queued_in_ray(local_ray, tmp_path):
    """Another job holds both CPUs, so the sweep's two tasks wait in Ray's queue: Stop cancels them
    (and the third trial is never submitted)."""
    ray = local_ray
    held = tmp_path / "held"

    def hold(marker: str) -> None:
        Path(marker).touch()
        time.sleep(60)

    blocker = ray.remote(num_cpus=2)(hold).remote(str(held))
    deadline = time.monotonic() + 60
    while not held.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    stop = threading.Event()
    threading.Timer(1.0, stop.set).start()
    try:
        trials = sweep(
            BASE, grid(learning_rate=[1e-3, 2e-3, 3e-3]), steps=2, executor="ray", max_concurrent=2, stop=stop,
            runs_dir=tmp_path, progress=False,
        )  # fmt: skip
    finally:
        ray.cancel(blocker, force=True)
        ray.wait([blocker], timeout=30)
    assert list(trials.status) == ["STOPPED"] * 3
    assert list(trials.reason) == ["stopped before it started"] * 3 and (trials.steps_done == 0).all()


def test_ctrl_c_keeps_finished_trials(local_ray, tmp_path):
    def interrupt(done, total, row):
        if done == 1:
            raise KeyboardInterrupt

    trials = sweep(
        BASE, grid(learning_rate=[1e-3, 2e-3, 3e-3]), steps=3, executor="ray", max_concurrent=1,
        runs_dir=tmp_path, progress=interrupt,
    )  # fmt: skip
    assert list(trials.status) == ["COMPLETED", "STOPPED", "STOPPED"]
    assert len(History.load(trials.run_path.iloc[0]).steps) == 3


def test_pruning_reaches_trials_in_other_processes(local_ray, tmp_path):
    pruner = optuna.pruners.ThresholdPruner(lower=0.5, n_warmup_steps=2)
    trials = sweep(
        BASE, space={"learning_rate": (1e-7, 2e-7, "log")}, n_trials=2, search="optuna", pruner=pruner, steps=6,
        executor="ray", runs_dir=tmp_path, progress=False,
    )  # fmt: skip
    assert list(trials.status) == ["PRUNED", "PRUNED"] and (trials.steps_done == 2).all()
    assert (trials.executor == "ray").all() and [len(h.steps) for h in histories(trials)] == [2, 2]


@pytest.mark.parametrize(
    ("resources", "words"),
    [
        ({"gpu": 1}, "GPU"),
        ({"cpu": 3}, r"asks for 3 CPU\(s\); the Ray cluster has 2"),  # each waited for ever
        ({"memory": 1e9}, "keys must be"),
        ({"cpu": -1}, ">= 0"),
    ],
)
def test_resources_per_trial_are_checked_before_anything_runs(local_ray, tmp_path, resources, words):
    with pytest.raises(ValueError, match=words):
        sweep(BASE, steps=1, executor="ray", resources_per_trial=resources, runs_dir=tmp_path, progress=False)
    assert not list(tmp_path.rglob("trial-*"))  # (a GPU the cluster lacks is found once Ray is asked)


@pytest.mark.parametrize(
    ("exc", "reason"), [(KeyboardInterrupt(), "KeyboardInterrupt"), (SystemExit(3), "SystemExit: 3")]
)
def test_a_reward_raising_keyboard_interrupt_or_exit_in_a_worker_is_a_failed_row(local_ray, tmp_path, exc, reason):
    """A KeyboardInterrupt raised by the trial's code was Ray's sign of a cancel: a STOPPED "cancelled" row, though
    nobody stopped anything; sys.exit() killed the worker: a WorkerCrashedError row without its reason or history."""
    trials = sweep(
        BASE, grid(learning_rate=[1e-3, 2e-3]), steps=2, task=raising_task(exc),
        executor="ray", runs_dir=tmp_path, progress=False,
    )  # fmt: skip
    assert list(trials.status) == ["FAILED", "FAILED"] and trials.reason.str.startswith(reason).all()
    assert all(Path(p).parent == Path(trials.attrs["path"]) for p in trials.run_path)  # its run folder came back


def test_ctrl_c_while_a_finished_trial_is_fetched_keeps_its_row_and_history(local_ray, tmp_path, monkeypatch):
    """The interrupt lands in ``ray.get`` of a finished task (its row and history files: the slow part of collecting
    it). The trial was let go of before the fetch, and left the table, its history with it."""
    real_get, interrupted = local_ray.get, []

    def get(refs, *args, **kwargs):
        if "timeout" not in kwargs and not interrupted:  # the mailbox's calls have a timeout; a task's row has none
            interrupted.append(True)
            raise KeyboardInterrupt
        return real_get(refs, *args, **kwargs)

    monkeypatch.setattr(local_ray, "get", get)
    trials = sweep(
        BASE, grid(learning_rate=[1e-3, 2e-3]), steps=2, executor="ray", max_concurrent=1, runs_dir=tmp_path,
        progress=False,
    )  # fmt: skip
    assert interrupted and list(trials.status) == ["COMPLETED", "STOPPED"]
    assert len(History.load(trials.run_path.iloc[0]).steps) == 2


class _RaisingPruner(optuna.pruners.BasePruner):
    def prune(self, study, trial):
        raise RuntimeError("pruner boom")


def test_a_pruner_that_raises_fails_the_trial_it_judged_as_on_threads(local_ray, tmp_path):
    """The pruner runs in the driver: its error escaped ``sweep`` and stopped every trial, where on threads each
    trial it judged is FAILED with the error and the sweep goes on."""
    trials = sweep(
        BASE, space={"learning_rate": (1e-4, 1e-2, "log")}, search="optuna", n_trials=2, pruner=_RaisingPruner(),
        steps=2, executor="ray", runs_dir=tmp_path, progress=False,
    )  # fmt: skip
    assert list(trials.status) == ["FAILED", "FAILED"]
    assert list(trials.reason) == ["RuntimeError: pruner boom"] * 2 and (trials.steps_done == 1).all()


LOOPBACK_SCRIPT = """
import sys
from pathlib import Path
import psutil
import ray
from rlnb.sweep.ray_executor import RayExecutor
executor = RayExecutor(Path(sys.argv[1]), None)  # starts a local Ray, as a sweep with executor="ray" does
print("GCS", ray.get_runtime_context().gcs_address)
print("NODE", ray.util.get_node_ip_address())
children = psutil.Process().children(recursive=True)  # this Ray's, not another one on the machine
ours = {p.pid for p in children if p.name() in ("gcs_server", "raylet")}
for c in psutil.net_connections(kind="tcp"):
    if c.status == psutil.CONN_LISTEN and c.pid in ours:
        print("LISTEN", c.laddr.ip, flush=True)
executor.close()
ray.shutdown()
"""


@pytest.mark.slow
def test_a_local_ray_started_for_a_sweep_listens_on_loopback_only(tmp_path):
    """With RAY_AUTH_MODE=disabled, a GCS and raylet on every interface let any host that reaches this one join
    and run tasks; Ray turned a node address of 127.0.0.1 into the machine's outside address (issue 19 §1.6)."""
    pytest.importorskip("psutil")
    env = {
        **os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    }  # fmt: skip
    env.pop("RAY_ADDRESS", None)
    out = subprocess.run(
        [sys.executable, "-c", LOOPBACK_SCRIPT, str(tmp_path)], capture_output=True, text=True, env=env, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    gcs = next(line.split()[1] for line in lines if line.startswith("GCS "))
    listening = {line.split()[1] for line in lines if line.startswith("LISTEN ")}
    assert gcs.rsplit(":", 1)[0] == "127.0.0.1"
    assert "NODE 127.0.0.1" in lines
    assert listening and listening <= {"127.0.0.1", "::ffff:127.0.0.1"}, listening


def test_a_trial_that_cannot_be_pickled_to_a_worker_is_refused_before_the_folder(local_ray, tmp_path):
    """A reward closing over a lock: Ray refused the first trial's task after the folder was made, and its error
    ("Could not serialize the argument TrialSpec(...)") ended the sweep, the trial missing from trials.jsonl."""
    lock = threading.Lock()

    def reward(prompt, completion):
        with lock:
            return 0.5

    with pytest.raises(TypeError, match=r"executor='ray' sends each trial to a worker pickled, and its task cannot"):
        sweep(BASE, steps=1, task=Task("locked", [[104, 105]], reward), executor="ray", runs_dir=tmp_path,
              progress=False)  # fmt: skip
    assert not list(tmp_path.iterdir())


def test_a_ray_cluster_too_small_for_a_trial_leaves_no_sweep_folder(local_ray, tmp_path):
    """``resources_per_trial={"gpu": 1}`` on a cluster without GPUs is refused once Ray answers, after the sweep
    folder was made: an empty one (sweep.json, the lock) stayed behind."""
    with pytest.raises(ValueError, match=r"resources_per_trial asks for 1 GPU\(s\); the Ray cluster has 0"):
        sweep(BASE, steps=1, executor="ray", resources_per_trial={"cpu": 1, "gpu": 1}, runs_dir=tmp_path,
              progress=False)  # fmt: skip
    assert not list(tmp_path.iterdir())


def _kill_mailbox_at_first_reward(local_ray, tmp_path):
    """A reward function; the sweep's mailbox actors are killed (on another thread) once it has been called."""
    from rlnb.sweep import ray_executor

    marker = tmp_path / "rewarded"

    def reward(prompt, completion):
        marker.touch()
        return 0.5

    def kill_mailbox():
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        for office in list(ray_executor._POST_OFFICES.values()):
            local_ray.kill(office)

    threading.Thread(target=kill_mailbox, daemon=True).start()
    return reward


def test_trials_that_find_the_sweeps_mailbox_dead_are_stopped_to_be_resumed(local_ray, tmp_path):
    """The mailbox actor killed mid-sweep (a node lost, OOM): each trial not yet started was FAILED with Ray's
    traceback, and ``resume=`` skips FAILED trials, so they never ran."""
    reward = _kill_mailbox_at_first_reward(local_ray, tmp_path)
    trials = sweep(
        BASE, grid(learning_rate=[1e-3, 2e-3, 3e-3]), steps=3, task=Task("mark", [[104, 105]], reward),
        executor="ray", max_concurrent=1, runs_dir=tmp_path, progress=False,
    )  # fmt: skip
    assert "FAILED" not in set(trials.status) and trials.status.iloc[2] == "STOPPED"
    assert trials.reason.iloc[2].startswith("stopped before it started: the sweep's mailbox is gone")


def test_an_optuna_search_whose_mailbox_dies_returns_its_table_with_the_trials_stopped(local_ray, tmp_path):
    """The mailbox killed while an Optuna search's trial runs: the driver's pruning poll raised Ray's
    ``ActorDiedError`` out of ``sweep`` (the running trial's row and history lost). Now the running trial ends
    STOPPED at its next step and the ones asked after it find the mailbox gone, all for ``resume=`` to run."""
    reward = _kill_mailbox_at_first_reward(local_ray, tmp_path)
    trials = sweep(
        BASE, search="optuna", space={"learning_rate": (1e-3, 1e-2, "log")}, n_trials=2, steps=20,
        task=Task("mark", [[104, 105]], reward), executor="ray", max_concurrent=1, runs_dir=tmp_path, progress=False,
    )  # fmt: skip
    assert list(trials.status) == ["STOPPED", "STOPPED"], list(trials.reason)
    assert trials.reason.iloc[0].startswith("stopped after") and trials.run_path.iloc[0] is not None
    assert trials.reason.iloc[1].startswith("stopped before it started: the sweep's mailbox is gone")

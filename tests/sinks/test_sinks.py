"""Sinks: what TensorBoard, MLflow, W&B and Trackio receive, read back with each library's own
reader (offline), against ``history.steps``; sinks that fail; exports of finished runs.

Every library is pointed at a temporary folder (HOME, XDG dirs, TRACKIO_DIR, WANDB_DIR, ...) with
telemetry off; the module checks at the end that nothing appeared in the real home or the repo. The
tests that write through MLflow (a child process), W&B or Trackio are slow; TensorBoard's writer and
the sinks' own machinery are fast.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch

import rlnb
from rlnb import samples, sinks
from rlnb.history import History
from rlnb.sinks import exporting, stream
from rlnb.sinks.base import Failure, Point, RunInfo
from rlnb.sinks.points import Steps, merge
from rlnb.sweep import grid, sweep
from tests.support import sink_readers as read
from tests.support.sink_tests import (  # noqa: F401 - env: every library's state under a temporary folder
    CE,
    FAILS_AFTER_CLOSE_SCRIPT,
    LOADED_MACHINE_TIMEOUT,
    ROOT,
    Flaky,
    assert_points,
    env,
    expected,
    four,
    pytestmark,
    read_all,
    trackio_db,
)

INVALID = "TRAINING_OPERATION_ERROR_CODE_INVALID_INPUT"
LIBRARIES = ("tensorboard", "mlflow", "wandb", "trackio")


def train(session, steps: int = 5) -> None:
    """Steps with two forward-backwards in one step (the loss is their sum), a failed one (an
    INVALID_INPUT event), a metric logged twice at a step (the last one counts) and one logged
    as NaN (left out)."""
    for i in range(steps):
        session.forward_backward(CE)
        if i == 1:
            session.forward_backward(CE)
        if i == 2:
            session.forward_backward(CE, loss="ppo")  # no logprobs: fails INVALID_INPUT
        step = session.optim_step().result().step
        session.history.log(step, reward=i / 10)
        if i == 3:
            session.history.log(step, reward=0.99, kl=0.5)
        if i == 4:
            session.history.log(step, kl=math.nan)
    session.wait()


def check_run(history: History, where: Path, project: str, mlflow_db: Path | None = None) -> None:
    name = history.config["run_id"]
    want = expected(history)
    assert want[2]["loss"] == pytest.approx(2 * want[1]["loss"], rel=0.2)  # two forward-backwards summed
    assert want[4]["reward"] == 0.99 and want[4]["kl"] == 0.5 and "kl" not in want[5]
    failed = history.df[history.df.status == "TRAINING_OPERATION_STATUS_FAILED"]
    assert list(failed.error_code) == [INVALID]
    got = read_all(where, name, project, mlflow_db)
    for library, params, points, events in got:
        assert_points(points, want, library)
        assert params["optimizer"] == history.config["optimizer"], library
        assert params["model"] == "rlnb/tiny" and float(params["seed"]) == 0, library
        assert params["versions.torch"] == torch.__version__, library
        assert len(events) == 1 and events[0][0] == int(failed.step.iloc[0]), library
        assert INVALID in events[0][1] and "forward-backward" in events[0][1], library


@pytest.mark.slow  # real sink libraries: MLflow's child process, W&B, Trackio
def test_a_session_streams_config_steps_and_failures_to_every_sink(tmp_path):
    attached = four(tmp_path, "live")
    with rlnb.connect("local", optimizer="muon", model="tiny", seed=0, device="cpu", sinks=attached) as session:
        train(session)
    assert all(s.error is None for s in attached)
    check_run(session.history, tmp_path, "live")


@pytest.mark.slow  # real sink libraries: MLflow's child process, W&B, Trackio
def test_an_rl_run_sends_every_rl_metric_to_every_sink(tmp_path):
    """``rl_step``'s RL metrics (TRL's names, with their slashes) arrive in each sink under the same name,
    at each step, equal to the history's steps table."""
    from rlnb.tasks import RL_METRICS, digits_task, rl_step

    attached = four(tmp_path, "rl")
    with rlnb.connect("local", optimizer="adam", model="tiny", seed=0, device="cpu", sinks=attached) as session:
        for i in range(3):
            rl_step(session, digits_task(), rlnb.AdamParams(learning_rate=3e-3), group_size=2, seed=i)
    assert all(s.error is None for s in attached)
    want = expected(session.history)
    names = set(RL_METRICS) - {"kl"}  # no reference log-probs: no KL
    assert all(names <= set(values) for values in want.values())
    for library, _, points, _ in read_all(tmp_path, session.history.config["run_id"], "rl"):
        assert_points(points, want, library)
        assert all(names <= set(values) for values in points.values()), library


@pytest.mark.slow  # real sink libraries: MLflow's child process, W&B, Trackio
def test_export_writes_a_reloaded_run_the_same_way(monkeypatch, tmp_path):
    with rlnb.connect("local", optimizer="adam", model="tiny", seed=0, device="cpu") as session:
        train(session)
    path = session.history.path
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    default = sinks.MLflow(experiment="exported")
    assert default.tracking_uri is None and default.process  # MLflow's default store, written by a child
    import trackio

    mine = trackio.init(project="mine", embed=False, auto_log_cpu=False, auto_log_gpu=False)  # your own run
    for sink in four(tmp_path, "exported", mlflow=default):
        rlnb.export(path, sink)  # on this thread
    trackio.log({"x": 1.0})  # still goes to your run, which the export neither finished nor replaced
    trackio.finish()
    assert read.trackio(trackio_db("mine"), mine.name)[1] == {0: {"x": 1.0}}
    check_run(History.load(path), tmp_path, "exported", mlflow_db=tmp_path / "cwd" / "mlflow.db")
    dropped = sinks.TensorBoard(tmp_path / "file")
    dropped.error = OSError("disk full")
    with pytest.raises(sinks.SinkError, match="disk full"):
        rlnb.export(session.history, dropped)
    with pytest.raises(TypeError, match="export takes a History or a run folder"):
        rlnb.export(session, sinks.TensorBoard(tmp_path / "tb"))  # type: ignore[arg-type]


@pytest.mark.slow  # real sink libraries: MLflow's child process, W&B, Trackio
def test_a_sweep_sends_each_trial_under_the_sweep(tmp_path):
    tb, db = sinks.TensorBoard(tmp_path / "tb"), sinks.MLflow(tmp_path / "m.db", "sweep")
    trials = sweep(
        rlnb.AdamParams(learning_rate=1e-3),
        grid(learning_rate=[1e-3, 3e-3]),
        steps=2,
        max_concurrent=2,
        runs_dir=tmp_path / "runs",
        progress=False,
        sinks=[tb, db],
    )
    assert list(trials.status) == ["COMPLETED", "COMPLETED"]
    folder = Path(trials.attrs["path"]).name
    for run_path in trials.run_path:
        history = History.load(run_path)
        name = f"{folder}/{history.config['run_id']}"
        _, points, _ = read.tensorboard(tmp_path / "tb" / name)
        assert_points(points, expected(history))
        params, points, _, _ = read.mlflow(f"sqlite:///{tmp_path / 'm.db'}", "sweep", name)
        assert_points(points, expected(history))
        assert params["sweep"] == folder and float(params["sweep_config.learning_rate"]) in (1e-3, 3e-3)


def test_a_remote_session_streams_the_same_figures(server, tmp_path):
    tb = sinks.TensorBoard(tmp_path / "tb")
    with rlnb.connect(server, base_model="rlnb/tiny", optimizer="adam", sinks=[tb]) as session:
        for i in range(3):
            session.forward_backward(CE)
            session.optim_step(rlnb.AdamParams(learning_rate=1e-3))
            session.history.log(i + 1, reward=i)
        session.wait()
    params, points, _ = read.tensorboard(tmp_path / "tb" / session.history.config["run_id"])
    assert params["backend"] == "remote" and params["model"] == "rlnb/tiny"
    assert_points(points, expected(session.history))
    assert all("grad_norm" in p for p in points.values())  # rlnb serve's extension metrics


# -- failures ------------------------------------------------------------------------------------


@pytest.mark.slow  # a session trained until its sink's disk fills (~1.3 s)
def test_a_full_disk_warns_once_drops_the_sink_and_training_goes_on(tmp_path):
    full = Flaky(2, OSError(errno.ENOSPC, "No space left on device"), interval=0)
    tb = sinks.TensorBoard(tmp_path / "tb", interval=0)
    with pytest.warns(sinks.SinkWarning) as caught, rlnb.connect("local", device="cpu", sinks=[full, tb]) as session:
        for i in range(6):
            session.forward_backward(CE)
            session.optim_step().result()
            session.history.log(i + 1, reward=i)
            time.sleep(0.05)  # one write per step (interval=0)
    assert [str(w.message).count("No space left on device") for w in caught] == [1]
    assert "Flaky dropped while writing run" in str(caught[0].message)
    assert isinstance(full.error, OSError) and full.closed  # closed after the failure, best effort
    assert len(session.history.steps) == 6 and len(History.load(session.history.path).steps) == 6
    _, points, _ = read.tensorboard(tmp_path / "tb" / session.history.config["run_id"])
    assert_points(points, expected(session.history))  # the other sink got everything
    written = len(full.writes)
    with pytest.warns(sinks.SinkWarning) as caught, rlnb.connect("local", device="cpu", sinks=[full]) as again:
        again.forward_backward(CE)  # a dropped sink is skipped from then on, and each run it skips says so
        again.optim_step().result()
    (said,) = [str(w.message) for w in caught]
    first, later = session.history.config["run_id"], again.history.config["run_id"]
    assert f"Flaky was dropped while writing run {first} (OSError: [Errno 28] No space left" in said
    assert f"run {later} is not written there" in said and len(full.writes) == written


def test_a_missing_library_warns_with_the_install_hint(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "trackio", None)  # import trackio raises ImportError
    with pytest.warns(sinks.SinkWarning, match=r"trackio is not installed: pip install 'rlnb\[trackio\]'"):
        missing = sinks.Trackio("p")
    tb = sinks.TensorBoard(tmp_path / "tb")
    with pytest.warns(sinks.SinkWarning, match=r"Trackio was dropped \(ImportError: trackio is not installed: pip "
                      r"install 'rlnb\[trackio\]'.*\): run \S+ is not written there"):  # fmt: skip
        session = rlnb.connect("local", device="cpu", sinks=[missing, tb])
    with session:
        session.forward_backward(CE)
        session.optim_step().result()
    assert read.tensorboard(tmp_path / "tb" / session.history.config["run_id"])[1].keys() == {1}
    with pytest.raises(sinks.SinkError, match="not installed"):
        rlnb.export(session.history, missing)


@pytest.mark.slow  # real sink libraries: MLflow's child process, W&B, Trackio
def test_an_mlflow_server_that_is_down_drops_the_sink(monkeypatch, tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    down = sinks.MLflow(f"http://127.0.0.1:{port}", "x", interval=0)
    assert not down.process  # a server does the work: no child process
    warns = pytest.warns(sinks.SinkWarning, match="MLflow dropped")
    with warns as caught, rlnb.connect("local", device="cpu", sinks=[down]) as session:
        for _ in range(3):
            session.forward_backward(CE)
            session.optim_step().result()
    assert len(caught) == 1 and len(session.history.steps) == 3


@pytest.mark.slow  # real sink libraries: MLflow's child process, W&B, Trackio
def test_wandb_online_without_an_account_drops_the_sink(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)  # and HOME has no ~/.netrc: never logged in
    online = sinks.WandB("p", mode="online", dir=tmp_path / "wb")
    warns = pytest.warns(sinks.SinkWarning, match="WandB dropped.*No API key configured")
    with warns, rlnb.connect("local", device="cpu", sinks=[online]) as session:
        session.forward_backward(CE)
        session.optim_step().result()
    assert len(History.load(session.history.path).steps) == 1


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_close_gives_up_on_a_sink_that_hangs(monkeypatch):
    stuck = Flaky(0, RuntimeError("unused"), interval=0)
    closing, release = threading.Event(), threading.Event()

    def hang() -> None:
        closing.set()
        release.wait(600)

    stuck.close = hang  # type: ignore[method-assign]
    monkeypatch.setattr(stream, "CLOSE_TIMEOUT", 0.5)
    session = rlnb.connect("local", device="cpu", sinks=[stuck])
    session.forward_backward(CE)
    session.optim_step().result()
    try:
        with pytest.warns(sinks.SinkWarning, match="did not finish writing within 0.5 s"):
            session.close()  # returns while the sink's close still hangs: release is set only below
        assert closing.is_set() and not release.is_set()
    finally:
        release.set()


@pytest.mark.parametrize("record", [False, True])
def test_a_sink_given_up_on_says_where_everything_is(monkeypatch, tmp_path, record):
    """The close's warning said "(the rlnb run store has everything)" for a session with ``record=False`` too, which
    has no run store: nothing is on disk. It names the run folder, or says the history is in memory only."""
    from rlnb.testing import FakeBackend

    stuck = Flaky(0, RuntimeError("unused"), interval=0)
    release = threading.Event()
    stuck.close = lambda: release.wait(600)  # type: ignore[method-assign]
    monkeypatch.setattr(stream, "CLOSE_TIMEOUT", 0.1)
    session = rlnb.Session(FakeBackend(), record=record, runs_dir=tmp_path if record else None, sinks=[stuck])
    session.forward_backward(CE)
    session.optim_step().result()
    try:
        with pytest.warns(sinks.SinkWarning, match="did not finish writing within 0.1 s") as caught:
            session.close()
    finally:
        release.set()
    said = str(caught[0].message)
    if record:
        assert f"its run folder {session.history.path} has everything" in said
    else:
        assert "run store" not in said and "session.history has everything, in memory only" in said


def test_metric_names_mlflow_refuses_are_cleaned():
    from rlnb.sinks.mlflow import key

    assert [key(n) for n in ("loss", "eval/reward@k", "a b:c", "../x", "a//b", ".")] == [
        "loss",
        "eval/reward_k",
        "a b:c",
        "_x",
        "a__b",
        "_",
    ]


def test_a_figure_logged_after_close_is_said_to_miss_the_sinks(tmp_path):
    """``history.log(step, eval_accuracy=...)`` after the ``with`` block reached the run folder and none of the sinks
    (they finished their runs at close), silently. It is said once; a later session given the history with sinks
    of its own streams the figure to them, and nothing is said."""
    from rlnb.testing import FakeBackend

    tb = sinks.TensorBoard(tmp_path / "tb", interval=0)
    with rlnb.Session(FakeBackend(), runs_dir=tmp_path / "runs", run_id="r", sinks=[tb]) as s:
        s.forward_backward(CE)
        s.optim_step().result()
    with pytest.warns(sinks.SinkWarning, match=r"eval_acc logged at step 1 after close\(\): rlnb.sinks TensorBoard "
                                               "finished this run") as caught:  # fmt: skip
        s.history.log(1, eval_acc=0.7)
        s.history.log(1, eval_loss=0.2)  # said once
    assert len(caught) == 1 and caught[0].filename == __file__  # at the user's log call
    assert "eval_acc" not in read.tensorboard(tmp_path / "tb" / "r")[1][1]
    assert History.load(tmp_path / "runs" / "r").logged.eval_loss.iloc[-1] == 0.2  # the run folder has both
    tb2 = sinks.TensorBoard(tmp_path / "tb2", interval=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", sinks.SinkWarning)
        warnings.simplefilter("ignore", rlnb.history.RunContinuedWarning)  # a fresh backend on the run: step 1 again
        with rlnb.Session(FakeBackend(), history=s.history, sinks=[tb2]) as again:
            again.history.log(1, later=0.5)  # streamed by the new session: neither closed attachment speaks
        with rlnb.Session(FakeBackend(), record=False) as bare:
            bare.history.log(1, x=1.0)
        bare.history.log(2, x=2.0)  # no sinks: nothing to miss
    with rlnb.Session(FakeBackend(), record=False, sinks=[sinks.TensorBoard(tmp_path / "tb3", interval=0)]) as mem:
        mem.history.log(1, x=1.0)
    with pytest.warns(sinks.SinkWarning, match=r"reaches session.history, in memory, only"):  # no run folder to name
        mem.history.log(2, x=2.0)
    assert read.tensorboard(tmp_path / "tb2" / "r")[1][1]["later"] == 0.5
    with pytest.warns(sinks.SinkWarning, match="after close") as caught:
        again.history.log(2, last=1.0)
    assert len(caught) == 1


def test_runs_without_a_run_id_are_never_merged_into_one_in_a_sink(tmp_path):
    """Sessions with ``record=False`` have no run id: each was named ``rlnb-run``, so two of them streamed (or
    exported) to ``TensorBoard("tb")`` wrote into one folder, one TensorBoard run mixing both.
    Each such run gets a fresh name, the same in every sink it streams to."""
    from rlnb.testing import FakeBackend

    histories = []
    for _ in range(2):
        tb, tb2 = sinks.TensorBoard(tmp_path / "tb", interval=0), sinks.TensorBoard(tmp_path / "tb2", interval=0)
        with rlnb.Session(FakeBackend(), record=False, sinks=[tb, tb2]) as s:
            s.forward_backward(CE)
            s.optim_step().result()
        histories.append(s.history)
    names = sorted(p.name for p in (tmp_path / "tb").iterdir())
    assert len(names) == 2 and "rlnb-run" not in names
    assert names == sorted(p.name for p in (tmp_path / "tb2").iterdir())  # one name per run, in every sink
    assert all(list(read.tensorboard(tmp_path / "tb" / name)[1]) == [1] for name in names)
    for h in histories:
        rlnb.export(h, sinks.TensorBoard(tmp_path / "exported"))
    assert len(list((tmp_path / "exported").iterdir())) == 2


def test_an_old_runs_figure_named_like_a_steps_column_never_replaces_the_steps_own_in_a_sink(tmp_path):
    """A run written before ``log`` refused ``loss`` (its ``metrics.jsonl`` has ``{"step": 1, "loss": 99}``): its
    ``history.steps`` shows the forward-backwards' loss and ``"loss (logged)"``, yet ``rlnb.export`` sent 99 as the
    step's ``loss`` (and a logged ``queue_s`` over the step's wait)."""
    from rlnb.testing import FakeBackend

    s = rlnb.Session(FakeBackend(), runs_dir=tmp_path / "runs", run_id="r")
    s.forward_backward(CE)
    s.optim_step().result()
    s.close()
    with open(tmp_path / "runs" / "r" / "metrics.jsonl", "a") as fh:
        fh.write(json.dumps({"step": 1, "loss": 99.0, "queue_s": 7.0}) + "\n")
    history = History.load(tmp_path / "runs" / "r")
    rlnb.export(history, sinks.TensorBoard(tmp_path / "tb"))
    _, points, _ = read.tensorboard(tmp_path / "tb" / "r")
    assert_points(points, expected(history))
    assert points[1]["loss"] == 1.0 and points[1]["loss (logged)"] == 99.0 and points[1]["queue_s (logged)"] == 7.0


@pytest.mark.slow  # MLflow itself (in-process, a SQLite store)
def test_names_past_mlflows_length_limit_are_cut_and_kept_apart(tmp_path):
    """A figure or config field named past 250 characters failed MLflow's whole batch: the export raised and a
    streamed run dropped the sink. Both are cut, each ending in its own hash. (``history.log`` refuses such a figure
    name: a run folder written before it did holds them.)"""
    from rlnb.history.store import METRICS_FILE

    long_a, long_b = "eval/" + "a" * 300, "eval/" + "a" * 299 + "b"
    history = History.create({"seed": 0, "note_" + "n" * 300: "x"}, runs_dir=tmp_path, run_id="long")
    history.log(1, short=3.0)
    history.close()
    with open(tmp_path / "long" / METRICS_FILE, "a") as metrics:
        metrics.write(json.dumps({"step": 1, long_a: 1.0, long_b: 2.0}) + "\n")
    history = History.load(tmp_path / "long")
    rlnb.export(history, sinks.MLflow(tmp_path / "mlflow.db", "long", process=False))
    params, points, _, status = read.mlflow(f"sqlite:///{tmp_path / 'mlflow.db'}", "long", "long")
    assert status == "FINISHED" and points[1]["short"] == 3.0
    cut = sorted(k for k in points[1] if k != "short")
    assert len(cut) == 2 and all(len(k) == 250 and k.startswith("eval/aaa") for k in cut)
    assert sorted(points[1][k] for k in cut) == [1.0, 2.0]
    assert [v for k, v in params.items() if k.startswith("note_")] == ["x"]


def test_bad_sinks_are_refused_before_anything_starts():
    with pytest.raises(TypeError, match="sinks must be rlnb.sinks objects"):
        rlnb.connect("local", device="cpu", sinks=["tensorboard"])
    with pytest.raises(ValueError, match=r"WandB.mode = 'cloud' is invalid: must be one of offline, online"):
        sinks.WandB("p", mode="cloud")
    for interval in (-1, 61, math.inf, 10**5000):  # 10**5000: int's own "Exceeds the limit", naming no option
        with pytest.raises(ValueError, match=r"^TensorBoard.interval must be a finite number of seconds in \[0, 60\]"):
            sinks.TensorBoard("tb", interval=interval)
    with pytest.raises(ValueError, match=r"MLflow.experiment = '' is invalid"):
        sinks.MLflow(experiment="")
    with pytest.raises(TypeError, match=r"sinks must be a sink or a list of sink objects .*got str: 'tb'"):
        rlnb.connect("local", device="cpu", sinks="tb")
    for logdir, kind in ((None, "NoneType: None"), (5, "int: 5")):
        with pytest.raises(TypeError, match=rf"TensorBoard.logdir must be a path \(str or os.PathLike\), got {kind}"):
            sinks.TensorBoard(logdir)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"MLflow.tracking_uri must be None .*, a URI or a SQLite file path, got 5"):
        sinks.MLflow(tracking_uri=5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"MLflow.tracking_uri must be None .*got ''"):
        sinks.MLflow(tracking_uri="")
    with pytest.raises(TypeError, match=r"WandB.dir must be a path \(str or os.PathLike\), got int: 5"):
        sinks.WandB("p", dir=5, process=True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="TensorBoard.logdir must be a folder's path, got ''"):
        sinks.TensorBoard("")  # an unset variable: the run folders went into the working folder


def test_the_same_sink_twice_is_refused_before_anything_starts(tmp_path):
    """``sinks=[tb, tb]`` (a list built in two places) gave the run two writers into one library: every point
    written twice (two TensorBoard event files of one run, each point doubled in the dashboard)."""
    from rlnb.testing import FakeBackend

    tb = sinks.TensorBoard(tmp_path / "tb")
    said = r"sinks\[2\] is sinks\[0\] \(<rlnb.sinks.TensorBoard>\): the same sink twice would write every point"
    with pytest.raises(ValueError, match=said):
        rlnb.connect("local", device="cpu", runs_dir=tmp_path / "runs", sinks=[tb, sinks.TensorBoard(tmp_path), tb])
    assert not (tmp_path / "runs").exists() and not (tmp_path / "tb").exists()
    said = r"sinks\[1\] writes where sinks\[0\] does \(TensorBoard\(logdir=.*\)\): two sinks of one place would"
    with pytest.raises(ValueError, match=said):  # two objects of one folder: every point twice there all the same
        rlnb.Session(FakeBackend(), record=False, sinks=[tb, sinks.TensorBoard(tmp_path / "tb", interval=0)])
    with rlnb.Session(FakeBackend(), record=False, sinks=[tb, sinks.TensorBoard(tmp_path / "other")]) as s:
        s.forward_backward(CE)


def test_sink_folders_expand_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert sinks.TensorBoard("~/tb").logdir == tmp_path / "tb"
    with warnings.catch_warnings():  # process=True imports nothing here; without wandb the sink warns and drops
        warnings.simplefilter("ignore", sinks.SinkWarning)
        assert sinks.WandB("p", dir="~/w", process=True).dir == tmp_path / "w"


# -- the step builder against History.steps ------------------------------------------------------


def test_points_match_history_steps_when_completions_arrive_out_of_order():
    """A remote poller may notice an optim-step before the forward-backwards of its step: the
    point waits for them. A failed optim-step leaves the step count behind and ends its step, as in History.steps."""
    from rlnb import wire

    history = History()
    done = "TRAINING_OPERATION_STATUS_COMPLETED"
    plan = [  # kind, output or error, steps submitted before it
        ("forward-backward", wire.ForwardBackwardResult(loss=1.5), 0),
        ("forward-backward", wire.ForwardBackwardResult(loss=2.5), 0),
        ("optim-step", wire.OptimStepResult(step=1, metrics={"grad_norm": 3.0, "learning_rate": 1e-3}), 0),
        ("forward-backward", wire.ForwardBackwardResult(loss=0.5), 1),
        ("optim-step", wire.OperationError(code="TRAINING_OPERATION_ERROR_CODE_NON_FINITE_LOSS", message="nan"), 1),
        ("forward-backward", wire.ForwardBackwardResult(loss=0.25), 2),
        ("optim-step", wire.OptimStepResult(step=2, metrics={"grad_norm": 2.0, "learning_rate": 1e-3}), 2),
        ("sample", wire.OperationError(code=INVALID, message="bad prompt"), 3),
    ]
    records = [history.new(kind, step, None, at=100.0 + i) for i, (kind, _, step) in enumerate(plan)]
    steps = Steps()
    items = []
    for rec in records:
        history.update(rec, wire.Operation(id=f"op-{rec.seq}", status="TRAINING_OPERATION_STATUS_PENDING"), rec.seq)
        items += steps.record(rec)
    for seq in (2, 6, 0, 7, 4, 1, 3, 5):  # the order the poller noticed them
        _, result, _ = plan[seq]
        failed = isinstance(result, wire.OperationError)
        operation = wire.Operation(
            id=f"op-{seq}",
            status="TRAINING_OPERATION_STATUS_FAILED" if failed else done,
            output=None if failed else result,
            error=result if failed else None,
        )
        history.update(records[seq], operation, 200.0 + seq)
        items += steps.record(records[seq])
    made, failures = merge(items + steps.drain())
    assert {p.step: p.values for p in made} == expected(history)
    # the one submitted after the failed step (NON_FINITE_LOSS drops the gradients before it); it used to be the 0.5
    # before the failed step, and 0.25 went to a step 3 never made
    assert expected(history)[2]["loss"] == 0.25
    assert sorted((f.kind, f.code) for f in failures) == [
        ("optim-step", "TRAINING_OPERATION_ERROR_CODE_NON_FINITE_LOSS"),
        ("sample", INVALID),
    ]


def test_a_forward_only_evaluation_is_no_part_of_its_steps_loss(tmp_path):
    """Notebook 02 measures a held-out loss with ``forward_only=True`` between training steps: the steps table
    (in memory and reloaded) and every sink's points keep the training loss alone; the evaluation's loss stays
    in the operations table, marked ``forward_only``."""
    train, held = [samples.cross_entropy(list(b"hello world"))], [samples.cross_entropy(list(b"held out"))]
    with rlnb.connect("local", model="tiny", seed=0, device="cpu", runs_dir=tmp_path, run_id="r") as s:
        for i in range(3):
            fb = s.forward_backward(train)
            evaluation = s.forward_backward(held, forward_only=True) if i == 1 else None
            s.optim_step(rlnb.AdamParams(learning_rate=1e-3)).result()
            assert s.history.steps.loss.iloc[-1] == pytest.approx(fb.result().loss)
            if evaluation is not None:
                assert evaluation.result().loss > 0
        history = s.history
    ops = history.df[history.df.kind == "forward-backward"]
    assert [bool(p.get("forward_only")) for p in ops.params] == [False, False, True, False]
    again = History.load(tmp_path / "r")
    pd.testing.assert_series_equal(again.steps.loss, history.steps.loss)
    assert list(history.steps.loss) == pytest.approx(list(ops.loss.iloc[[0, 1, 3]]))
    steps = Steps()
    made, _ = merge([item for rec in history.records for item in steps.record(rec)] + steps.drain())
    assert [p.values["loss"] for p in made] == pytest.approx(list(history.steps.loss))


# -- imports and interpreter exit ----------------------------------------------------------------


@pytest.mark.slow  # a Python process
def test_libraries_are_imported_only_when_a_sink_is_created():
    code = (
        "import sys, rlnb, rlnb.sinks as s; libs = ('tensorboard', 'mlflow', 'wandb', 'trackio');"
        "print(sorted(m for m in libs if m in sys.modules)); s.TensorBoard('unused');"
        "print(sorted(m for m in libs if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=600)
    assert out.stdout.split("\n")[:2] == ["[]", "['tensorboard']"]


EXIT_SCRIPT = """
import rlnb
from rlnb import samples, sinks
from rlnb.sinks import stream
stream.EXIT_TIMEOUT = {exit_timeout!r}  # room for MLflow's child on a busy machine
where, project = {where!r}, "atexit"
session = rlnb.connect("local", device="cpu", runs_dir=where + "/runs", sinks=[
    sinks.TensorBoard(where + "/tb"), sinks.MLflow(where + "/mlflow.db", project),
    sinks.WandB(project, dir=where + "/wb"), sinks.Trackio(project)])
for i in range(3):
    session.forward_backward([samples.cross_entropy(list(b"hello world"))], loss="ppo" if i == 1 else "cross_entropy")
    session.optim_step().result()
    session.history.log(i + 1, reward=i)
print("RUN", session.history.path)
"""


@pytest.mark.slow  # a Python process that writes to every sink library
@pytest.mark.timeout(3 * LOADED_MACHINE_TIMEOUT)
def test_an_interpreter_that_exits_without_close_flushes_every_sink_and_exits(tmp_path):
    script = textwrap.dedent(EXIT_SCRIPT).format(where=str(tmp_path), exit_timeout=LOADED_MACHINE_TIMEOUT)
    timeout = 2 * LOADED_MACHINE_TIMEOUT  # exit waits at most EXIT_TIMEOUT for the sinks: it never hangs
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    path = Path(next(line for line in out.stdout.splitlines() if line.startswith("RUN ")).split(" ", 1)[1])
    history = History.load(path)
    for library, _, points, events in read_all(tmp_path, path.name, "atexit"):
        assert_points(points, expected(history), library)
        assert len(events) == 1 and INVALID in events[0][1], library


MID_INIT_SCRIPT = """
import threading, time
import wandb
import rlnb
from rlnb import samples, sinks
where, real_init, started = {where!r}, wandb.init, threading.Event()

def slow_init(*args, **kwargs):  # wandb.init starts its service first, then makes the run: slow on a busy machine
    wandb.setup()
    started.set()
    time.sleep(2)  # the interpreter exits meanwhile
    return real_init(*args, **kwargs)

wandb.init = slow_init
wb = sinks.WandB("midinit", dir=where + "/wb")
session = rlnb.connect("local", device="cpu", runs_dir=where + "/runs", sinks=[wb])
session.forward_backward([samples.cross_entropy(list(b"hello world"))])
session.optim_step().result()
session.history.log(1, reward=1.0)
assert started.wait(300)
print("RUN", session.history.path)
"""


@pytest.mark.slow  # a Python process that writes to W&B
@pytest.mark.timeout(3 * LOADED_MACHINE_TIMEOUT)
def test_an_interpreter_that_exits_while_wandb_starts_its_run_keeps_the_points(tmp_path):
    """W&B registers its service's teardown at exit when init starts the service; rlnb registered its own exit hook
    again (to run first) only once init returned, so an exit mid-init tore the service down first and the sink was
    dropped with "ConnectionResetError: Connection lost", its points lost (seen at load, 5 of 14 runs)."""
    script = textwrap.dedent(MID_INIT_SCRIPT).format(where=str(tmp_path))
    timeout = 2 * LOADED_MACHINE_TIMEOUT
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0 and "dropped" not in out.stderr, out.stderr[-3000:]
    path = Path(next(line for line in out.stdout.splitlines() if line.startswith("RUN ")).split(" ", 1)[1])
    runs = list((tmp_path / "wb" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    _, points, _, exit_code = read.wandb(runs[0])
    assert exit_code == 0
    assert_points(points, expected(History.load(path)), "wandb")


HANGING_SCRIPT = """
import socket, sys
import rlnb
from rlnb import samples, sinks
from rlnb.sinks import stream
stream.EXIT_TIMEOUT = float(sys.argv[2])
silent = socket.create_server(("127.0.0.1", 0))  # the kernel accepts connections; nobody ever answers
url = "http://127.0.0.1:%d" % silent.getsockname()[1]
session = rlnb.connect("local", device="cpu", runs_dir=sys.argv[1], sinks=[sinks.MLflow(url, "x", process=True)])
session.forward_backward([samples.cross_entropy(list(b"hello"))])
session.optim_step().result()
print("ready", flush=True)
"""


@pytest.mark.slow
def test_exit_does_not_wait_on_a_sink_child_whose_set_up_never_returns(tmp_path):
    """MLflow(process=True) against a server that accepts and never answers: its child never finishes making
    the sink. Exit gives up on it after EXIT_TIMEOUT (3 s here, 30 s by default), says so, and kills it."""
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(HANGING_SCRIPT), str(tmp_path), "3"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ, start_new_session=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        _, err = proc.communicate(timeout=300)  # the child never answers: exiting at all is the behaviour
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)  # the script and the sink's child, if anything is left
        proc.wait()
    assert proc.returncode == 0, err[-3000:]
    waited = re.search(r"MLflow did not finish writing within (\S+) s", err)
    assert waited and float(waited[1]) <= 3  # what is left of EXIT_TIMEOUT, then the child is killed
    assert len(History.load(next(tmp_path.iterdir())).steps) == 1  # the run store has everything


@pytest.mark.parametrize("created", ["yesterday", 10**400, [1]])
def test_export_takes_a_run_whose_created_at_is_damaged(tmp_path, created):
    """``rlnb.export`` stamped logged figures with ``float(config["created_at"])``: a config.json whose created_at is
    text, a list or 10**400 stopped the export with ValueError / TypeError / OverflowError before any point."""
    from rlnb.testing import FakeBackend

    s = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")
    s.forward_backward([samples.cross_entropy(list(b"ab"))])
    s.optim_step()
    s.wait()
    s.history.log(1, reward=0.5)
    s.close()
    config = json.loads((tmp_path / "r" / "config.json").read_text())
    (tmp_path / "r" / "config.json").write_text(json.dumps({**config, "created_at": created}))
    sink = Flaky(0, OSError("never"))
    rlnb.export(tmp_path / "r", sink)
    assert [p.values["reward"] for p in sink.writes[0]] == [0.5] and sink.closed


@pytest.mark.parametrize("sink", [None, "tensorboard", 5, "list"])
def test_export_to_what_is_no_sink_names_it(tmp_path, sink):
    """``rlnb.export(run, [tb])`` (a list, as ``connect(sinks=...)`` takes), ``"tensorboard"`` or None:
    ``AttributeError: 'list' object has no attribute 'error'``, naming neither the argument nor the fix."""
    from rlnb.testing import FakeBackend

    s = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")
    s.close()
    given = [Flaky(0, OSError("never"))] if sink == "list" else sink
    said = f"export takes one sink, such as rlnb.sinks.TensorBoard.*got {type(given).__name__}"
    with pytest.raises(TypeError, match=said):
        rlnb.export(tmp_path / "r", given)


def test_a_damaged_configs_run_id_or_sweep_never_leads_a_sink_out_of_its_folder(tmp_path):
    run = tmp_path / "runs" / "20260101-000000-abc123"
    info = RunInfo.from_config({"run_id": "../../../escaped", "sweep": "../x"}, run)
    assert (info.name, info.group) == ("20260101-000000-abc123", None)  # the folder's own name
    assert RunInfo.from_config({"run_id": "/etc", "sweep": "s1"}).name == "s1/rlnb-run"
    assert RunInfo.from_config({"run_id": "r1", "sweep": "s1"}).name == "s1/r1"


def test_an_export_of_a_run_folder_whose_run_id_is_damaged_is_named_for_its_folder(tmp_path):
    """A loaded run has no store, so the export had no folder to fall back on: every such run became ``rlnb-run``."""
    from rlnb.testing import FakeBackend

    with rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="20260101-000000-abc123") as s:
        s.forward_backward(CE).result()
    run = tmp_path / "20260101-000000-abc123"
    config = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps(config | {"run_id": "../../escaped"}))
    seen = []

    class Named(Flaky):
        def open(self, info: RunInfo):
            seen.append(info)
            return self

    rlnb.export(run, Named(0, OSError("never")))
    assert [(i.name, i.path) for i in seen] == [("20260101-000000-abc123", str(run))]


def test_a_sink_error_quoting_a_tracking_uris_password_never_shows_it(tmp_path):
    """MLflow's error quotes its tracking URI whole: ``MLflow("http://bob:<password>@host")`` on a server that is down
    put the password in the SinkWarning, the sink's repr and ``export``'s SinkError and its chained cause."""
    uri_error = RuntimeError("API request to http://bob:hunter2secret@127.0.0.1:1/api failed: refused")
    with rlnb.connect("local", device="cpu", runs_dir=tmp_path) as session:
        session.forward_backward(CE)
        session.optim_step().result()
    with pytest.raises(sinks.SinkError) as raised:
        rlnb.export(session.history, Flaky(1, uri_error))
    shown = [str(raised.value), repr(raised.value.__cause__)]
    live = Flaky(1, uri_error, interval=0)
    with pytest.warns(sinks.SinkWarning) as caught, rlnb.connect("local", device="cpu", sinks=[live]) as session:
        session.forward_backward(CE)
        session.optim_step().result()
    shown += [str(w.message) for w in caught] + [repr(live), repr(live.error)]
    assert all("hunter2secret" not in s and "http://bob:***@127.0.0.1:1/api" in s for s in shown), shown


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_a_sink_whose_close_missed_its_deadline_is_never_waited_for_again_while_it_runs(monkeypatch):
    """A sink whose close never returns (a tracking server gone silent) held every session's close for
    ``CLOSE_TIMEOUT`` (N x 30 s in a sweep), warning each time. Once a close has missed its deadline, one
    ``SinkWarning`` names it and no close waits for that sink while that writer still runs. A slow close is no
    error: the sink is not dropped, so a trial streaming to it meanwhile keeps writing (dropping it cut the
    other trials of a sweep mid-run); once the writer ends, closes wait for the sink again."""
    from rlnb.testing import FakeBackend

    stuck = Flaky(0, RuntimeError("unused"), interval=0)
    release = threading.Event()
    stuck.close = lambda: release.wait(600)  # type: ignore[method-assign]
    monkeypatch.setattr(stream, "CLOSE_TIMEOUT", 0.3)
    try:
        a, b = (rlnb.Session(FakeBackend(), record=False, sinks=[stuck]) for _ in range(2))  # a sweep's trials
        for s in (a, b):
            s.forward_backward(CE)
            s.optim_step().result()
        with pytest.warns(sinks.SinkWarning) as caught:
            a.close()
        assert [re.sub(r"\(.*\)", "(...)", str(w.message)) for w in caught] == [
            "rlnb.sinks.Flaky did not finish writing within 0.3 s; what it had not written yet may be missing there "
            "(...); no close waits for it again while it is still writing"
        ]
        assert stuck.error is None and stuck.is_stalled() and "dropped" not in repr(stuck)
        written = len(stuck.writes)
        b.history.log(1, reward=0.5)  # the other trial goes on streaming to it
        deadline = time.monotonic() + 30
        while len(stuck.writes) == written and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(stuck.writes) > written
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            b.close()  # neither waits nor warns (a missed wait would warn: an error here)
            with rlnb.Session(FakeBackend(), record=False, sinks=[stuck]) as c:
                c.forward_backward(CE)
    finally:
        release.set()
    stuck.stalled.join(30)
    assert not stuck.is_stalled()
    slow = threading.Event()
    stuck.close = lambda: slow.wait(600)  # type: ignore[method-assign]
    try:
        said = pytest.warns(sinks.SinkWarning, match="did not finish writing within 0.3 s")
        with said, rlnb.Session(FakeBackend(), record=False, sinks=[stuck]) as d:  # waited for again, said again
            d.forward_backward(CE)
    finally:
        slow.set()


@pytest.mark.timeout(60)  # it waited for ever
def test_export_to_a_sink_whose_set_up_never_answers_gives_up_at_the_deadline(monkeypatch, tmp_path):
    """``rlnb.export`` to a sink whose set-up never returns (MLflow pointed at a server that accepts and never
    answers) waited until Ctrl-C. It gives up after ``CLOSE_TIMEOUT`` with a ``SinkError`` naming the sink, the run
    and what it was doing; a sink that answers in time is written whole, in batches."""
    from rlnb.testing import FakeBackend

    entered, release = threading.Event(), threading.Event()

    class Silent(Flaky):
        def prepare(self) -> None:
            entered.set()
            release.wait(600)

    with rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r") as s:
        for _ in range(5):
            s.forward_backward(CE)
            s.optim_step().result()
    monkeypatch.setattr(stream, "CLOSE_TIMEOUT", 0.1)
    said = r"could not export run r to <rlnb.sinks.Silent>: no answer within 0.1 s .* while setting up the sink"
    try:
        with pytest.raises(sinks.SinkError, match=said):
            rlnb.export(s.history, Silent(0, OSError("never")))
        assert entered.is_set()
    finally:
        release.set()
    monkeypatch.setattr(exporting, "EXPORT_BATCH", 2)
    monkeypatch.setattr(stream, "CLOSE_TIMEOUT", 60.0)
    done = Flaky(0, OSError("never"))
    rlnb.export(tmp_path / "r", done)
    assert [[p.step for p in w] for w in done.writes] == [[1, 2], [3, 4], [5]] and done.closed


EXPORT_HANGING_SCRIPT = """
import sys, threading
import rlnb
from rlnb.history import History
from rlnb.sinks import SinkError, stream
from rlnb.sinks.base import Sink

class Silent(Sink):
    library, extra = "json", "none"
    def spec(self): raise NotImplementedError
    def prepare(self): threading.Event().wait()  # a tracking server that accepts and never answers
    def open(self, run): raise AssertionError("never reached")

history = History.create({}, sys.argv[1], "r")
history.log(1, reward=1.0)
history.close()
stream.CLOSE_TIMEOUT = 0.5
try:
    rlnb.export(sys.argv[1] + "/r", Silent())
except SinkError as exc:
    print(exc)
print("daemons:", all(t.daemon for t in threading.enumerate() if t.name.startswith("rlnb-export")), flush=True)
"""


@pytest.mark.slow  # a Python process
def test_an_export_given_up_on_says_the_library_may_still_write_and_never_keeps_the_process_alive(tmp_path):
    """``rlnb.export`` past its deadline left the library's thread running and said only "its thread is left
    behind": not that the library may still be writing the run there (an export again may write it twice), nor
    whether that thread keeps the process from exiting. It says so; the thread is a daemon: the script exits."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(EXPORT_HANGING_SCRIPT), str(tmp_path)],
        capture_output=True, text=True, timeout=300, env=os.environ,  # exiting at all is the behaviour
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (
        "no answer within 0.5 s (rlnb.sinks.stream.CLOSE_TIMEOUT) while setting up the sink; the library may "
        "still be writing this run there, on a daemon thread left behind" in proc.stdout
    ), proc.stdout
    assert "daemons: True" in proc.stdout


def test_wandb_figures_named_like_its_own_keys_are_sent_under_logged(tmp_path):
    """``history.log(step, _step=..., _runtime=...)``: W&B keeps every key that starts with ``_`` for itself
    (``_step``, ``_runtime``, ``_timestamp``), so such a figure was overwritten by W&B's own value (or replaced it),
    and hidden; one named ``failed_operation`` was mixed with rlnb's failure rows. They are ``logged/<name>``."""
    from rlnb.sinks.wandb import _Writer

    class Run:
        def __init__(self) -> None:
            self.rows: list[dict[str, object]] = []

        def define_metric(self, *args: object, **kwargs: object) -> None:
            return None

        def log(self, row: dict[str, object]) -> None:
            self.rows.append(row)

    run = Run()
    values = {"_step": 9.0, "_runtime": 1.0, "_timestamp": 2.0, "failed_operation": 3.0, "reward": 0.5, "a_b": 1.0}
    _Writer(run).write([Point(4, values, 0.0)], [Failure(1, 4, "optim_step", "op", "CODE", "boom", 0.0)])
    assert run.rows == [
        {"step": 4, "logged/_step": 9.0, "logged/_runtime": 1.0, "logged/_timestamp": 2.0,
         "logged/failed_operation": 3.0, "reward": 0.5, "a_b": 1.0},
        {"step": 4, "failed_operation": "optim_step op failed at step 4: CODE: boom"},
    ]  # fmt: skip


def test_a_field_annotated_while_the_sink_reads_the_config_never_drops_it(tmp_path):
    """``history.annotate`` on one thread while a sink's thread first read ``history.config`` (to name the run and
    send its hyperparameters): ``RuntimeError: dictionary changed size during iteration`` dropped the sink. It reads
    a snapshot. (The race made certain: a config value whose text, made on the sink's thread, annotates.)"""
    from rlnb.testing import FakeBackend

    seen: list[RunInfo] = []

    class Named(Flaky):
        def open(self, info: RunInfo):
            seen.append(info)
            return self

    sink = Named(0, OSError("never"), interval=0)
    session = rlnb.Session(FakeBackend(), record=False, sinks=[sink])

    class Annotating:
        def __str__(self) -> str:
            if "note" not in session.history.config:
                session.history.annotate(note="added meanwhile")
            return "annotating"

    session.history.config["probe"] = [Annotating()]
    session.forward_backward(CE)
    session.optim_step().result()
    session.close()
    assert sink.error is None and sink.closed
    assert seen[0].params["probe"] == '["annotating"]' and session.history.config["note"] == "added meanwhile"


def test_a_sink_failure_reaches_the_user_past_another_threads_catch_warnings():
    """A sink that failed warned on its own thread; warning filters are the process's, so a ``catch_warnings`` open
    on another thread at that moment (a library quieting its own warnings) took the ``SinkWarning``: the user never
    saw that the sink was dropped. It is said on the thread that logs or closes."""
    from rlnb.testing import FakeBackend

    failed, entered, leave = threading.Event(), threading.Event(), threading.Event()
    swallowed: list[warnings.WarningMessage] = []

    class Failing(Flaky):
        def fail(self, *args: Any, **kwargs: Any) -> None:
            super().fail(*args, **kwargs)
            failed.set()

    def quiet() -> None:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            entered.set()
            leave.wait(60)
        swallowed.extend(caught)

    sink = Failing(1, OSError("disk gone"), interval=0)
    other = threading.Thread(target=quiet)
    with pytest.warns(sinks.SinkWarning, match="Failing dropped while writing run .*disk gone") as said:
        other.start()
        entered.wait(60)
        session = rlnb.Session(FakeBackend(), record=False, sinks=[sink])
        session.forward_backward(CE)
        session.optim_step().result()
        failed.wait(60)
        leave.set()
        other.join(60)
        session.history.log(1, reward=1.0)  # said here, at the user's call
        assert len(said) == 1
        session.close()
    assert [w for w in swallowed if issubclass(w.category, sinks.SinkWarning)] == [] and len(said) == 1


def test_a_sink_failure_after_the_last_log_is_said_at_the_next_read_or_new_run():
    """A sink's failure was said only at the next ``history.log`` or ``close``: one after the last ``log``, in a
    notebook that never closes its history, was never shown. It is said at the next read of the history's tables
    (``steps``, ``df``, ``logged``: what a plot reads) on the notebook's thread, once; or when a new run starts
    streaming. Either way at the user's line."""
    from rlnb.testing import FakeBackend

    go, failed = threading.Event(), threading.Event()

    class Late(Flaky):
        def write(self, points: list[Point], failures: list[Failure]) -> None:
            go.wait(60)  # fails only once the log call has returned
            super().write(points, failures)

        def fail(self, *args: Any, **kwargs: Any) -> None:
            super().fail(*args, **kwargs)
            failed.set()

    history = History()
    attachment = stream.attach(history, [Late(1, OSError("disk gone"), interval=0)])
    try:
        with warnings.catch_warnings(record=True) as early:
            warnings.simplefilter("always")
            history.log(1, reward=1.0)
        assert not [w for w in early if issubclass(w.category, sinks.SinkWarning)]
        go.set()
        assert failed.wait(60)
        with warnings.catch_warnings(record=True) as on_thread:  # a live view's thread reading: never said there
            warnings.simplefilter("always")
            reader = threading.Thread(target=lambda: history.steps)
            reader.start()
            reader.join(60)
        assert not [w for w in on_thread if issubclass(w.category, sinks.SinkWarning)]
        with pytest.warns(sinks.SinkWarning, match="Late dropped while writing run .*disk gone") as said:
            history.steps  # noqa: B018 - the read is the point
        assert len(said) == 1 and said[0].filename == __file__  # at the user's line
        with warnings.catch_warnings(record=True) as again:
            warnings.simplefilter("always")
            history.df  # noqa: B018
        assert not [w for w in again if issubclass(w.category, sinks.SinkWarning)]  # said once
        failed.clear()
        other = Late(1, OSError("second disk gone"), interval=0)
        second = stream.attach(History(), [other])
        second._channels[0].put([Point(1, {"x": 1.0}, 0.0)])
        assert failed.wait(60)
        quiet = Flaky(10**6, OSError("never raised"), interval=0)
        with warnings.catch_warnings(record=True) as on_thread:  # a sweep's trial thread starting a run: not there
            warnings.simplefilter("always")
            trial = threading.Thread(target=lambda: rlnb.Session(FakeBackend(), record=False, sinks=[quiet]).close())
            trial.start()
            trial.join(60)
        assert not [w for w in on_thread if issubclass(w.category, sinks.SinkWarning)]
        with pytest.warns(sinks.SinkWarning, match="second disk gone") as said:
            rlnb.Session(FakeBackend(), record=False, sinks=[quiet]).close()  # a new run says what nothing said yet
        assert len(said) == 1 and said[0].filename == __file__  # at the user's line, not rlnb's Session
        second.close()
    finally:
        go.set()
        attachment.close()


@pytest.mark.slow  # a Python process
def test_a_sink_failure_no_call_said_is_said_at_interpreter_exit(tmp_path):
    """A run's writer that missed its close's deadline and failed afterwards: no log, close or read came again, and
    the failure was never shown. Interpreter exit says it, at the latest."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(FAILS_AFTER_CLOSE_SCRIPT)],
        capture_output=True, text=True, timeout=300, env=os.environ,
    )  # fmt: skip
    assert proc.returncode == 0 and "ready" in proc.stdout, proc.stderr[-3000:]
    assert re.search(r"SinkWarning: rlnb.sinks.Late dropped while writing run \S+: OSError: disk gone at close",
                     proc.stderr), proc.stderr[-3000:]  # fmt: skip


def test_an_export_of_a_run_without_an_id_keeps_the_name_its_stream_used(tmp_path):
    """A session with ``record=False`` streamed to a sink under a fresh name; ``rlnb.export`` of its history made
    another fresh name, so the export was a second run beside the streamed one instead of the same run's name."""
    from rlnb.testing import FakeBackend

    with rlnb.Session(FakeBackend(), record=False, sinks=[sinks.TensorBoard(tmp_path / "tb", interval=0)]) as s:
        s.forward_backward(CE)
        s.optim_step().result()
    rlnb.export(s.history, sinks.TensorBoard(tmp_path / "exported"))
    streamed = [p.name for p in (tmp_path / "tb").iterdir()]
    assert [p.name for p in (tmp_path / "exported").iterdir()] == streamed and len(streamed) == 1


def test_a_closed_run_whose_writers_ended_listens_to_the_historys_reads_no_more():
    """A history that many sessions continue (``history=``) gathered one read listener per run, each called at every
    read of its tables: once every writer has ended, nothing is left to say there."""
    history = History()
    for _ in range(3):
        stream.attach(history, [Flaky(10**6, OSError("never raised"), interval=0)]).close()
    assert len(history._read_listeners) == 0
    open_run = stream.attach(history, [Flaky(10**6, OSError("never raised"), interval=0)])
    assert len(history._read_listeners) == 1  # an open run listens: its writer may fail after the last log
    open_run.close()

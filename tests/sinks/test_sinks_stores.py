"""Where a sink's run lands: one store by several spellings (MLflow), W&B's own keys, a run continued in W&B."""

from __future__ import annotations

import re
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

import rlnb
from rlnb import sinks
from rlnb.sinks import leases, process, stream
from rlnb.sinks import mlflow as mlflow_sink
from rlnb.sinks import wandb as wandb_sink
from rlnb.sinks.base import Point, RunInfo
from rlnb.sinks.mlflow import store_uri
from rlnb.testing import FakeBackend
from tests.support import sink_readers as read
from tests.support.sink_tests import (  # noqa: F401 - env: every library's state under a temporary folder
    CE,
    LOADED_MACHINE_TIMEOUT,
    ROOT,
    env,
    pytestmark,
)

SPELLINGS = {
    "a relative path": lambda d: "mlflow.db",
    "an absolute path": lambda d: d / "mlflow.db",
    "a path through a link": lambda d: d / "link" / "mlflow.db",
    "sqlite:/// relative": lambda d: "sqlite:///mlflow.db",
    "sqlite://// absolute": lambda d: f"sqlite:///{d}/mlflow.db",
    "sqlite:/// with a query": lambda d: "sqlite:///mlflow.db?timeout=5",
}


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_mlflows_default_store_and_its_path_are_one_store(tmp_path, monkeypatch, spelling):
    """``sinks=[MLflow(), MLflow("mlflow.db")]``: MLflow's default store is ``./mlflow.db``, so both wrote every point
    of the run, as two MLflow runs of one name in one experiment. Any spelling of that file is refused as one place."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (tmp_path / "sub").mkdir()
    (tmp_path / "link").symlink_to(tmp_path)
    other = sinks.MLflow(SPELLINGS[spelling](tmp_path))
    said = r"sinks\[1\] writes where sinks\[0\] does \(MLflow\(store='sqlite:.*mlflow.db', experiment='rlnb'\)\)"
    with pytest.raises(ValueError, match=said):
        rlnb.Session(FakeBackend(), record=False, sinks=[sinks.MLflow(), other])
    with pytest.raises(ValueError, match=said):
        up_and_down = sinks.MLflow(tmp_path / "link" / "sub" / ".." / "mlflow.db")
        rlnb.Session(FakeBackend(), record=False, sinks=[other, up_and_down])
    assert not (tmp_path / "mlflow.db").exists()  # refused before anything started
    claim = leases.take(process.place(sinks.MLflow(process=True)) or "", "r")  # as Lease.claim: one run of a name
    assert claim is not None and leases.take(process.place(other) or "", "r") is None  # at a store, however spelled
    leases.drop(claim)


def test_file_stores_and_the_environments_default_are_one_store_by_any_spelling(tmp_path, monkeypatch):
    """``file:`` URIs of one folder (relative, absolute, ``localhost``, percent-quoted), and the store that
    ``$MLFLOW_TRACKING_URI`` names beside the same store given as an argument."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my runs").mkdir()
    spellings = ["file:my runs", f"file://{tmp_path}/my%20runs", f"file://localhost{tmp_path}/my runs/"]
    for spelling in spellings[1:]:
        with pytest.raises(ValueError, match=r"two sinks of one place"):
            rlnb.Session(FakeBackend(), record=False, sinks=[sinks.MLflow(spellings[0]), sinks.MLflow(spelling)])
    monkeypatch.setenv("MLFLOW_TRACKING_URI", spellings[1])
    with pytest.raises(ValueError, match=r"two sinks of one place"):
        rlnb.Session(FakeBackend(), record=False, sinks=[sinks.MLflow(), sinks.MLflow(spellings[2])])
    apart = [sinks.MLflow(), sinks.MLflow("file:other"), sinks.MLflow("mlflow.db"), sinks.MLflow(experiment="x")]
    assert len({mlflow_sink.store(s.tracking_uri) for s in apart[:3]}) == 3  # three stores, one sink's experiment
    assert stream.validate(apart) == apart


MLRUNS = {  # what ./mlruns holds, and whether MLflow keeps it as its store
    "nothing": ({}, False),
    "an empty experiment folder": ({"mlruns/0/": ""}, False),
    "an experiment": ({"mlruns/0/meta.yaml": "name: Default\n"}, True),
    "a folder not named by digits": ({"mlruns/models/meta.yaml": "name: m\n"}, False),
    "a meta.yaml that is a dangling link": ({"mlruns/3/meta.yaml": "->gone"}, True),
    "a file, not a folder": ({"mlruns": "x"}, False),
}


@pytest.mark.slow  # MLflow itself (imported: 2 s)
@pytest.mark.parametrize("environment", [False, True])
@pytest.mark.parametrize("layout", sorted(MLRUNS))
def test_rlnbs_copy_of_mlflows_default_store_rule_finds_what_mlflow_finds(tmp_path, monkeypatch, layout, environment):
    """rlnb finds MLflow's default store without importing MLflow (``as_mlflow_finds``: a sink writing from its child
    never imports it in the parent), the one copy of MLflow's rule in rlnb; MLflow's own ``get_tracking_uri`` finds
    the same: ``$MLFLOW_TRACKING_URI``, else ``./mlruns`` where that holds an experiment, else ``./mlflow.db``."""
    import mlflow

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    if environment:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/elsewhere.db")
    monkeypatch.setattr("mlflow.tracking._tracking_service.utils._tracking_uri", None)
    files, kept = MLRUNS[layout]
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        if text.startswith("->"):
            (tmp_path / name).symlink_to(tmp_path / text[2:])
        elif not name.endswith("/"):
            (tmp_path / name).write_text(text)
    copy = mlflow_sink.as_mlflow_finds()
    assert mlflow_sink.store(copy) == mlflow_sink.store(mlflow.get_tracking_uri())
    assert mlflow_sink.store(copy) == ("sqlite:" + str(tmp_path / "elsewhere.db") if environment else
                                       "file:" + str(tmp_path / "mlruns") if kept else
                                       "sqlite:" + str(tmp_path / "mlflow.db"))  # fmt: skip


@pytest.mark.slow  # MLflow itself (imported: 2 s), and the sink's child process
def test_mlflows_default_store_is_mlflows_own_answer_where_it_is_imported_and_the_child_writes_there(
    tmp_path, monkeypatch
):
    """MLflow before 3.7 kept ``./mlruns`` as its default store, with or without an experiment there; rlnb's rule,
    MLflow 3.7's, said ``./mlflow.db``: ``[MLflow(), MLflow("file:mlruns")]`` wrote one run twice into one store, and
    a sink writing from its child wrote into MLflow's default while its place said ``mlflow.db``. Where MLflow is
    imported, its own ``get_tracking_uri`` says where the default store is (here, as MLflow 3.6 finds it); a child is
    given the store its parent found, so it writes into the file its place names whatever its MLflow's default."""
    import mlflow  # noqa: F401 - imported: its own answer is taken

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setattr("mlflow.tracking._tracking_service.utils._tracking_uri", None)
    monkeypatch.setattr("mlflow.tracking._tracking_service.utils._get_default_tracking_uri", lambda: "./mlruns")
    assert mlflow_sink.store(None) == "file:" + str(tmp_path / "mlruns")
    with pytest.raises(ValueError, match=r"two sinks of one place"):
        rlnb.Session(FakeBackend(), record=False, sinks=[sinks.MLflow(), sinks.MLflow("file:mlruns")])
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "")  # MLflow's own default in the child: ./mlflow.db
    monkeypatch.setattr(mlflow_sink, "default_uri", lambda: store_uri(tmp_path / "found.db"))  # what the parent found
    child = sinks.MLflow(interval=0, process=True)
    with rlnb.Session(FakeBackend(), runs_dir=tmp_path / "runs", run_id="r", sinks=[child]) as s:
        s.forward_backward(CE)
        s.optim_step().result()
    assert child.error is None and not (tmp_path / "mlflow.db").exists()
    _, points, _, status = read.mlflow(store_uri(tmp_path / "found.db") or "", "rlnb", "r")
    assert status == "FINISHED" and sorted(points) == [1]


@pytest.mark.slow  # MLflow itself (in-process, a SQLite store)
def test_an_mlflow_store_path_with_url_characters_is_that_file(tmp_path):
    """``MLflow("50%41 #1?.db")``: the path went into ``sqlite:///`` unquoted, and SQLAlchemy read it as a URI: the
    file ``50A `` (``%41`` unquoted, ``#`` and ``?`` ending the path). Read back with MLflow from the file named."""
    (tmp_path / "db").mkdir()
    path = tmp_path / "db" / "50%41 #1?.db"
    mlflow = sinks.MLflow(path, interval=0, process=False)
    with rlnb.Session(FakeBackend(), runs_dir=tmp_path / "runs", run_id="r", sinks=[mlflow]) as s:
        s.forward_backward(CE)
        s.optim_step().result()
    assert [p.name for p in (tmp_path / "db").iterdir()] == [path.name]
    params, points, _, status = read.mlflow(mlflow.tracking_uri or "", "rlnb", "r")
    assert status == "FINISHED" and sorted(points) == [1] and params["run_id"] == "r"
    assert mlflow_sink.local_store(mlflow.tracking_uri or "") == path


def wandb_runs(where: Path) -> list[Path]:
    """The offline W&B run folders under ``where``, oldest first."""
    return sorted((where / "wandb").glob("offline-run-*"))


def finished(run: Path) -> tuple[dict[str, Any], read.Points, list[tuple[int, str]]]:
    """An offline run's config, points and failures (``read.wandb``) once its file holds the exit record: W&B's
    ``finish`` returns before its ``wandb-core`` process has written the file's last records (seen under load)."""
    deadline = time.monotonic() + LOADED_MACHINE_TIMEOUT
    while True:
        config, points, events, exit_code = read.wandb(run)
        if exit_code is not None or time.monotonic() > deadline:
            assert exit_code == 0, run
            return config, points, events
        time.sleep(0.1)


@pytest.mark.slow  # W&B itself (its service, an offline run)
def test_a_figure_named_like_wandbs_escape_of_another_stays_its_own(tmp_path):
    """``history.log(step, _step=1, **{"logged/_step": 2})``: ``_step`` is sent as ``logged/_step`` (W&B keeps
    ``_step``), which was also the other figure's own key, so one value overwrote the other at every step. Names that
    start with ``logged/`` are escaped too; both figures read back from the offline run's file, each its own."""
    wandb = sinks.WandB("p", dir=tmp_path / "wb", interval=0)
    with rlnb.Session(FakeBackend(), runs_dir=tmp_path / "runs", run_id="r", sinks=[wandb]) as s:
        s.forward_backward(CE)
        step = s.optim_step().result().step
        s.history.log(step, **{"_step": 1.0, "logged/_step": 2.0, "logged/x": 3.0, "failed_operation": 4.0})
    (run,) = wandb_runs(tmp_path / "wb")
    _, points, _ = finished(run)
    logged = {k: v for k, v in points[step].items() if k.startswith("logged/")}
    assert logged == {
        "logged/_step": 1.0,
        "logged/logged/_step": 2.0,
        "logged/logged/x": 3.0,
        "logged/failed_operation": 4.0,
    }


@pytest.mark.slow  # W&B's wandb-core process
def test_a_later_session_of_a_run_writes_on_into_its_wandb_run(tmp_path):
    """A session continuing a run (``run_id=`` of one streamed before: a kernel restart) made a second W&B run of the
    same name, where MLflow, TensorBoard and Trackio write on into the first. Each session's offline folder now holds
    the same W&B run id (``resume="allow"``): ``wandb sync`` uploads them, in order, as one run."""
    from rlnb.history.runs import RunContinuedWarning

    for steps in (2, 3):
        with warnings.catch_warnings():
            warnings.simplefilter("error", sinks.SinkWarning)
            warnings.simplefilter("ignore", RunContinuedWarning)  # it starts at step 1 again: FakeBackend has no resume
            sink = sinks.WandB("again", dir=tmp_path / "wb", interval=0)
            with rlnb.Session(FakeBackend(), runs_dir=tmp_path / "runs", run_id="r", sinks=[sink]) as s:
                for _ in range(steps):
                    s.forward_backward(CE)
                    s.history.log(s.optim_step().result().step, reward=float(steps))
    runs = wandb_runs(tmp_path / "wb")
    assert len(runs) == 2  # offline, W&B writes a folder per session
    records = [r.run for run in runs for r in read.wandb_records(next(run.glob("run-*.wandb"))) if r.HasField("run")]
    assert [(r.display_name, r.project) for r in records] == [("r", "again")] * 2
    assert records[0].run_id == records[1].run_id and all(records[0].run_id in run.name for run in runs)  # "-1" added
    # to the second folder's name when both sessions started within one second
    rewards = [{step: p["reward"] for step, p in finished(run)[1].items()} for run in runs]
    assert rewards == [{1: 2.0, 2: 2.0}, {1: 3.0, 2: 3.0, 3: 3.0}]
    made = s.history.config["created_at"]
    other = RunInfo("r", None, {"created_at": made + 1})  # another run of that name: another W&B run
    assert wandb_sink.run_id(other) != records[0].run_id == wandb_sink.run_id(RunInfo("r", None, {"created_at": made}))


def test_two_wandb_sinks_of_one_place_are_refused_however_spelled(tmp_path, monkeypatch):
    """Each session of a run writes one W&B run id now: two W&B sinks of one place would write every point into it
    twice. Offline, ``WandB()`` is ``WandB(dir=<$WANDB_DIR>)``; online, the server's project, whatever ``dir`` is."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "w"))

    def wandb(project: str = "p", **kwargs: object) -> sinks.WandB:
        return sinks.WandB(project, process=True, **kwargs)  # type: ignore[arg-type]  # process: W&B not imported

    for pair in ([wandb(), wandb(dir="w")], [wandb(mode="online"), wandb(mode="online", dir=tmp_path / "x")]):
        with pytest.raises(ValueError, match=r"sinks\[1\] writes where sinks\[0\] does \(WandB\(project='p'"):
            stream.validate(pair)
    apart = [wandb(), wandb(dir="x"), wandb(mode="online"), wandb(mode="online", entity="e"), wandb("q")]
    assert stream.validate(apart) == apart


@pytest.mark.slow  # W&B's wandb-core process
def test_wandb_sessions_of_one_run_started_within_a_second_keep_each_their_folder(tmp_path):
    """One W&B run id per rlnb run: two sessions started within one second name one ``offline-run-<time>-<id>``
    folder; W&B ends the later one in ``-1``, and no session's points overwrite another's."""
    sink = sinks.WandB("p", dir=tmp_path / "wb")
    for step in (1, 2, 3):
        writer = sink.open(RunInfo("r", None, {"created_at": 1.0}))
        writer.write([Point(step, {"loss": float(step)}, 0.0)], [])
        writer.close()
    runs = wandb_runs(tmp_path / "wb")
    points = sorted((finished(run)[1] for run in runs), key=min)
    assert points == [{1: {"loss": 1.0}}, {2: {"loss": 2.0}}, {3: {"loss": 3.0}}]


@pytest.mark.slow  # a local session, a sweep of two trials and four sink libraries
def test_the_sinks_page_example_runs_as_printed(tmp_path, monkeypatch):
    """docs/sinks.md's example, with two steps for its ``...`` and the session's run for ``<run-id>``: its export
    was of the run the session had just streamed to that MLflow store (``MLflow()`` is ``./mlflow.db``), which
    ``export`` refuses (``SinkError``: the store holds it already)."""
    page = (ROOT / "docs" / "sinks.md").read_text()
    (block,) = re.findall(r"```python\n(.*?)```", page, re.S)[:1]
    train = "for _ in range(2):\n    session.forward_backward(CE)\n    session.optim_step().result()\n"
    block = re.sub(r"^\.\.\. .*\n", train, block, flags=re.M).replace('"rlnb-runs/<run-id>"', "session.history.path")
    assert "<" not in block and "session.forward_backward" in block, block
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RLNB_RUNS_DIR", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    namespace: dict[str, Any] = {"CE": CE}
    with warnings.catch_warnings():
        warnings.simplefilter("error", sinks.SinkWarning)
        exec(compile(block, "docs/sinks.md", "exec"), namespace)
    name = namespace["session"].history.config["run_id"]
    _, points, _, status = read.mlflow(f"sqlite:///{tmp_path / 'archive.db'}", "rlnb", name)
    assert status == "FINISHED" and sorted(points) == [1, 2]
    assert set(namespace["trials"].status) == {"COMPLETED"} and len(namespace["trials"]) == 2


def test_two_mlflow_sinks_of_one_server_are_refused_without_showing_its_password():
    """The refusal names the place, which held the tracking URI whole: ``http://bob:<password>@host``."""
    server = "http://bob:s3cret@mlflow.example:5000"
    pair = [sinks.MLflow(server, process=True), sinks.MLflow(server.replace("s3cret", "other"), process=True)]
    with pytest.raises(ValueError, match=r"two sinks of one place") as refused:
        stream.validate(pair)
    assert "s3cret" not in str(refused.value) and "http://bob:***@mlflow.example:5000" in str(refused.value)

"""Names and texts a sink library takes otherwise: lone surrogates in what a server says and in a run folder copied
from elsewhere; names MLflow cleans alike."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import httpx
import pytest

import rlnb
from rlnb import sinks, wire
from rlnb.history import History
from rlnb.remote.bodies import Scrubber
from rlnb.sinks.base import Sink
from tests.support import sink_readers as read
from tests.support.sink_tests import (  # noqa: F401 - env: every library's state under a temporary folder
    LOADED_MACHINE_TIMEOUT,
    env,
    pytestmark,
    trackio_db,
)

INVALID = "TRAINING_OPERATION_ERROR_CODE_INVALID_INPUT"
SERVER_SAYS = (  # a server's JSON escapes may spell half a UTF-16 pair: decoded, it is a lone surrogate
    b'{"id": "op-\\ud800", "status": "TRAINING_OPERATION_STATUS_FAILED", "error": {"code": "' + INVALID.encode()
    + b'", "message": "no token \\udcff here"}}'
)  # fmt: skip


def _failed_by_server(history: History) -> None:
    """A forward-backward the remote client saw FAIL with ``SERVER_SAYS``, parsed as it parses every envelope."""
    envelope = Scrubber(None).parse(httpx.Response(200, content=SERVER_SAYS), wire.Operation)
    assert envelope.error is not None and "\udcff" in str(envelope.error.message)  # what reaches the history
    at = 1.7e9
    history.update(history.new(wire.OperationKind.FORWARD_BACKWARD, 0, {}, at), envelope, at + 1)


def _stream(sinks_: list[Sink]) -> History:
    history = History(config={"run_id": "surrogates", "model": "rlnb/tiny"})
    attached = sinks.attach(history, sinks_)
    _failed_by_server(history)
    history.log(1, reward=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", sinks.SinkWarning)  # no sink is dropped
        attached.close(timeout=LOADED_MACHINE_TIMEOUT)
    assert [s.error for s in sinks_] == [None] * len(sinks_)
    return history


SHOWN = r"forward-backward op-\ud800 failed at step 0: " + INVALID + r": no token \udcff here"
"""The failure as every library shows it: each lone surrogate as its escape."""


def test_a_server_message_with_a_lone_surrogate_reaches_tensorboard_escaped(tmp_path):
    """A server's error message (or operation id) holding a lone surrogate (a JSON ``"\\udcff"``) dropped TensorBoard
    at the batch holding it (``UnicodeEncodeError``), that batch's points lost too. It is written with the surrogate
    as its escape."""
    _stream([sinks.TensorBoard(tmp_path / "tb", interval=0)])
    _, points, events = read.tensorboard(tmp_path / "tb" / "surrogates")
    assert points == {1: {"reward": 0.5}}
    assert events == [(0, SHOWN)]


@pytest.mark.slow  # MLflow, W&B, Trackio
def test_a_server_message_with_a_lone_surrogate_reaches_every_library_escaped(tmp_path):
    """MLflow was dropped as TensorBoard was; Trackio lost the failure, saying only its own ``UserWarning``; W&B wrote
    ``\ufffd``. Each holds the failure's text with the surrogate as its escape now."""
    _stream([sinks.MLflow(tmp_path / "mlflow.db", "texts"), sinks.WandB("texts", dir=tmp_path / "wb"),
             sinks.Trackio("texts")])  # fmt: skip
    _, points, events, status = read.mlflow(f"sqlite:///{tmp_path / 'mlflow.db'}", "texts", "surrogates")
    assert (points, [text for _, text in events], status) == ({1: {"reward": 0.5}}, [SHOWN], "FINISHED")
    (run,) = (tmp_path / "wb" / "wandb").glob("offline-run-*")
    _, points, events, _ = read.wandb(run)
    assert (points, events) == ({1: {"reward": 0.5}}, [(0, SHOWN)])
    _, points, events = read.trackio(trackio_db("texts"), "surrogates")
    assert points == {1: {"reward": 0.5}}
    assert events == [(0, f"forward-backward failed: {INVALID}: {SHOWN}")]


def _copied_from_elsewhere(tmp_path: Path) -> Path:
    """A run folder named in another encoding (its byte 0xff: ``r\\udcff`` to Python) whose hand-edited config holds
    a lone surrogate's escape."""
    history = History.create({"model": "rlnb/tiny"}, tmp_path / "runs", "r")
    history.log(1, reward=0.5)
    history.close()
    folder = tmp_path / "runs" / os.fsdecode(b"r\xff")
    os.rename(tmp_path / "runs" / "r", folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | {"run_id": folder.name, "note": "caf\udce9"}))
    return folder


def test_a_run_folder_named_in_another_encoding_exports_to_tensorboard(tmp_path):
    """Such a run's export raised ``SinkError`` (``UnicodeEncodeError``: its name and config value reach the sink's
    claim and TensorBoard's hyperparameters). It is written under its name with the surrogate as its escape."""
    rlnb.export(_copied_from_elsewhere(tmp_path), sinks.TensorBoard(tmp_path / "tb"))
    params, points, _ = read.tensorboard(tmp_path / "tb" / r"r\udcff")
    assert points == {1: {"reward": 0.5}}
    assert params["note"] == r"caf\udce9" and params["model"] == "rlnb/tiny"


@pytest.mark.slow  # MLflow itself (in-process, a SQLite store)
def test_names_mlflow_cleans_alike_stay_apart(tmp_path):
    """``reward@k`` and ``reward_k`` (or ``%`` and ``..``) are both ``reward_k`` (``_``) to MLflow: the two figures were
    one metric holding both values at each step, and two such config fields made MLflow refuse the batch (the export
    raised, a streamed run dropped the sink). The later of each pair ends in its own hash; a lone name is as before."""
    from rlnb.sinks.mlflow import key

    history = History.create({"lr@warm": 1, "lr_warm": 2}, runs_dir=tmp_path, run_id="alike")
    for step in (1, 2):
        history.log(step, **{"reward@k": step, "reward_k": 10 * step, "%": 100 * step, "..": 1000 * step, "ok@": 5})
    history.close()
    rlnb.export(history, sinks.MLflow(tmp_path / "mlflow.db", "alike", process=False))
    params, points, _, _ = read.mlflow(f"sqlite:///{tmp_path / 'mlflow.db'}", "alike", "alike")
    hashed = [k for k in points[1] if k not in ("reward_k", "_", key("ok@"))]
    assert [k.rsplit("-", 1)[0] for k in sorted(hashed)] == ["_", "reward_k"] and key("ok@") == "ok_"
    for step in (1, 2):
        assert sorted(points[step].values()) == sorted([5, step, 10 * step, 100 * step, 1000 * step])
        assert points[step]["reward_k"] == step and points[step]["_"] == 100 * step  # the first of each pair
    assert sorted(v for k, v in params.items() if k.startswith("lr_warm")) == ["1", "2"]


@pytest.mark.slow  # MLflow's child process
def test_a_later_session_of_a_run_writes_on_into_its_mlflow_run(tmp_path):
    """A session continuing a run (``run_id=`` of one streamed before: a kernel restart) made a second MLflow run of
    the same name, each holding one session's steps, where TensorBoard's folder and Trackio's run go on. It writes on
    into the first, whose params keep their values (MLflow refuses to change one); a new run of that name is still
    left out (``test_sinks_hostile``)."""
    from mlflow import MlflowClient

    from rlnb.history.runs import RunContinuedWarning
    from rlnb.testing import FakeBackend

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    for steps in (2, 3):
        with warnings.catch_warnings():
            warnings.simplefilter("error", sinks.SinkWarning)
            warnings.simplefilter("ignore", RunContinuedWarning)  # it starts at step 1 again: FakeBackend has no resume
            sink = sinks.MLflow(tmp_path / "mlflow.db", "again")
            with rlnb.Session(FakeBackend(), runs_dir=tmp_path / "runs", run_id="r", sinks=[sink]) as s:
                for _ in range(steps):
                    s.forward_backward([rlnb.samples.cross_entropy([1, 2, 3])])
                    s.history.log(s.optim_step().result().step, reward=float(steps))
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("again").experiment_id])
    assert run.info.run_name == "r" and run.info.status == "FINISHED"
    rewards = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, "reward"))
    assert rewards == [(1, 2.0), (1, 3.0), (2, 2.0), (2, 3.0), (3, 3.0)]  # as history.logged holds them
    assert run.data.params["model"] == "fake"


@pytest.mark.slow  # Trackio itself (and, with process=True, the sink's child process)
@pytest.mark.parametrize("process", [False, True])
def test_a_figure_trackio_stores_under_another_name_is_said_once_naming_it(process):
    """Trackio keeps some names for itself (``time``, ``metrics``, ... and any that starts with ``__``) and stores
    such a figure as ``__<name>``, saying so only in a ``UserWarning`` of its own on the sink's thread, at each batch,
    or in the sink's child process: in a notebook, nothing said where ``time`` had gone. A ``SinkWarning`` says it on
    the user's thread, once per name, naming the stored name; in-process and from a child alike."""
    project = f"names-{process}"  # Trackio's folder is the module's
    sink = sinks.Trackio(project, interval=0, process=process)
    history = History(config={"run_id": "renamed", "model": "rlnb/tiny"})
    attached = sinks.attach(history, [sink])
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        history.log(1, time=1.0, reward=0.5)
        history.log(2, time=2.0, __x=3.0)
        history.log(3, time=3.0, metrics=4.0, reward=0.7)
        attached.close(timeout=LOADED_MACHINE_TIMEOUT)
    assert sink.error is None
    texts = [str(w.message) for w in said if w.category is sinks.SinkWarning]
    for name, stored in (("time", "__time"), ("__x", "____x"), ("metrics", "__metrics")):
        assert sum(f"{name!r} as {stored!r}" in text for text in texts) == 1, (name, texts)
    assert not any("reward" in text for text in texts) and all("run renamed has" in text for text in texts)
    _, points, _ = read.trackio(trackio_db(project), "renamed")
    assert points[1] == {"__time": 1.0, "reward": 0.5} and points[2] == {"__time": 2.0, "____x": 3.0}
    assert points[3] == {"__time": 3.0, "__metrics": 4.0, "reward": 0.7}

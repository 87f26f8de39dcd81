"""Read what each sink wrote with the library's own reader, offline.

Each reader returns ``(params, points, events)``: the hyperparameters as the library stored them,
``{step: {metric: value}}`` (the last value of a metric at a step wins, as in ``History.steps``),
and the failure events as ``[(step, text)]``.
"""

from __future__ import annotations

import json
import sqlite3
import struct
import time
from pathlib import Path
from typing import Any

Points = dict[int, dict[str, float]]


def tensorboard(run_dir: Path) -> tuple[dict[str, Any], Points, list[tuple[int, str]]]:
    """TensorBoard's ``EventAccumulator`` (keeping every event: size guidance 0) and its hparams proto."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    points: Points = {}
    for tag in acc.Tags()["scalars"]:
        for event in acc.Scalars(tag):
            points.setdefault(event.step, {})[tag] = event.value
    content = acc.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    start = HParamsPluginData.FromString(content).session_start_info
    params = {k: getattr(v, v.WhichOneof("kind")) for k, v in start.hparams.items()}
    tag = "failed_operations/text_summary"
    texts = acc.Tensors(tag) if tag in acc.Tags()["tensors"] else []
    events = [(e.step, e.tensor_proto.string_val[0].decode()) for e in texts]
    return params, points, events


def tensorboard_wait(run_dir: Path, step: int, deadline: float) -> None:
    """Wait (up to ``deadline`` seconds) until ``run_dir``'s event files hold ``step``'s scalars."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    end = time.monotonic() + deadline
    while time.monotonic() < end:
        acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
        scalars = acc.Reload().Tags()["scalars"] if run_dir.is_dir() else []
        if any(event.step == step for tag in scalars for event in acc.Scalars(tag)):
            return
        time.sleep(0.02)
    raise AssertionError(f"step {step} did not reach {run_dir} within {deadline} s")


def mlflow(uri: str, experiment: str, name: str) -> tuple[dict[str, Any], Points, list[tuple[int, str]], str]:
    """``MlflowClient`` on the store: params, every metric's history, ``rlnb.failure.*`` tags, status."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], filter_string=f"attributes.run_name = '{name}'")
    assert len(runs) == 1, [r.info.run_name for r in runs]
    run = runs[0]
    points: Points = {}
    for key in run.data.metrics:
        for m in sorted(client.get_metric_history(run.info.run_id, key), key=lambda m: m.timestamp):
            points.setdefault(m.step, {})[key] = m.value
    events = [
        (int(v.split(" failed at step ")[1].split(":")[0]), v)
        for k, v in sorted(run.data.tags.items())
        if k.startswith("rlnb.failure.")
    ]
    return dict(run.data.params), points, events, run.info.status


_BLOCK = 32768


def wandb_records(path: Path) -> list[Any]:
    """The records of a ``.wandb`` file: a LevelDB-style log (7-byte header ``:W&B``, 0xBEE1, 0;
    32 KiB blocks of chunks, each ``<crc32 uint32, length uint16, type uint8>``), parsed with
    W&B's own protobuf ``Record``."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B" and struct.unpack("<HB", data[4:7]) == (0xBEE1, 0)
    pos, pieces, raw = 7, b"", []
    while pos + 7 <= len(data):
        if _BLOCK - pos % _BLOCK < 7:  # a block's tail too short for a header is padding
            pos += _BLOCK - pos % _BLOCK
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 1:  # FULL
            raw.append(chunk)
        elif kind == 2:  # FIRST
            pieces = chunk
        elif kind == 3:  # MIDDLE
            pieces += chunk
        elif kind == 4:  # LAST
            raw.append(pieces + chunk)
        else:
            break
    records = []
    for blob in raw:
        record = pb.Record()
        record.ParseFromString(blob)
        records.append(record)
    return records


def wandb(run_dir: Path) -> tuple[dict[str, Any], Points, list[tuple[int, str]], int | None]:
    """An offline run folder (``offline-run-*``): config, history rows by their ``step``, the
    ``failed_operation`` rows, and the exit code (None if the run never finished)."""
    (path,) = run_dir.glob("run-*.wandb")
    config: dict[str, Any] = {}
    points: Points = {}
    events: list[tuple[int, str]] = []
    exit_code = None
    for record in wandb_records(path):
        kind = record.WhichOneof("record_type")
        if kind in ("run", "config"):
            items = record.run.config.update if kind == "run" else record.config.update
            config.update({i.key: json.loads(i.value_json) for i in items})
        elif kind == "history":
            row = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item}
            if "failed_operation" in row:
                events.append((row["step"], row["failed_operation"]))
            else:
                values = {k: v for k, v in row.items() if not k.startswith("_") and k != "step"}
                points.setdefault(row["step"], {}).update(values)
        elif kind == "exit":
            exit_code = record.exit.exit_code
    return config, points, events, exit_code


def trackio(db: Path, name: str) -> tuple[dict[str, Any], Points, list[tuple[int, str]]]:
    """Trackio's SQLite database: the run's config, its metric rows, its alerts."""
    con = sqlite3.connect(db)
    try:
        (config,) = con.execute("select config from configs where run_name = ?", (name,)).fetchone()
        points: Points = {}
        rows = con.execute("select step, metrics from metrics where run_name = ? order by id", (name,))
        for step, metrics in rows:
            points.setdefault(step, {}).update(json.loads(metrics))
        alerts = con.execute("select step, title, text from alerts where run_name = ? order by id", (name,))
        events = [(step, f"{title}: {text}") for step, title, text in alerts]
    finally:
        con.close()
    return json.loads(config), points, events

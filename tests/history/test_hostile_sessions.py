"""A hostile user's runs, continued: a damaged operation number, figures no standard JSON reader takes, a run that
holds only its config, and a later session whose clock is behind. Each must keep what was recorded, or say plainly
what it could not."""

import errno
import json
import math
import os

import pandas as pd
import pytest

import rlnb
import rlnb._files
from rlnb import samples, wire
from rlnb.history import History
from rlnb.history.runs import RunContinuedWarning
from rlnb.history.store import RunStoreWarning
from rlnb.testing import FakeBackend

BATCH = [samples.cross_entropy(list(b"sessions"))]


def one_step(session: rlnb.Session) -> None:
    session.forward_backward(BATCH)
    session.optim_step()
    session.wait()


def test_a_seq_that_leaves_no_room_is_skipped_as_damage_and_the_run_continues(tmp_path):
    """A hand-edited ``seq`` of 2**63 - 1 loaded (an int64 holds it), and the next session numbered its operations from
    2**63: its ``df`` failed (Int64 overflow) and its lines were left out of every later load."""
    with rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r") as first:
        one_step(first)
    ops = tmp_path / "r" / "ops.jsonl"
    damaged = {**json.loads(ops.read_text().splitlines()[-1]), "seq": 2**63 - 1}
    with ops.open("a") as fh:
        fh.write(json.dumps(damaged) + "\n")
    line = len(ops.read_text().splitlines())
    said = rf"ops\.jsonl: skipped line {line} \(seq {2**63 - 1}\): a seq of {2**53} or more leaves no room"
    with pytest.warns(RunContinuedWarning), pytest.warns(RuntimeWarning, match=said):
        again = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")
    one_step(again)
    again.close()
    assert list(again.history.df.seq) == [0, 1, 2, 3]
    with pytest.warns(RuntimeWarning, match="leaves no room"):
        loaded = History.load(tmp_path / "r")
    assert list(loaded.df.seq) == [0, 1, 2, 3] and list(loaded.steps.step) == [1, 1]


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_exports_write_standard_json_that_reads_back_exactly_and_older_files_still_read(tmp_path, fmt):
    """``to_csv``/``to_parquet`` wrote ``{"kl":NaN,"clip":Infinity}``: Python reads it, jq, JavaScript and DuckDB's json
    refuse it. Non-finite floats are the strings ``"NaN"``/``"Infinity"``/``"-Infinity"`` (protobuf's JSON spelling);
    ``rlnb.history.from_json_text`` gives the dicts back as ``history.df`` has them, and reads the older bare form."""
    if fmt == "parquet":
        pytest.importorskip("pyarrow")
    history = History()
    figures = {"kl": math.nan, "clip": math.inf, "low": -math.inf, "ok": 0.25}
    rec = history.new("forward-backward", 0, {"betas": [0.9, math.inf], "name": "adam"}, 1.7e9)
    done = wire.Operation(id="op-0", status=wire.OperationStatus.COMPLETED,
                          output=wire.ForwardBackwardResult(loss=1.0, metrics=figures))  # fmt: skip
    history.update(rec, done, 1.7e9 + 1)
    path = tmp_path / f"h.{fmt}"
    getattr(history, f"to_{fmt}")(path)
    table = pd.read_csv(path) if fmt == "csv" else pd.read_parquet(path)

    def strict(text: str) -> object:  # as jq or JavaScript's JSON.parse: NaN and Infinity are no JSON
        return json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} is not standard JSON: {text}"))

    assert strict(table.metrics[0]) == {"kl": "NaN", "clip": "Infinity", "low": "-Infinity", "ok": 0.25}
    assert strict(table.params[0]) == {"betas": [0.9, "Infinity"], "name": "adam"}
    for column in ("metrics", "params"):
        back, df = rlnb.history.from_json_text(table[column][0]), history.df[column][0]
        assert json.dumps(back) == json.dumps(df)  # NaN == NaN here: the same numbers, the same order
    assert json.dumps(rlnb.history.from_json_text('{"kl":NaN,"clip":-Infinity}')) == '{"kl": NaN, "clip": -Infinity}'


def test_a_run_that_holds_only_its_config_is_continued_keeping_its_label_and_first_start(tmp_path):
    """A session annotated (a sweep's label) and ended before any operation: the next session on that run id took it
    for a new run and wrote over ``config.json``, its label and first ``created_at`` lost. Such a run is continued;
    another optimizer (or seed) is neither refused nor warned about: the run holds no step the first one made, that
    the new one would relabel. The first session's setup is kept in ``earlier_sessions``."""
    with rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r") as first:
        first.history.annotate(label="lr=1e-3")
    created = first.history.config["created_at"]
    again = rlnb.Session(FakeBackend(optimizer="muon"), runs_dir=tmp_path, run_id="r")
    one_step(again)
    again.close()
    config = History.load(tmp_path / "r").config
    assert config["label"] == "lr=1e-3" and config["created_at"] == created and config["optimizer"] == "muon"
    assert config["earlier_sessions"][0]["optimizer"] == "adam" and len(config["continued_at"]) == 1
    with pytest.raises(ValueError, match="recorded with optimizer muon, and this session's is adam"):
        rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")  # it has steps now: one optimizer's


def test_a_later_session_whose_clock_is_behind_starts_its_own_step_by_operation_number(tmp_path):
    """Where a continued session begins was found by clock (``continued_at``): a second session on a node whose clock
    is behind the first's (a cluster on one shared runs folder, an NTP step back) put the boundary inside the first
    session on load, and its never-stepped forward-backward's loss (5) was added to the second session's first step
    (12, where the live history showed 7). ``continued_seq`` records the operation it began at; the loaded run, a plot
    given ``df`` and the sinks read it. A run an older rlnb continued (no ``continued_seq``) keeps the clock rule."""
    from rlnb.history.runconfig import session_starts
    from rlnb.history.tables import steps_table
    from rlnb.sinks.base import Point
    from rlnb.sinks.points import Steps

    losses = iter([10.0, 5.0, 7.0, 1.0])
    first = rlnb.Session(FakeBackend(loss=lambda step: next(losses)), runs_dir=tmp_path, run_id="r")
    one_step(first)
    first.forward_backward(BATCH).result(timeout=30)
    first.history.close()  # the process dies before its optim-step
    ops = tmp_path / "r" / "ops.jsonl"
    honest = ops.read_text()
    ahead = [
        {
            **row,
            **{t: row[t] + 3600 for t in ("submitted_at", "started_at", "finished_at") if isinstance(row[t], float)},
        }
        for row in map(json.loads, honest.splitlines())
    ]  # fmt: skip  (its clock an hour ahead of the next's)
    ops.write_text("".join(json.dumps(row) + "\n" for row in ahead))
    with pytest.warns(RunContinuedWarning):
        again = rlnb.Session(FakeBackend(loss=lambda step: next(losses)), runs_dir=tmp_path, run_id="r")
    one_step(again)
    one_step(again)
    again.close()
    assert again.history.config["continued_seq"] == [3]
    expected = [{"step": 1, "loss": 10.0}, {"step": 1, "loss": 7.0}, {"step": 2, "loss": 1.0}]
    loaded = History.load(tmp_path / "r")
    for history in (again.history, loaded):
        assert history.steps[["step", "loss"]].to_dict("records") == expected
        assert steps_table(history.df)[["step", "loss"]].to_dict("records") == expected
        steps = Steps(session_starts(history.config))  # what rlnb.export sends a sink
        points = [i for rec in history.records for i in steps.record(rec)] + steps.drain()
        assert all(isinstance(p, Point) for p in points)  # no failure among them
        assert [(p.step, p.values["loss"]) for p in points if isinstance(p, Point)] == [(1, 10.0), (1, 7.0), (2, 1.0)]
    config = tmp_path / "r" / "config.json"
    older = {k: v for k, v in json.loads(config.read_text()).items() if k != "continued_seq"}
    config.write_text(json.dumps(older))  # as an rlnb before continued_seq wrote it, with honest clocks
    ops.write_text(honest + "".join(ops.read_text().splitlines(keepends=True)[len(ahead) :]))
    assert History.load(tmp_path / "r").steps[["step", "loss"]].to_dict("records") == expected


@pytest.mark.parametrize("error", [errno.EROFS, errno.EACCES])
def test_a_run_continued_in_a_folder_that_cannot_be_written_goes_on_in_memory(tmp_path, monkeypatch, error):
    """A read-only runs folder (a mount, another user's shared one): continuing a run there raised a bare
    ``OSError`` from the check for a session holding it, naming neither the run nor what to do, while a new run
    there warned once and went on in memory. Now both do the latter."""
    with rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r") as first:
        one_step(first)
    real = rlnb._files.regular

    def read_only(path: str, flags: int, follow: bool = True) -> int:
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND):
            raise OSError(error, os.strerror(error), path)
        return real(path, flags, follow)

    monkeypatch.setattr(rlnb._files, "regular", read_only)
    with pytest.warns(RunContinuedWarning), pytest.warns(RunStoreWarning, match=r"cannot write the run folder .*r "):
        again = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")
    one_step(again)
    again.close()
    assert len(again.history.steps) == 2 and len(History.load(tmp_path / "r").steps) == 1  # the second in memory

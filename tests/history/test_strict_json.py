"""Every file of a run folder is standard JSON: ``ops.jsonl``, ``metrics.jsonl`` and ``completions.jsonl`` wrote a
NaN or infinite figure bare (``NaN``, ``Infinity``), which jq, JavaScript's ``JSON.parse``, Go and DuckDB refuse. They
are written as ``config.json`` writes them (``"NaN"``, ``"Infinity"``, ``"-Infinity"``) and read back as the floats
where a field holds a number, as text where it holds text; a run folder an older rlnb wrote bare still loads."""

import json
import math
from pathlib import Path

import pytest

from rlnb import wire
from rlnb.history import History

DONE, FAILED = wire.OperationStatus.COMPLETED, wire.OperationStatus.FAILED
ROW = {"group": 0, "prompt": "NaN", "completion": "Infinity", "reward": math.nan, "advantage": -math.inf,
       "length": 2, "truncated": False}  # fmt: skip
"""A completion whose texts are spelled like non-finite floats: they stay text."""


def reject(constant: str) -> None:
    raise ValueError(f"{constant} is not standard JSON")


def record(history: History) -> None:
    """A forward-backward of infinite loss and a NaN metric, a failed one whose texts read "NaN" and "Infinity", one
    never finished (NaN times), figures NaN and +-inf, and completions."""
    rec = history.new(wire.OperationKind.FORWARD_BACKWARD, 0, None, 1.7e9)
    output = wire.ForwardBackwardResult(loss=math.inf, metrics={"kl": math.nan, "clip": -math.inf})
    history.update(rec, wire.Operation(id="fb", status=DONE, output=output), 1.7e9 + 1)
    rec = history.new(wire.OperationKind.FORWARD_BACKWARD, 0, None, 1.7e9 + 2)
    error = wire.OperationError(code=wire.OperationErrorCode.INVALID_INPUT, message="NaN")
    history.update(rec, wire.Operation(id="Infinity", status=FAILED, error=error), 1.7e9 + 3)
    history.new(wire.OperationKind.OPTIM_STEP, 0, None, 1.7e9 + 4)  # never finished: NaN times and figures
    history.log_completions(1, [ROW])
    history.log(1, reward=math.nan, up=math.inf, down=-math.inf, plain=0.5)


def check_standard(folder: Path) -> None:
    names = sorted(p.name for p in folder.iterdir() if p.suffix in (".jsonl", ".json"))
    assert names == ["completions.jsonl", "config.json", "metrics.jsonl", "ops.jsonl"]
    for name in names:
        text = (folder / name).read_text(encoding="utf-8")
        for line in text.splitlines() if name.endswith(".jsonl") else [text]:
            json.loads(line, parse_constant=reject)


def check_read_back(loaded: History) -> None:
    first, failed, pending = loaded.records
    assert first.loss == math.inf and math.isnan(first.metrics["kl"]) and first.metrics["clip"] == -math.inf
    assert failed.op_id == "Infinity" and failed.error_message == "NaN"  # text fields stay text
    assert math.isnan(pending.finished_at) and math.isnan(pending.grad_norm) and math.isnan(pending.loss)
    logged = loaded.logged.iloc[0]
    assert math.isnan(logged.reward) and logged.up == math.inf and logged.down == -math.inf and logged.plain == 0.5
    row = loaded.completions.iloc[0]
    assert (row.prompt, row.completion) == ("NaN", "Infinity") and math.isnan(row.reward)
    assert row.advantage == -math.inf


def test_every_line_a_run_writes_is_standard_json_and_reads_back_as_recorded(tmp_path):
    history = History.create({"optimizer": "adam"}, tmp_path, "r")
    record(history)
    history.close()
    check_standard(tmp_path / "r")
    check_read_back(History.load(tmp_path / "r"))
    line = json.loads((tmp_path / "r" / "metrics.jsonl").read_text())
    assert line == {"step": 1, "reward": "NaN", "up": "Infinity", "down": "-Infinity", "plain": 0.5, "rlnb_session": 0}
    with pytest.raises(ValueError, match=r"rows\[0\]: reward = 'NaN'"):  # given as text: refused, as before
        history.log_completions(2, [{**ROW, "reward": "NaN"}])


def test_a_saved_history_is_standard_json_and_reads_back_as_recorded(tmp_path):
    history = History()
    record(history)
    saved = history.save(tmp_path / "saved")
    check_standard(saved)
    check_read_back(History.load(saved))


def test_a_run_an_older_rlnb_wrote_with_bare_nan_still_loads_and_continues(tmp_path):
    """Lines written bare (``NaN``, ``Infinity``), as rlnb wrote them before, load as the floats; a session continuing
    such a run appends standard lines after them, and the run loads whole."""
    history = History.create({"optimizer": "adam"}, tmp_path, "old")
    record(history)
    history.close()
    folder = tmp_path / "old"
    for name in ("ops.jsonl", "metrics.jsonl", "completions.jsonl"):  # each line as an older rlnb wrote it
        rows = [json.loads(line) for line in (folder / name).read_text().splitlines()]
        old = [{k: _bare(v, k) for k, v in row.items()} for row in rows]
        text = "".join(json.dumps(row, separators=(",", ":")) + "\n" for row in old)
        assert "NaN" in text and '"NaN"' not in text.replace('"prompt":"NaN"', "").replace('"error_message":"NaN"', "")
        (folder / name).write_text(text)
    check_read_back(History.load(folder))
    again = History.create({"optimizer": "adam"}, tmp_path, "old")
    again.log(2, reward=-math.inf)
    again.close()
    loaded = History.load(folder)
    check_read_back(loaded)
    assert loaded.logged.reward.iloc[-1] == -math.inf
    json.loads((folder / "metrics.jsonl").read_text().splitlines()[-1], parse_constant=reject)


TEXTS = ("op_id", "error_message", "prompt", "completion")


def _bare(value, name):
    """``value`` as an older rlnb wrote it: a non-finite float bare (json's default), text as text."""
    if name in TEXTS or not isinstance(value, str | dict):
        return value
    if isinstance(value, dict):
        return {k: _bare(v, k) for k, v in value.items()}
    return float(value) if value in wire.NON_FINITE_JSON else value


def test_a_line_spells_each_nested_dicts_non_finite_floats_and_keeps_its_other_values():
    """``spelled`` keeps a dict of finite floats as it is (a record's ``metrics``, without a call of its own): a dict
    with a NaN, an infinity, an integer JSON holds but a float cannot, or a float subclass beside them, is spelled."""
    from rlnb.history.jsontext import line

    class Figure(float):
        pass

    row = {
        "finite": {"a": 1.5, "b": -0.0},
        "nan": {"a": 1.5, "kl": math.nan},
        "inf": {"up": math.inf, "down": -math.inf},
        "huge": {"n": 10**400, "x": math.nan},
        "mixed": {"t": True, "s": "NaN", "f": Figure(math.inf), "none": None},
        "deep": {"d": {"x": math.nan}},
        "empty": {},
    }
    read = json.loads(line(row), parse_constant=reject)
    assert read == {
        "finite": {"a": 1.5, "b": -0.0},
        "nan": {"a": 1.5, "kl": "NaN"},
        "inf": {"up": "Infinity", "down": "-Infinity"},
        "huge": {"n": 10**400, "x": "NaN"},
        "mixed": {"t": True, "s": "NaN", "f": "Infinity", "none": None},
        "deep": {"d": {"x": "NaN"}},
        "empty": {},
    }


OPS_SHA256 = "c5b114c644a568d048cf9368c3e77c7e4f01540f160ceb079375720096796bde"
"""``ops.jsonl`` of ``record`` and the optim-step below, as rlnb wrote it before a record's row and line were made in
``RunStore.write_record`` (issue 20: 8 Python calls a step fewer): 7 lines, 3116 bytes."""


def test_the_run_store_writes_a_records_lines_byte_for_byte_as_before(tmp_path):
    """Every byte of ``ops.jsonl`` pinned: non-finite figures spelled, at the top and nested in ``params``, a key JSON
    has no text for (``line``'s fallback), a set, non-ASCII ids and keys, a line at submission, RUNNING left out."""
    import hashlib

    history = History.create({"optimizer": "adam"}, tmp_path, "r")
    record(history)
    params = {"learning_rate": 1e-3, "nested": {"a": math.nan, "b": [math.inf, 1]}, "tags": {1}, math.nan: "key"}
    rec = history.new(wire.OperationKind.OPTIM_STEP, 1, {**params, "é": "ü"}, 1.7e9 + 5)
    history.update(rec, wire.Operation(id="op-é", status=wire.OperationStatus.RUNNING), 1.7e9 + 6)
    output = wire.OptimStepResult(step=1, metrics={"grad_norm": math.nan, "lr": 1e-3})
    history.update(rec, wire.Operation(id="op-é", status=DONE, output=output), 1.7e9 + 7)
    history.close()
    written = (tmp_path / "r" / "ops.jsonl").read_bytes()
    assert (hashlib.sha256(written).hexdigest(), len(written)) == (OPS_SHA256, 3116), written.decode()


def test_a_records_line_is_the_one_line_writes_of_its_row(tmp_path):
    """``RunStore.write_record`` spells a row in a loop of its own (issue 20: 8 Python calls a step fewer): each line
    it writes is byte for byte ``line(as_row(rec))``, the reference, for figures finite, NaN and +-inf at the top,
    in ``metrics`` and ``params`` (finite ones kept as they are, a dict of them too), nested lists and tuples, a bool,
    a set and a key JSON has no text for (``line``'s fallback), non-ASCII text."""
    from rlnb.history.jsontext import line
    from rlnb.history.record import Record, as_row

    inf = math.inf
    recs = [
        Record(seq=0, kind="forward-backward"),
        Record(seq=1, kind="forward-backward", loss=inf, metrics={"kl": math.nan, "clip": -inf, "ok": 0.5}),
        Record(seq=2, kind="optim-step", loss=-inf, grad_norm=1.5, learning_rate=-0.0, metrics={"a": 1.0}),
        Record(seq=3, kind="optim-step", params={"lr": 1e-3, "adam": {"b": [inf, (1, -inf)], "t": True}, "s": {1}}),
        Record(seq=4, kind="sample", op_id="é", params={math.nan: "key", "ü": [None, -inf]}, metrics={}),
    ]
    history = History.create({"optimizer": "adam"}, tmp_path, "r")
    for rec in recs:
        history.store.write_record(rec)
    history.close()
    written = (tmp_path / "r" / "ops.jsonl").read_text(encoding="utf-8")
    assert written == "".join(line(as_row(rec)) for rec in recs)

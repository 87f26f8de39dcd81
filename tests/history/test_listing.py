"""``rlnb.runs()`` lists a run from each operation's last line (``history.listing``), without loading it whole: its
rows must be what a full ``History.load`` of the same files says, whatever state the folder is in. And ``from_row``'s
fast path for values of the usual type keeps exactly what its checks keep."""

import json
import math
import os
import stat
import warnings
from pathlib import Path

import pandas as pd
import pytest

import rlnb
from rlnb import wire
from rlnb.history import History, RunContinuedWarning, listing, reading, runs
from rlnb.history.loaded import _field, from_row
from rlnb.history.record import COLUMNS, MAX_SEQ, Record

COMPLETED, FAILED = wire.OperationStatus.COMPLETED, wire.OperationStatus.FAILED
RUNNING = wire.OperationStatus.RUNNING


def steps(h: History, first: int, n: int, fail_at: int | None = None) -> None:
    """Record steps ``first+1 .. first+n``: an evaluation, a forward-backward and an optim-step each (the optim-step
    of step ``fail_at`` fails), through ``new``/``update`` as a backend does, and a logged reward."""
    for i in range(first, first + n):
        at = 1_700_000_000.0 + i
        ops = (
            ("forward-backward", {wire.FORWARD_ONLY: True}, wire.ForwardBackwardResult(loss=9.0)),
            ("forward-backward", None, wire.ForwardBackwardResult(loss=1.0 / (i + 1))),
            ("optim-step", {"learning_rate": 1e-3}, wire.OptimStepResult(step=i + 1, metrics={"grad_norm": 0.5})),
        )
        for kind, params, out in ops:
            rec = h.new(kind, i, params, at=at)
            h.update(rec, wire.Operation(id=f"op-{rec.seq}", status=RUNNING), at)
            if kind == "optim-step" and i + 1 == fail_at:
                error = wire.OperationError(code=wire.OperationErrorCode.NON_FINITE_LOSS, message="nan")
                h.update(rec, wire.Operation(id=f"op-{rec.seq}", status=FAILED, error=error), at + 0.5)
            else:
                h.update(rec, wire.Operation(id=f"op-{rec.seq}", status=COMPLETED, output=out), at + 0.5)
        h.log(i + 1, reward=i * 0.1)


def full_parse(root: Path) -> pd.DataFrame:
    """What ``rlnb.runs`` listed before it read runs its own way: each run ``History.load``-ed whole."""
    rows = []
    for run in sorted(p for p in root.iterdir() if (p / "ops.jsonl").exists()):
        h = History.load(run)
        st = h.steps
        rows.append({"run_id": h.config.get("run_id") or run.name, "operations": len(h),
                     "failed": int((h.df.status == FAILED).sum()), "steps": int(st.step.max()) if len(st) else 0,
                     "final_loss": float(st.loss.iloc[-1]) if len(st) else math.nan})  # fmt: skip
    return pd.DataFrame(rows)


def assert_lists_as_full_parse(root: Path) -> pd.DataFrame:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the damage each case made: both readings warn of it
        expected, listed = full_parse(root), rlnb.runs(root)
    assert listed.error.isna().all(), listed.error.tolist()
    got = listed.sort_values("run_id", ignore_index=True)[list(expected.columns)]
    pd.testing.assert_frame_equal(got, expected.sort_values("run_id", ignore_index=True), check_dtype=False)
    return got


def test_a_run_a_torn_last_line_and_a_continued_run_list_as_a_full_parse_says(tmp_path):
    h = History.create({"optimizer": "adam"}, tmp_path, "plain")
    steps(h, 0, 5, fail_at=3)
    h.close()
    torn = History.create({"optimizer": "adam"}, tmp_path, "torn")
    steps(torn, 0, 4)
    torn.close()
    with (tmp_path / "torn" / "ops.jsonl").open("a") as fh:  # killed mid-line, rewriting seq 11 (the last optim-step)
        fh.write('{"seq":11,"kind":"optim-step","op_id":"op-11","status":"TRAINING_OPERATION_STAT')
    for first in (0, 3):  # the second session continues the run from step 3: steps 4-5 appear twice
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RunContinuedWarning)
            cont = History.create({"optimizer": "adam"}, tmp_path, "continued")
        steps(cont, first, 5)
        rec = cont.new("forward-backward", first + 5, None, at=1_800_000_000.0)  # killed with one in flight
        cont.update(rec, wire.Operation(id="x", status=RUNNING), 1_800_000_000.0)
        cont.close()  # the history alone, as a killed session leaves it: no final line for rec
    got = assert_lists_as_full_parse(tmp_path)
    assert got.operations.tolist() == [2 * 16, 15, 12]  # continued, plain, torn: the torn line left out
    assert got.failed.tolist() == [0, 1, 0] and got.steps.tolist() == [8, 5, 4]


def test_a_run_being_written_by_another_session_lists_as_a_full_parse_says(tmp_path):
    live = History.create({"optimizer": "adam"}, tmp_path, "live")
    steps(live, 0, 3)
    rec = live.new("optim-step", 3, None, at=1_800_000_000.0)  # submitted, not finished: its first line alone
    assert assert_lists_as_full_parse(tmp_path).operations.tolist() == [10]
    live.update(rec, wire.Operation(id="y", status=COMPLETED, output=wire.OptimStepResult(step=4)), 1_800_000_001.0)
    got = assert_lists_as_full_parse(tmp_path)  # read again while the session still holds the run
    assert got.steps.tolist() == [4]
    live.close()


def test_a_read_only_run_folder_lists_as_a_full_parse_says(tmp_path):
    h = History.create({"optimizer": "adam"}, tmp_path, "ro")
    steps(h, 0, 3)
    h.close()
    run = tmp_path / "ro"
    modes = {p: p.stat().st_mode for p in (run, *run.iterdir())}
    for p in modes:
        p.chmod(stat.S_IMODE(modes[p]) & ~0o222)
    try:
        assert assert_lists_as_full_parse(tmp_path).steps.tolist() == [3]
    finally:
        for p, mode in modes.items():
            p.chmod(stat.S_IMODE(mode))


def hand_edit(run: Path, edit) -> None:
    lines = (run / "ops.jsonl").read_text().splitlines(keepends=True)
    (run / "ops.jsonl").write_text("".join(edit(lines)))


def line(**fields) -> str:
    return json.dumps(fields, separators=(",", ":")) + "\n"


@pytest.mark.parametrize(
    "edit",
    [
        lambda ls: ls + [line(seq=1, kind=5, status="TRAINING_OPERATION_STATUS_FAILED")],  # no kind: does not count
        lambda ls: ls + [line(seq=2, kind="optim-step", status=FAILED)[:-2] + ',"seq":8}\n'],  # seq twice: 8 counts
        lambda ls: ls + [line(kind="optim-step", seq=5, status=1.5)],  # another shape: seq not first
        lambda ls: ["\ufeff" + ls[0], *ls[1:]],  # a BOM an editor put first
        lambda ls: ls + [line(seq=MAX_SEQ, kind="optim-step")],  # a seq no run reaches
        lambda ls: ls[:3] + ["{not json\n", "\n"] + ls[3:] + ['{"seq":007,"kind":"x"}\n'],  # corrupt, blank, not JSON
        lambda ls: ls + [ls[-1].replace('"status":"TRAINING_OPERATION_STATUS_COMPLETED"', '"status":null')],
        lambda ls: ls + ['{"seq":8,"kind":"optim-st\n', '{"seq":8,"kind":7}\n'],  # its last two lines give nothing
        lambda ls: ls + ['{"seq":9,"kind":"forward-backw'],  # a new operation's only line, torn
        lambda ls: ls + ['{"seq":' + "9" * 5000 + ',"kind":"optim-step"}\n'],  # past int()'s 4300 digits (review38d F3)
    ],
    ids=[
        "kind-not-text",
        "seq-twice",
        "reordered",
        "bom",
        "huge-seq",
        "corrupt",
        "bad-status",
        "two-bad",
        "torn-new",
        "seq-5000-digits",
    ],
)
def test_a_hand_edited_run_lists_as_a_full_parse_says(tmp_path, edit):
    h = History.create({"optimizer": "adam"}, tmp_path, "edited")
    steps(h, 0, 3, fail_at=2)
    h.close()
    hand_edit(tmp_path / "edited", edit)
    assert_lists_as_full_parse(tmp_path)


def test_the_listing_parses_each_operations_last_line_alone(tmp_path, monkeypatch):
    """A run writes each operation twice (submitted, ended): the listing parses half the lines a load parses."""
    h = History.create({"optimizer": "adam"}, tmp_path, "r")
    steps(h, 0, 4)
    h.close()
    parsed: list[str] = []

    def counted(text: str):
        parsed.append(text)
        return reading.loads(text)

    monkeypatch.setattr(listing, "loads", counted)
    assert rlnb.runs(tmp_path).operations.tolist() == [12]
    assert len(parsed) == 12 and all('"status":"TRAINING_OPERATION_STATUS_COMPLETED"' in t for t in parsed)
    assert len((tmp_path / "r" / "ops.jsonl").read_text().splitlines()) == 24


def test_an_unreadable_figures_file_is_the_listings_error_as_it_is_a_loads(tmp_path):
    h = History.create({"optimizer": "adam"}, tmp_path, "r")
    steps(h, 0, 1)
    h.close()
    (tmp_path / "r" / "metrics.jsonl").unlink()
    os.mkfifo(tmp_path / "r" / "metrics.jsonl")  # never waited on: left out with a warning, by both
    with pytest.warns(RuntimeWarning, match="not a regular file"):
        assert rlnb.runs(tmp_path).steps.tolist() == [1]


ROWS = [
    {"seq": 0, "kind": "optim-step", "loss": "NaN", "grad_norm": 1.5, "metrics": {"a": 1.0}, "params": {"lr": 1}},
    {"seq": 1, "kind": "fb", "loss": 2, "metrics": {"a": 1}, "step": True, "submitted_at": "Infinity"},
    {"seq": 2, "kind": "fb", "loss": None, "metrics": {"a": "NaN"}, "params": {"x": {"y": "NaN"}}, "step": -1},
    {"seq": 3, "kind": "\udcff", "op_id": "é", "status": None, "error_code": 5, "na_reason": "\ud800", "step": 2**63},
    {"seq": 4, "kind": "fb", "started_at": 1e10, "finished_at": -1.0, "grad_norm": "x", "metrics": [], "params": 3},
    {"seq": 5, "kind": "fb", "weights_version": 3, "learning_rate": 10**400, "metrics": {"a": True}, "extra": 1},
    {"seq": 6, "kind": "fb", "params": {"flag": True, "n": None}, "metrics": {}, "loss": "-Infinity", "step": 7},
]


@pytest.mark.parametrize("row", ROWS, ids=[str(r["seq"]) for r in ROWS])
def test_from_rows_fast_path_keeps_what_its_checks_keep(row):
    """``from_row`` keeps a value of the usual type at once; every value is kept, or named in ``bad``, as the
    field-by-field checks (``_field``) do."""
    expected_bad: list[str] = []
    values: dict = {}
    for name in COLUMNS:
        if name in row:
            _field(name, row[name], expected_bad, values)
    bad: list[str] = []
    rec = from_row(row, bad)
    assert repr(rec) == repr(Record(**values)) and bad == expected_bad  # repr: NaN equals NaN there


ODD = [0, 1, -1, 2**63 - 1, 2**63, 10**400, 1.5, -0.0, math.nan, math.inf, -math.inf, 1e300, 9.3e9, -9.3e9, 9.2e9,
       True, False, None, "x", "é", "\ud800", "NaN", "Infinity", "-Infinity", {}, {"a": 1.0}, {"a": True}, {"a": 1},
       {"a": "NaN"}, {"a": math.nan}, {"a": 10**400}, {"a": [1]}, {"a": None}, [], [1.0]]  # fmt: skip


@pytest.mark.parametrize("name", COLUMNS)
def test_from_rows_fast_path_agrees_with_its_checks_on_odd_values_in_every_field(name):
    """Each field's fast path (its shape's usual types) and its full check (``_field``) keep or name the same values:
    a field's shape is described once, in ``record.SHAPES``, so neither may drift from the other."""
    for value in ODD:
        expected_bad: list[str] = []
        values: dict = {"seq": 1, "kind": "optim-step"}
        _field(name, value, expected_bad, values)
        bad: list[str] = []
        rec = from_row({"seq": 1, "kind": "optim-step", name: value}, bad)
        if rec is None:  # a line without a usable seq and kind is no record
            assert name in ("seq", "kind") and len(bad) == 1, value
            continue
        assert (repr(rec), bad) == (repr(Record(**values)), expected_bad), value  # repr: NaN equals NaN there


def test_the_listing_holds_no_copy_of_the_files_text(tmp_path):
    """``latest_records`` kept each operation's last two lines as text: the whole ``ops.jsonl`` as ``str`` on top of
    the records (a 100k-step run listed at a 502 MiB peak where loading it took 350, review42e F4). It now keeps line
    numbers, then the text of a line only until its operation's last: past the records, far less than the file."""
    import tracemalloc

    from rlnb.testing import FakeBackend

    with rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="one") as s:
        s.forward_backward([rlnb.samples.cross_entropy(list(b"ab"))])
        s.optim_step().result(timeout=30)
    one = [json.loads(line) for line in (tmp_path / "one" / "ops.jsonl").read_text().splitlines()]
    assert sorted((r["seq"], r["kind"]) for r in one) == [(0, "forward-backward")] * 2 + [(1, "optim-step")] * 2
    file = tmp_path / "ops.jsonl"
    with file.open("w") as out:
        for k in range(5000):  # 5000 steps: each operation's pending line and its finished one
            for row in one:
                out.write(json.dumps({**row, "seq": 2 * k + row["seq"], "step": k}, separators=(",", ":")) + "\n")
    tracemalloc.start()
    try:
        records = listing.latest_records(file)
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [r.seq for r in records] == list(range(10_000))
    assert [(r.seq, r.status) for r in records] == [(r.seq, r.status) for r in runs.read_ops(file)]
    assert peak - held < file.stat().st_size / 2, (peak - held, file.stat().st_size)  # was 1.35 times the file

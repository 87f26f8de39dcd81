"""A value that ``jsontext.spelled`` does not reach (a NaN or a numpy number as a dict KEY, a tuple key, a dict
that holds itself) is written, its keys as JSON text, by every writer of a ``.jsonl`` line or a ``config.json``: the
run store's (operations, figures, completions), a sweep's ``trials.jsonl``, a server's journal. The encoder's
``ValueError`` / ``TypeError`` ran outside each writer's ``OSError`` handling and raised into the recorder (a
record's line lost, a trial's row lost, the server's state not written)."""

import json
import math
import time

import numpy as np

from rlnb.history import History
from rlnb.history.jsontext import line
from rlnb.history.store import COMPLETIONS_FILE, METRICS_FILE, RunStore
from rlnb.server.state import Journal
from rlnb.sweep import folder as sweep_folder
from rlnb.sweep import rows as sweep_rows

ODD = {math.nan: 1.0, np.int64(2): 2.0, (1, 2): 3.0, -math.inf: 4.0, 1.5: 5.0, None: 6.0}
"""Keys JSON has no text for, or Python's json spells as a bare ``NaN`` (not JSON): a dict's keys as given."""
AS_READ = {"NaN": 1.0, "2": 2.0, "(1, 2)": 3.0, "-Infinity": 4.0, "1.5": 5.0, "null": 6.0}
"""``ODD`` as it reads back: each key as JSON text."""


def test_a_line_holding_odd_keys_and_a_cycle_is_written_not_raised():
    cycle: dict = {"a": 1}
    cycle["self"] = cycle
    row = json.loads(line({"metrics": ODD, "loss": math.nan, "cycle": cycle, "ok": [1, {"x": 2}]}))
    assert row["metrics"] == AS_READ
    assert row["loss"] == "NaN"
    assert row["cycle"] == "{'a': 1, 'self': {...}}"  # its str(), as default=str writes what JSON has no type for
    assert row["ok"] == [1, {"x": 2}]


def test_an_operations_params_with_odd_keys_are_recorded_and_read_back(tmp_path):
    history = History.create({"lr": 1e-3}, runs_dir=tmp_path, run_id="r")
    history.new("forward_backward", 0, {"weights": ODD}, at=time.time())
    history.close()
    (record,) = History.load(tmp_path / "r").records
    assert record.params == {"weights": AS_READ}


def test_a_config_with_odd_keys_is_written_and_read_back(tmp_path):
    History.create({"model": {"layers": ODD}}, runs_dir=tmp_path, run_id="r").close()
    assert History.load(tmp_path / "r").config["model"] == {"layers": AS_READ}


def test_a_config_holding_itself_is_written_not_raised(tmp_path):
    """``rlnb_texts`` was looked for (recursively) before the encoder's own fallback: a backend's config holding
    itself (or nested past the recursion limit) was a RecursionError out of ``History.create``."""
    cycle: dict = {"note": "NaN"}
    cycle["self"] = cycle
    history = History.create({"lr": 1e-3, "cycle": cycle}, runs_dir=tmp_path, run_id="r")
    history.close()
    assert History.load(tmp_path / "r").config["cycle"] == "{'note': 'NaN', 'self': {...}}"


def test_figures_and_completions_lines_with_odd_keys_are_written(tmp_path):
    store = RunStore(tmp_path)
    store.write_metrics({"step": 1, "extra": ODD})
    store.write_completions([{"step": 1, "extra": ODD}])
    store.close()
    assert store.failed is None
    for name in (METRICS_FILE, COMPLETIONS_FILE):
        assert json.loads((tmp_path / name).read_text())["extra"] == AS_READ, name


def test_a_trials_row_with_odd_keys_is_written_and_read_back_on_resume(tmp_path):
    sweep_folder.begin(tmp_path, {"steps": 1}, resume=False)
    sweep_rows.append_row(tmp_path, {"trial": 0, "status": "COMPLETED", "extra": ODD})
    (row,) = sweep_folder.begin(tmp_path, {"steps": 1}, resume=True)
    assert row["extra"] == AS_READ


def test_a_servers_journal_line_with_odd_keys_is_written_and_read_back(tmp_path):
    journal = Journal(tmp_path)
    journal.rewrite([("resource", {"id": "m", "extra": ODD})])
    journal.append("session", {"id": "s", "extra": ODD})
    journal.close()
    assert not journal.failed
    again = Journal(tmp_path)
    try:
        state = again.load(keep_ops=10)
    finally:
        again.close()
    assert state["resource"] == [{"id": "m", "extra": AS_READ}]
    assert state["session"] == [{"id": "s", "extra": AS_READ}]

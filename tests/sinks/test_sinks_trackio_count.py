"""Trackio's rows of a run are counted after every batch while its queue is behind (``Writer.stored``): by the run's
id, which Trackio indexes, not by its name, which made SQLite read every run's rows of the project at each count
(232 ms at a million rows, twice a second)."""

from __future__ import annotations

import sqlite3

import pytest

import rlnb
from rlnb import sinks
from rlnb.testing import FakeBackend
from tests.support.sink_tests import env  # noqa: F401 - every library's state under a temporary folder, $HOME too


@pytest.mark.slow  # Trackio itself (imported: seconds of CPU)
def test_trackios_rows_of_a_run_are_counted_by_its_index(tmp_path, monkeypatch):
    pytest.importorskip("trackio")
    from rlnb.sinks import trackio as trackio_sink

    counted: list[str] = []
    real = trackio_sink._Writer.count_in

    def count_in(self, db, *args):  # the key the writer counts by
        real(self, db, *args)
        counted.append(self._key)

    monkeypatch.setattr(trackio_sink._Writer, "count_in", count_in)
    sink = sinks.Trackio("counted", interval=0)
    with rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r", sinks=[sink]) as s:
        for step in (1, 2, 3):
            s.history.log(step, reward=float(step))
    db = sink.written_to()
    assert db is not None
    with sqlite3.connect(db) as con:
        (run_id,) = {r for (r,) in con.execute("SELECT run_id FROM metrics WHERE run_name = 'r'")}
        assert counted == [run_id]
        plan = " | ".join(row[-1] for row in con.execute(f"EXPLAIN QUERY PLAN {trackio_sink.ROWS}", (run_id, run_id)))
        assert "SCAN metrics" not in plan and "SCAN alerts" not in plan and "run_id=?" in plan, plan  # an index
        assert con.execute(trackio_sink.ROWS, (run_id, run_id)).fetchone()[0] == 3

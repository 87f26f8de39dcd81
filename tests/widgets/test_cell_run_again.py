"""A notebook cell that makes a builder, run again while the Find LR of the builder its earlier run made is going."""

import time

import pytest

from rlnb.viz import cells
from rlnb.widgets import OptimizerBuilder

DEADLINE = 120.0


@pytest.mark.slow  # a range test of real steps on the tiny model
def test_a_builder_cell_run_again_stops_the_range_test_its_earlier_run_started(monkeypatch):
    """``builder = OptimizerBuilder(); builder`` run again while its Find LR ran: the old output, its Stop with it, was
    cleared, and the old range test trained out of sight to its last step. Now the new builder stops it and says so;
    a builder made by another cell, or by the same run of the cell, leaves it going."""
    run = {"cellId": "cell-a", "msg_id": "run-1"}
    monkeypatch.setattr(
        cells,
        "_parent",
        lambda: {
            "metadata": {"cellId": run["cellId"]},
            "header": {"msg_id": run["msg_id"], "msg_type": "execute_request"},
        },
    )
    old = OptimizerBuilder(expanded=True).lr_finder
    old.options["steps"] = 400
    old.button.click()
    deadline = time.monotonic() + DEADLINE
    while "running … 1/400" not in old.status.value:  # a step done
        assert time.monotonic() < deadline and old.running, old.status.value
        time.sleep(0.02)
    beside = OptimizerBuilder().lr_finder  # the same run of the cell makes a second builder
    run.update(cellId="cell-b", msg_id="run-2")
    other = OptimizerBuilder().lr_finder  # another cell
    assert old.running and "stopped" not in beside.status.value + other.status.value
    run.update(cellId="cell-a", msg_id="run-3")
    new = OptimizerBuilder(expanded=True).lr_finder  # the cell run again
    assert "stopped the range test this cell&#x27;s earlier run started" in new.status.value, new.status.value
    assert old.join(DEADLINE) and old.error is None and not old.running
    assert "ended early: stopped after" in old.status.value
    assert not new.button.disabled and not new.running

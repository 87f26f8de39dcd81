"""How a session's operation takes its backend's reports: each recorded once, in order, and a FAILED optim-step
counted as no step whatever the recording of its report did."""

from __future__ import annotations

import logging

import pytest

import rlnb
from rlnb import samples, wire
from rlnb.testing import FakeBackend

BATCH = [samples.cross_entropy([1, 2, 3])]


def test_an_on_record_callback_that_raises_on_a_failed_optim_step_still_counts_it_as_no_step(caplog):
    """The FAILED optim-step's report raised from ``history.update`` (a callback's bug, told after the record changed):
    the failure was then never counted, and everything submitted after it claimed a step one too high."""
    failed = iter([True, False])
    fail = lambda kind, body, step: "INVALID_INPUT" if kind == "optim-step" and next(failed) else None  # noqa: E731
    s = rlnb.Session(FakeBackend(fail=fail), record=False)

    def buggy(rec):
        if rec.status == wire.OperationStatus.FAILED:
            raise RuntimeError("a notebook's bug")

    s.history.on_record(buggy)
    with caplog.at_level(logging.ERROR, logger="rlnb"):
        s.forward_backward(BATCH)
        with pytest.raises(rlnb.OperationFailed, match="INVALID_INPUT"):
            s.optim_step().result(timeout=30)
        s.forward_backward(BATCH)
        s.optim_step().result(timeout=30)
    s.close()
    assert "a notebook's bug" in caplog.text  # logged, as before
    assert [(r.kind, wire.OperationStatus(r.status).name, r.step) for r in s.history.records] == [
        ("forward-backward", "COMPLETED", 0),
        ("optim-step", "FAILED", 0),
        ("forward-backward", "COMPLETED", 0),  # it said 1: the failure was not counted
        ("optim-step", "COMPLETED", 1),
    ]

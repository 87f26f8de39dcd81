"""One rule for what an operation adds to its step's times (``rlnb.history.timing.UNWAITED``): the steps table built as
operations finish (``StepLog``, which applies it inline, a call an operation less) and the sinks' points and the
reference build (``timing.op_times``) give every kind the same compute time and wait."""

import math
from types import SimpleNamespace

import pytest

from rlnb import wire
from rlnb.history.steplog import StepLog
from rlnb.history.timing import UNWAITED, op_times, step_times

K = wire.OperationKind
SUBMITTED, STARTED, FINISHED = 10.0, 15.0, 16.0
"""One operation's times: queued 5 s, ran 1 s; the optim-step after it runs from 16 s to 17 s."""


def record(seq, kind, submitted, started, finished):
    """What ``StepLog`` reads of a finished record (its attributes only)."""
    return SimpleNamespace(
        seq=seq,
        kind=kind,
        status=wire.OperationStatus.COMPLETED,
        step=1,
        step_loss=0.5,
        grad_norm=1.0,
        grad_norm_muon=math.nan,
        grad_norm_adam=math.nan,
        grad_clip_norm=1.0,
        learning_rate=1e-3,
        na_reason=None,
        error_code=None,
        weights_version=1,
        submitted_at=submitted,
        started_at=started,
        finished_at=finished,
    )


@pytest.mark.parametrize("kind", [k for k in K if k != K.OPTIM_STEP])
def test_the_steps_table_and_op_times_agree_for_every_kind(kind):
    """A guard: ``StepLog.finished`` keeps its own inline form of ``op_times``; both read ``UNWAITED``."""
    ops = [(kind, SUBMITTED, STARTED, FINISHED), (K.OPTIM_STEP, FINISHED, FINISHED, FINISHED + 1)]
    log = StepLog()
    log.feed([record(seq, *op) for seq, op in enumerate(ops)], [], unfinished=False)
    row = log.frame().iloc[0]
    assert (row.step_time_s, row.queue_s) == pytest.approx(step_times([op_times(*op) for op in ops]))
    assert row.step_time_s == pytest.approx(2.0)  # its run and the optim-step's
    assert row.queue_s == pytest.approx(0.0 if kind in UNWAITED else STARTED - SUBMITTED)


def test_only_a_weights_sync_s_wait_is_left_out():
    """It is submitted right behind the optim-step whose weights it publishes and waits for it by design."""
    assert {K.WEIGHTS_SYNC} == UNWAITED

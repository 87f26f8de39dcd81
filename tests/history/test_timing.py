"""A step's time is its compute time (its operations' started → finished) and its wait is a column of its
own: a pause between two clicks is in neither, and a step queued behind a slow one waits, not computes.
The same in the operations table, the steps table (built as it goes and from the operations), the live
view, the sinks' points, and for local and remote sessions."""

import math
import time

import pandas as pd
import pytest

import rlnb
from rlnb import samples, wire
from rlnb.history import History
from rlnb.history.tables import steps_table
from rlnb.history.timing import op_times, step_times
from rlnb.sinks.points import replay
from rlnb.testing import FakeBackend, ServerProcess
from rlnb.viz.live import LiveView
from tests.support.server import START_DEADLINE

CE = [samples.cross_entropy(list(b"the digits 0123456789"))]
DELAY = 0.1
"""Seconds every operation of a real session spends running (``op_delay``), on top of its real work."""
PAUSE = 4.0
"""Seconds between two steps (a person looking at the plot). The checks measure the slow step against the time
since step 1 ended, not against the pause: at load 13 its 4 operations took 4.6 s, past this pause."""


def submit_step(session, forward_backwards=1):
    for _ in range(forward_backwards):
        session.forward_backward(CE)
    return session.optim_step(rlnb.AdamParams(learning_rate=1e-3))


def same_everywhere(history):
    """The incremental steps table, a fresh build from the operations and the sinks' points agree."""
    steps = history.steps
    pd.testing.assert_frame_equal(steps, steps_table(history.df, history.logged))
    points, _ = replay(history, time.time())
    for point, row in zip(points, steps.itertuples(), strict=True):
        assert point.values["step_time_s"] == pytest.approx(row.step_time_s)
        assert point.values["queue_s"] == pytest.approx(row.queue_s)
    return steps


def pause_then_queue(session, pause):
    """Step 1; a pause; step 2, slow (three forward-backwards: four operations); step 3 submitted at once
    behind it (two operations)."""
    submit_step(session).result(timeout=60)
    time.sleep(pause)
    submit_step(session, forward_backwards=3)
    submit_step(session).result(timeout=60)
    return same_everywhere(session.history)


def check(steps, ops, pause, delay, seen=0.9):
    """Each operation runs ``delay`` seconds at least; ``seen`` of it at least is seen running. A remote client
    sees RUNNING a poll late, or not at all (then it started when the one before it ended), so one operation's time
    may show short on a loaded machine (0.012 s of 0.1 s): there the operations' sum is what holds."""
    ops = ops[ops.status == wire.OperationStatus.COMPLETED]
    assert ops.run_s.sum() >= len(ops) * delay * seen  # the operations' time is their own runs
    assert seen < 0.9 or (ops.run_s >= delay * seen).all()  # a local session sees each one start
    first, slow, queued = steps.itertuples()
    ended = ops[ops.kind == wire.OperationKind.OPTIM_STEP].finished_at.tolist()
    since = (ended[1] - ended[0]).total_seconds()  # step 1 ended, then the pause, then the slow step ran
    # after the pause: its four operations' compute, not the pause, however loaded the machine
    assert 4 * delay * seen <= slow.step_time_s <= since - 0.9 * pause
    assert slow.queue_s < pause / 4  # queued behind nothing: the pause is no wait either
    # behind the slow step: waited while it ran (all four of its operations), then computed two
    assert queued.queue_s >= 3 * delay and queued.queue_s > queued.step_time_s
    assert 2 * delay * seen <= queued.step_time_s < slow.step_time_s
    assert first.step_time_s >= 2 * delay * seen and not math.isnan(first.queue_s)


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_a_pause_is_not_step_time_and_a_queued_step_waits():
    session = rlnb.Session(FakeBackend(delay=0.03), record=False)
    steps = pause_then_queue(session, pause=0.4)
    session.close()
    check(steps, session.history.df, pause=0.4, delay=0.03)
    view = LiveView(session.history, metrics=())
    table = view.steps_table.value
    assert ">time</th>" in table and ">wait</th>" in table
    assert f"{steps.step_time_s.iloc[1]:.2f} s" in table and f"{steps.queue_s.iloc[2]:.2f} s" in table
    view.tables.selected_index = 1
    assert ">wait</th>" in view.ops_table.value and ">time</th>" in view.ops_table.value
    view.close()


@pytest.mark.slow
def test_the_same_on_a_local_session(tmp_path):
    session = rlnb.connect("local", optimizer="adam", device="cpu", op_delay=DELAY, runs_dir=tmp_path)
    steps = pause_then_queue(session, PAUSE)
    session.close()
    check(steps, session.history.df, PAUSE, DELAY)
    loaded = History.load(session.history.path)  # a run folder read back gives the same table
    pd.testing.assert_frame_equal(loaded.steps, steps)


@pytest.mark.slow
@pytest.mark.parametrize("extensions", [True, False], ids=["long-poll", "polling-like-together"])
def test_the_same_on_a_remote_session(extensions):
    with ServerProcess.rlnb_serve("--device", "cpu", "--op-delay", str(DELAY), timeout=START_DEADLINE) as url:
        options = {"base_model": "rlnb/tiny", "server_extensions": extensions, "record": False}
        session = rlnb.connect(url, optimizer="adam", **options)
        steps = pause_then_queue(session, PAUSE)
        session.close()
    check(steps, session.history.df, PAUSE, DELAY, seen=0.25)  # RUNNING is seen a round trip late


def test_the_weights_sync_behind_each_step_is_not_a_wait():
    """An RL loop submits forward-backward, optim-step and weights-sync back to back: the sync waits
    for the optim-step by design, which is not the next step waiting behind another."""
    delay = 0.1  # a step that waited behind the sync would show >= 0.09 s; a loaded machine's hiccups stay below
    session = rlnb.Session(FakeBackend(delay=delay), record=False)
    for _ in range(2):
        opt = submit_step(session)
        session.weights_sync()
        opt.result(timeout=30)
    session.wait()
    ops = session.history.df
    syncs = ops[ops.kind == wire.OperationKind.WEIGHTS_SYNC]
    assert (syncs.queue_s >= delay * 0.9).all()  # each waited for its optim-step
    steps = same_everywhere(session.history)
    assert (steps.queue_s < delay * 0.9).all() and (steps.iloc[1:].step_time_s >= 3 * delay * 0.9).all()  # its run
    session.close()


def env(status, output=None):
    return wire.Operation(id="op", status=status, output=output)


def test_an_operation_first_seen_finished_started_when_the_one_before_it_ended():
    """A remote poll may miss RUNNING: the operation ran at most from when the one before it ended (a
    session runs its operations in order), not for no time at all; a failure seen at once never ran."""
    h = History()
    fb = h.new(wire.OperationKind.FORWARD_BACKWARD, 0, None, at=100.0)
    h.update(fb, env(wire.OperationStatus.PENDING), 100.0)
    opt = h.new(wire.OperationKind.OPTIM_STEP, 0, {"learning_rate": 1e-3}, at=100.1)
    h.update(opt, env(wire.OperationStatus.PENDING), 100.1)
    h.update(fb, env(wire.OperationStatus.RUNNING), 100.5)
    h.update(fb, env(wire.OperationStatus.COMPLETED, wire.ForwardBackwardResult(loss=1.0)), 102.0)
    h.update(opt, env(wire.OperationStatus.COMPLETED, wire.OptimStepResult(step=1)), 102.4)  # never seen RUNNING
    assert opt.started_at == 102.0
    refused = h.new(wire.OperationKind.SAMPLE, 1, None, at=103.0)
    h.update(refused, env(wire.OperationStatus.FAILED), 103.2)
    assert refused.started_at == 103.2  # counted as waiting
    df = h.df
    assert list(df.run_s) == pytest.approx([1.5, 0.4, 0.0]) and list(df.queue_s) == pytest.approx([0.5, 1.9, 0.2])
    row = h.steps.iloc[0]
    assert row.step_time_s == pytest.approx(1.9) and row.queue_s == pytest.approx(0.5)


def test_step_times_are_unions_of_intervals():
    # overlap is not counted twice; a gap between operations is in neither figure
    assert step_times([(0, 1, 3), (0, 2, 4), (10, 10, 11)]) == pytest.approx((4.0, 1.0))
    assert step_times([(0, 0, 1), (0.5, 1, 2)]) == pytest.approx((2.0, 0.0))  # waited behind its own step
    assert all(math.isnan(x) for x in step_times([(0, math.nan, 1)]))
    assert op_times(wire.OperationKind.WEIGHTS_SYNC, 0, 2, 3) == (2, 2, 3)
    assert op_times(wire.OperationKind.SAMPLE, 0, 2, 3) == (0, 2, 3)

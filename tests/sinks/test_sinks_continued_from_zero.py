"""A run a later session continued from step 0 (allowed, with a ``RunContinuedWarning``): each session's steps are
points of their own in a sink, as in ``history.steps``, whether streamed, sent again or exported (review42e F2)."""

from __future__ import annotations

import json
import warnings

import pytest

import rlnb
from rlnb import samples, sinks
from rlnb.history import History
from rlnb.history.figures import SESSION_FIELD
from rlnb.testing import FakeBackend
from tests.support.kept_sink import WRITTEN, Kept, written

CE = [samples.cross_entropy(list(b"from zero"))]
pytestmark = pytest.mark.filterwarnings("ignore::rlnb.history.RunContinuedWarning")


def session(runs, n: int, number: int, sink: Kept, wait: int = 10**6) -> None:
    """``n`` steps of run r (loss ``10 * number + k`` at its ``k``-th forward-backward, from 0), each logging
    ``session=number``, waiting until ``sink`` wrote each of the first ``wait``."""
    with rlnb.Session(FakeBackend(loss=lambda k: 10.0 * number + k), runs_dir=runs, run_id="r", sinks=[sink]) as s:
        for step in range(1, n + 1):
            s.forward_backward(CE)
            s.optim_step().result(timeout=30)
            s.history.log(step, session=float(number))
            if step <= wait:
                written(sink.name, step, "session")


def given(name: str, figure: str) -> list[tuple[int, float]]:
    return [(p.step, p.values[figure]) for points, _ in WRITTEN.get(name, []) for p in points if figure in p.values]


def test_each_sessions_steps_reach_a_sink_streamed_and_exported(tmp_path):
    """``rlnb.export`` merged points by step number: the first session's steps 1-3 were gone from the sink, the second's
    written in their place (``history.steps`` has six)."""
    runs = tmp_path / "runs"
    session(runs, 3, 1, Kept("zero-live", interval=0))
    session(runs, 3, 2, Kept("zero-live", interval=0))
    history = History.load(runs / "r")
    steps = list(zip(history.steps.step, history.steps.loss, strict=True))
    assert steps == [(1, 10.0), (2, 11.0), (3, 12.0), (1, 20.0), (2, 21.0), (3, 22.0)]
    assert given("zero-live", "loss") == steps
    assert given("zero-live", "session") == [(k, s) for s in (1.0, 2.0) for k in (1, 2, 3)]  # as logged
    rlnb.export(history, Kept("zero-export"))
    assert given("zero-export", "loss") == steps
    # each logged row on its own session's step (metrics.jsonl keeps the session that logged it), as streamed
    assert given("zero-export", "session") == [(k, s) for s in (1.0, 2.0) for k in (1, 2, 3)]
    rlnb.export(history.save(tmp_path / "copy"), Kept("zero-copy"))  # a saved copy keeps them too
    assert given("zero-copy", "session") == [(k, s) for s in (1.0, 2.0) for k in (1, 2, 3)]


def test_an_older_rlnbs_logged_rows_with_no_session_join_each_sessions_step_of_their_number(tmp_path):
    """A run folder an older rlnb wrote keeps no session for a logged row: read back, each is on every session's step of
    its number, the figure logged last there, as ``history.steps`` shows it."""
    runs = tmp_path / "runs"
    session(runs, 3, 1, Kept("zero-older", interval=0))
    session(runs, 3, 2, Kept("zero-older", interval=0))
    metrics = runs / "r" / "metrics.jsonl"
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [line.pop(SESSION_FIELD) for line in lines] == [0, 0, 0, 1, 1, 1]  # as each session logged it
    metrics.write_text("".join(json.dumps(line) + "\n" for line in lines))
    history = History.load(runs / "r")
    assert [session for _, session in history.logged_rows()] == [None] * 6
    rlnb.export(history, Kept("zero-older-export"))
    assert given("zero-older-export", "session") == [(k, 2.0) for _ in range(2) for k in (1, 2, 3)]
    assert given("zero-older-export", "session") == list(zip(history.steps.step, history.steps.session, strict=True))


def test_a_sink_sent_two_sessions_it_missed_gets_each_and_is_told_how_many(tmp_path):
    """A sink dropped in the first session, left out of the second, then a new one in the third: sent the steps it
    missed of both sessions in one batch, it got one point per step number (5 of the 6 steps as 3 points), and the
    second left-out session was told the run "is not written there", though one step is."""
    runs = tmp_path / "runs"
    dropped = Kept("zero-part", fail_at=2, interval=0)
    with pytest.warns(sinks.SinkWarning, match="disk gone"):
        session(runs, 3, 1, dropped, wait=1)
    with pytest.warns(sinks.SinkWarning, match="written there in part: 2 of its 3 steps so far are not"):
        session(runs, 3, 2, dropped, wait=0)
    with pytest.warns(sinks.SinkWarning, match="written there in part: 5 of its 6 steps so far are not"):
        session(runs, 1, 3, dropped, wait=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", sinks.SinkWarning)
        session(runs, 1, 4, Kept("zero-part", interval=0))
    history = History.load(runs / "r")
    assert given("zero-part", "loss") == list(zip(history.steps.step, history.steps.loss, strict=True))
    assert len(history.steps) == 8

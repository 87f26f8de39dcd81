"""A sink dropped in one run (its library failed) and given to a later session of another run (a notebook's cell run
again with the same sink object): the session says that the sink is dropped and names the run it leaves out, and a
session continuing that run with a working sink sends the sink the whole run. It was skipped in silence, and no
later session sent it any of the run's first session."""

from __future__ import annotations

from collections import Counter

import pytest

import rlnb
from rlnb import samples, sinks
from rlnb.sinks.left_out import gathered
from rlnb.testing import FakeBackend
from tests.support.kept_sink import WRITTEN, Kept, written

CE = [samples.cross_entropy(list(b"hello world"))]


def run(runs, run_id: str, sink: sinks.Sink, first: int, n: int) -> list[str]:
    """A session of ``run_id`` with ``sink``: ``n`` steps, each logging ``reward`` at its own step from ``first``;
    the SinkWarnings said."""
    with pytest.warns() as caught, rlnb.Session(FakeBackend(), runs_dir=runs, run_id=run_id, sinks=[sink]) as s:
        for step in range(first, first + n):
            s.forward_backward(CE)
            s.optim_step().result()
            s.history.log(step, reward=float(step))
    return [str(w.message) for w in caught if issubclass(w.category, sinks.SinkWarning)]


@pytest.mark.filterwarnings("ignore::rlnb.history.RunContinuedWarning")
def test_a_sink_dropped_in_an_earlier_run_says_so_and_its_later_run_is_sent_whole_when_continued(tmp_path):
    runs, sink = tmp_path / "runs", Kept("dropped-later", fail_at=1, interval=0)
    (said,) = run(runs, "a", sink, 1, 2)
    assert "dropped while writing run a: OSError: disk gone" in said
    sink.fail_at = 0  # the library works again; the sink object stays dropped
    (said,) = run(runs, "b", sink, 1, 3)  # a notebook's next cell: the cell-1 warning has scrolled away
    assert "dropped while writing run a (OSError: disk gone): run b is not written there" in said, said
    assert WRITTEN.get("dropped-later") is None
    # continued with a working sink: its session's step 1 meets run b's logged step 1, whose reward stays on run b's
    # first session's point (test_a_continued_runs_logged_rows_sent_again_join_their_own_sessions_points_only)
    assert run(runs, "b", Kept("dropped-later", interval=0), 4, 1) == []
    rewards = Counter(p.step for points, _ in WRITTEN["dropped-later"] for p in points if "reward" in p.values)
    assert rewards == {step: 1 for step in range(1, 5)}  # run b whole, each figure once


def written_in_part(runs, name: str) -> Kept:
    """A sink dropped at step 3 of run a, which wrote steps 1-2 to it (and marked them), working again."""
    sink = Kept(name, fail_at=3, interval=0)
    dropped = pytest.warns(sinks.SinkWarning, match="dropped while writing run a: OSError: disk gone")
    with dropped, rlnb.Session(FakeBackend(), runs_dir=runs, run_id="a", sinks=[sink]) as s:
        for step in range(1, 5):
            s.forward_backward(CE)
            s.optim_step().result()
            s.history.log(step, reward=float(step))
            if step == 2:  # its own batch, and its mark, before step 3's fails
                written(name, 2, "reward")
    sink.fail_at = 0
    return sink


@pytest.mark.filterwarnings("ignore::rlnb.history.RunContinuedWarning")
def test_a_run_written_in_part_before_its_sink_was_dropped_is_said_so_and_sent_the_rest(tmp_path):
    """Run a wrote steps 1-2 to its sink, which was dropped at step 3; a later session given the dropped sink said
    "run a is not written there" and that a continuation would send "the whole run": it sends what the run's mark
    says the sink lacks, steps 3 on (mend40c)."""
    runs, name = tmp_path / "runs", "written-in-part"
    (said,) = run(runs, "a", written_in_part(runs, name), 5, 1)
    assert "run a is written there in part: 2 of its 4 steps so far are not, nor are this session's" in said, said
    assert "not written there" not in said and "with a new Kept sink sends it the rest" in said, said
    assert run(runs, "a", Kept(name, interval=0), 6, 1) == []  # continued with a working sink
    rewards = Counter(p.step for points, _ in WRITTEN[name] for p in points if "reward" in p.values)
    assert rewards == {step: 1 for step in range(1, 7)}  # run a whole, each figure once


@pytest.mark.filterwarnings("ignore::rlnb.history.RunContinuedWarning")
def test_a_sweeps_trial_written_in_part_is_listed_so(tmp_path):
    """A sweep's one warning for the trials left out of a dropped sink (``left_out.gathered``) listed a trial written
    in part among those "not written there"."""
    runs, name = tmp_path / "runs", "trial-in-part"
    sink = written_in_part(runs, name)
    with (
        pytest.warns(sinks.SinkWarning) as caught,
        gathered([sink]),  # as a sweep: said once at its end
        rlnb.Session(FakeBackend(), runs_dir=runs, run_id="a", sinks=[sink]) as s,
    ):
        s.history.log(5, reward=5.0)
    (said,) = [str(w.message) for w in caught if "of the sweep" in str(w.message)]
    assert "1 other trial of the sweep is not written there, or only in part: a (2 of its 4 steps not)." in said
    assert "one written in part, a session continuing its run with a new Kept sink sends the rest" in said, said


def logged(runs, run_id: str, sink: sinks.Sink, steps: range) -> None:
    """A session of ``run_id`` with ``sink`` that warns nothing (a working sink, or a sweep's, said at its end)."""
    with rlnb.Session(FakeBackend(), runs_dir=runs, run_id=run_id, sinks=[sink]) as s:
        for step in steps:
            s.forward_backward(CE)
            s.optim_step().result()
            s.history.log(step, reward=float(step))


@pytest.mark.filterwarnings("ignore::rlnb.history.RunContinuedWarning")
def test_a_run_its_sink_holds_whole_is_said_so_not_written_in_part_with_none_missing(tmp_path):
    """Runs a and c written whole (steps 1-4), their sink then dropped in run b, and each continued with it: "run a is
    written there in part: 0 of its 4 steps so far are not", and a sweep listed "c (0 of its 4 steps not)"
    (review41h L3)."""
    runs, name = tmp_path / "runs", "whole-then-dropped"
    sink = Kept(name, interval=0)
    for run_id in ("a", "c"):
        logged(runs, run_id, sink, range(1, 5))
    sink.fail_at = 1
    run(runs, "b", sink, 1, 1)  # dropped here
    sink.fail_at = 0
    (said,) = run(runs, "a", sink, 5, 1)
    assert "run a is written there in part: it holds its 4 steps so far, only this session's are not." in said, said
    assert "0 of its" not in said and "with a new Kept sink sends it the rest" in said, said
    with pytest.warns(sinks.SinkWarning) as caught, gathered([sink]):  # as a sweep: said once at its end
        logged(runs, "c", sink, range(5, 6))
    (listed,) = [str(w.message) for w in caught if "of the sweep" in str(w.message)]
    assert "is not written there, or only in part: c (its 4 steps before this session's)." in listed, listed
    before = len(WRITTEN[name])
    logged(runs, "a", Kept(name, interval=0), range(6, 7))  # continued with a working sink
    rewards = Counter(p.step for points, _ in WRITTEN[name][before:] for p in points if "reward" in p.values)
    assert rewards == {5: 1, 6: 1}, rewards  # the rest of run a, none of the steps it held again


@pytest.mark.filterwarnings("ignore::rlnb.history.RunContinuedWarning")
def test_a_run_whose_write_failed_as_another_runs_dropped_the_sink_is_said_left_out(tmp_path):
    """Two trials' writes failing at once: the other run's failure drops the sink between this run's write and its
    own ``fail`` (a no-op then). This run was said nowhere: not the sink's warning (it names the other run), not
    ``left_out`` (asked before ``fail``, when the sink was not dropped yet)."""
    sink = Kept("dropped-at-once", fail_at=1, interval=0)
    own_fail = sink.fail

    def other_run_first(exc: BaseException, run_name: str, text: str = "") -> None:
        own_fail(OSError("disk gone"), "other")  # the other trial's failure, landed first
        own_fail(exc, run_name, text)

    sink.fail = other_run_first  # type: ignore[method-assign]
    dropped, left = run(tmp_path / "runs", "a", sink, 1, 2)
    assert "dropped while writing run other: OSError: disk gone" in dropped, dropped
    assert "dropped while writing run other (OSError: disk gone): run a is not written there" in left, left


@pytest.mark.filterwarnings("ignore::rlnb.history.RunContinuedWarning")
@pytest.mark.parametrize("catch_up", ["with the new session's steps", "before them"])
def test_a_continued_runs_logged_rows_sent_again_join_their_own_sessions_points_only(tmp_path, catch_up):
    """Run b logged ``reward`` at steps 1-3 while its sink was dropped; a session continuing it from step 0 with a
    working sink sends it those rows and optim-steps of its own, steps 1-2: each reward reaches the sink once, on
    run b's first session's point of its step, whether the rows sent again are in one batch with the new steps (a
    sink that writes once a minute) or written before them."""
    runs, name = tmp_path / "runs", f"logged-rows-{catch_up.split()[0]}"
    sink = Kept(name, fail_at=1, interval=0)
    run(runs, "a", sink, 1, 1)  # dropped here
    sink.fail_at = 0
    run(runs, "b", sink, 1, 3)  # logged while dropped: none of it written
    one_batch = catch_up.startswith("with")
    later = Kept(name, interval=60 if one_batch else 0)  # 60 s: everything in the close's one batch
    with rlnb.Session(FakeBackend(), runs_dir=runs, run_id="b", sinks=[later]) as s:
        if not one_batch:
            written(name, 3, "reward")
        for _ in range(2):
            s.forward_backward(CE)
            s.optim_step().result()
    rewards = Counter((p.session, p.step) for points, _ in WRITTEN[name] for p in points if "reward" in p.values)
    assert rewards == {(0, 1): 1, (0, 2): 1, (0, 3): 1}, rewards
    steps = sorted((p.session, p.step) for points, _ in WRITTEN[name] for p in points if "loss" in p.values)
    assert steps == [(0, 1), (0, 2), (0, 3), (1, 1), (1, 2)], steps  # run b whole, both sessions' steps

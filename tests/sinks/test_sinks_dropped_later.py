"""A sink dropped in one run (its library failed) and given to a later session of another run (a notebook's cell run
again with the same sink object): the session says that the sink is dropped and names the run it leaves out, and a
session continuing that run with a working sink sends the sink the whole run. It was skipped in silence, and no
later session sent it any of the run's first session."""

from __future__ import annotations

from collections import Counter

import pytest

import rlnb
from rlnb import samples, sinks
from rlnb.testing import FakeBackend
from tests.support.kept_sink import WRITTEN, Kept

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
    assert run(runs, "b", Kept("dropped-later", interval=0), 4, 1) == []  # continued with a working sink
    rewards = Counter(p.step for points, _ in WRITTEN["dropped-later"] for p in points if "reward" in p.values)
    assert rewards == {step: 1 for step in range(1, 5)}  # run b whole, each figure once

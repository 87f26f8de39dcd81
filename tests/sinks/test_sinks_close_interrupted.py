"""A Ctrl-C (or a SIGTERM's SystemExit) inside a close's locked block, after it marked itself closed but before it told
every sink's writer to finish the run: the next close (the user's, the exit's) tells those it had not told (review42i
L1). It skipped them: it waited its whole timeout for a writer never told to close, then said the sink "did not finish
writing" and stalled it, though the writer was idle."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

import pytest

import rlnb
from rlnb import samples
from rlnb.sinks import stream
from rlnb.testing import FakeBackend
from tests.support.kept_sink import WRITTEN, Kept, written

CE = [samples.cross_entropy(list(b"cut short"))]


def _once(real: Callable[..., Any]) -> Callable[..., Any]:
    """``real``, but the first call raises KeyboardInterrupt instead (a Ctrl-C landing there)."""
    calls = []

    def cut(*args: Any) -> Any:
        calls.append(args)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return real(*args)

    return cut


@pytest.mark.parametrize("where", ["the last send", "the second writer's close"])
def test_a_close_cut_short_in_its_locked_block_tells_every_writer_at_the_next_close(tmp_path, where):
    a, b = Kept(f"cut-a-{where}", interval=0), Kept(f"cut-b-{where}", interval=0)
    s = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r", sinks=[a, b])
    s.forward_backward(CE)
    s.optim_step().result(timeout=30)
    s.history.log(1, reward=0.5)
    written(a.name, 1, "reward")
    (att,) = [x for x in stream._ATTACHED if x._history is s.history]
    if where == "the last send":
        att._send = _once(att._send)  # type: ignore[method-assign]
    else:
        second = att._channels[1]
        second.close = _once(second.close)  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        att.close(timeout=30)
    started = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "did not finish writing": an error here
        att.close(timeout=30)
    assert time.monotonic() - started < 20  # the whole timeout was waited out
    assert all(c.settled.is_set() and not c.sink.is_stalled() for c in att._channels)
    assert [sum(len(p) for p, _ in WRITTEN[k.name]) > 0 for k in (a, b)] == [True, True]
    s.close()

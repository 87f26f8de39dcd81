"""What a sink's library does when a run ends badly: a full disk under TensorBoard (its own writer thread printed a
raw ``Exception in thread`` traceback, in a notebook into the cell, besides rlnb's SinkWarning, which named no step
not written), and a session closed with operations queued (each cancelled one was a red Trackio alert)."""

from __future__ import annotations

import errno
import os
import re
import threading
from typing import Any

import pytest

import rlnb
from rlnb import sinks
from rlnb.sinks import SinkWarning
from tests.support import sink_readers as read
from tests.support.sink_tests import (  # noqa: F401 - env: every library's state under a temporary folder
    CE,
    LOADED_MACHINE_TIMEOUT,
    env,
    pytestmark,
    trackio_db,
)


def test_a_tensorboard_disk_full_mid_run_is_one_warning_naming_the_first_step_not_written(tmp_path, monkeypatch, capfd):
    from tensorboard.summary.writer.record_writer import RecordWriter  # type: ignore[import-untyped]

    from rlnb.testing import FakeBackend

    full = threading.Event()
    write = RecordWriter.write

    def filling(self: Any, data: bytes) -> None:
        if full.is_set():
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        write(self, data)

    monkeypatch.setattr(RecordWriter, "write", filling)
    died: list[str] = []
    monkeypatch.setattr(threading, "excepthook", lambda hook: died.append(f"{hook.thread}: {hook.exc_value!r}"))
    folder = tmp_path / "tb" / "r"
    said = (r"rlnb.sinks.TensorBoard dropped while writing run r: OSError: \[Errno 28\] No space left on device "
            rf"writing {re.escape(str(folder))}.*: the points from step 2 on were not written there")  # fmt: skip
    session = rlnb.Session(FakeBackend(), runs_dir=tmp_path / "runs", run_id="r",
                           sinks=[sinks.TensorBoard(tmp_path / "tb", interval=0)])  # fmt: skip
    with pytest.warns(SinkWarning, match=said) as caught, session as s:
        s.forward_backward(CE)
        s.optim_step().result()
        read.tensorboard_wait(folder, 1, LOADED_MACHINE_TIMEOUT)
        full.set()
        for _ in range(3):
            s.forward_backward(CE)
            s.optim_step().result()
    assert list(s.history.steps.step) == [1, 2, 3, 4]
    assert len([w for w in caught if issubclass(w.category, SinkWarning)]) == 1
    assert died == [] and "Exception in thread" not in capfd.readouterr().err


@pytest.mark.slow  # Trackio
def test_operations_cancelled_at_close_are_one_trackio_alert_and_real_failures_one_each(tmp_path, capfd):
    """Closing with operations queued fails them ``SESSION_NOT_ACTIVE``: each was a red Trackio alert of its own, 79
    console lines for 40 queued steps. Now they are one summary alert at the run's end; a real failure stays one."""
    from rlnb import wire
    from rlnb.testing import FakeBackend

    failing = [wire.OperationErrorCode.INVALID_INPUT]  # the first forward-backward after step 1 fails

    def once(kind: str, body: object, step: int) -> str | None:
        return failing.pop() if failing and kind == wire.OperationKind.FORWARD_BACKWARD and step == 1 else None

    s = rlnb.Session(FakeBackend(delay=0.05, fail=once), runs_dir=tmp_path, run_id="r",
                     sinks=[sinks.Trackio("cancelled", interval=0)])  # fmt: skip
    s.forward_backward(CE)
    s.optim_step().result()  # a step: Trackio keeps the run's config once it has a metric
    with pytest.raises(rlnb.OperationFailed):
        s.forward_backward(CE).result()
    for _ in range(10):
        s.forward_backward(CE)
        s.optim_step()
    s.close()
    cancelled = s.history.df[s.history.df.error_code == wire.OperationErrorCode.SESSION_NOT_ACTIVE]
    assert len(cancelled) >= 10  # the session never ran most of them
    first, last = int(cancelled.step.min()), int(cancelled.step.max())
    events = read.trackio(trackio_db("cancelled"), "r")[2]
    assert [text.split(":")[0] for _, text in events] == ["forward-backward failed", f"{len(cancelled)} operations "
                                                          "cancelled"]  # fmt: skip
    assert events[0][0] == 1 and wire.OperationErrorCode.INVALID_INPUT in events[0][1]
    steps = f"at step {first}" if first == last else f"steps {first} to {last}"
    said = (f"{len(cancelled)} operations cancelled: {wire.OperationErrorCode.SESSION_NOT_ACTIVE.value}: the session "
            f"stopped before they ran ({steps}); each is in the rlnb run's history")  # fmt: skip
    assert events[1] == (last, said)
    assert capfd.readouterr().out.count("[TRACKIO") == 2

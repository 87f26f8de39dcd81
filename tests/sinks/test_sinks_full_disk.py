"""A sink whose library meets a full disk mid-run: TensorBoard's own writer thread printed a raw ``Exception in
thread`` traceback (in a notebook, into the cell) besides rlnb's SinkWarning, and the warning did not say which
steps went unwritten."""

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
from tests.support.sink_tests import CE, LOADED_MACHINE_TIMEOUT, env, pytestmark  # noqa: F401 - env: libraries' state


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

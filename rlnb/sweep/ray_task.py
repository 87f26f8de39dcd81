"""What runs in a Ray task: one trial in a temporary folder on its node, talking to the sweep through the
mailbox actor (Stop, and the pruner's answer to each report); the driver's side is ``ray_executor``."""

from __future__ import annotations

import contextlib
import shutil
import socket
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlnb import _files
from rlnb.engine import held
from rlnb.wire import TrialStatus

from .ray_checks import import_ray
from .trial import TrialSpec, base_row, run_trial

REPORT_TIMEOUT = 60.0
"""Seconds a task waits for the pruner's answer; past it the trial goes on (a sweep never hangs on it)."""
MAILBOX_TIMEOUT = 30.0
"""Seconds any call to the mailbox actor may take; past it the caller reads the mailbox as gone."""


class _RayControl:
    def __init__(self, ray: Any, office: Any, sweep: str, trial: int, reports: bool):
        self._ray, self._office, self._sweep, self._trial, self._reports = ray, office, sweep, trial, reports

    def stopping(self) -> bool:
        try:
            return bool(self._ray.get(self._office.stopping.remote(self._sweep), timeout=MAILBOX_TIMEOUT))
        except self._ray.exceptions.RayError:  # the driver (and its mailbox) is gone: stop
            return True

    def wait(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.stopping():
                return True
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
        return self.stopping()

    def report(self, step: int, value: float) -> str | None:
        if not self._reports:
            return None
        try:
            answer = self._office.report.remote(self._sweep, self._trial, step, value)
            verdict = self._ray.get(answer, timeout=REPORT_TIMEOUT)
        except self._ray.exceptions.RayError:
            return None
        if isinstance(verdict, bytes):  # the search raised on this report: the trial fails with it, as on a thread
            raise self._ray.cloudpickle.loads(verdict)
        return str(verdict) if verdict is not None else None


def ray_trial(spec: TrialSpec, office: Any, sweep: str, reports: bool) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The task: run the trial in a temporary folder, return its row and its history's files."""
    ray = import_ray()
    try:
        started = ray.get(office.begin.remote(sweep, spec.trial), timeout=MAILBOX_TIMEOUT)
    except ray.exceptions.RayError as exc:  # the sweep's mailbox died: FAILED with a traceback, and resume skipped it
        return base_row(spec, TrialStatus.STOPPED, f"stopped before it started: the sweep's mailbox is gone "
                                         f"({type(exc).__name__}); resume= runs it"), {}  # fmt: skip
    if not started:
        return base_row(spec, TrialStatus.STOPPED, "stopped before it started"), {}
    with trial_folder() as tmp:
        row = run_trial(spec, tmp, _RayControl(ray, office, sweep, spec.trial, reports))
        run = tmp / spec.run_id
        files = {str(p.relative_to(run)): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    row["host"] = socket.gethostname()
    return row, files


TRIAL_PREFIX = "rlnb-ray-trial-"


@contextlib.contextmanager
def trial_folder() -> Iterator[Path]:
    """A Ray trial's temporary folder on its node, held (``rlnb.engine.held``) while the trial runs: a worker that
    was killed left its folder in the node's /tmp for ever; the next trial on that node removes it."""
    folder, lock = held.scratch_folder(TRIAL_PREFIX)
    try:
        yield folder
    finally:
        try:
            shutil.rmtree(folder)
        except OSError as exc:
            warnings.warn(f"a Ray trial's temporary folder could not be removed: {exc.filename or folder}: "
                          f"{exc.strerror or exc}", RuntimeWarning, stacklevel=3)  # fmt: skip
        _files.release(lock)

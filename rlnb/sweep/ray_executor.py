"""Trials as Ray tasks: on this machine's Ray, or on a cluster at ``address``.

Each trial is one task (``resources_per_trial`` CPUs / GPUs) that records its history in a temporary
folder on the worker and returns the row plus the history's files, which land in the sweep folder —
so a cluster needs no shared disk. A small actor, the *mailbox*, carries the sweep's voice to running
tasks: Stop, and the pruner's answer to each per-step report (the task waits for it, so pruning acts
at the same step as on threads). Stopping cancels tasks that have not started, lets running ones end
STOPPED at their next step, and force-cancels any that do not within ``STOP_GRACE`` seconds.

Ray lends a task's CPUs to queued tasks while it waits in ``ray.get`` / ``ray.wait`` — here a few ms
per step on the mailbox. The sweep therefore submits no more tasks than the cluster holds (the default
``max_concurrent``); with more, a queued trial may start beside a running one and share its CPUs.
"""

from __future__ import annotations

import asyncio
import importlib
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

from .executors import Reporter
from .trial import TrialSpec, base_row, run_trial

STOP_GRACE = 30.0
"""Seconds a running trial gets to stop at its next step before its task is force-cancelled."""
REPORT_TIMEOUT = 60.0
"""Seconds a task waits for the pruner's answer; past it the trial goes on (a sweep never hangs on it)."""
MAILBOX_TIMEOUT = 30.0
REPORT_POLL = 0.02
"""Seconds between the driver's looks at the mailbox while trials report (pruning)."""
RESOURCE_KEYS = ("cpu", "gpu")


def import_ray() -> Any:
    try:
        return importlib.import_module("ray")
    except ImportError:
        raise ImportError("executor='ray' needs Ray: pip install 'rlnb[ray]'") from None


class Mailbox:
    """Driver ↔ tasks: who started, stop, and per-step reports waiting for the pruner's verdict."""

    def __init__(self) -> None:
        self._stop = False
        self._started: set[int] = set()
        self._reports: list[tuple[int, int, float]] = []
        self._waiting: dict[tuple[int, int], asyncio.Future[str | None]] = {}

    def begin(self, trial: int) -> bool:
        if not self._stop:
            self._started.add(trial)
        return not self._stop

    def stopping(self) -> bool:
        return self._stop

    async def report(self, trial: int, step: int, value: float) -> str | None:
        if self._stop:
            return None
        future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._waiting[(trial, step)] = future
        self._reports.append((trial, step, value))
        return await future

    def take(self) -> tuple[list[tuple[int, int, float]], list[int]]:
        reports, self._reports = self._reports, []
        return reports, sorted(self._started)

    def answer(self, verdicts: list[tuple[int, int, str | None]]) -> None:
        for trial, step, verdict in verdicts:
            future = self._waiting.pop((trial, step), None)
            if future is not None and not future.done():
                future.set_result(verdict)

    def stop(self) -> list[int]:
        self._stop = True
        for future in self._waiting.values():
            if not future.done():
                future.set_result(None)
        self._waiting.clear()
        return sorted(self._started)


class _RayControl:
    def __init__(self, ray: Any, mailbox: Any, trial: int, reports: bool):
        self._ray, self._mailbox, self._trial, self._reports = ray, mailbox, trial, reports

    def stopping(self) -> bool:
        try:
            return bool(self._ray.get(self._mailbox.stopping.remote(), timeout=MAILBOX_TIMEOUT))
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
            verdict = self._ray.get(self._mailbox.report.remote(self._trial, step, value), timeout=REPORT_TIMEOUT)
        except self._ray.exceptions.RayError:
            return None
        return str(verdict) if verdict is not None else None


def ray_trial(spec: TrialSpec, mailbox: Any, reports: bool) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The task: run the trial in a temporary folder, return its row and its history's files."""
    ray = import_ray()
    if not ray.get(mailbox.begin.remote(spec.trial), timeout=MAILBOX_TIMEOUT):
        return base_row(spec, "STOPPED", "stopped before it started"), {}
    with tempfile.TemporaryDirectory(prefix="rlnb-ray-trial-") as tmp:
        row = run_trial(spec, Path(tmp), _RayControl(ray, mailbox, spec.trial, reports))
        run = Path(tmp) / spec.run_id
        files = {str(p.relative_to(run)): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    row["host"] = socket.gethostname()
    return row, files


class RayExecutor:
    """Trials as Ray tasks; Ray is started here (locally) unless this process is already connected."""

    name = "ray"

    def __init__(
        self,
        folder: Path,
        reporter: Reporter | None,
        *,
        address: str | None = None,
        resources_per_trial: dict[str, float] | None = None,
    ):
        resources = dict(resources_per_trial or {})
        unknown = set(resources) - set(RESOURCE_KEYS)
        if unknown:
            raise ValueError(f"resources_per_trial keys must be {RESOURCE_KEYS}, got {sorted(unknown)}")
        cpu, gpu = float(resources.get("cpu", 1)), float(resources.get("gpu", 0))
        if cpu < 0 or gpu < 0:
            raise ValueError(f"resources_per_trial must be >= 0, got cpu={cpu}, gpu={gpu}")
        ray = self._ray = import_ray()
        if not ray.is_initialized():
            ray.init(address=address, include_dashboard=False, logging_level="error")
        have = ray.cluster_resources()
        if gpu > have.get("GPU", 0):  # a task asking for a GPU the cluster lacks would wait forever
            raise ValueError(f"resources_per_trial asks for {gpu:g} GPU(s); the Ray cluster has {have.get('GPU', 0):g}")
        self._capacity = max(1, int(have.get("CPU", 1) // cpu)) if cpu > 0 else max(1, int(have.get("CPU", 1)))
        self._folder, self._reporter = folder, reporter
        self._mailbox = ray.remote(num_cpus=0)(Mailbox).remote()
        self._task = ray.remote(ray_trial).options(num_cpus=cpu, num_gpus=gpu, max_retries=0)
        self._refs: dict[Any, TrialSpec] = {}
        self._stop_deadline: float | None = None

    def capacity(self) -> int:
        return self._capacity

    def running(self) -> int:
        return len(self._refs)

    def submit(self, spec: TrialSpec) -> None:
        self._refs[self._task.remote(spec, self._mailbox, self._reporter is not None)] = spec

    def poll(self, timeout: float) -> list[dict[str, Any]]:
        """Finished rows; while waiting, answer the trials' reports every ``REPORT_POLL`` seconds (a
        reporting trial waits for its answer, so this interval is added to each of its steps)."""
        deadline = time.monotonic() + timeout
        refs = list(self._refs)
        while True:
            self._serve()
            wait = REPORT_POLL if self._reporter is not None else max(0.0, deadline - time.monotonic())
            ready = self._ray.wait(refs, num_returns=1, timeout=wait)[0] if refs else []
            if ready or time.monotonic() >= deadline:
                break
        if ready:  # and any others that are done by now
            ready = self._ray.wait(refs, num_returns=len(refs), timeout=0)[0]
        rows = [self._collect(ref) for ref in ready]
        if self._stop_deadline is not None and time.monotonic() > self._stop_deadline:
            rows += self._cancel(force=True, reason=f"cancelled: did not stop within {STOP_GRACE:g} s")
        return rows

    def _serve(self) -> None:
        """Answer the reports waiting in the mailbox with the search's verdicts."""
        if self._reporter is None:
            return
        reports, _ = self._ray.get(self._mailbox.take.remote(), timeout=MAILBOX_TIMEOUT)
        if reports:
            specs = {s.trial: s for s in self._refs.values()}
            verdicts = [(t, step, self._reporter(specs[t], step, v) if t in specs else None) for t, step, v in reports]
            self._mailbox.answer.remote(verdicts)

    def _collect(self, ref: Any) -> dict[str, Any]:
        spec = self._refs.pop(ref)
        try:
            row, files = self._ray.get(ref)
        except self._ray.exceptions.TaskCancelledError:
            return base_row(spec, "STOPPED", "cancelled")
        except self._ray.exceptions.RayError as exc:  # the worker crashed, or the node went away
            return base_row(spec, "FAILED", f"{type(exc).__name__}: {exc}")
        if files:
            run = self._folder / spec.run_id
            for name, data in files.items():
                (run / name).parent.mkdir(parents=True, exist_ok=True)
                (run / name).write_bytes(data)
            row["run_path"] = str(run)
        return row

    def stop(self) -> list[dict[str, Any]]:
        started = set(self._ray.get(self._mailbox.stop.remote(), timeout=MAILBOX_TIMEOUT))
        self._stop_deadline = time.monotonic() + STOP_GRACE
        rows = []
        for ref, spec in list(self._refs.items()):
            if spec.trial not in started:  # still queued: it will never start a trial now
                self._ray.cancel(ref)
                self._refs.pop(ref)
                rows.append(base_row(spec, "STOPPED", "stopped before it started"))
        return rows

    def _cancel(self, force: bool, reason: str) -> list[dict[str, Any]]:
        rows = []
        for ref, spec in list(self._refs.items()):
            self._ray.cancel(ref, force=force)
            self._refs.pop(ref)
            rows.append(base_row(spec, "STOPPED", reason))
        return rows

    def kill(self) -> list[dict[str, Any]]:
        """A second interrupt: cancel every task now (their histories stay on the workers)."""
        return self._cancel(force=True, reason="cancelled by a second interrupt")

    def close(self) -> None:
        self._ray.kill(self._mailbox)

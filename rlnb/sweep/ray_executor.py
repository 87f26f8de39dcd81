"""Trials as Ray tasks: on this machine's Ray, or on a cluster at ``address``.

Each trial is one task (``resources_per_trial`` CPUs / GPUs) that records its history in a temporary
folder on the worker and returns the row plus the history's files, which land in the sweep folder —
so a cluster needs no shared disk. A small actor (``mailbox.PostOffice``) carries the sweep's voice to running
tasks: Stop, and the pruner's answer to each per-step report (the task waits for it, so pruning acts
at the same step as on threads). Stopping cancels tasks that have not started, lets running ones end
STOPPED at their next step, and force-cancels any that do not within ``STOP_GRACE`` seconds.

Ray lends a task's CPUs to queued tasks while it waits in ``ray.get`` / ``ray.wait`` — here a few ms
per step on the mailbox. The sweep therefore submits no more tasks than the cluster holds (the default
``max_concurrent``); with more, a queued trial may start beside a running one and share its CPUs.

A local Ray started here listens on 127.0.0.1 only (``start_local``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from rlnb.errors import describe
from rlnb.wire import TrialStatus

from . import mailbox
from .executors import RAY_CANCELLED, Reporter
from .ray_checks import check_reachable, check_resources, import_ray, warn_unused_address
from .ray_task import MAILBOX_TIMEOUT, ray_trial
from .trial import TrialSpec, base_row

STOP_GRACE = 30.0
"""Seconds a running trial gets to stop at its next step before its task is force-cancelled."""
REPORT_POLL = 0.02
"""Seconds between the driver's looks at the mailbox while trials report (pruning)."""


SINGLE_MACHINE_FLAG = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""Ray's switch for a single-machine instance; "0" makes every process it starts take 127.0.0.1 as the node's
address and listen there."""


def start_local(ray: Any) -> None:
    """Start Ray on this machine, reachable from this machine only.

    On Linux, Ray replaces a node address of 127.0.0.1 by the one other machines see, and its GCS and
    raylet then listen on every interface: with ``RAY_AUTH_MODE=disabled`` any host that reaches this one
    can join the cluster and run tasks. Ray keeps a node on loopback only when it is told this is a
    single-machine instance, which it reads from ``SINGLE_MACHINE_FLAG`` (in the processes it starts, and as
    a constant read at import in this one), so both are set while it starts, with the node address.
    """
    constants: Any = getattr(getattr(ray, "_private", None), "ray_constants", None)
    saved_env, saved = os.environ.get(SINGLE_MACHINE_FLAG), getattr(constants, "ENABLE_RAY_CLUSTER", None)
    os.environ[SINGLE_MACHINE_FLAG] = "0"
    if saved is not None:
        constants.ENABLE_RAY_CLUSTER = False
    try:
        ray.init(include_dashboard=False, logging_level="error", _node_ip_address="127.0.0.1")
    finally:
        if saved is not None:
            constants.ENABLE_RAY_CLUSTER = saved
        if saved_env is None:
            os.environ.pop(SINGLE_MACHINE_FLAG, None)
        else:
            os.environ[SINGLE_MACHINE_FLAG] = saved_env


def _start(ray: Any, address: str | None) -> None:
    """A new local Ray (``address`` None), or this process connected to the one at ``address``; a ``RuntimeError``
    naming ``executor='ray'`` and what to do when it fails: Ray's own ``Exception: The current node timed out during
    startup`` (a loaded machine) named neither the sweep's option nor a way on."""
    try:
        if address is None:
            start_local(ray)
        else:
            ray.init(address=address, include_dashboard=False, logging_level="error")
    except Exception as exc:
        where = "a local Ray" if address is None else f"the connection to the Ray at address={address!r}"
        raise RuntimeError(f"executor='ray': {where} did not start ({describe(exc)}); call ray.init(...) yourself "
                           "before the sweep, or use executor='threads'") from exc  # fmt: skip


def post_office(ray: Any) -> Any:
    """The driver's one ``PostOffice`` actor (made on first use, again if it died)."""
    key = ray.get_runtime_context().get_job_id()
    actor = _POST_OFFICES.get(key)
    if actor is not None:
        try:
            ray.get(actor.ping.remote(), timeout=MAILBOX_TIMEOUT)
            return actor
        except ray.exceptions.RayError:
            pass
    ray.cloudpickle.register_pickle_by_value(mailbox)  # the actor's process need not import rlnb
    actor = _POST_OFFICES[key] = ray.remote(num_cpus=0)(mailbox.PostOffice).remote()
    return actor


_POST_OFFICES: dict[str, Any] = {}


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
        cpu, gpu = check_resources(resources_per_trial)
        ray = self._ray = import_ray()
        if ray.is_initialized():
            warn_unused_address(ray, address)
        else:
            at = None if address is None and not os.environ.get("RAY_ADDRESS") else address or os.environ["RAY_ADDRESS"]
            if at is not None:
                check_reachable(at)
            _start(ray, at)
        have = ray.cluster_resources()
        for asked, key in ((cpu, "CPU"), (gpu, "GPU")):  # a task asking for more than the cluster has waits forever
            if asked > have.get(key, 0):
                raise ValueError(f"resources_per_trial asks for {asked:g} {key}(s); the Ray cluster has "
                                 f"{have.get(key, 0):g}")  # fmt: skip
        self._capacity = max(1, int(have.get("CPU", 1) // cpu)) if cpu > 0 else max(1, int(have.get("CPU", 1)))
        self._folder, self._reporter, self._key = folder, reporter, str(folder)
        self._office = post_office(ray)
        ray.get(self._office.open.remote(self._key), timeout=MAILBOX_TIMEOUT)
        self._task = ray.remote(ray_trial).options(num_cpus=cpu, num_gpus=gpu, max_retries=0)
        self._refs: dict[Any, TrialSpec] = {}
        self._collected: list[dict[str, Any]] = []
        """Rows of finished tasks not yet handed back (a Ctrl-C in ``poll`` leaves them for the next)."""
        self._stop_deadline: float | None = None

    def capacity(self) -> int:
        return self._capacity

    def running(self) -> int:
        return len(self._refs) + len(self._collected)

    def submit(self, spec: TrialSpec) -> None:
        self._refs[self._task.remote(spec, self._office, self._key, self._reporter is not None)] = spec

    def poll(self, timeout: float) -> list[dict[str, Any]]:
        """Finished rows; while waiting, answer the trials' reports every ``REPORT_POLL`` seconds (a
        reporting trial waits for its answer, so this interval is added to each of its steps)."""
        deadline = time.monotonic() + timeout
        refs = list(self._refs)
        while True:
            self._serve()
            wait = REPORT_POLL if self._reporter is not None else max(0.0, deadline - time.monotonic())
            ready = self._ray.wait(refs, num_returns=1, timeout=wait)[0] if refs else []
            if ready or self._collected or time.monotonic() >= deadline:
                break
        if ready:  # and any others that are done by now
            ready = self._ray.wait(refs, num_returns=len(refs), timeout=0)[0]
        for ref in ready:  # a Ctrl-C while a row's files are fetched or written loses no row: the next poll has it
            self._collected.append(self._collect(ref))
        rows, self._collected = self._collected, []
        if self._stop_deadline is not None and time.monotonic() > self._stop_deadline:
            rows += self._cancel(force=True, reason=f"cancelled: did not stop within {STOP_GRACE:g} s")
        return rows

    def _serve(self) -> None:
        """Answer the reports waiting in the mailbox with the search's verdicts."""
        if self._reporter is None:
            return
        try:
            reports = self._ray.get(self._office.take.remote(self._key), timeout=MAILBOX_TIMEOUT)
        except self._ray.exceptions.RayError:  # the mailbox is gone: its trials stop at their next step, no report
            return
        if reports:
            specs = {s.trial: s for s in self._refs.values()}
            verdicts = [(t, step, self._verdict(specs[t], step, v) if t in specs else None) for t, step, v in reports]
            self._office.answer.remote(self._key, verdicts)

    def _verdict(self, spec: TrialSpec, step: int, value: float) -> str | bytes | None:
        """The search's answer to one report; an error it raises (a pruner's) goes to the trial, pickled, and fails
        it there, as on a thread (it escaped ``sweep`` and stopped every trial)."""
        assert self._reporter is not None
        try:
            return self._reporter(spec, step, value)
        except Exception as exc:  # noqa: BLE001 - the trial's row says it
            return bytes(self._ray.cloudpickle.dumps(exc))

    def _collect(self, ref: Any) -> dict[str, Any]:
        """The task's row, its history written to the sweep folder; the task is let go of only then (a Ctrl-C in
        the fetch, which takes the time of the files, dropped the trial from the table, its history with it)."""
        row = self._fetch(ref, self._refs[ref])
        self._refs.pop(ref)
        return row

    def _fetch(self, ref: Any, spec: TrialSpec) -> dict[str, Any]:
        try:
            row, files = self._ray.get(ref)
        except self._ray.exceptions.TaskCancelledError:
            return base_row(spec, TrialStatus.STOPPED, "cancelled")
        except self._ray.exceptions.RayError as exc:  # the worker crashed, or the node went away
            return base_row(spec, TrialStatus.FAILED, describe(exc))
        if files:
            run = self._folder / spec.run_id
            for name, data in files.items():
                (run / name).parent.mkdir(parents=True, exist_ok=True)
                (run / name).write_bytes(data)
            row["run_path"] = str(run)
        return row

    def stop(self) -> list[dict[str, Any]]:
        """Tasks still queued are cancelled; running trials stop at their next step. With the mailbox gone, every task
        reads Stop from that (a queued one ends STOPPED at its start): none is cancelled, as if all had started."""
        try:
            started = set(self._ray.get(self._office.stop.remote(self._key), timeout=MAILBOX_TIMEOUT))
        except self._ray.exceptions.RayError:  # else Ray's error escapes the sweep, and running trials' rows are lost
            started = {spec.trial for spec in self._refs.values()}
        self._stop_deadline = time.monotonic() + STOP_GRACE
        rows = []
        for ref, spec in list(self._refs.items()):
            if spec.trial not in started:  # still queued: it will never start a trial now
                self._ray.cancel(ref)
                self._refs.pop(ref)
                rows.append(base_row(spec, TrialStatus.STOPPED, "stopped before it started"))
        return rows

    def _cancel(self, force: bool, reason: str) -> list[dict[str, Any]]:
        rows = []
        for ref, spec in list(self._refs.items()):
            self._ray.cancel(ref, force=force)
            self._refs.pop(ref)
            rows.append(base_row(spec, TrialStatus.STOPPED, reason))
        return rows

    def kill(self) -> list[dict[str, Any]]:
        """A second interrupt: cancel every task now (their histories stay on the workers)."""
        return self._cancel(force=True, reason=RAY_CANCELLED)

    def close(self) -> None:
        self._office.close.remote(self._key)  # tasks still running see "stopping" and end

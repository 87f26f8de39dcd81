"""Trials as stacked ensembles: compatible local trials train together in this process (``rlnb.batched``).

The driver submits trials one at a time; this executor only collects them. At the next ``poll`` it
starts what it has collected on one background thread: the trials are grouped by what an ensemble must
share (model, optimizer kind, step count, task, options) and each group of up to ``MAX_MEMBERS`` trains
as one ensemble, group after group. Rows come back as members end, in the sweep's usual format; the
``executor`` column says ``batched``. Each member's run folder is a normal run. Trials whose models the memory
no longer held as their ensemble was built wait for it to end, then train as the next one (``_defer``).
"""

from __future__ import annotations

import queue
import threading
import time
from collections import defaultdict
from collections.abc import Hashable
from pathlib import Path
from typing import Any

from rlnb.batched import Member, MemberResult, run_batched
from rlnb.batched.memory import EnsembleTooLarge
from rlnb.batched.run import most_members
from rlnb.errors import describe
from rlnb.lifecycle import threads
from rlnb.tasks import StepReport
from rlnb.wire import TrialStatus

from .executors import ABANDONED, join_trials
from .trial import TrialSpec, base_row, objective_value, run_annotations, step_params, summary

MAX_MEMBERS = 32
"""Trials in one ensemble at most, and in flight at once (``capacity``), unless ``max_concurrent`` says otherwise.
Not a memory figure: what fits is decided per ensemble, when its trials are known (``capacity``)."""


class BatchedExecutor:
    name = "batched"

    def __init__(self, runs_dir: Path, stop: threading.Event, reporter: Any = None, max_members: int = MAX_MEMBERS):
        most = most_members(max_members)  # each member records its run: past the files it may open, refused
        self._max = max_members if most is None else max(1, min(max_members, most))
        self._runs_dir, self._stop, self._reporter = runs_dir, stop, reporter
        self._waiting: list[TrialSpec] = []
        self._rows: queue.Queue[dict[str, Any]] = queue.Queue()
        self._pending: dict[int, TrialSpec] = {}  # submitted and not yet returned as a row, by trial
        self._thread: threads.Thread | None = None
        self._abandoned = False
        self._deferred: dict[
            int, list[str]
        ] = {}  # by trial: the trials it did not fit beside, each time (its row says)

    def capacity(self) -> int:
        """The trials the driver keeps submitted: ``max_members`` (``max_concurrent``, else ``MAX_MEMBERS``), within
        the files the process may open. Not what the memory holds, which it cannot say: the driver reads it once,
        before any trial exists, and a member's bytes depend on the trials' model, task and group size
        (``member_bytes``). Memory is checked where those are known: an ensemble that does not fit is split into ones
        that do (``EnsembleTooLarge``), and each member is checked again as its model is built (``build_members``);
        so a capacity past what fits makes trials wait their turn (the estimate is a lower bound: a step can still
        fail ``RESOURCE_EXHAUSTED``)."""
        return self._max

    def running(self) -> int:
        return len(self._pending)

    def submit(self, spec: TrialSpec) -> None:
        self._waiting.append(spec)
        self._pending[spec.trial] = spec

    def poll(self, timeout: float) -> list[dict[str, Any]]:
        if self._waiting and (self._thread is None or not self._thread.is_alive()):
            specs, self._waiting = self._waiting, []
            self._thread = threads.Thread(target=self._run, args=(specs,), name="rlnb-sweep-batched")
            self._thread.start()
        rows: list[dict[str, Any]] = []
        try:
            rows.append(self._rows.get(timeout=timeout))
            while True:
                rows.append(self._rows.get_nowait())
        except queue.Empty:
            pass
        for row in rows:
            self._pending.pop(row["trial"])
        return rows

    def stop(self) -> list[dict[str, Any]]:
        """Collected trials that have not started end STOPPED now; running members stop at their next step
        (the ensemble watches the sweep's stop event)."""
        waiting, self._waiting = self._waiting, []
        for spec in waiting:
            self._pending.pop(spec.trial)
        return [base_row(spec, TrialStatus.STOPPED, "stopped before it started") for spec in waiting]

    def kill(self) -> list[dict[str, Any]]:
        """Stop waiting for the ensemble: its thread cannot be killed, and a member stuck in user code (a reward
        that never returns) held the sweep, and every further Ctrl-C, for ever. The rows that came back are
        kept, every other trial is a STOPPED row now, and what the thread sends later is dropped."""
        rows = self.stop()  # collected and not started: never started now
        rows += self.poll(0) if self._pending else []
        rows += [base_row(spec, TrialStatus.STOPPED, ABANDONED) for spec in self._pending.values()]
        self._abandoned |= bool(self._pending)
        self._pending.clear()
        return rows

    def close(self) -> None:
        if self._thread is not None and not self._abandoned:
            join_trials([self._thread])

    # -- the background thread ---------------------------------------------------------------------

    def _run(self, specs: list[TrialSpec]) -> None:
        """Anything that escapes (a bug here, not a trial's failure) ends every trial not yet returned
        FAILED: the driver waits for one row per submitted trial, so a dead thread would hang the sweep."""
        sent: set[int] = set()
        try:
            groups: dict[Hashable, list[TrialSpec]] = defaultdict(list)
            for spec in specs:
                groups[_key(spec)].append(spec)
            for group in groups.values():
                for start in range(0, len(group), self._max):
                    self._ensemble(group[start : start + self._max], sent)
        except BaseException as exc:  # noqa: BLE001 - never a hang: each trial left is a FAILED row
            for spec in specs:
                if spec.trial not in sent:
                    self._put(base_row(spec, TrialStatus.FAILED, f"batched executor: {describe(exc)}"), sent)

    def _put(self, row: dict[str, Any], sent: set[int]) -> None:
        sent.add(row["trial"])
        besides = self._deferred.pop(row["trial"], None)
        if besides is not None:
            where = ", then beside trial(s) ".join(besides)
            note = (
                f"deferred: the memory no longer held its model beside trial(s) {where} as their ensemble was built; "
            )
            note += "it waited for a later one"
            row["reason"] = note if row["reason"] is None else f"{row['reason']}; {note}"
        self._rows.put(row)

    def _ensemble(self, specs: list[TrialSpec], sent: set[int]) -> None:
        if self._stop.is_set():
            for spec in specs:
                self._put(base_row(spec, TrialStatus.STOPPED, "stopped before it started"), sent)
            return
        first = specs[0]
        rewards: list[list[float]] = [[] for _ in specs]
        losses: list[list[float]] = [[] for _ in specs]
        start = time.perf_counter()
        deferred: list[int] = []  # members whose models the memory no longer held: a later ensemble runs them

        def on_step(i: int, report: StepReport) -> str | None:
            rewards[i].append(report.reward)
            losses[i].append(report.loss)
            if self._reporter is None:
                return None
            spec = specs[i]
            value = objective_value(spec.objective, rewards[i], losses[i])
            verdict: str | None = self._reporter(spec, len(rewards[i]), value)
            return verdict

        def on_done(i: int, result: MemberResult) -> None:
            try:
                if not result.built:
                    deferred.append(i)
                    return
                row = self._row(specs[i], result)
            except Exception as exc:  # noqa: BLE001 - the member ended; its row must still come back
                row = base_row(specs[i], TrialStatus.FAILED, f"its row could not be made: {describe(exc)}")
            self._put(row, sent)

        members = [
            Member(_params_at(spec), spec.seed, spec.run_id, run_annotations(spec, self._runs_dir)) for spec in specs
        ]
        options = {k: v for k, v in first.session_options.items() if k != "model"}
        try:
            run_batched(
                first.options.get("model", "tiny"), first.kind, members, steps=first.steps, task=first.task,
                runs_dir=self._runs_dir, stop=self._stop, on_step=on_step, on_done=on_done, **options,
            )  # fmt: skip
        except EnsembleTooLarge as exc:  # refused before any member ran: smaller ensembles that fit, one after another
            if not 0 < exc.most < len(specs):
                self._failed(specs, exc, start, sent)
                return
            for part in range(0, len(specs), exc.most):
                self._ensemble(specs[part : part + exc.most], sent)
        except Exception as exc:  # noqa: BLE001 - the ensemble could not run: each trial is a FAILED row
            self._failed(specs, exc, start, sent)
            return
        if deferred:
            self._defer(specs, deferred, sent)

    def _defer(self, specs: list[TrialSpec], deferred: list[int], sent: set[int]) -> None:
        """The trials whose models the memory no longer held as their ensemble was built (``MemberResult.built``)
        run as a later ensemble, now that this one has freed its memory (not FAILED rows, to be run again by
        hand). Each ensemble builds its first member or is refused (its trials FAILED), so this ends; a trial deferred
        again names each ensemble it did not fit in."""
        beside = ", ".join(str(spec.trial) for i, spec in enumerate(specs) if i not in deferred)
        for i in deferred:
            self._deferred.setdefault(specs[i].trial, []).append(beside)
        self._ensemble([specs[i] for i in deferred], sent)

    def _failed(self, specs: list[TrialSpec], exc: Exception, start: float, sent: set[int]) -> None:
        for spec in specs:
            if spec.trial not in sent:
                row = base_row(spec, TrialStatus.FAILED, describe(exc))
                row["wall_s"] = time.perf_counter() - start
                self._put(row, sent)

    def _row(self, spec: TrialSpec, result: MemberResult) -> dict[str, Any]:
        row = base_row(spec, result.status, result.reason)
        row.update(summary(result.history, result.rewards, result.losses, spec.objective, result.reason))
        row["wall_s"] = result.wall_s
        return row


def _params_at(spec: TrialSpec) -> Any:
    return spec.params if spec.schedule is None else (lambda step: step_params(spec, step))


def _key(spec: TrialSpec) -> Hashable:
    """What one ensemble's members must share."""
    return (spec.kind, spec.steps, id(spec.task), tuple(sorted((k, repr(v)) for k, v in spec.options.items())))

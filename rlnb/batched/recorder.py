"""A run's History written without a session, as a local session writes it: for batched trials.

A member of an ensemble (``rlnb.batched``) has no ``Session`` or worker of its own, yet its run must read as
any local run: the same ``config.json`` keys, and one record per operation that goes PENDING → RUNNING →
COMPLETED (with the operation's wire output, which ``History`` folds in as for a session) or FAILED (with
an API error code and message). ``Recorder`` does that, with the session's step numbering, and logs a step
that trained as ``rl_step`` logs it (``Recorder.trained``).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlnb import wire
from rlnb.engine.models.adapter import ModelAdapter
from rlnb.engine.optim.split import ADAM_GROUP, MUON_GROUP
from rlnb.engine.optim.trainer import StepStats
from rlnb.engine.stepping import optim_metrics
from rlnb.history import History, Record
from rlnb.history.figures import RLMetric
from rlnb.history.runconfig import LOCAL
from rlnb.history.runs import warn_continued
from rlnb.params import Hyperparams
from rlnb.tasks import StepReport
from rlnb.tasks.rollouts import Rollout, completion_rows, step_metrics
from rlnb.wire import OperationErrorCode as Code
from rlnb.wire import OperationStatus as Status


def member_config(
    adapter: ModelAdapter,
    optimizer: wire.OptimizerKind,
    muon_scaling: wire.MuonScaling,
    ns_dtype: torch.dtype,
    muon_names: list[str],
    adam_names: list[str],
    *,
    seed: int,
    ensemble: str,
    index: int,
    members: int,
) -> dict[str, Any]:
    """The ``config.json`` of a member's run: ``LocalBackend.config()``'s keys for the same trial alone, plus
    ``batched`` (the ensemble's id, its size and the member's index)."""
    order = {n: i for i, (n, _) in enumerate(adapter.module.named_parameters())}
    return {
        "backend": LOCAL,
        "session_id": f"local-{uuid.uuid4()}",
        "model": adapter.name,
        "model_kind": adapter.kind,
        "optimizer": optimizer,
        "muon_scaling": muon_scaling,
        "ns_dtype": str(ns_dtype).removeprefix("torch.") if optimizer == wire.MUON else None,
        "param_split": (
            {MUON_GROUP: sorted(muon_names, key=order.__getitem__), ADAM_GROUP: adam_names}
            if optimizer == wire.MUON
            else None
        ),
        "seed": seed,
        "device": str(adapter.device),
        "dtype": str(next(adapter.module.parameters()).dtype).removeprefix("torch."),
        "lora": None,
        "resume_from": None,
        "tokenizer": None,  # built-in models only, with no option that reshapes them (``assembly.recorded``)
        "trust_remote_code": False,
        "eos_token_id": None,
        "num_generator_replicas": 1,
        "batched": {"ensemble": ensemble, "members": members, "index": index},
    }


@dataclass
class Op:
    record: Record
    id: str


class Recorder:
    """One member's History, written operation by operation as its session would write it."""

    def __init__(self, history: History) -> None:
        self.history = history
        self.submitted = 0
        """Optim-steps submitted: the ``step`` a new record gets (a session's ``Submissions.steps_submitted``)."""
        self.step = 0
        """Optim-steps completed (the session's ``step``); weights-sync publishes it as the weights version."""
        self._open: list[Op] = []

    @classmethod
    def open(cls, config: dict[str, Any], runs_dir: str | Path | None, run_id: str | None) -> Recorder:
        """Recording into ``runs_dir/run_id`` (a new id if None), or in memory when ``runs_dir`` is None. An
        existing run is continued, with the ``RunContinuedWarning`` a session starting at step 0 gives."""
        if runs_dir is None:
            return cls(History(config=config))
        history = History.create(config, runs_dir, run_id)
        try:  # a warning made an error: the run folder it locked is let go
            warn_continued(history.config.get("run_id"), history.steps_reached(), 0)
        except BaseException:
            history.close()
            raise
        return cls(history)

    @classmethod
    def unbuilt(cls, config: dict[str, Any], run_id: str | None) -> Recorder:
        """A member whose model was not built: its run in memory, no folder made, so that running it again with
        ``run_id`` starts a new run (the folder left behind was continued: a second session in one run)."""
        return cls(History(config=config if run_id is None else {**config, "run_id": run_id}))

    @classmethod
    def open_all(cls, runs: list[tuple[dict[str, Any], str | None]], runs_dir: str | Path | None) -> list[Recorder]:
        """``open`` for each ``(config, run_id)``; if one cannot be opened (``RunLocked``, a file in its place),
        those already open are closed, not left locked until garbage collection."""
        opened: list[Recorder] = []
        try:
            for config, run_id in runs:
                opened.append(cls.open(config, runs_dir, run_id))
        except BaseException:
            for rec in opened:
                rec.close()
            raise
        return opened

    def submit(self, kind: wire.OperationKind, params: dict[str, Any] | None = None) -> Op:
        at = time.time()
        rec = self.history.new(kind, self.submitted, params, at=at)
        if kind == wire.OperationKind.OPTIM_STEP:
            self.submitted += 1
        op = Op(rec, str(uuid.uuid4()))
        self.history.update(rec, wire.Operation(id=op.id, status=Status.PENDING), at)
        self._open.append(op)
        return op

    def running(self, op: Op) -> None:
        self.history.update(op.record, wire.Operation(id=op.id, status=Status.RUNNING), time.time())

    def complete(self, op: Op, output: Any) -> None:
        self._open.remove(op)
        self.history.update(op.record, wire.Operation(id=op.id, status=Status.COMPLETED, output=output), time.time())

    def fail(self, op: Op, code: Code, message: str) -> None:
        """End ``op`` FAILED with ``code``."""
        self._open.remove(op)
        self.history.update(op.record, wire.Operation.failed(op.id, code, message), time.time())
        if op.record.kind == wire.OperationKind.OPTIM_STEP:  # no step made, as a session counts it
            self.submitted -= 1
            self.history.uncount_step(op.record)

    def publish(self, op: Op) -> None:
        """Run and complete the weights-sync ``op``: it publishes the completed optim-steps as the weights version."""
        self.running(op)
        self.complete(op, wire.WeightsSyncResult(weights_version=self.step))

    def trained(
        self,
        ops: tuple[Op, Op],
        stats: StepStats,
        hp: Hyperparams,
        rollouts: list[list[Rollout]],
        fb: wire.ForwardBackwardResult,
    ) -> StepReport:
        """A step that trained, recorded as ``rl_step`` records it: its optim-step and weights-sync (``ops``)
        completed, its completions and RL metrics logged; its report for ``on_step``."""
        opt, sync = ops
        self.step += 1
        self.complete(opt, wire.OptimStepResult(step=self.step, metrics=optim_metrics(stats, hp)))
        self.publish(sync)
        self.history.log_completions(self.step, completion_rows(rollouts))
        metrics = step_metrics(rollouts, fb.metrics)
        self.history.log(self.step, **metrics)
        rewards = [r.reward for g in rollouts for r in g]
        return StepReport(
            self.step, metrics[RLMetric.REWARD], fb.loss, stats.grad_norm, Status.COMPLETED, rewards, metrics
        )

    def abandon(self, message: str, code: Code = Code.SESSION_NOT_ACTIVE) -> None:
        """Fail every operation not yet finished (the run stopped or broke while they were queued or running)."""
        for op in list(self._open):
            self.fail(op, code, message)

    def close(self) -> None:
        self.history.close()

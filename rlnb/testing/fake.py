"""``FakeBackend``: a ``Backend`` without torch, for testing code that drives a ``Session`` in milliseconds."""

from __future__ import annotations

import random
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from rlnb import wire
from rlnb._options import check_seconds
from rlnb.engine.worker import Worker
from rlnb.errors import OperationError
from rlnb.text import ByteCodec
from rlnb.wire import Listener

Failure = Callable[[str, Any, int], str | None]
"""``fail(kind, body, step) -> short error code or None``: which operations end FAILED."""


class FakeBackend:
    """A training session without a model.

    Args:
        optimizer: ``"adam"`` or ``"muon"``.
        delay: seconds each operation spends RUNNING (a finite number in [0, 86400]; a close ends them).
        loss: ``loss(step) -> float``, the forward-backward loss at an optimizer step (default 1 / (1 + step)).
        grad_norm: the pre-clip gradient norm every optim-step reports.
        fail: which operations fail: ``{"optim-step": "NON_FINITE_LOSS"}`` or a ``Failure`` callable.

    Sampling returns ``max_tokens`` (default 4) pseudo-random bytes per sequence, reproducible from the
    ``seed``, each with logprob -1; text is byte-level (``codec``), as on the built-in models.
    ``submitted`` lists every ``(kind, body)`` in order.
    """

    codec = ByteCodec()

    def __init__(
        self,
        optimizer: wire.OptimizerKind = "adam",
        *,
        delay: float = 0.0,
        loss: Callable[[int], float] | None = None,
        grad_norm: float = 1.0,
        fail: dict[str, str] | Failure | None = None,
    ):
        self.optimizer: wire.OptimizerKind = wire.optimizer_kind(optimizer)
        self.delay, self.grad_norm = check_seconds("delay", delay), grad_norm  # NaN or inf fails every wait
        self.loss = loss or (lambda step: 1.0 / (1 + step))
        self._fail: Failure = _failing(fail) if isinstance(fail, dict) else (fail or _never)
        self.step = self.weights_version = 0
        self.submitted: list[tuple[str, Any]] = []
        now = datetime.now(UTC)
        self._info = wire.Session(
            id=f"fake-{uuid.uuid4()}", status=wire.SessionStatus.RUNNING, base_model="fake", model_resources_id="fake",
            created_by="fake", created_at=now, updated_at=now,
        )  # fmt: skip
        self._lock = threading.Lock()
        self._worker = Worker(self._run, name=f"rlnb-{self._info.id}")

    def submit(self, kind: wire.OperationKind, body: wire._Model | None, listener: Listener) -> None:
        """Queue one operation; ``listener`` gets its envelope now (PENDING) and on every change."""
        if kind not in wire.REQUEST_TYPES:
            raise ValueError(f"unknown operation kind {kind!r}")
        with self._lock:  # ``submitted`` in the worker's order
            self.submitted.append((kind, body))
            self._worker.submit(kind, body, listener)

    def session(self) -> wire.Session:
        """The session object as the API's GET returns it, with the current step and weights version."""
        info = self._info.model_copy(deep=True)
        info.step = self.step
        info.policy_state = wire.PolicyState(
            applied_weights_version=self.weights_version,
            target_weights_version=self.weights_version,
            trainer_step=self.step,
        )
        return info

    def config(self) -> dict[str, Any]:
        """What the run's ``config.json`` records: ``backend='fake'``, the session id, the optimizer."""
        return {"backend": "fake", "session_id": self._info.id, "model": "fake", "optimizer": self.optimizer}

    def close(self) -> None:
        """Stop as a local session stops: the running operation finishes, queued ones fail SESSION_NOT_ACTIVE."""
        with self._lock:
            if not self._worker.closed:
                self._info.status = wire.SessionStatus.STOPPED
        self._worker.close()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until every queued operation has finished; False if ``timeout`` passed first."""
        return self._worker.wait_idle(timeout)

    def runs_here(self) -> bool:
        """Whether the caller is the worker's thread (``Operation.result`` refuses to wait there)."""
        return self._worker.runs_here()

    def _run(self, kind: wire.OperationKind, body: Any, cancelled: threading.Event) -> wire._Model:
        """One operation, on the worker's thread: ``delay`` seconds (which a close ends at once, as it ends the
        engine's ``op_delay``: a test of a stop does not wait them out), then its failure or its output."""
        if self.delay:  # a wait of 0 is no yield here: it costs ~80 µs of timer slack
            cancelled.wait(self.delay)
        code = self._fail(kind, body, self.step)
        if code is not None:
            raise OperationError(wire.error_code(code), f"FakeBackend fails {kind} at step {self.step}")
        return _OUTPUTS[kind](self, body)

    def _forward_backward(self, body: wire.ForwardBackwardBody) -> wire.ForwardBackwardResult:
        tokens = sum(len(s.model_input.tokens) for s in body.samples)
        return wire.ForwardBackwardResult(loss=self.loss(self.step), metrics={"loss/tokens": float(tokens)})

    def _custom_forward_backward(self, body: wire.CustomForwardBackwardBody) -> wire.CustomForwardBackwardResult:
        return wire.CustomForwardBackwardResult()

    def _optim_step(self, body: wire.OptimStepBody | None) -> wire.OptimStepResult:
        self.step += 1
        given = getattr(body, wire.OPTIMIZER_PARAMS_FIELD[self.optimizer]) if body is not None else None
        lr = getattr(given, "learning_rate", None) or 1e-4
        clip = getattr(given, "grad_clip_norm", None)
        clip = 1.0 if clip is None else clip  # the engine's default; 0 = clipping off, as sent
        metrics = {"grad_norm": self.grad_norm, "grad_clip_norm": clip, "learning_rate": lr}
        return wire.OptimStepResult(step=self.step, metrics=metrics)

    def _weights_sync(self, body: wire.WeightsSyncBody) -> wire.WeightsSyncResult:
        self.weights_version = self.step
        return wire.WeightsSyncResult(weights_version=self.weights_version)

    def _inference_checkpoint(self, body: None) -> wire.InferenceCheckpointResult:
        return wire.InferenceCheckpointResult(checkpoint=wire.InferenceCheckpoint(**self._checkpoint()))

    def _training_checkpoint(self, body: None) -> wire.TrainingCheckpointResult:
        return wire.TrainingCheckpointResult(checkpoint=wire.TrainingCheckpoint(**self._checkpoint()))

    def _checkpoint(self) -> dict[str, Any]:
        return {"id": f"ckpt-fake-{uuid.uuid4().hex[:8]}", "step": self.step, "created_at": datetime.now(UTC)}

    def _sample(self, body: wire.SampleBody) -> wire.SampleOutput:
        sp = body.sampling_params or wire.SamplingParams()
        rng = random.Random(sp.seed)
        n, length = body.num_samples or 1, sp.max_tokens or 4
        results = []
        for _ in body.model_inputs:
            seqs = [
                wire.SampledSequence(
                    tokens=[rng.randrange(256) for _ in range(length)],
                    logprobs=[-1.0] * length,
                    stop_reason=wire.STOP_REASON_LENGTH,
                )  # fmt: skip
                for _ in range(n)
            ]
            segments = [wire.PolicyVersionSegment(start_token=0, version=self.weights_version)]
            results.append(wire.SampleResult(policy_segments=segments, sequences=seqs))
        return wire.SampleOutput(results=results)


_OUTPUTS: dict[wire.OperationKind, Callable[[FakeBackend, Any], wire._Model]] = {
    wire.OperationKind.FORWARD_BACKWARD: FakeBackend._forward_backward,
    wire.OperationKind.CUSTOM_FORWARD_BACKWARD: FakeBackend._custom_forward_backward,
    wire.OperationKind.OPTIM_STEP: FakeBackend._optim_step,
    wire.OperationKind.WEIGHTS_SYNC: FakeBackend._weights_sync,
    wire.OperationKind.SAMPLE: FakeBackend._sample,
    wire.OperationKind.INFERENCE_CHECKPOINT: FakeBackend._inference_checkpoint,
    wire.OperationKind.TRAINING_CHECKPOINT: FakeBackend._training_checkpoint,
}
"""Each kind's plausible output (and the step or version it advances)."""


def _failing(fail: dict[str, str]) -> Failure:
    """``fail={kind: code}`` as a ``Failure``, checked now: a misspelt kind or code would never fail anything."""
    table: dict[str, wire.OperationErrorCode] = {}
    for kind, code in fail.items():
        if kind not in wire.REQUEST_TYPES:
            raise ValueError(f"fail: {kind!r} is not an operation kind; one of {', '.join(wire.OperationKind)}")
        try:
            table[kind] = wire.error_code(code)
        except ValueError as exc:
            raise ValueError(f"fail[{kind!r}]: {exc}") from None
    return lambda kind, body, step: table.get(kind)


def _never(kind: str, body: Any, step: int) -> str | None:
    return None

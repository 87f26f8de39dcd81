"""``FakeBackend``: a ``Backend`` without torch, for testing code that drives a ``Session`` in milliseconds."""

from __future__ import annotations

import random
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from rlnb import wire
from rlnb._input.checks import check_int, check_seconds
from rlnb.engine.worker import Worker
from rlnb.errors import OperationError
from rlnb.history.runconfig import FAKE
from rlnb.params import Hyperparams
from rlnb.testing import fake_checks, fake_ops
from rlnb.text.codec import ByteCodec
from rlnb.wire import Listener

Failure = Callable[[str, Any, int], str | None]
"""``fail(kind, body, step) -> short error code or None``: which operations end FAILED."""


class FakeBackend:
    """A training session without a model: the in-process engine's worker, statuses, error codes and result fields,
    on a pretend byte-level model the size of the built-in ``"tiny"`` (256 token ids, a context of 256 tokens).

    Args:
        optimizer: ``"adam"`` or ``"muon"``.
        delay: seconds each operation spends RUNNING (a finite number in [0, 86400]; a close ends them).
        loss: ``loss(step) -> float``, the forward-backward loss at an optimizer step (default 1 / (1 + step)); NaN
            or ±inf fails the forward-backward ``NON_FINITE_LOSS``, as the engine and the service fail it.
        grad_norm: the pre-clip gradient norm an optim-step reports, or ``grad_norm(step) -> float``; 0 where no
            forward-backward accumulated gradients since the step before, as on the engine. NaN or ±inf fails the
            optim-step ``NON_FINITE_LOSS`` and drops the gradients, the step unchanged, as the engine fails
            gradients that are not finite.
        fail: which operations fail: ``{"optim-step": "NON_FINITE_LOSS"}`` or a ``Failure`` callable.
        seed: seeds the samples sent without a ``seed`` (the engine's ``seed=``): a run is the same each time.
        num_generator_replicas: 0 makes a trainer-only session, whose samples fail ``INVALID_INPUT``.
        vocab_size: the token ids a sample or a prompt may hold, [0, vocab_size) (at most 256: the ids are bytes);
            past it the ``Session`` refuses before sending, and a body sent past it fails ``INVALID_INPUT``, as on
            the engine. None: no bound (a stand-in for a model with a larger vocabulary).
        context_length: the most tokens a sample, or a prompt and its ``max_tokens``, may hold, checked the same
            way; None: no bound.

    What the engine refuses in a request is refused here, with its code and words: a loss's missing or unread
    inputs, inputs of another length than their sample, token ids outside the vocabulary or past the context, the
    other optimizer's params, an AdamW eps that is 0 in float32 (the pretend weights' dtype, ``tiny``'s) or a step
    size past float32's range, a custom forward-backward's gradients (their count, length and finiteness) and its
    inputs, sampling params sent past the wire's checks. What differs, by design: sampling returns pseudo-random
    bytes (``max_tokens``, default ``wire.DEFAULT_MAX_TOKENS``, cut at a stop string as the engine cuts them) whatever
    ``temperature``, ``top_p`` and ``top_k`` say, except that greedy sampling (a temperature below 1e-5, or top_k 1)
    gives every completion of a prompt the same bytes whatever the seed; a tiny ``top_p``, greedy on the engine, is
    not; every sampled token, prompt token and counted target is at log-prob -1 (``fake_ops.FAKE_LOGPROB``); the loss
    is ``loss(step)``, whatever the loss type; forward-backward metrics hold ``loss/tokens`` only; gradients are not
    finite only where ``grad_norm`` says so (custom gradients of 3e38 overflow on the engine, not here), and the
    failure names no parameter; a Muon step splits ``grad_norm`` equally between its groups. ``submitted`` lists
    every ``(kind, body)`` in order.
    """

    codec = ByteCodec()
    max_num_samples = wire.MAX_NUM_SAMPLES
    """The in-process engine's bounds on a sample request: a ``Session`` refuses past them before sending."""
    max_stop_strings = wire.MAX_STOP_STRINGS
    max_stop_chars = wire.MAX_STOP_CHARS

    def __init__(
        self,
        optimizer: wire.OptimizerKind = wire.ADAM,
        *,
        delay: float = 0.0,
        loss: Callable[[int], float] | None = None,
        grad_norm: float | Callable[[int], float] = 1.0,
        fail: dict[str, str] | Failure | None = None,
        seed: int = 0,
        num_generator_replicas: int = 1,
        vocab_size: int | None = 256,
        context_length: int | None = 256,
    ):
        self.optimizer: wire.OptimizerKind = wire.optimizer_kind(optimizer)
        self.delay, self.grad_norm = check_seconds("delay", delay), grad_norm  # NaN or inf fails every wait
        self.loss = loss or (lambda step: 1.0 / (1 + step))
        self._fail: Failure = _failing(fail) if isinstance(fail, dict) else (fail or _never)
        self.seed = check_int("seed", seed, -(2**63), 2**63 - 1)
        self.sample_rng = random.Random(self.seed)
        self.num_generator_replicas = check_int("num_generator_replicas", num_generator_replicas, 0, wire.INT32_MAX)
        self.vocab_size = None if vocab_size is None else check_int("vocab_size", vocab_size, 1, 256)
        self.context_length = None if context_length is None else check_int("context_length", context_length, 1)
        self.step = self.weights_version = 0
        self.accumulated = False
        """Whether a forward-backward has accumulated gradients since the last optim-step (the engine's state)."""
        self.submitted: list[tuple[str, Any]] = []
        self._training_checkpoints: list[wire.TrainingCheckpoint] = []
        self._inference_checkpoints: list[wire.InferenceCheckpoint] = []
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
        info.training_checkpoints = list(self._training_checkpoints)
        info.inference_checkpoints = list(self._inference_checkpoints)
        return info

    def config(self) -> dict[str, Any]:
        """What the run's ``config.json`` records: ``backend='fake'``, the session id, the optimizer, the seed."""
        return {
            "backend": FAKE, "session_id": self._info.id, "model": "fake", "optimizer": self.optimizer,
            "seed": self.seed,
        }  # fmt: skip

    def close(self) -> None:
        """Stop as a local session stops: the running operation finishes, queued ones fail SESSION_NOT_ACTIVE."""
        with self._lock:
            if not self._worker.closed:
                self._info.status = wire.SessionStatus.STOPPED
        self._worker.close()

    def check_optim_step(self, hp: Hyperparams) -> None:
        """A ``ValueError`` naming the field where an optim-step with ``hp`` would be refused ``INVALID_INPUT`` here, as
        on the engine (``fake_checks.step_limits``): ``Session.check_params`` asks before anything is sent."""
        fake_checks.step_limits(hp)

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
            code = wire.error_code(code)
            if kind == wire.OperationKind.OPTIM_STEP and code == wire.OperationErrorCode.NON_FINITE_LOSS:
                self.accumulated = False  # the engine drops the gradients that were not finite
            raise OperationError(code, f"FakeBackend fails {kind} at step {self.step}")
        output = _OUTPUTS[kind](self, body)
        if kind in wire.CHANGES_SESSION:
            self._info.updated_at = datetime.now(UTC)
        return output

    def _weights_sync(self, body: wire.WeightsSyncBody) -> wire.WeightsSyncResult:
        self.weights_version = self.step
        return wire.WeightsSyncResult(weights_version=self.weights_version)

    def _inference_checkpoint(self, body: None) -> wire.InferenceCheckpointResult:
        ckpt = wire.InferenceCheckpoint(**self._checkpoint())
        self._inference_checkpoints.append(ckpt)
        return wire.InferenceCheckpointResult(checkpoint=ckpt)

    def _training_checkpoint(self, body: None) -> wire.TrainingCheckpointResult:
        ckpt = wire.TrainingCheckpoint(**self._checkpoint())
        self._training_checkpoints.append(ckpt)
        return wire.TrainingCheckpointResult(checkpoint=ckpt)

    def _checkpoint(self) -> dict[str, Any]:
        return {"id": f"ckpt-fake-{uuid.uuid4().hex[:8]}", "step": self.step, "created_at": datetime.now(UTC)}


_OUTPUTS: dict[wire.OperationKind, Callable[[FakeBackend, Any], wire._Model]] = {
    wire.OperationKind.FORWARD_BACKWARD: fake_ops.forward_backward,
    wire.OperationKind.CUSTOM_FORWARD_BACKWARD: fake_ops.custom_forward_backward,
    wire.OperationKind.OPTIM_STEP: fake_ops.optim_step,
    wire.OperationKind.WEIGHTS_SYNC: FakeBackend._weights_sync,
    wire.OperationKind.SAMPLE: fake_ops.sample,
    wire.OperationKind.INFERENCE_CHECKPOINT: FakeBackend._inference_checkpoint,
    wire.OperationKind.TRAINING_CHECKPOINT: FakeBackend._training_checkpoint,
}
"""Each kind's output (and the step or version it advances); ``fake_ops`` holds those that check their body."""


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

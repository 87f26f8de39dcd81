"""Tools for testing code that uses rlnb (and rlnb itself): no model, no network beyond loopback.

* ``FakeBackend``: a ``Backend`` without torch: the in-process engine's own worker (submission order, the
  API's PENDING → RUNNING → COMPLETED / FAILED transitions, closing and failure rules) running fake
  operations with plausible outputs, so a ``Session``, its history, widgets and sweeps can be tested in
  milliseconds: ``rlnb.Session(FakeBackend(), record=False)``.
* ``ServerProcess`` / ``free_port``: a server (``rlnb serve`` or any command) in a child process on
  127.0.0.1, started and stopped with deadlines.
"""

from __future__ import annotations

import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from datetime import UTC, datetime
from typing import IO, Any

from rlnb import wire
from rlnb.engine.worker import Worker
from rlnb.errors import OperationError
from rlnb.text import ByteCodec
from rlnb.wire import Listener

# ---------------------------------------------------------------------------------------------
# FakeBackend

Failure = Callable[[str, Any, int], str | None]
"""``fail(kind, body, step) -> short error code or None``: which operations end FAILED."""


class FakeBackend:
    """A training session without a model.

    Args:
        optimizer: ``"adam"`` or ``"muon"``.
        delay: seconds each operation spends RUNNING.
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
        self.delay, self.grad_norm = delay, grad_norm
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
        """One operation, on the worker's thread: ``delay`` seconds, then its failure or its output."""
        if self.delay:  # sleep(0) is no yield here: it costs ~80 µs of timer slack
            time.sleep(self.delay)
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
                    stop_reason="STOP_REASON_LENGTH",
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


# ---------------------------------------------------------------------------------------------
# Servers in child processes


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """A server in a child process on loopback, for notebooks, tests and benchmarks:

        with ServerProcess.rlnb_serve("--op-delay", "0.05") as url:
            session = rlnb.connect(url, base_model="rlnb/tiny")

    ``start()`` waits until ``health`` answers (or the process dies: its stderr is in the error);
    ``stop()`` terminates it, then kills it if it does not exit. The server's stdin is a pipe held by this process
    alone: ``rlnb serve`` is started with ``--exit-with-stdin``, so it stops when this process ends, however it
    ends (a SIGKILLed kernel runs no finalizer); a command of your own can watch its stdin the same way. The
    server's stderr goes to a temporary file, never to a pipe that nobody reads (a full pipe would block the server
    mid-request); ``log()`` returns what it has written so far.
    """

    def __init__(self, cmd: list[str], url: str, health: str = "/health", timeout: float = 60.0):
        self.cmd, self.url, self.health, self.timeout = cmd, url, health, timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._ender: weakref.finalize[Any, Any] | None = None

    @classmethod
    def rlnb_serve(cls, *args: str, port: int | None = None, timeout: float = 60.0) -> ServerProcess:
        """``rlnb serve`` with ``args`` (e.g. ``"--token", "t"``) on ``port`` (default: a free one), given
        ``timeout`` seconds to answer its health check (it imports torch: longer on a busy machine)."""
        port = port or free_port()
        cmd = [sys.executable, "-m", "rlnb.cli", "serve", "--port", str(port), "--exit-with-stdin", *args]
        return cls(cmd, f"http://127.0.0.1:{port}", timeout=timeout)

    def start(self) -> str:
        """Start the server and wait until ``health`` answers; returns its URL. Raises RuntimeError, with
        its stderr, if it dies or misses the deadline."""
        import httpx

        if self.proc is not None:  # a second process on the same port would fail, and the first be lost
            raise RuntimeError(f"this server is already started at {self.url}: stop() it first")
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the server; closed by stop()
        # stdin: a pipe only this process holds, closed by the OS however it ends (see the class's docstring)
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=self._stderr)
        # A notebook that never reaches its stop() cell (an error before it, the cell re-run, the kernel shut down)
        # left the server running after the kernel: it is stopped when this object is collected or Python exits.
        self._ender = weakref.finalize(self, _end, self.proc, self._stderr)
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                if httpx.get(self.url + self.health, timeout=1).status_code < 500:
                    return self.url
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                err = self.log()[-2000:]
                self.stop()
                raise RuntimeError(f"{' '.join(self.cmd[:4])} did not start: {err}")
            time.sleep(0.05)

    def stop(self) -> None:
        """Terminate the server, then kill it if it has not exited within 15 s."""
        if self._ender is not None:
            self._ender()  # runs _end once
        self.proc, self._stderr, self._ender = None, None, None

    def log(self) -> str:
        """The server's stderr so far (its log and any traceback); empty once stopped."""
        if self._stderr is None:
            return ""
        self._stderr.flush()
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")

    def __enter__(self) -> str:
        """``with ServerProcess.rlnb_serve() as url:`` starts the server and gives its URL."""
        return self.start()

    def __exit__(self, *exc: object) -> None:
        """Stop the server (see ``stop``), whether or not the block raised."""
        self.stop()


def _end(proc: subprocess.Popen[bytes], stderr: IO[bytes]) -> None:
    """Terminate ``proc``, then kill it if it has not exited within 15 s, and close its stderr file. A function of
    its own, so that the finalizer holds no reference to the ``ServerProcess``."""
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    proc.stdin.close()  # type: ignore[union-attr]  # a pipe: start() made it
    stderr.close()

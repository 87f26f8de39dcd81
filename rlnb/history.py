"""The record of every operation a session runs, and its pandas views.

One ``Record`` per operation, updated in place as its status changes (PENDING → RUNNING →
COMPLETED / FAILED). The record format lives here and only here; ``History.df`` is a DataFrame
with one row per operation.

Figures a backend does not report stay missing (NaN), never 0, and ``na_reason`` says why —
Together's optim-step returns only ``step``, so a remote session has no gradient norm.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import pandas as pd

from rlnb import wire

NA_NO_GRAD_NORM = "the API's optim-step output carries only `step` (no gradient norm or learning rate)"


@dataclass
class Record:
    """One operation. Times are POSIX seconds as observed by this process."""

    seq: int
    """Submission order within the session (0, 1, 2, ...)."""
    kind: str
    """Operation kind as in the path: forward-backward, optim-step, weights-sync, sample, ..."""
    op_id: str = ""
    status: str = "TRAINING_OPERATION_STATUS_PENDING"
    error_code: str | None = None
    error_message: str | None = None
    step: int | None = None
    """optim-step: the step count after it. Others: optim-steps submitted before this op, i.e. the
    trainer version it sees; a forward-backward with ``step=k`` feeds the optim-step that makes k+1."""
    loss: float = math.nan
    """forward-backward: the loss as returned (cross-entropy: a sum over trained tokens)."""
    metrics: dict[str, float] = field(default_factory=dict)
    """forward-backward metrics (clip fractions, KL, ...) or optim-step extension metrics."""
    grad_norm: float = math.nan
    """optim-step: global gradient norm before clipping; NaN when the backend does not report it."""
    grad_norm_muon: float = math.nan
    """optim-step (Muon): pre-clip norm over the Muon matrices."""
    grad_norm_adam: float = math.nan
    """optim-step (Muon): pre-clip norm over the AdamW-tuned parameters."""
    grad_clip_norm: float = math.nan
    """optim-step: the clipping threshold in force (0 = off)."""
    learning_rate: float = math.nan
    """optim-step: the learning rate used (Muon: the matrix learning rate)."""
    params: dict[str, Any] = field(default_factory=dict)
    """optim-step: the optimizer params object as sent (``params.request_body()`` inner dict)."""
    weights_version: int | None = None
    """weights-sync: version published; sample: policy version that generated the tokens."""
    na_reason: str | None = None
    """Why a figure above is missing, when it is."""
    submitted_at: float = math.nan
    started_at: float = math.nan
    finished_at: float = math.nan


COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(Record))


class History:
    """The operations of one session, in submission order. Thread-safe: backends update records
    from their worker or poller threads."""

    def __init__(self) -> None:
        self._records: list[Record] = []
        self._lock = threading.Lock()
        self._listeners: list[Callable[[Record], None]] = []
        self._logged: list[dict[str, Any]] = []

    def __len__(self) -> int:
        return len(self._records)

    @property
    def records(self) -> list[Record]:
        with self._lock:
            return list(self._records)

    def on_record(self, callback: Callable[[Record], None]) -> Callable[[], None]:
        """Call ``callback(record)`` after every change; returns a function that unsubscribes."""
        self._listeners.append(callback)
        return lambda: self._listeners.remove(callback)

    def new(self, kind: str, step: int | None, params: dict[str, Any] | None, at: float) -> Record:
        """Start the record of a just-submitted operation."""
        with self._lock:
            rec = Record(seq=len(self._records), kind=kind, step=step, params=params or {}, submitted_at=at)
            # What was asked for; the local backend's output later replaces it with what was used.
            rec.learning_rate = float(rec.params.get("learning_rate", math.nan))
            rec.grad_clip_norm = float(rec.params.get("grad_clip_norm", math.nan))
            self._records.append(rec)
        return rec

    def update(self, rec: Record, env: wire.Operation[Any], at: float) -> None:
        """Fold an operation envelope into its record; called on every status change."""
        with self._lock:
            rec.op_id = env.id
            rec.status = env.status
            if env.status == "TRAINING_OPERATION_STATUS_RUNNING" and math.isnan(rec.started_at):
                rec.started_at = at
            if env.status in wire.TERMINAL_STATUSES:
                rec.finished_at = at
                if math.isnan(rec.started_at):
                    rec.started_at = at
            if env.error is not None:
                rec.error_code, rec.error_message = env.error.code, env.error.message
            if env.output is not None:
                _fold_output(rec, env.output)
        for cb in list(self._listeners):
            cb(rec)

    def log(self, step: int, **metrics: float) -> None:
        """Record your own per-step figures (e.g. ``reward=0.4``) next to the operations."""
        with self._lock:
            self._logged.append({"step": int(step), **{k: float(v) for k, v in metrics.items()}})

    @property
    def logged(self) -> pd.DataFrame:
        """The figures given to ``log()``, one row per call."""
        with self._lock:
            rows = list(self._logged)
        return pd.DataFrame(rows, columns=None if rows else ["step"])

    @property
    def df(self) -> pd.DataFrame:
        """One row per operation, in submission order."""
        rows = [asdict(r) for r in self.records]
        frame = pd.DataFrame(rows, columns=list(COLUMNS))
        for col in ("submitted_at", "started_at", "finished_at"):
            frame[col] = pd.to_datetime(frame[col], unit="s", utc=True)
        for col in ("step", "weights_version"):
            frame[col] = frame[col].astype("Int64")
        return frame

    def _repr_html_(self) -> str:
        return self.df.tail(20)._repr_html_()  # type: ignore[operator]


def _fold_output(rec: Record, out: Any) -> None:
    if isinstance(out, wire.ForwardBackwardResult):
        rec.loss = out.loss
        rec.metrics = dict(out.metrics or {})
    elif isinstance(out, wire.OptimStepResult):
        rec.step = out.step
        m = out.metrics or {}
        if "grad_norm" in m:
            rec.metrics = dict(m)
            rec.grad_norm = m["grad_norm"]
            rec.grad_norm_muon = m.get("grad_norm/muon", math.nan)
            rec.grad_norm_adam = m.get("grad_norm/adam", math.nan)
            rec.grad_clip_norm = m.get("grad_clip_norm", math.nan)
            rec.learning_rate = m.get("learning_rate", math.nan)
        else:
            rec.na_reason = NA_NO_GRAD_NORM
    elif isinstance(out, wire.WeightsSyncResult):
        rec.weights_version = out.weights_version
    elif isinstance(out, wire.SampleOutput) and out.results and out.results[0].policy_segments:
        rec.weights_version = out.results[0].policy_segments[-1].version

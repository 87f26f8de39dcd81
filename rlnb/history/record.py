"""One operation's record: the ``Record`` fields, the one place the record format lives, and how a record is
written (``as_row``; read back from a run folder: ``rlnb.history.loaded``) and filled from an operation's envelope
(``History.update``: its status, times, error and output, by its kind's ``FOLDS``).

Figures a backend does not report stay missing (NaN), never 0, and ``na_reason`` says why —
Together's optim-step returns only ``step``, so a remote session has no gradient norm.
"""

from __future__ import annotations

import enum
import math
import operator
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeGuard

from rlnb import wire

NA_NO_GRAD_NORM = "the API's optim-step output carries only `step` (no gradient norm or learning rate)"
"""The ``na_reason`` of a remote optim-step: its grad norm is NaN because the API does not report one, never 0."""


@dataclass(slots=True)
class Record:
    """One operation. Times are POSIX seconds as observed by this process. ``kind``, ``status`` and
    ``error_code`` are the plain wire strings (as a run folder holds them); they equal wire's members."""

    seq: int
    """Submission order within the session (0, 1, 2, ...)."""
    kind: str
    """Operation kind as in the path: forward-backward, optim-step, weights-sync, sample, ..."""
    op_id: str = ""
    status: str = wire.OperationStatus.PENDING.value
    error_code: str | None = None
    error_message: str | None = None
    step: int | None = None
    """optim-step: the step count after it (a failed one: before it). Others: optim-steps submitted before this op
    that did not fail, i.e. the trainer version it sees; a forward-backward with ``step=k`` feeds the optim-step that
    makes k+1."""
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
    """optim-step: the clipping threshold in force (0 = off); NaN if unset and not reported."""
    learning_rate: float = math.nan
    """optim-step: the learning rate used (Muon: the matrix learning rate)."""
    params: dict[str, Any] = field(default_factory=dict)
    """optim-step: the optimizer params object as sent (``params.request_body()`` inner dict); forward-backward:
    ``{wire.FORWARD_ONLY: True}`` for an evaluation, whose loss is no part of its step's training loss, else
    empty."""
    weights_version: int | None = None
    """weights-sync: version published; sample: policy version that generated the tokens."""
    na_reason: str | None = None
    """Why a figure above is missing, when it is."""
    submitted_at: float = math.nan
    started_at: float = math.nan
    finished_at: float = math.nan

    @property
    def step_loss(self) -> float:
        """What this operation adds to its step's loss: a completed training forward-backward's loss; NaN for an
        evaluation (``forward_only``) or any other operation."""
        # ``wire.accumulates`` inlined for the one kind that may: a call less on every recorded step.
        if self.kind != wire.OperationKind.FORWARD_BACKWARD or self.params.get(wire.FORWARD_ONLY):
            return math.nan
        return self.loss


class Shape(enum.Enum):
    """What a field of a run folder's line holds: ``rlnb.history.loaded`` checks each value read back by it."""

    COUNT = "an integer from 0 below 2**63, or null"
    FIGURE = "a number (null or NaN: not reported)"
    TIME = "POSIX seconds, within LATEST_TIME either side of 1970 (null or NaN: not reached yet)"
    TEXT = "text"
    MAYBE_TEXT = "text, or null"
    FIGURES = "an object of numbers"
    PARAMS = "an object (the optimizer params as sent)"


SHAPES: dict[str, Shape] = {
    "seq": Shape.COUNT, "kind": Shape.TEXT, "op_id": Shape.TEXT, "status": Shape.TEXT,
    "error_code": Shape.MAYBE_TEXT, "error_message": Shape.MAYBE_TEXT, "step": Shape.COUNT,
    "loss": Shape.FIGURE, "metrics": Shape.FIGURES, "grad_norm": Shape.FIGURE, "grad_norm_muon": Shape.FIGURE,
    "grad_norm_adam": Shape.FIGURE, "grad_clip_norm": Shape.FIGURE, "learning_rate": Shape.FIGURE,
    "params": Shape.PARAMS, "weights_version": Shape.COUNT, "na_reason": Shape.MAYBE_TEXT,
    "submitted_at": Shape.TIME, "started_at": Shape.TIME, "finished_at": Shape.TIME,
}  # fmt: skip
"""Each ``Record`` field's shape, in field order: the one description of a field's type that a load checks by (a
field missing here fails ``rlnb.history.loaded``'s import)."""
COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(Record))
FLOATS = tuple(name for name, shape in SHAPES.items() if shape is Shape.FIGURE)
CATEGORIES = ("kind", "status", "error_code")
TIMES = tuple(name for name, shape in SHAPES.items() if shape is Shape.TIME)
ROW_FIELDS = operator.attrgetter(*COLUMNS)
"""A record's values, in ``COLUMNS`` order (C: one call)."""


def as_row(rec: Record) -> dict[str, Any]:
    return dict(zip(COLUMNS, ROW_FIELDS(rec), strict=True))  # one Python call: a record is written twice a step


INT64 = 2**63
"""Integer fields must fit a table's int64 column."""
FLOAT_MAX = sys.float_info.max
"""The largest figure a float holds; a larger JSON integer is damage."""
MAX_SEQ = 2**53
"""Operation numbers a run takes: below 2**53 (a million a second for 285 years; exact in any JSON reader). A larger
``seq`` is damage (a hand edit): 2**63 - 1 left the next session numbering past int64, its ``df`` failing and its
lines left out of every later load."""
LATEST_TIME = 9.2e9
"""Seconds from 1970 that pandas' datetimes hold (about 292 years either side): a time past it is damage."""


def fits_float(v: Any) -> bool:
    """A JSON number a float holds: JSON integers have no size limit, and ``float(10**400)`` raises."""
    return isinstance(v, float) or isinstance(v, int) and not isinstance(v, bool) and abs(v) <= FLOAT_MAX


def fits_int64(v: Any) -> TypeGuard[int]:
    """An integer an int64 column holds (not a bool): a larger JSON integer is damage (a hand edit)."""
    return isinstance(v, int) and not isinstance(v, bool) and -INT64 <= v < INT64


def warn_bad(path: Path, bad: list[str], stacklevel: int = 4) -> None:
    if bad:
        shown = list(dict.fromkeys(bad))[:3]  # a column left out from every row is named once
        warnings.warn(
            f"{path}: left out {len(bad)} value(s) of the wrong type or name (e.g. {'; '.join(shown)})",
            RuntimeWarning,
            stacklevel=stacklevel,
        )


def _fold_forward_backward(rec: Record, out: wire.ForwardBackwardResult) -> None:
    rec.loss = out.loss
    rec.metrics = dict(out.metrics or {})


def _fold_optim_step(rec: Record, out: wire.OptimStepResult) -> None:
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


def _fold_weights_sync(rec: Record, out: wire.WeightsSyncResult) -> None:
    rec.weights_version = out.weights_version


def _fold_sample(rec: Record, out: wire.SampleOutput) -> None:
    if out.results and out.results[0].policy_segments:
        rec.weights_version = out.results[0].policy_segments[-1].version


FOLDS: dict[str, Callable[[Record, Any], None]] = {
    wire.OperationKind.FORWARD_BACKWARD: _fold_forward_backward,
    wire.OperationKind.OPTIM_STEP: _fold_optim_step,
    wire.OperationKind.WEIGHTS_SYNC: _fold_weights_sync,
    wire.OperationKind.SAMPLE: _fold_sample,
}
"""What each kind's result adds to its record (the other kinds add nothing)."""


def uncount(records: list[Record], failed: Record) -> list[Record]:
    """Lower by one the ``step`` of the records after the optim-step ``failed`` (in submission order), which counted
    it as a step when it made none; returns them. A completed optim-step's is its output's: it stays."""
    lowered = []
    for rec in reversed(records):
        if rec.seq <= failed.seq:
            break
        stepped = rec.kind == wire.OperationKind.OPTIM_STEP and rec.status == wire.OperationStatus.COMPLETED
        if rec.step and not stepped:
            rec.step -= 1
            lowered.append(rec)
    return lowered[::-1]


def start_unseen(rec: Record, at: float, last_finished: float) -> float:
    """When an operation first seen finished started: a session runs its operations in order, so a
    completed one ran from when the one before it ended (or its submission, if later) — to within a
    poll, where ``at`` alone would make its compute time 0 and count it all as waiting. One that
    failed unseen may never have run (refused, or cancelled in the queue): it gets no compute time."""
    if rec.status != wire.OperationStatus.COMPLETED:
        return at
    return min(at, max(rec.submitted_at, last_finished))

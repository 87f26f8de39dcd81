"""Operations: the envelope, the training kinds' bodies and results, the kind tables.

Forward-backward, custom-forward-backward and sample bodies may carry ``payload_id`` (the payload side channel,
``payloads``): the real body was uploaded and the inline one is a small stand-in that only passes validation.

What a model reads is ``inputs``; the sample request and its completions are ``sampling``; the optim-step
and the checkpoints have modules of their own. The tables here pair every kind with its body and result.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Annotated, Any, Final, Generic, Literal, TypeAlias, TypeVar

from pydantic import FailFast, model_validator

from rlnb.wire.base import Int64, Newer, StrictBool, StrictFloat, _Model, _Request
from rlnb.wire.checkpoints import InferenceCheckpointResult, TrainingCheckpointResult
from rlnb.wire.inputs import OutputTensor, Sample, int64_problem
from rlnb.wire.losses import LossConfig
from rlnb.wire.optim import OptimStepBody, OptimStepResult
from rlnb.wire.sampling import SampleBody, SampleOutput
from rlnb.wire.status import OperationErrorCode, OperationStatus, _CodedError

__all__ = [
    "ACCUMULATING",
    "CHANGES_SESSION",
    "FORWARD_ONLY",
    "OPERATION_TIMEOUT",
    "OUTPUT_OPTIONAL",
    "REQUEST_TYPES",
    "RESULT_TYPES",
    "SYNC_NAMES",
    "CustomForwardBackwardBody",
    "CustomForwardBackwardResult",
    "DType",
    "ForwardBackwardBody",
    "ForwardBackwardResult",
    "GradientTensor",
    "Listener",
    "LossFnOutput",
    "NoBody",
    "Operation",
    "OperationError",
    "OperationKind",
    "WeightSyncType",
    "WeightsSyncBody",
    "WeightsSyncResult",
    "accumulates",
]


class OperationKind(StrEnum):
    """Operation kinds; each member is the kind as spelled in the paths ``.../operations/<kind>``."""

    FORWARD_BACKWARD = "forward-backward"
    CUSTOM_FORWARD_BACKWARD = "custom-forward-backward"
    OPTIM_STEP = "optim-step"
    WEIGHTS_SYNC = "weights-sync"
    SAMPLE = "sample"
    INFERENCE_CHECKPOINT = "inference-checkpoint"
    TRAINING_CHECKPOINT = "training-checkpoint"


DType: TypeAlias = Literal["D_TYPE_UNSPECIFIED", "D_TYPE_INT64", "D_TYPE_FLOAT32", "D_TYPE_BFLOAT16"]
"""The dtype a custom-forward-backward gradient may declare (the values are float32 whatever it says)."""
WeightSyncType: TypeAlias = Literal[
    "WEIGHT_SYNC_TYPE_SYNCHRONOUS", "WEIGHT_SYNC_TYPE_BACKGROUND_PUBLISH", "WEIGHT_SYNC_TYPE_PIPELINE"
]
"""How weights-sync publishes the trainer's weights to the sampler (``SYNC_NAMES`` has short names)."""
SYNC_NAMES: dict[str, WeightSyncType] = {
    "synchronous": "WEIGHT_SYNC_TYPE_SYNCHRONOUS",
    "background_publish": "WEIGHT_SYNC_TYPE_BACKGROUND_PUBLISH",
    "pipeline": "WEIGHT_SYNC_TYPE_PIPELINE",
}
"""Short names of the weight-sync types."""

OPERATION_TIMEOUT: Final = 3600.0
"""Seconds after submission at which a remote session gives an operation up (FAILED, TIMEOUT); what lr_find waits
for a local session's operations too."""
# ---------------------------------------------------------------------------------------------
# Envelope

Output = TypeVar("Output")


class OperationError(_CodedError):
    """Why an operation FAILED: an ``OperationErrorCode`` and the server's message."""

    FALLBACK = OperationErrorCode.UNSPECIFIED

    code: OperationErrorCode | None = None
    """Why the operation failed; ``None`` when the server gave no code."""
    message: str | None = None


class Operation(_Model, Generic[Output]):
    """The envelope every operation POST returns and every GET polls."""

    id: str
    status: Annotated[OperationStatus, Newer]
    """A server's status newer than the list is kept as its string (``Newer``): not known to end the operation."""
    output: Output | None = None
    """The kind's result; present once COMPLETED (an optim-step may legitimately complete without it)."""
    error: OperationError | None = None
    """Present once FAILED."""

    @classmethod
    def failed(cls, id: str, code: OperationErrorCode | None, message: str) -> Operation[Any]:
        """A FAILED envelope, as rlnb makes one itself: the engine's worker, the remote poller, the server
        and ``FakeBackend`` (``code`` None: the client does not know why, e.g. its POST failed)."""
        return Operation(id=id, status=OperationStatus.FAILED, error=OperationError(code=code, message=message))


Listener: TypeAlias = Callable[[Operation[Any]], None]
"""What a backend calls with an operation's envelope on submission (PENDING) and on every change."""


# ---------------------------------------------------------------------------------------------
# Forward-backward and custom forward-backward


class ForwardBackwardBody(_Request):
    """The forward-backward request: samples and the loss, with or without gradients."""

    samples: Annotated[list[Sample], FailFast()]  # the first bad sample's error only, not one per sample
    loss: LossConfig
    forward_only: StrictBool | None = None
    """Compute loss and metrics without accumulating gradients (default false)."""
    return_loss_fn_outputs: StrictBool | None = None
    """Return per-sample output tensors (``logprobs``); large and slower (default false)."""
    payload_id: str | None = None
    """The uploaded body (``loss`` and ``samples``) replaces the inline stand-in."""


class LossFnOutput(_Model):
    """Per-sample output tensors of a loss (e.g. ``logprobs``), when asked for."""

    tensors: dict[str, OutputTensor]


class ForwardBackwardResult(_Model):
    """The output of a forward-backward: the loss, its metrics, and per-sample outputs if asked."""

    loss: float
    """Summed over the batch for cross-entropy; for a mean-aggregated loss the batch's mean. Gradients of
    several forward-backward calls add up before an optim-step, and so do their losses."""
    metrics: dict[str, float] | None = None
    loss_fn_outputs: list[LossFnOutput] | None = None
    """One per sample, in request order; only when ``return_loss_fn_outputs``."""


class GradientTensor(_Model):
    """d loss / d logprob for one sample's target tokens, in a custom forward-backward."""

    data: Annotated[list[StrictFloat], FailFast()]
    dtype: DType | None = None
    """Optional, as in the API: the values are used as float32 whatever it says, but ``D_TYPE_INT64`` data must be
    integers (a fraction there says the dtype or the data is wrong)."""

    @model_validator(mode="after")
    def _int64_is_integers(self) -> GradientTensor:
        if self.dtype == "D_TYPE_INT64" and (problem := int64_problem(self.data, self.dtype)) is not None:
            raise ValueError(problem)  # as an int64 TensorData says it, its range checked (2.0**63 refused)
        return self


class CustomForwardBackwardBody(_Request):
    """Backpropagate your own per-token gradients of the log-probs: the loss is computed client-side."""

    samples: Annotated[list[Sample], FailFast()]
    gradients: Annotated[list[GradientTensor], FailFast()]
    """One per sample: d loss / d logprob for each target token."""
    payload_id: str | None = None
    """The uploaded body (``samples`` and ``gradients``) replaces the inline stand-in."""


class CustomForwardBackwardResult(_Model):
    """The (empty) output of a custom forward-backward: the gradients have accumulated."""

    pass


# ---------------------------------------------------------------------------------------------
# Weights-sync


class WeightsSyncBody(_Request):
    """The weights-sync request: how to publish the trainer's weights to the sampler."""

    weight_sync_type: WeightSyncType


class WeightsSyncResult(_Model):
    """The output of a weights-sync: the policy version the sampler now serves."""

    weights_version: Int64
    """Policy version now live (0 = initial model, +1 per optim-step)."""


# ---------------------------------------------------------------------------------------------
# Per-kind request and result types, in one table (client and server both read it).


class NoBody(_Request):
    """The body of a kind that takes none (the checkpoints): absent or ``{}``; a field is a 400 naming it."""


REQUEST_TYPES: dict[OperationKind, type[_Model] | None] = {
    OperationKind.FORWARD_BACKWARD: ForwardBackwardBody,
    OperationKind.CUSTOM_FORWARD_BACKWARD: CustomForwardBackwardBody,
    OperationKind.OPTIM_STEP: OptimStepBody,
    OperationKind.WEIGHTS_SYNC: WeightsSyncBody,
    OperationKind.SAMPLE: SampleBody,
    OperationKind.INFERENCE_CHECKPOINT: None,
    OperationKind.TRAINING_CHECKPOINT: None,
}
"""Each operation kind's request body model (None: the kind takes no body). Client and server both read it."""
RESULT_TYPES: dict[OperationKind, type[_Model]] = {
    OperationKind.FORWARD_BACKWARD: ForwardBackwardResult,
    OperationKind.CUSTOM_FORWARD_BACKWARD: CustomForwardBackwardResult,
    OperationKind.OPTIM_STEP: OptimStepResult,
    OperationKind.WEIGHTS_SYNC: WeightsSyncResult,
    OperationKind.SAMPLE: SampleOutput,
    OperationKind.INFERENCE_CHECKPOINT: InferenceCheckpointResult,
    OperationKind.TRAINING_CHECKPOINT: TrainingCheckpointResult,
}
"""Each operation kind's result model, which the envelope's ``output`` parses to."""
CHANGES_SESSION: Final = frozenset(
    {
        OperationKind.OPTIM_STEP,
        OperationKind.WEIGHTS_SYNC,
        OperationKind.TRAINING_CHECKPOINT,
        OperationKind.INFERENCE_CHECKPOINT,
    }
)
"""The kinds whose completion changes the session's own fields (``step``, ``policy_state``, its checkpoint lists):
its ``updated_at`` moves then."""
ACCUMULATING: Final = frozenset({OperationKind.FORWARD_BACKWARD, OperationKind.CUSTOM_FORWARD_BACKWARD})
"""The kinds whose gradients stay accumulated on the server until the next optim-step applies them with its own."""
FORWARD_ONLY: Final = "forward_only"
"""``ForwardBackwardBody``'s field that runs it without gradients (an evaluation), kept in its record's ``params``."""
OUTPUT_OPTIONAL: Final = frozenset({OperationKind.OPTIM_STEP, OperationKind.CUSTOM_FORWARD_BACKWARD})
"""The kinds that may be COMPLETED without ``output``: an optim-step legitimately may (the SDK says so),
a custom-forward-backward's result has no fields. Every other kind's output carries the result."""


def accumulates(kind: str, body: Mapping[str, Any]) -> bool:
    """Whether an operation of ``kind`` with ``body`` (its request's fields, or its record's ``params``) leaves
    gradients for the next optim-step: one of ``ACCUMULATING``, but a ``forward_only`` forward-backward."""
    return kind in ACCUMULATING and not body.get(FORWARD_ONLY)


def _typed_envelopes() -> dict[OperationKind, type[Operation[Any]]]:
    return {kind: Operation[result] for kind, result in RESULT_TYPES.items()}  # type: ignore[valid-type]  # a runtime type as a type argument: pydantic builds a concrete model per kind


ENVELOPES: dict[OperationKind, type[Operation[Any]]] = _typed_envelopes()
"""The typed envelope of each kind: ``output`` parses to the kind's result model."""
__all__ += ["ENVELOPES"]

"""The engine's refusals that read no tensor: a model input's token ids, the keys of a sample's loss inputs, a sample
on a trainer-only session. Torch-free, so that ``rlnb.testing.FakeBackend`` refuses the same requests in the same
words by calling them (``rlnb.engine.inputs`` and ``loss_inputs`` hold the checks that read tensors)."""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from rlnb import wire
from rlnb.errors import OperationError
from rlnb.wire import OperationErrorCode as Code
from rlnb.wire.lists import only

TRAINER_ONLY = "this session is trainer-only (0 generator replicas): sample is rejected"
"""A sample's refusal where the session has no generator replica."""


class InvalidLossInput(ValueError):
    """Bad loss inputs; the backend turns it into a FAILED op with
    TRAINING_OPERATION_ERROR_CODE_INVALID_INPUT. Message names the sample index and the key."""


class Bounds(Protocol):
    """What ``check_tokens`` reads of a model: its context and vocabulary (None: no bound, a fake's choice)."""

    @property
    def context_length(self) -> int | None: ...

    @property
    def vocab_size(self) -> int | None: ...


def check_tokens(model: Bounds, tokens: list[int], where: str) -> list[int]:
    """``tokens`` if they are a model input ``model`` can read, else ``INVALID_INPUT`` naming ``where``."""
    if not tokens:
        raise OperationError(Code.INVALID_INPUT, f"{where}: model_input has no tokens")
    if not only(tokens, int):  # plain ints, as the wire leaves them: one C pass; else the first non-integer is named
        odd = ((i, t) for i, t in enumerate(tokens) if not isinstance(t, numbers.Integral) or isinstance(t, bool))
        at, bad = next(odd, (None, None))  # a numpy integer is an id
        if at is not None:
            said = f"token {bad!r} at position {at} is {type(bad).__name__}, expected an integer id"
            raise OperationError(Code.INVALID_INPUT, f"{where}: {said}")
    limit = model.context_length
    if limit is not None and len(tokens) > limit:
        raise OperationError(Code.INVALID_INPUT, f"{where}: {len(tokens)} tokens exceed the model's context of {limit}")
    vocab = model.vocab_size
    if vocab is not None and (min(tokens) < 0 or max(tokens) >= vocab):  # min/max in C: the valid case costs little
        bad = next(t for t in tokens if not 0 <= t < vocab)
        raise OperationError(Code.INVALID_INPUT, f"{where}: token {bad} is outside the vocabulary [0, {vocab})")
    return tokens


def check_read(loss_type: str | None, inputs: Sequence[Mapping[str, Any]]) -> None:
    """Refuse a ``loss_fn_inputs`` key the operation would silently ignore (``wire.unread_inputs``), as
    ``rlnb serve`` does with a 400: a forward-backward of ``loss_type``, or a custom-forward-backward
    (None). Apart from ``validate``, which checks a loss's own inputs."""
    spec = wire.LOSSES.get(loss_type) if loss_type is not None else None
    read = wire.LOSS_READS[loss_type] if loss_type in wire.LOSS_READS else wire.LOSS_READS[None]
    for i, x in enumerate(inputs):
        if x.keys() <= read:  # every key read (C): nothing to name
            continue
        for key in wire.unread_inputs(loss_type, x):
            if key in wire.LOSS_INPUT_DTYPES and spec is not None:
                reads = ", ".join((*spec.required, *spec.optional))
                raise InvalidLossInput(f"sample {i}: {spec.type} does not read input {key!r} (it reads {reads})")
            raise InvalidLossInput(
                f"sample {i}: no loss reads input {key!r} (the inputs are {', '.join(wire.LOSS_INPUT_DTYPES)})"
            )


def mask_key(where: str, x: Mapping[str, Any]) -> str | None:
    """Which of a sample's inputs says the positions that count, ``"weights"`` or ``"mask"`` (None: neither), for a
    policy loss and a custom forward-backward alike; both given is refused (one of them would be ignored).
    Raise InvalidLossInput naming ``where``."""
    if "weights" in x and "mask" in x:
        raise InvalidLossInput(f"{where}: give either weights or mask, not both (inputs 'weights' and 'mask' each "
                               "say which positions count: one would be ignored)")  # fmt: skip
    return "weights" if "weights" in x else "mask" if "mask" in x else None

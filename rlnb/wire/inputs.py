"""What a model reads: token chunks (``ModelInput``) and a sample's loss tensors (``TensorData``).

Forward-backward and custom forward-backward bodies carry ``Sample``s; a sample request carries
``ModelInput``s as its prompts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import chain
from operator import attrgetter
from typing import Annotated, Any, Literal, TypeAlias, get_args

from pydantic import (
    FailFast,
    Field,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_serializer,
    model_validator,
)

from rlnb.wire.base import Newer, StrictFloat, StrictInt, _finite_list, _from_server, _Model, shown
from rlnb.wire.lists import Int64List, only

__all__ = [
    "EncodedText",
    "ModelInput",
    "ModelInputChunk",
    "Sample",
    "TensorDType",
    "TensorData",
    "OutputTensor",
    "int64_problem",
    "not_int64",
    "outside_vocab",
]

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _int64_ids(data: list[Any]) -> list[int] | None:
    """``data`` as ints when every element is a whole number in int64's range, else None: C passes (``int``, ``==``,
    ``min``, ``max``), no Python call inside."""
    try:
        ids = list(map(int, data))  # NaN, inf and text raise; a fraction is cut, so the lists differ
    except (OverflowError, TypeError, ValueError):
        return None
    return ids if ids == data and (not ids or (min(ids) >= INT64_MIN and max(ids) <= INT64_MAX)) else None


def not_int64(data: list[Any], dtype: str = "int64") -> str | None:
    """The first element of int64 ``data`` that int64 cannot hold, in words (``data[1] is 2.5, but dtype int64 holds
    integers in int64's range only``), None when there is none: the one wording of the wire's 400 and the engine's
    ``INVALID_INPUT``, a ``D_TYPE_INT64`` gradient's too (``dtype`` as its model spells it). Asked only once the fast
    check failed."""
    for i, v in enumerate(data):
        if _int64_ids([v]) is None:
            return f"data[{i}] is {shown(v)}, but dtype {dtype} holds integers in int64's range only"
    return None


def outside_vocab(ids: Sequence[float], vocab: int) -> str | None:
    """Why ``target_tokens`` ``ids`` do not fit a vocabulary of ``vocab`` ids, naming the first outside and its
    position, or None when every id fits: the one wording of the engine and ``FakeBackend``. -100 (Hugging Face's
    ignore index, in a batch made for its trainers) is no id: the position needs an id, and its weight 0 ignores it."""
    for i, t in enumerate(ids):
        if not 0 <= t < vocab:
            hint = " (-100 is Hugging Face's ignore index, no id: give that position any id and weight 0)"
            return f"ids must be in [0, {vocab}), got {int(t)} at position {i}{hint if t == -100 else ''}"
    return None


def int64_problem(data: list[Any], dtype: str) -> str | None:
    """``not_int64`` after the fast check (C passes): None when every element is an integer in int64's range."""
    return None if _int64_ids(data) is not None else not_int64(data, dtype)


def _plain_floats(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """A list of plain floats, copied as it is; of plain ints (``samples``' token ids), as floats: C passes each.
    Anything else through the item rules (``StrictFloat``: ints become floats; a bool, text, any other object with
    ``__float__`` is named, an int past any float too)."""
    if type(value) is list:
        if only(value, float):
            return value[:]
        if only(value, int):
            try:
                return list(map(float, value))
            except OverflowError:
                pass
    return handler(value)


TensorDType: TypeAlias = Literal["int64", "float32"]
"""A loss input tensor's dtype: ``int64`` for token ids, ``float32`` for the rest."""
_DTYPES = get_args(TensorDType)  # read once: the engine asks of every tensor


class TensorData(_Model):
    """A flat 1-D tensor. ``shape``, if given, must equal ``[len(data)]``; sparse fields are rejected."""

    data: Annotated[list[StrictFloat], FailFast(), WrapValidator(_plain_floats)]  # the first bad item's error only
    dtype: TensorDType
    shape: list[StrictInt] | None = Field(default=None, fail_fast=True)
    sparse_crow_indices: list[int] | None = Field(default=None, fail_fast=True)
    sparse_col_indices: list[int] | None = Field(default=None, fail_fast=True)

    @field_serializer("data")
    def _int64_as_integers(self, data: list[float]) -> list[float | int]:
        """int64 data goes out as JSON integers (``215``, not ``215.0``), as the SDK insists. Whatever else ``data``
        was set to after validation is returned as it is, for the validation of a copy to name it."""
        if not isinstance(data, list):
            return data
        if self.dtype != "int64":
            return list(data)
        if only(data, float):  # whole floats, in C passes; a fraction makes the lists differ, NaN or inf int() raise
            ints: list[float | int]
            try:
                ints = list(map(int, data))
            except (ValueError, OverflowError):
                ints = []
            if ints == data:
                return ints
        return [int(v) if isinstance(v, float) and v.is_integer() else v for v in data]

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo) -> TensorData:
        if not math.isfinite(sum(self.data)):  # one NaN or inf makes the sum one (so may big finite values): search
            _finite_list(self.data)
        if self.dtype == "int64":  # 2.5 would pass here, then fail the operation naming no value; inline: a call less
            try:
                ids: list[int] | None = list(map(int, self.data))
            except (OverflowError, TypeError, ValueError):
                ids = None
            if ids != self.data or (ids and (min(ids) < INT64_MIN or max(ids) > INT64_MAX)):
                raise ValueError(not_int64(self.data))
        problem = self.layout_problem(newer_dtype=self.dtype not in _DTYPES and _from_server(info))  # a call less
        if problem is not None:
            raise ValueError(problem)
        return self

    def layout_problem(self, newer_dtype: bool = False) -> str | None:
        """The rule this tensor's layout breaks (``data`` a list, ``dtype``, ``shape``, the sparse fields), None when
        none: the validator's rules, which the engine applies again to a tensor that skipped them (``model_construct``,
        a field set after it was built). Its elements are the reader's to check, each as it converts them.
        ``newer_dtype``: a dtype newer than rlnb's list breaks none (a server's answer)."""
        if not isinstance(self.data, list):
            return f"data must be a list of numbers, got {type(self.data).__name__}"
        if self.dtype not in _DTYPES and not newer_dtype:
            return f"dtype {self.dtype!r} is not one of {', '.join(_DTYPES)}"
        if self.shape is not None and self.shape != [len(self.data)]:
            return f"shape {self.shape} must be 1-D and equal to the data length {len(self.data)}"
        if self.sparse_crow_indices is not None or self.sparse_col_indices is not None:
            return "sparse tensors are reserved and rejected: sparse_crow_indices and sparse_col_indices must be null"
        return None


class OutputTensor(TensorData):
    """A loss's output tensor as a server's answer holds it (``LossFnOutput.tensors``): its dtype may be newer than
    rlnb's list (``bfloat16`` logprobs), kept as it came and its data read as numbers. A request's ``TensorData``
    holds to the list with no Python step per tensor: a local step validates its inputs on every call."""

    dtype: Annotated[TensorDType, Newer]


class EncodedText(_Model):
    """A chunk of token ids (int64, sent as JSON integers by clients)."""

    tokens: Int64List


class ModelInputChunk(_Model):
    """One chunk of a model input; the API has only encoded text today."""

    encoded_text: EncodedText


_CHUNK_TOKENS = attrgetter("encoded_text.tokens")


class ModelInput(_Model):
    """A prompt or a training sequence as the API sends it: a list of token chunks."""

    chunks: Annotated[list[ModelInputChunk], FailFast()]

    @classmethod
    def from_tokens(cls, tokens: list[int]) -> ModelInput:
        """One chunk holding ``tokens``: the shape every rlnb client sends."""
        return cls(chunks=[ModelInputChunk(encoded_text=EncodedText(tokens=list(tokens)))])

    @property
    def tokens(self) -> list[int]:
        """All chunks' tokens, concatenated."""
        return list(chain.from_iterable(map(_CHUNK_TOKENS, self.chunks)))  # C: a generator would be 2 calls a step

    @property
    def length(self) -> int:
        """How many tokens the chunks hold, none copied (``tokens`` joins them)."""
        return sum(map(len, map(_CHUNK_TOKENS, self.chunks)))


class Sample(_Model):
    """One sequence. Position convention: ``model_input = (prompt + response)[:-1]`` and slot ``i`` of
    every loss tensor describes the token predicted at position ``i``."""

    model_input: ModelInput
    loss_fn_inputs: dict[str, TensorData]
    routed_experts_key: str | None = None

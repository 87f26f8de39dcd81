"""The engine's refusals that read no tensor: a model input's token ids, the keys of a sample's loss inputs, a custom
forward-backward's gradients, a sample request's head and stop strings, what a loss input's dtype, shape and
finiteness must be, an optim-step's hyperparameters against the weights' range, a sample on a trainer-only session,
a routing key no sequence was given.
What a half-stepped session refuses (FakeBackend models no half step).
Torch-free, so that ``rlnb.testing.FakeBackend`` refuses the same requests in the same words by calling them
(``rlnb.engine.inputs``, ``loss_inputs``, ``sample_inputs`` and ``optim.limits`` read the tensors and dtypes and call
these)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import pydantic

from rlnb import wire
from rlnb.errors import OperationError
from rlnb.params import Hyperparams, MuonHyperparams
from rlnb.text.prompts import EMPTY_STOP
from rlnb.wire import OperationErrorCode as Code
from rlnb.wire.inputs import outside_vocab
from rlnb.wire.lists import only
from rlnb.wire.loss_params import FLOAT32_MAX

TRAINER_ONLY = "this session is trainer-only (0 generator replicas): sample is rejected"
"""A sample's refusal where the session has no generator replica."""

HALF_STEPPED_REFUSES = frozenset(
    {
        wire.OperationKind.OPTIM_STEP,
        wire.OperationKind.WEIGHTS_SYNC,
        wire.OperationKind.TRAINING_CHECKPOINT,
        wire.OperationKind.INFERENCE_CHECKPOINT,
    }
)
"""What a session whose optim-step stopped part way refuses: each would step, publish or save weights that belong to
no step (a checkpoint of them, labelled as the last good step, would be the newest). Samples (on the weights of the
last weights-sync) and forward-backwards still run."""


def half_stepped_words(kind: wire.OperationKind, saved: bool) -> str:
    """Why a half-stepped session refuses an operation of ``kind``; ``saved``: whether it saved a training checkpoint
    to restore from (else a new session is the way on: saves are refused). Both recoveries named: a remote session
    resumes by checkpoint id (``resume_from`` is in-process only, a TypeError there)."""
    how = (
        "(rlnb.connect(..., resume_from=<its path>) in-process, or resume_from_checkpoint_id=<its id> on a remote "
        "session)"
        if saved
        else "(none saved: open a new session)"
    )
    return (
        f"{kind} refused: an earlier optim-step stopped part way and left this session's weights and optimizer "
        f"state half-stepped (some moved, others not); restore from its last training checkpoint {how}; samples "
        "still run on the weights of the last weights-sync"
    )


def check_half_stepped(kind: wire.OperationKind, saved: bool) -> None:
    """On a half-stepped session: ``INVALID_INPUT`` for an operation of ``kind`` that ``HALF_STEPPED_REFUSES``;
    ``saved`` as ``half_stepped_words`` reads it."""
    if kind in HALF_STEPPED_REFUSES:
        raise OperationError(Code.INVALID_INPUT, half_stepped_words(kind, saved))


_TORCH_DTYPES = {key: tuple(f"torch.{d}" for d in names) for key, names in wire.LOSS_INPUT_DTYPES.items()}
"""Torch's names of the dtypes each loss input may have: made once, not a list per input checked."""


class InvalidLossInput(ValueError):
    """Bad loss inputs; the backend turns it into a FAILED op with
    TRAINING_OPERATION_ERROR_CODE_INVALID_INPUT. Message names the sample index and the key."""


class Bounds(Protocol):
    """What ``check_tokens`` reads of a model: its context and vocabulary (None: no bound, a fake's choice)."""

    @property
    def context_length(self) -> int | None: ...

    @property
    def vocab_size(self) -> int | None: ...


def must_be(value: object, kind: type, where: str) -> None:
    """``INVALID_INPUT`` naming ``where`` unless ``value`` is a ``kind``."""
    if not isinstance(value, kind):
        a = "an" if kind.__name__[0] in "AEIOU" else "a"
        raise OperationError(Code.INVALID_INPUT, f"{where} must be {a} {kind.__name__}, got {type(value).__name__}")


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


def check_given(spec: wire.LossSpec, beta: float, inputs: Sequence[Mapping[str, Any]]) -> None:
    """Each sample's loss inputs hold what its loss reads: each of ``spec.required``, GRPO's ``reference_logprobs``
    where ``beta`` > 0, and not both weights and mask (``mask_key``). Raise InvalidLossInput naming the sample."""
    for i, x in enumerate(inputs):
        for key in spec.required:
            if key not in x:
                raise InvalidLossInput(f"sample {i}: missing required input {key!r} for {spec.type}")
        if "mask" in spec.optional:
            mask_key(f"sample {i}", x)
        if spec.type == wire.LOSS_GRPO and beta > 0 and "reference_logprobs" not in x:
            raise InvalidLossInput(f"sample {i}: missing input 'reference_logprobs', required when beta > 0")


def no_routing_key(i: int) -> OperationError:
    """``INVALID_INPUT`` for sample ``i``'s ``routed_experts_key``: R-new's operation fails for a key no longer
    available, and these models are dense, so none was ever issued (ignored, it would train as if routing had been
    replayed)."""
    return OperationError(
        Code.INVALID_INPUT,
        f"samples[{i}].routed_experts_key: this model is dense and issues no routing keys (its sampled sequences' "
        "routed_experts_key is null), so no key is available to replay: leave it out",
    )


def check_target_ids(where: str, td: wire.TensorData, vocab: int | None) -> None:
    """``INVALID_INPUT`` naming ``where`` for int64 ``target_tokens`` outside the vocabulary (None: no bound): from
    ``data``'s own min and max (whole numbers once read), C passes where a tensor's would be 4 torch ops."""
    if vocab is not None and td.dtype == "int64" and td.data and not 0 <= min(td.data) <= max(td.data) < vocab:
        raise OperationError(Code.INVALID_INPUT, f"{where}: {outside_vocab(td.data, vocab)}")


def check_gradients(gradients: int, samples: int) -> None:
    """``INVALID_INPUT`` unless a custom forward-backward gives one gradient per sample."""
    if gradients != samples:
        raise OperationError(Code.INVALID_INPUT, f"gradients has {gradients} entries for {samples} samples")


def require_targets(where: str, x: Mapping[str, Any]) -> None:
    """``INVALID_INPUT`` unless a custom forward-backward's sample inputs ``x`` (named ``where``) hold
    ``target_tokens``: the tokens whose log-probs its gradients are of."""
    if "target_tokens" not in x:
        raise OperationError(Code.INVALID_INPUT, f"{where}.target_tokens is required")


def check_gradient_length(i: int, values: int, tokens: int) -> None:
    """``INVALID_INPUT`` unless gradient ``i`` of a custom forward-backward has one value per token."""
    if values != tokens:
        raise OperationError(Code.INVALID_INPUT, f"gradients[{i}] has {values} values for {tokens} tokens")


def non_finite_gradient(i: int) -> OperationError:
    """``NON_FINITE_LOSS`` for gradient ``i`` that is not finite in float32: nothing is accumulated."""
    return OperationError(Code.NON_FINITE_LOSS, f"gradients[{i}] is not finite; no gradients were accumulated")


def check_loaded(where: str, key: str, dtype: str, shape: tuple[int, ...], n: int, finite: Callable[[], bool]) -> None:
    """A loss input ``key`` read as a tensor of ``dtype`` (torch's name, ``torch.float32``) and ``shape``: a dtype
    ``wire.LOSS_INPUT_DTYPES`` allows for ``key``, 1-D of the model input's length ``n``, and, for float32, ``finite()``
    (asked last: it reads the values). ``where`` names it as its caller names fields. Raise InvalidLossInput."""
    allowed = _TORCH_DTYPES[key]
    if dtype not in allowed:
        raise InvalidLossInput(f"{where} must be {' or '.join(allowed)}, got {dtype}")
    if shape != (n,):
        raise InvalidLossInput(f"{where} must be 1-D of length {n} (the model input's), got {shape}")
    if dtype == "torch.float32" and not finite():
        # 1e39 is a finite JSON number: the range says why it is refused
        said = f"NaN, inf or past float32's range (+-{FLOAT32_MAX:.4g}), which the engine reads them in"
        raise InvalidLossInput(f"{where} has non-finite values: {said}")


def sample_head(body: wire.SampleBody, most: int) -> tuple[wire.SamplingParams, int]:
    """A sample request's sampling params, checked by the wire's rules again (a crafted body's, ``model_construct``,
    skipped them: its text ``max_tokens`` or ``temperature`` reached the sampler, ``INTERNAL_ERROR``), and its
    ``num_samples`` (in [1, ``most``]); its ``model_inputs`` a list that is not empty. ``INVALID_INPUT`` naming the
    field."""
    sp = _sampling_params(body.sampling_params)
    n = 1 if body.num_samples is None else body.num_samples
    if type(n) is not int or not 1 <= n <= most:  # a crafted body's "3" or 2.0 was INTERNAL_ERROR
        raise OperationError(Code.INVALID_INPUT, f"num_samples must be an integer in [1, {most}], got {n!r}")
    must_be(body.model_inputs, list, "model_inputs")
    if not body.model_inputs:
        raise OperationError(Code.INVALID_INPUT, "model_inputs is empty")
    return sp, n


def _sampling_params(sp: object) -> wire.SamplingParams:
    if sp is None:
        return wire.SamplingParams()
    must_be(sp, wire.SamplingParams, "sampling_params")
    try:
        return wire.SamplingParams.model_validate(dict(sp))  # type: ignore[call-overload]
    except pydantic.ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        raise OperationError(Code.INVALID_INPUT, f"sampling_params.{where}: {error['msg']}") from None


def check_empty_stop(stop: Sequence[str]) -> None:
    """``INVALID_INPUT`` for an empty stop string: a server that matches it ends every sequence at once."""
    empty = next((i for i, s in enumerate(stop) if not s), None)
    if empty is not None:
        raise OperationError(Code.INVALID_INPUT, f"sampling_params.stop[{empty}] {EMPTY_STOP}")


def check_stop(stop: Sequence[str], most: int, chars: int) -> None:
    """``INVALID_INPUT`` for more than ``most`` stop strings or one longer than ``chars``: every new token is searched
    for every stop string in every row, and past such bounds the sampler slowed to a crawl without a word."""
    if len(stop) > most:
        raise OperationError(Code.INVALID_INPUT, f"sampling_params.stop has {len(stop)} strings; the limit is {most}")
    at = max(range(len(stop)), key=lambda i: len(stop[i]), default=None)
    if at is not None and len(stop[at]) > chars:
        raise OperationError(Code.INVALID_INPUT, f"sampling_params.stop[{at}] has {len(stop[at])} characters; the "
                             f"limit is {chars} per stop string")  # fmt: skip


def check_step(
    hp: Hyperparams, dtypes: Sequence[tuple[str, float]], adam_max: float, muon_max: float, scale: float
) -> None:
    """A ``ValueError`` naming the field when ``hp`` would corrupt or half-step the weights: ``dtypes`` holds the dtypes
    the AdamW group is stepped in (torch's names less ``torch.``; a half-precision weight's float32 master's) each with
    its least positive number, ``adam_max`` and ``muon_max`` the largest number each group's weights hold, ``scale``
    Muon's largest shape scale. An AdamW ``eps`` that is 0 in that dtype (1e-50 in float32) turns every weight whose
    gradient is 0 (an unused token's embedding row) into 0/0 = NaN; a step size past what the weights' dtype holds
    fails torch's conversion half-way through the step (lr 1e39: AdamW's moments and step count moved), or, a float16
    weight's master stepped in float32, makes the weight inf."""
    muon = isinstance(hp, MuonHyperparams)
    adam = hp.adam if isinstance(hp, MuonHyperparams) else hp
    prefix = "muon_params.adam." if muon else "adam_params."
    for dtype, tiny in dtypes:
        least = float(f"{tiny:.3g}")  # the bound checked is the one the error names (1e-45 passed ">= 1.4e-45")
        if adam.eps < least:
            what = "0" if adam.eps <= tiny / 2 else f"below {least:g}, the least positive number"
            raise ValueError(
                f"{prefix}eps {adam.eps:g} is {what} in {dtype}, the dtype of the weights AdamW updates: an eps of 0 "
                f"there turns every weight whose gradient is 0 into 0/0 = NaN; give {prefix}eps >= {least:g}"
            )
    # (field, rate, per, largest): the update multiplies by rate / per, which must not pass the largest the weights'
    # dtype holds; the decay's 1 - lr * wd is checked first, and kept in (0, 1] (rlnb.params.check_decay)
    factors = [(f"{prefix}learning_rate", adam.learning_rate, 1 - adam.beta1, adam_max)]  # lr / (1 - beta1^t)
    if isinstance(hp, MuonHyperparams):
        factors.append(("muon_params.learning_rate", hp.learning_rate, 1 / scale, muon_max))
    for field, rate, per, largest in factors:
        if rate / per > largest:
            raise ValueError(
                f"{field} is too large: the update would multiply by {rate / per:.3g}, past the {largest:.3g} the "
                f"weights' dtype holds; give one <= {_at_most(largest * per):.3g}"
            )


def _at_most(bound: float) -> float:
    """``bound`` to 3 significant digits, rounded down: the rate said is one that is taken."""
    said = float(f"{bound:.3g}")
    if said <= bound:
        return said
    exponent = math.floor(math.log10(bound)) - 2  # the bound's: rounded up, 9.996 reads 10.0
    return float(f"{round(said / 10**exponent) - 1}e{exponent}")

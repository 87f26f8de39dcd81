"""The inputs of a loss, checked before any compute (``rlnb.engine.losses`` holds the maths): its params by the wire
catalogue's bounds, each ``loss_fn_inputs`` tensor's dtype, length and finiteness, and the log-probs a policy loss
reads (the checks that read no tensor, such as the keys no loss would read, are ``rlnb.engine.refusals``'). Apart from
the maths so that each stays one concept; ``losses`` re-exports them."""

import math
from typing import Any, get_args

import torch
from pydantic import ValidationError

from rlnb import wire
from rlnb.engine.refusals import InvalidLossInput, check_given, check_loaded
from rlnb.samples import LOGPROB_SLACK
from rlnb.wire import LOSS_CROSS_ENTROPY, LOSS_GRPO
from rlnb.wire.loss_params import GrpoLossAggregationType

_UNSPECIFIED_AGG = next(v for v in get_args(GrpoLossAggregationType) if v.endswith("_UNSPECIFIED"))  # protobuf's unset
_MASKED = ("logprobs", "advantages", "reference_logprobs")
"""A policy loss's inputs it reads at unmasked positions only (``losses.compute`` puts neutral values at the others):
finite there, whatever a masked one holds (a sentinel past float32's range, -1.7e308, is not refused)."""


def validate(
    loss_type: str, params: dict[str, Any] | None, inputs: list[dict[str, torch.Tensor]], seq_lens: list[int]
) -> dict[str, Any]:
    """Check the input contract before any compute; return the params dict with defaults filled in.
    A param given as None takes its default. Raise InvalidLossInput."""
    spec = wire.LOSSES.get(loss_type)
    if spec is None:
        raise InvalidLossInput(f"unknown loss type {loss_type!r}; expected one of {', '.join(wire.LOSSES)}")
    params = _check_params(spec, params)
    if not inputs:
        raise InvalidLossInput("empty batch: at least one sample is required")
    if len(inputs) != len(seq_lens):
        raise InvalidLossInput(f"got loss inputs for {len(inputs)} samples but {len(seq_lens)} model inputs")
    check_given(spec, params["beta"] if loss_type == LOSS_GRPO else 0.0, inputs)  # GRPO's beta: no call
    for i, (x, n) in enumerate(zip(inputs, seq_lens, strict=True)):
        masked = _MASKED if loss_type != LOSS_CROSS_ENTROPY else ()  # the mask first: it says which positions are read
        for key in spec.required + spec.optional:
            if key in x and key not in masked:
                check_input(f"sample {i}: input {key!r}", key, x[key], n)
        if loss_type == LOSS_CROSS_ENTROPY:  # no input read only where the mask is on: no mask to make (3 ops a sample)
            continue
        on = loss_mask(loss_type, x) != 0
        for key in masked:
            if key in x:
                check_input(f"sample {i}: input {key!r}", key, x[key], n, read=on)
        _check_logprobs(i, loss_type, params, x, on)
    return params


def _check_logprobs(
    i: int, loss_type: str, params: dict[str, Any], x: dict[str, torch.Tensor], on: torch.Tensor
) -> None:
    """The log-probs a policy loss reads (the sampler's; the reference's when GRPO's beta > 0) are <= 0, up to
    ``LOGPROB_SLACK``, at the positions it reads (a masked one may hold anything): probabilities sent by mistake would
    make the ratio e^(lp - q) ~0, and the step train on nothing, in silence. ``rlnb.samples.policy``'s own rule."""
    read = ("logprobs", "reference_logprobs") if loss_type == LOSS_GRPO and params["beta"] > 0 else ("logprobs",)
    for key in read:
        above = (x[key] > LOGPROB_SLACK) & on
        if bool(above.any()):
            at = int(above.nonzero()[0])
            raise InvalidLossInput(f"sample {i}: input {key!r} is {x[key][at].item():g} at position {at}: "
                                   "log-probabilities are <= 0 (probabilities sent by mistake?)")  # fmt: skip


def _check_params(spec: wire.LossSpec, params: dict[str, Any] | None) -> dict[str, Any]:
    """The params by the rules of ``spec.params`` (the wire model's bounds), defaults filled in. A bad value is said
    as rlnb's client says it (``wire.one_line``: the body's field, its value and its rule), every bad field at once."""
    # no params (cross-entropy's, most steps): no comprehension, which is a Python call even over nothing
    given = {k: v for k, v in params.items() if v is not None} if params else {}
    fields: dict[str, Any] = dict(spec.params.__pydantic_fields__) if spec.params is not None else {}  # no property
    for key in given:
        if key not in fields:
            raise InvalidLossInput(f"unknown param {key!r} for {spec.type} (allowed: {', '.join(fields) or 'none'})")
    if spec.params is not None and (given or spec.required_params):  # nothing given, nothing required: the defaults
        try:
            spec.params.model_validate(given)
        except ValidationError as exc:
            missing = [str(e["loc"][0]) for e in exc.errors() if e["type"] == "missing"]
            if missing:
                raise InvalidLossInput(f"param {missing[0]!r} is required for {spec.type}") from None
            raise InvalidLossInput(wire.one_line(f"loss.{spec.params_field}", spec.params, exc)) from None
    out = {**spec.defaults, **given}
    if out.get("agg_type") == _UNSPECIFIED_AGG:  # protobuf's "unset": the default aggregation
        out["agg_type"] = spec.defaults["agg_type"]
    return (
        {k: float(v) if isinstance(v, int) and not isinstance(v, bool) else v for k, v in out.items()} if out else out
    )


def check_input(where: str, key: str, t: Any, n: int, read: torch.Tensor | None = None) -> None:
    """The one check of a loss input tensor, ``validate``'s and a custom forward-backward's alike, so a bad
    tensor reads the same wherever it comes from: a tensor of a dtype ``wire.LOSS_INPUT_DTYPES`` allows for
    ``key``, 1-D of the model input's length ``n``, finite (at the positions ``read`` marks, when given). ``where``
    names it as its caller names fields (the rule and its words: ``refusals.check_loaded``, ``FakeBackend``'s too).
    Raise InvalidLossInput."""
    if not isinstance(t, torch.Tensor):
        raise InvalidLossInput(f"{where} must be a tensor, got {type(t).__name__}")
    check_loaded(where, key, str(t.dtype), tuple(t.shape), n,
                 lambda: math.isfinite((t if read is None else t[read]).sum(dtype=torch.float64)))  # fmt: skip


def loss_mask(loss_type: str, inputs_i: dict[str, torch.Tensor]) -> torch.Tensor:
    """1-D float 0/1 mask of the positions that count in the loss for one sample:
    m = (weights != 0), or for policy losses (mask != 0), or 1 everywhere when neither is given."""
    for key in ("weights",) if loss_type == LOSS_CROSS_ENTROPY else ("weights", "mask"):
        if key in inputs_i:
            return (inputs_i[key] != 0).float()
    return torch.ones(len(inputs_i["target_tokens"]), device=inputs_i["target_tokens"].device)

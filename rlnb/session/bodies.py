"""The request body of each operation, built from a ``Session`` method's arguments and checked first: an input the
service would fail the operation for is refused here, before anything is sent or recorded."""

from __future__ import annotations

import operator
import reprlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from rlnb import wire
from rlnb._input.checks import check_int, is_integer
from rlnb._input.scalars import scalar
from rlnb.params import AdamParams, OptimizerParams, params_for, params_state
from rlnb.samples import gradient
from rlnb.session.backend import Backend
from rlnb.text.codec import Codec, NoTokenizerCodec
from rlnb.text.prompts import check_ids, check_room, stop_list

_CHUNK_TOKENS = operator.attrgetter("encoded_text.tokens")
"""A chunk's token ids (C: a generator was two Python calls a forward-backward)."""


def forward_backward_body(
    backend: Backend,
    samples: Sequence[wire.Sample | dict[str, Any]],
    loss: str | wire.LossConfig | dict[str, Any],
    loss_params: dict[str, Any] | None,
    *,
    forward_only: bool,
    return_loss_fn_outputs: bool,
) -> wire.ForwardBackwardBody:
    """``Session.forward_backward``'s body: its samples checked (``batch_list``)."""
    batch = batch_list(backend, samples)
    # the model's validator, as ``model_validate`` calls it: the constructor's Python call spent on ``wire.given``
    body: wire.ForwardBackwardBody = wire.ForwardBackwardBody.__pydantic_validator__.validate_python(wire.given(
        samples=batch,
        loss=wire.loss_config(loss, loss_params),
        forward_only=forward_only or None,  # false is the default: absent
        return_loss_fn_outputs=return_loss_fn_outputs or None,
    ))  # fmt: skip
    return body


def custom_forward_backward_body(backend: Backend, samples: Any, gradients: Any) -> wire.CustomForwardBackwardBody:
    """``Session.custom_forward_backward``'s body: its samples checked (``batch_list``), each with the
    ``target_tokens`` its gradient is of, and one gradient per sample of one float32 value per token
    (``samples.gradient``), each refused naming ``samples[i]`` or ``gradients[i]`` before anything is sent."""
    batch = batch_list(backend, samples)
    listed = gradients.tolist() if hasattr(gradients, "tolist") else gradients  # a 2-D array's rows
    if isinstance(listed, str | bytes | Mapping | wire.GradientTensor) or not isinstance(listed, Sequence):
        raise TypeError(f"gradients must be a list with one gradient per sample (a list of numbers each, or "
                        f"rlnb.samples.gradient(...)), got {type(gradients).__name__}")  # fmt: skip
    if len(listed) != len(batch):
        raise ValueError(f"gradients has {len(listed)} entries for {len(batch)} samples: give one per sample")
    grads = []
    for i, (sample, values) in enumerate(zip(batch, listed, strict=True)):
        if "target_tokens" not in sample.loss_fn_inputs:
            raise ValueError(f"samples[{i}].loss_fn_inputs.target_tokens is required: the tokens whose log-probs "
                             "the gradient is of")  # fmt: skip
        grad = gradient(values, f"gradients[{i}]")
        n = sum(map(len, map(_CHUNK_TOKENS, sample.model_input.chunks)))
        if len(grad.data) != n:
            raise ValueError(f"gradients[{i}] has {len(grad.data)} values for the {n} tokens of samples[{i}]")
        grads.append(grad)
    return wire.CustomForwardBackwardBody(samples=batch, gradients=grads)


def batch_list(backend: Backend, samples: Any) -> list[wire.Sample]:
    """A forward-backward's samples (``sample_list``): at least one and at most a remote trainer's
    ``max_batch_size``, none longer than the model's context (a remote one's trainer's ``max_seq_length``: its
    sampler's context may be another)."""
    batch = sample_list(samples)
    if not batch:  # else sent, and FAILED INVALID_INPUT once it ran
        raise ValueError("samples is empty: pass at least one (rlnb.samples.cross_entropy(...) or .policy(...))")
    most = getattr(backend, "max_batch_size", None)  # a remote trainer's, as supported-models says it
    if most is not None and len(batch) > most:  # else sent, and refused 400 by the server
        raise ValueError(
            f"samples has {len(batch)} entries, more than the {most} one forward-backward of this model takes "
            "(max_batch_size in supported-models): split the batch (gradients add up until the optim-step)"
        )
    context = getattr(backend, "max_seq_length", getattr(backend, "context_length", None))
    for i, s in enumerate(batch):
        n = sum(map(len, map(_CHUNK_TOKENS, s.model_input.chunks)))  # ``.tokens`` would join every chunk
        if context is not None and n > context:
            raise ValueError(f"samples[{i}] has {n} tokens, more than the model's context of {context}")
    return batch


def sample_list(samples: Any) -> list[wire.Sample]:
    """``samples`` as ``wire.Sample``s; a ``ValueError`` naming ``samples`` or ``samples[i]`` where one is not a
    sample (pydantic's "Input should be a valid dictionary or instance of Sample" names neither: one ``Sample``
    passed alone would read as a list of its fields). A ``Sample`` is copied (``_own``): the operation runs later."""
    # a list (most calls) is none of those and iterable: not asked, the ABCs' checks costing 2 Python calls a step
    if type(samples) is not list and (
        isinstance(samples, wire.Sample | Mapping | str | bytes) or not isinstance(samples, Iterable)
    ):
        one = isinstance(samples, wire.Sample | Mapping)
        raise ValueError(f"samples must be a list of samples, such as [rlnb.samples.cross_entropy(...)], got "
                         f"{'one sample: pass [sample]' if one else reprlib.repr(samples)}")  # fmt: skip
    batch = []
    for i, sample in enumerate(samples):
        if not isinstance(sample, wire.Sample | Mapping):
            raise ValueError(f"samples[{i}] must be a Sample (rlnb.samples.cross_entropy(...), .policy(...)) or its "
                             f"dict, got {reprlib.repr(sample)}")  # fmt: skip
        try:
            batch.append(_own(sample) if isinstance(sample, wire.Sample) else wire.Sample.model_validate(sample))
        except ValidationError as exc:
            err = exc.errors()[0]
            where = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in err["loc"])
            said = str(err["msg"]).removeprefix("Value error, ")  # pydantic's prefix of a validator's own words,
            if err["type"] != "value_error":  # which say what they got ("expected an integer, got 1.5, got 1.5")
                said += f", got {reprlib.repr(err.get('input'))}"
            raise ValueError(f"samples[{i}]{where}: {said}") from None
    return batch


def _own(sample: wire.Sample) -> wire.Sample:
    """A validated copy of the caller's ``sample`` as a plain ``wire.Sample``. A copy: an edit made after
    ``forward_backward()`` returned, before the worker ran it, was trained on. Validated by the constructor's rules:
    a field set after construction (text or a bool in ``data``, ``shape``, ``dtype``, ``data=None``) was never checked,
    and reached the engine. The validation builds new lists; ``warnings=False`` lets a bad value through the dump to
    the validation that names it (a subclass's class is left behind)."""
    try:
        data = _fields(sample) or sample.model_dump(warnings=False, exclude_unset=True)  # the fields set, as sent
    except (AttributeError, TypeError, ValueError):  # an object no field takes, set after construction: the dump fails
        wire.Sample.model_validate(dict(sample))  # its ValidationError names the field (sample_list says it)
        raise
    return wire.Sample.model_validate(data)


_EXTRA, _DICT = operator.attrgetter("__pydantic_extra__"), operator.attrgetter("__dict__")
_ENCODED_TEXT = operator.attrgetter("encoded_text")


def _fields(sample: wire.Sample) -> dict[str, Any] | None:
    """``sample`` as the dicts of its models' fields, values as they are now (the validation copies the lists;
    int64 data is not turned into ints and back: the dump was most of a submission's cost), or None where a part is
    not the plain wire type (a subclass, a value set to something else) or has extra fields: the dump takes those, so
    that nothing reaches the validation as a model instance it would keep unchecked, and extra values are copied."""
    given, inputs = sample.model_input, sample.loss_fn_inputs
    chunks = getattr(given, "chunks", None)
    if type(inputs) is not dict or type(chunks) is not list:
        return None
    try:
        texts = list(map(_ENCODED_TEXT, chunks))  # C, where a comprehension was a Python call a forward-backward
    except AttributeError:  # not a chunk: the dump takes it
        return None
    parts = [sample, given, *chunks, *texts, *inputs.values()]
    kinds = [wire.Sample, wire.ModelInput, *[wire.ModelInputChunk] * len(chunks), *[wire.EncodedText] * len(texts)]
    kinds += [wire.TensorData] * len(inputs)
    # C passes (map, is, any), not a generator: that would be 16 Python calls of a submission's ~45; types by identity,
    # as ``wire.only``: a list's ``!=`` would ask each type's ``==``, and a metaclass's ``__eq__`` could pass a stranger
    if not all(map(operator.is_, map(type, parts), kinds)) or any(map(_EXTRA, parts)):
        return None
    copies = list(map(dict, map(_DICT, chunks)))  # C, as ``texts``: a comprehension was a Python call
    text_copies = list(map(dict, map(_DICT, texts)))
    for c, t in zip(copies, text_copies, strict=True):
        c["encoded_text"] = t
    model_input = {**given.__dict__, "chunks": copies}
    tensors = dict(zip(inputs, map(dict, map(_DICT, inputs.values())), strict=True))  # C, as ``texts``
    data = {**sample.__dict__, "model_input": model_input, "loss_fn_inputs": tensors}
    # a field left unset is left out, as the part's own dump (exclude_unset) leaves it: the copy's validation counts
    # each key given as set, and ``to_json_dict`` then sent its default, ``"shape": null``, which R-new says to omit
    # (one left unset yet assigned a value past pydantic, ``object.__setattr__``, is kept: validated, not dropped)
    for part, copy in zip(parts, [data, model_input, *copies, *text_copies, *tensors.values()], strict=True):
        for key in part.__dict__.keys() - part.__pydantic_fields_set__:
            if copy[key] is None:
                del copy[key]
    return data


class StepParams:
    """A session's optim-step bodies and recorded params, from the params given (``params_for``: a checked copy). The
    same ``AdamParams`` or ``MuonParams`` object given again, unchanged (a training loop's ``hp``), keeps its last
    check, body and recorded params: its fields, their types and the fields set are compared (C calls), a Muon's
    ``adam`` object's too, where checking it again cost ~30 Python calls a step. A change, even one past its checks
    (``object.__setattr__``), or another ``adam`` object, is checked afresh."""

    def __init__(self, optimizer: wire.OptimizerKind) -> None:
        self.optimizer = optimizer
        self._last: tuple[Any, ...] | None = None
        """The last params given, its ``params_state`` as it was, its body and its recorded params."""

    def __call__(self, params: OptimizerParams | dict[str, Any] | None) -> tuple[wire.OptimStepBody, dict[str, Any]]:
        """The body of an optim-step with ``params``, and the params its record holds (a new dict each time, a Muon's
        ``adam`` dict too)."""
        last = self._last  # one read: another thread's step replaces it whole
        if last is None or last[0] is not params or last[1] != params_state(params):
            taken = params_for(self.optimizer, params)
            last = (params, params_state(params), optim_step_body(taken), taken.model_dump(exclude_unset=True))
            if last[1] is None:  # a dict, or a subclass (its own state): checked afresh each time
                return last[2], last[3]
            self._last = last
        recorded = {**last[3]}
        if recorded.get("adam") is not None:
            recorded["adam"] = {**recorded["adam"]}
        return last[2], recorded


def optim_step_body(params: OptimizerParams) -> wire.OptimStepBody:
    """``Session.optim_step``'s body around ``params``, already checked for the session's optimizer."""
    # The params were validated by params_for (Session.check_params): the body wraps them as they are, and the
    # backend only fills in defaults.
    if isinstance(params, AdamParams):
        return wire.OptimStepBody.model_construct(adam_params=params)
    return wire.OptimStepBody.model_construct(muon_params=params)


def weights_sync_body(sync_type: str) -> wire.WeightsSyncBody:
    """``Session.weights_sync``'s body: ``sync_type`` by its short name or its wire value."""
    sync = wire.SYNC_NAMES.get(sync_type, sync_type) if isinstance(sync_type, str) else sync_type
    if sync not in wire.SYNC_NAMES.values():  # pydantic's error listed only the WEIGHT_SYNC_TYPE_* spellings
        raise ValueError(f"sync_type must be one of {', '.join(wire.SYNC_NAMES)} (or its wire name, such as "
                         f"{next(iter(wire.SYNC_NAMES.values()))!r}), got {sync_type!r}")  # fmt: skip
    return wire.WeightsSyncBody.model_validate({"weight_sync_type": sync})


@dataclass(frozen=True)
class SampleSettings:
    """``Session.sample``'s keywords as given (``sample_body`` checks them): one group, not nine parameters."""

    num_samples: int = 1
    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    stop: str | Sequence[str] | None = None
    seed: int | None = None
    prompt_logprobs: bool = False
    topk_prompt_logprobs: int = 0


def sample_body(
    backend: Backend, codec: Codec | None, tokens: list[list[int]], asked: SampleSettings
) -> wire.SampleBody:
    """``Session.sample``'s body for the prompts' ``tokens``: each one a prompt the model can take, with room in
    its context for ``max_tokens``, stop strings only where there is text to match them on."""
    temperature, top_p, stop = asked.temperature, asked.top_p, asked.stop
    for i, t in enumerate(tokens):  # the service would fail the operation: refused before it is sent
        if not t:
            raise ValueError(f"prompts[{i}] encodes to no tokens: a prompt needs at least one")
        check_ids(t, f"prompts[{i}]", getattr(backend, "vocab_size", None))
    stops = stop_list(stop)
    check_stops(backend, stops or [])
    if stops and isinstance(codec, NoTokenizerCodec):  # stop strings are matched on decoded text
        raise ValueError(f"stop: {codec.refusal()}")
    max_tokens, num_samples, top_k, seed, topk_prompt_logprobs, prompt_logprobs = map(scalar, (
        asked.max_tokens, asked.num_samples, asked.top_k, asked.seed, asked.topk_prompt_logprobs, asked.prompt_logprobs
    ))  # fmt: skip
    seed = check_int("seed", seed, -(2**63), 2**63 - 1, optional=True)  # the wire's int64 takes "42" and 42.0 in
    given = wire.given(max_tokens=max_tokens, temperature=scalar(temperature), top_p=scalar(top_p), top_k=top_k,
                       stop=stops, seed=seed)  # fmt: skip
    # first: a bad value is named (one line, its bounds from the wire model) before the prompts are measured
    params = wire.validated(wire.SamplingParams, given, "SamplingParams")
    default = getattr(backend, "default_max_tokens", wire.DEFAULT_MAX_TOKENS)  # a remote one's: its server's
    check_room(tokens, params.max_tokens, getattr(backend, "context_length", None), default)
    most: int | None = getattr(backend, "max_num_samples", None)  # the in-process engine's
    if most is not None and is_integer(num_samples) and not 1 <= num_samples <= most:  # else FAILED once sent
        raise ValueError(f"num_samples must be in [1, {most}] on this in-process session, got {num_samples}")
    return wire.validated(wire.SampleBody, wire.given(
        model_inputs=[wire.ModelInput.from_tokens(t) for t in tokens],
        num_samples=num_samples,
        sampling_params=params,
        prompt_logprobs=prompt_logprobs or None,  # false and 0 are the defaults: absent
        topk_prompt_logprobs=topk_prompt_logprobs or None,
    ), "SampleBody")  # fmt: skip


def check_stops(backend: Backend, stops: list[str]) -> None:
    """``ValueError`` naming ``stop`` past the in-process engine's bounds on stop strings (``rlnb serve`` has its own,
    ``--limit max_stop_strings`` and ``max_stop_chars``, whose defaults these are)."""
    most: int | None = getattr(backend, "max_stop_strings", None)
    if most is not None and len(stops) > most:
        raise ValueError(f"stop has {len(stops)} strings; this in-process session takes at most {most}")
    chars: int | None = getattr(backend, "max_stop_chars", None)
    longest = max(range(len(stops)), key=lambda i: len(stops[i]), default=None)
    if chars is not None and longest is not None and len(stops[longest]) > chars:
        raise ValueError(
            f"stop[{longest}] has {len(stops[longest])} characters; this in-process session takes at most {chars} "
            "per stop string"
        )


def sample_mismatch(body: wire.SampleBody, out: wire.SampleOutput) -> str | None:
    """Why a sample's output does not answer ``body`` (one result per prompt, ``num_samples`` sequences each), or
    None: a short answer would be zipped against the prompts in silence, or fail far away (an ``IndexError``, a
    ``zip()`` "argument 2 is shorter"), and fewer sequences would make a group's advantages from fewer rewards."""
    n, got = body.num_samples or 1, [len(r.sequences) for r in out.results]
    if got == [n] * len(body.model_inputs):
        return None
    return (
        f"the backend answered {len(got)} results with {got} sequences for {len(body.model_inputs)} prompts of "
        f"{n} samples each: not an answer to this request"
    )

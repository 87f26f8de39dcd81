"""What one request may ask of the server, checked before anything is stored or queued.

Every number comes from ``ServerSettings``. A request past a limit gets the API's error body: 413 for a
body too large (``body_limit.BodyLimit``, before the body is read into memory), 400 naming the field otherwise
(``check_operation``); a field the API does not have, at any depth, is a 400 naming it (``check_known``)
instead of being ignored (a misspelt ``learning_rat`` would otherwise run with the default rate).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from rlnb import wire
from rlnb.server.counts import batch_limit
from rlnb.server.errors import ServerError
from rlnb.server.models import SAMPLING_DEFAULTS
from rlnb.server.settings import ServerSettings
from rlnb.text.prompts import EMPTY_STOP, REPLACEMENT, surrogate
from rlnb.wire import MAX_NUM_SAMPLES


def check_operation(settings: ServerSettings, kind: wire.OperationKind, body: Any) -> None:
    """The limits of one operation body: batch size, sampling budget, stop strings; and the loss params."""
    for check in CHECKS.get(kind, ()):
        check(settings, body)


def check_batch(settings: ServerSettings, body: wire.ForwardBackwardBody | wire.CustomForwardBackwardBody) -> None:
    if not body.samples:  # else accepted, and FAILED INVALID_INPUT once it ran
        raise ServerError(400, "samples is empty: a forward-backward needs at least one sample", param="samples")
    if len(body.samples) > settings.max_batch_size:
        raise batch_limit(settings, "samples", len(body.samples))


def check_inputs(settings: ServerSettings, body: wire.ForwardBackwardBody | wire.CustomForwardBackwardBody) -> None:
    """A ``loss_fn_inputs`` key the operation would silently ignore is a 400 naming it
    (``wire.unread_inputs``)."""
    loss_type = body.loss.type if isinstance(body, wire.ForwardBackwardBody) else None
    for i, sample in enumerate(body.samples):
        for key in wire.unread_inputs(loss_type, sample.loss_fn_inputs):
            param, spec = f"samples.{i}.loss_fn_inputs.{key}", wire.LOSSES.get(loss_type or "")
            if key in wire.LOSS_INPUT_DTYPES and spec is not None:
                why = f"{loss_type} does not read it (it reads {', '.join((*spec.required, *spec.optional))})"
            else:
                why = f"no loss reads it (the inputs are {', '.join(wire.LOSS_INPUT_DTYPES)})"
            raise ServerError(400, f"{param}: {why}", param=param)


def check_loss(settings: ServerSettings, body: wire.ForwardBackwardBody) -> None:
    """A loss type that is no loss, params of another loss type (refused, not ignored), params the loss requires
    (DRO's) missing: ``wire.loss_problem``, which rlnb's client checks before sending."""
    problem = wire.loss_problem(body.loss)
    if problem is not None:
        param, why = problem
        raise ServerError(400, why, param=param)


def tighter_range(settings: ServerSettings, param: str | None) -> str | None:
    """``1..HIGH`` of a field this server bounds below the wire's int32 range, else None: a 400 for a value under it
    names this range (the server's), as the one for a value over it does, not the wire's ``1..2147483647``."""
    high = {"num_samples": MAX_NUM_SAMPLES, "lora_config.rank": settings.max_lora_rank}.get(param or "")
    return None if high is None else f"1..{high}"


def past_range(param: str, high: int, got: int, why: str = "") -> ServerError:
    """The 400 for ``param`` over this server's ``high`` (``tighter_range``), worded as the one under it."""
    return ServerError(400, f"{param}: must be at most {high}{why} (allowed: 1..{high}; got {got})", param=param)


def check_sample(settings: ServerSettings, body: wire.SampleBody) -> None:
    sp = body.sampling_params or wire.SamplingParams()
    prompts, n = len(body.model_inputs), body.num_samples or 1
    if not prompts:  # else accepted, and FAILED INVALID_INPUT once it ran
        raise ServerError(400, "model_inputs is empty: a sample needs at least one prompt", param="model_inputs")
    empty = next((i for i, prompt in enumerate(body.model_inputs) if not prompt.tokens), None)
    if empty is not None:
        raise ServerError(400, f"model_inputs[{empty}] has no tokens: a prompt needs at least one",
                          param=f"model_inputs.{empty}")  # fmt: skip
    if n > MAX_NUM_SAMPLES:
        raise past_range("num_samples", MAX_NUM_SAMPLES, n)
    tokens = sp.max_tokens or SAMPLING_DEFAULTS.max_tokens or 1
    if prompts * n * tokens > settings.max_sample_tokens:
        raise ServerError(
            400,
            f"this sample asks for {prompts} prompts x {n} samples x {tokens} max_tokens = {prompts * n * tokens} "
            f"tokens; the limit is {settings.max_sample_tokens} per request (max_sample_tokens): split it",
            param=max(  # the largest factor: 1 prompt x 1 sample x 10**6 max_tokens named num_samples
                ((tokens, "sampling_params.max_tokens"), (n, "num_samples"), (prompts, "model_inputs")),
                key=lambda factor: factor[0],
            )[1],
        )
    longest = max((len(prompt.tokens) for prompt in body.model_inputs), default=0)
    if prompts * n * longest > settings.max_sample_prompt_tokens:  # each sample's cache row holds its padded prompt
        raise ServerError(
            400,
            f"this sample caches {prompts} prompts x {n} samples x {longest} tokens (the longest prompt) = "
            f"{prompts * n * longest} prompt tokens; the limit is {settings.max_sample_prompt_tokens} per request "
            "(max_sample_prompt_tokens): split it",
            param="model_inputs",
        )
    check_prompt_logprobs(settings, body)
    stop = sp.stop or []
    if len(stop) > settings.max_stop_strings:
        raise ServerError(
            400, f"sampling_params.stop has {len(stop)} strings; the limit is {settings.max_stop_strings} "
            "(max_stop_strings)", param="sampling_params.stop",
        )  # fmt: skip
    at = max(range(len(stop)), key=lambda i: len(stop[i]), default=None)  # named: "a stop string" was not
    if at is not None and len(stop[at]) > settings.max_stop_chars:
        raise ServerError(
            400, f"sampling_params.stop.{at} has {len(stop[at])} characters; the limit is "
            f"{settings.max_stop_chars} per stop string (max_stop_chars)", param=f"sampling_params.stop.{at}",
        )  # fmt: skip
    for i, text in enumerate(stop):  # decoded text never holds one: the stop string could never match
        if not text:
            raise ServerError(400, f"sampling_params.stop.{i} {EMPTY_STOP}", param=f"sampling_params.stop.{i}")
        if surrogate(text) is not None:
            raise ServerError(
                400, f"sampling_params.stop.{i} holds a lone surrogate: it is not valid Unicode text and could "
                "never match", param=f"sampling_params.stop.{i}",
            )  # fmt: skip
        if REPLACEMENT in text:
            raise ServerError(
                400, f"sampling_params.stop.{i} holds U+FFFD, which decoded text shows for bytes that are no "
                "character yet: it could never match", param=f"sampling_params.stop.{i}",
            )  # fmt: skip


def check_prompt_logprobs(settings: ServerSettings, body: wire.SampleBody) -> None:
    """The prompt log-probs a sample returns (one per prompt token, and ``topk_prompt_logprobs`` more), whatever its
    ``num_samples``: they are kept with the operation, and 0.6 MB of prompts can ask for 65 MB of them."""
    each, topk = int(bool(body.prompt_logprobs)) + (body.topk_prompt_logprobs or 0), body.topk_prompt_logprobs or 0
    tokens = sum(len(prompt.tokens) for prompt in body.model_inputs)
    if tokens * each > settings.max_prompt_logprobs:
        per = f"(1 + topk_prompt_logprobs {topk})" if body.prompt_logprobs else f"topk_prompt_logprobs {topk}"
        per = per if topk else "1 (prompt_logprobs)"
        raise ServerError(
            400, f"this sample returns {tokens} prompt tokens x {per} = {tokens * each} prompt log-probs; the limit "
            f"is {settings.max_prompt_logprobs} per request (max_prompt_logprobs): split it, or ask fewer top ones",
            param="topk_prompt_logprobs" if topk else "prompt_logprobs",
        )  # fmt: skip


def check_context(context: int, body: Any) -> None:
    """Each datum of a body that holds tokens within the session model's ``context``, as supported-models says it: a
    400 naming it and the range at submission. The engine refuses it too, but only once it ran: till then the queue
    held its parsed body (a 30 MB sample of 2.2 M tokens held ~300 MB). A prompt that fits but leaves no room for its
    ``max_tokens`` is still the engine's ``INVALID_INPUT``: its body is no larger, and the SDK's own tests send
    ``max_tokens`` 512 to whatever model they are given."""
    for i, prompt in enumerate(getattr(body, "model_inputs", ())):
        _within(f"model_inputs.{i}", prompt.length, "tokens", context, "context_length")
    for i, sample in enumerate(getattr(body, "samples", ())):
        _within(f"samples.{i}.model_input", sample.model_input.length, "tokens", context)
        for key, tensor in sample.loss_fn_inputs.items():
            _within(f"samples.{i}.loss_fn_inputs.{key}", len(tensor.data), "values", context)
    for i, gradient in enumerate(getattr(body, "gradients", ())):
        _within(f"gradients.{i}", len(gradient.data), "values", context)


def _within(param: str, n: int, what: str, context: int, field: str = "max_seq_length") -> None:
    if n > context:
        raise ServerError(
            400, f"{param}: {n} {what} exceed the model's context of {context} ({field} in supported-models; "
            f"allowed: 1..{context} {what})", param=param,
        )  # fmt: skip


def check_labels(settings: ServerSettings, display_name: str | None, metadata: wire.SessionMetadata | None) -> None:
    """A session's display name (UTF-8) and metadata (JSON), each at most ``max_label_bytes``."""
    for param, value in (("display_name", display_name), ("metadata", metadata)):
        if value is None:
            continue
        size = len((value if isinstance(value, str) else value.model_dump_json()).encode())  # bytes, not characters
        if size > settings.max_label_bytes:
            raise ServerError(
                400, f"{param} is {size:,} bytes; the limit is {settings.max_label_bytes:,} (max_label_bytes)",
                param=param,
            )  # fmt: skip


CHECKS: dict[str, tuple[Callable[[ServerSettings, Any], None], ...]] = {
    wire.OperationKind.FORWARD_BACKWARD: (check_batch, check_inputs, check_loss),
    wire.OperationKind.CUSTOM_FORWARD_BACKWARD: (check_batch, check_inputs),
    wire.OperationKind.SAMPLE: (check_sample,),
}
"""The limits each kind's body is checked against (the other kinds have none)."""


def check_lora(settings: ServerSettings, res: wire.ModelResources, lora: wire.LoraConfig | None) -> None:
    """A session's ``lora_config``: on a LoRA resource only (it is not dropped: the user asked for LoRA),
    of a rank up to ``max_lora_rank``."""
    if lora is not None and not res.lora_enabled:
        raise ServerError(
            400, f"lora_config applies to a LoRA model resource; {res.id} trains all weights (lora_enabled is "
            "false): create a resource with lora_enabled true, or leave lora_config out", param="lora_config",
        )  # fmt: skip
    if lora is not None and lora.rank is not None and lora.rank > settings.max_lora_rank:
        raise past_range("lora_config.rank", settings.max_lora_rank, lora.rank, ", this server's max_lora_rank")


def check_resume(res: wire.ModelResources, lora: wire.LoraConfig | None, ckpt: wire.Checkpoint) -> None:
    """What a checkpoint's record already says will not resume on ``res``, refused at the POST (400) before the
    session is made; what only its weights tell ends the session ERROR as it is built."""
    training = ckpt.type == wire.CHECKPOINT_TRAINING
    why = None
    if res.lora_enabled and not (training and ckpt.lora_rank is not None):
        kind = "an inference checkpoint" if not training else "a full-weight training checkpoint"
        why = f"it is {kind}; a LoRA session resumes from a LoRA training checkpoint"
    elif not res.lora_enabled and training and ckpt.lora_rank is not None:
        why = f"it is a LoRA training checkpoint (rank {ckpt.lora_rank}); {res.id} trains all weights"
    elif lora is not None and lora.rank is not None and ckpt.lora_rank not in (None, lora.rank):
        why = f"its LoRA rank is {ckpt.lora_rank}, lora_config.rank is {lora.rank}: leave rank out or give its own"
    elif ckpt.lora_rank is None and ckpt.base_model != res.base_model:  # R-new: "need the original base model"
        why = (f"it holds all the weights of base model {ckpt.base_model!r}; {res.id} serves {res.base_model!r}: a "
               "full-weight checkpoint resumes on a resource of its own base model")  # fmt: skip
    if why is not None:
        raise ServerError(400, f"checkpoint {ckpt.id} does not resume here: {why}", param="resume_from_checkpoint_id")


def check_known(model: BaseModel, prefix: str = "") -> None:
    """400 naming the first field, at any depth, that the API's schema does not have."""
    for name in model.model_extra or {}:
        raise ServerError(400, f"{prefix}{name}: unknown field", param=f"{prefix}{name}")
    for name in type(model).model_fields:
        _known(getattr(model, name), f"{prefix}{name}")


def _known(value: Any, path: str) -> None:
    if isinstance(value, BaseModel):
        check_known(value, path + ".")
    elif isinstance(value, list) and value and isinstance(value[0], BaseModel):
        for i, item in enumerate(value):
            _known(item, f"{path}.{i}")
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, BaseModel):
                _known(item, f"{path}.{key}")


def fingerprint(body: BaseModel | None) -> str:
    """What an Idempotency-Key is bound to: the request body as the server read it."""
    if body is None:
        return ""
    data = body.model_dump(mode="json", exclude_unset=True, by_alias=True)
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()

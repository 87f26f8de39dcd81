"""What each operation does on the in-process backend: one function per kind, in one explicit table.

Every handler takes the session's ``Engine`` (``rlnb.engine.state``), the request body and the
cancel event, and returns the kind's wire result or raises ``OperationError`` with an API error code.
Inputs are checked before any compute (``rlnb.engine.inputs``), so a bad request never leaves
half-accumulated gradients.
"""

from __future__ import annotations

import math
import operator
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from itertools import repeat
from typing import Any

import torch
from torch import Tensor

from rlnb import wire
from rlnb.engine import checkpoints, choice, refusals, sample_inputs, sampling
from rlnb.engine import inputs as inputs_mod
from rlnb.engine import losses as losses_mod
from rlnb.engine.checkpoint_files import DiskFull, FolderNotWritable
from rlnb.engine.models import packed
from rlnb.engine.models.compiled import bucket, window
from rlnb.engine.oom import out_of_memory
from rlnb.engine.optim.failures import GRADIENTS_DROPPED, StepFailed
from rlnb.engine.state import Engine
from rlnb.engine.stepping import optim_step
from rlnb.engine.worker import failure
from rlnb.errors import Cancelled, OperationError
from rlnb.wire import OperationErrorCode as Code


def run(engine: Engine, kind: wire.OperationKind, body: Any, cancelled: threading.Event) -> Any:
    """The worker's entry point: one operation of ``kind``."""
    if engine.op_delay:  # simulated compute, which a stop ends at once; the operation's own work still runs
        cancelled.wait(engine.op_delay)
    if engine.half_stepped:  # an attribute read a step, not a call
        refusals.check_half_stepped(kind, bool(engine.training_checkpoints))
    out = HANDLERS[kind](engine, body, cancelled)
    if kind in wire.CHANGES_SESSION:
        engine.changed_at = datetime.now(UTC)
    return out


def classify(exc: BaseException) -> OperationError | None:
    """What an exception of torch or of the handlers' helpers stands for (the worker's ``classify``)."""
    if isinstance(exc, StepFailed):  # an optim-step's: its cause's code, and what the step left
        code, message = failure(exc.cause, classify)
        return OperationError(code, f"{message}{exc.words()}")
    if out_of_memory(exc):
        return OperationError(Code.RESOURCE_EXHAUSTED, f"out of memory: {str(exc)[:300]}")
    if isinstance(exc, losses_mod.InvalidLossInput):
        return OperationError(Code.INVALID_INPUT, str(exc))
    if isinstance(exc, DiskFull | FolderNotWritable):  # the storage's, not the request's: see docs/reliability.md
        return OperationError(Code.RESOURCE_EXHAUSTED, str(exc))
    if isinstance(exc, sampling.Diverged):
        return OperationError(Code.NON_FINITE_LOSS, str(exc))
    return None


# -- forward-backward ------------------------------------------------------------------------------


def finite_loss(loss: torch.Tensor, metrics: dict[str, float]) -> float:
    """The loss's value, before any backward; ``NON_FINITE_LOSS`` if it or a metric is not finite (a finite loss
    can still carry an overflowed ratio, whose gradient would be NaN). Batched trials' members check the same."""
    value = loss.item()  # no ``detach`` first: an op, and ``item`` records no gradient
    if not math.isfinite(value):
        raise OperationError(Code.NON_FINITE_LOSS, f"loss is {value}; no gradients were accumulated")
    if not all(map(math.isfinite, metrics.values())):  # C passes; a generator would be a Python call a step
        bad = next(k for k, v in metrics.items() if not math.isfinite(v))
        raise OperationError(
            Code.NON_FINITE_LOSS,
            f"{bad} is {metrics[bad]} (are loss_fn_inputs' logprobs far from the policy's?); no gradients were "
            "accumulated",
        )
    return value


_TARGETS = operator.itemgetter("target_tokens")


def forward_backward(engine: Engine, body: wire.ForwardBackwardBody, cancelled: threading.Event) -> Any:
    problem = wire.loss_problem(body.loss)  # the check rlnb's client and ``rlnb serve`` make, in the same words
    if problem is not None:
        raise OperationError(Code.INVALID_INPUT, problem[1])
    loss_type = body.loss.type
    field_name = wire.LOSS_PARAMS_FIELD[loss_type]
    given = getattr(body.loss, field_name) if field_name else None
    seqs, inputs = inputs_mod.read_samples(engine.adapter, body.samples)
    losses_mod.check_read(loss_type, inputs)
    loss_params = losses_mod.validate(
        loss_type, given.model_dump(exclude_none=True) if given is not None else None, inputs, list(map(len, seqs))
    )
    forward_only = bool(body.forward_only)
    # the tokens the loss and its metrics read (``map``s, not comprehensions: those would be a Python call each)
    counted = list(map(losses_mod.loss_mask, repeat(loss_type), inputs))
    whole = losses_mod.counts_all(counted)
    # A forward-only evaluation runs in eval mode: LoRA's dropout (or a custom module's) off, so the same evaluation
    # gives the same loss every time; training mode again after. A ``try``, not a context manager: 6 calls a step.
    evaluating = forward_only and engine.trainer.training
    if evaluating:
        engine.trainer.eval()
    try:
        with torch.set_grad_enabled(not forward_only):
            targets = list(map(_TARGETS, inputs))
            lps, entropy = inputs_mod.logprobs(engine.adapter, engine.trainer, seqs, targets, counted, whole)
            horizon = engine.adapter.context_length  # FIXED_HORIZON's constant: the session's maximum sequence length
            loss, metrics = losses_mod.compute(
                loss_type, loss_params, lps, inputs, horizon=horizon, entropy=entropy, counted=counted, whole=whole
            )
    finally:
        if evaluating:
            engine.trainer.train()
    value = finite_loss(loss, metrics)
    if not forward_only:
        try:  # a ``try``, not a function: no Python call a step
            loss.backward()
        except BaseException as exc:
            raise _dropped(engine, exc) from exc
    outputs = None
    if body.return_loss_fn_outputs:
        outputs = [
            wire.LossFnOutput(
                tensors={
                    "logprobs": wire.OutputTensor(
                        data=torch.where(m != 0, lp.detach(), 0.0).tolist(),  # +0.0 where not counted
                        dtype="float32",
                    )
                }
            )
            for lp, m in zip(lps, counted, strict=True)
        ]
    return wire.ForwardBackwardResult(loss=value, metrics=metrics, loss_fn_outputs=outputs)


def custom_forward_backward(
    engine: Engine, body: wire.CustomForwardBackwardBody, cancelled: threading.Event
) -> wire.CustomForwardBackwardResult:
    seqs, inputs = inputs_mod.read_samples(engine.adapter, body.samples)
    losses_mod.check_read(None, inputs)
    grads = inputs_mod.custom_gradients(seqs, inputs, body.gradients)  # w·g, or zero where the mask is
    lps, _ = inputs_mod.logprobs(engine.adapter, engine.trainer, seqs, [x["target_tokens"] for x in inputs], None)
    surrogate = sum((lp * g.to(lp.device)).sum() for lp, g in zip(lps, grads, strict=True))
    try:
        surrogate.backward()  # type: ignore[union-attr]  # d surrogate / d lp = g: the caller's gradients exactly
    except BaseException as exc:
        raise _dropped(engine, exc) from exc
    return wire.CustomForwardBackwardResult()


def _dropped(engine: Engine, exc: BaseException) -> BaseException:
    """A backward that failed part way (out of memory) added to some parameters' gradients and not to others: every
    gradient since the last optim-step is dropped, as a non-finite one is, and the failure says so. A
    ``BaseException`` that is no ``Exception`` (``SystemExit``) goes on as it is."""
    engine.optim.zero_grad()
    if not isinstance(exc, Exception):
        return exc
    code, message = failure(exc, classify)
    return OperationError(code, f"{message}{GRADIENTS_DROPPED}")


# -- weights-sync (the optim-step: ``rlnb.engine.stepping``) ---------------------------------------


@torch.no_grad()
def weights_sync(engine: Engine, body: wire.WeightsSyncBody, cancelled: threading.Event) -> wire.WeightsSyncResult:
    """Publish the trainer's weights to the sampler: only tensors the two do not share (the trainable ones)."""
    sampler: list[Tensor] = [*engine.sampler.parameters(), *engine.sampler.buffers()]
    trainer: list[Tensor] = [*engine.trainer.parameters(), *engine.trainer.buffers()]
    for dst, src in zip(sampler, trainer, strict=True):
        if dst is not src:
            dst.copy_(src)
    engine.weights_version = engine.step
    return wire.WeightsSyncResult(weights_version=engine.weights_version)


# -- sample ---------------------------------------------------------------------------------------


@torch.no_grad()
def sample(engine: Engine, body: wire.SampleBody, cancelled: threading.Event) -> wire.SampleOutput:
    if engine.num_generator_replicas == 0:
        raise OperationError(Code.INVALID_INPUT, refusals.TRAINER_ONLY)
    sp, n, settings, prompts = sample_inputs.sample_request(engine.adapter, body)
    refusals.check_stop(settings.stop, engine.max_stop_strings, engine.max_stop_chars)
    seed = sp.seed if sp.seed is not None else int(torch.randint(2**62, (1,), generator=engine.sample_rng))
    longest, rows = max(len(p) for p in prompts) + settings.max_tokens, len(prompts) * n
    chooser: choice.Pick = choice.pick
    if engine.compiler is not None:  # compiled: lengths in buckets, so that nearby ones share a graph
        packed.refresh(engine.sampler)  # weights written since the last sample: a compiled step cannot re-pack
        longest = bucket(longest, engine.adapter.context_length)
        dtype = next(engine.sampler.parameters()).dtype  # of the logits the choice reads
        chooser = choice.compiled_pick(engine.compiler, settings, dtype, rows, engine.adapter.vocab_size, engine.device)
    prefill = _prefill(engine, prompts, n, longest)  # before anything is allocated
    sampling.check_cache(rows, longest, engine.adapter.kv_bytes_per_token(), prefill, engine.device)
    decoder = _Cancellable(engine.adapter.decoder(engine.sampler, rows, longest, engine.compiler), cancelled)
    cached = engine.adapter.kv_bytes_per_token() > 0  # 0: a plain module, which recomputes every row
    groups = sampling.generate(
        decoder, prompts, n, settings, seed, engine.adapter.codec, engine.device, chooser, cached=cached
    )
    results = []
    for prompt, seqs in zip(prompts, groups, strict=True):
        result = wire.SampleResult(
            policy_segments=[wire.PolicyVersionSegment(start_token=0, version=engine.weights_version)], sequences=seqs
        )
        if body.prompt_logprobs or body.topk_prompt_logprobs:
            ids = torch.tensor(prompt[:-1], device=engine.device)  # the last token predicts none of the prompt
            chunks = engine.adapter.prompt_logits(engine.sampler, ids) if len(ids) else ()
            result.prompt_logprobs, result.topk_prompt_logprobs = sampling.prompt_logprobs(
                chunks, prompt, body.topk_prompt_logprobs or 0, engine.device
            )
        results.append(result)
    return wire.SampleOutput(results=results)


def _prefill(engine: Engine, prompts: list[list[int]], n: int, longest: int) -> tuple[int, int, int]:
    """The prefill's share of a sample's memory (``sampling.check_cache``): each prompt once, its longest's tokens.
    A mask is built for prompts of different lengths (one length: plain causal attention), and by a compiled
    sample of one row a prompt, prefilled straight into its static cache: over the slots its first step attends
    to (``compiled.window``), though the rest of the cache is empty (measured)."""
    tokens = max(len(p) for p in prompts)
    static = engine.compiler is not None and n == 1
    keys = window(tokens, longest) if static else tokens
    masked = static or len({len(p) for p in prompts}) > 1
    return len(prompts), tokens, engine.adapter.prefill_bytes_per_token(keys, masked, repeated=n > 1)


class _Cancellable:
    """A decoder that stops between tokens once the session is stopped."""

    def __init__(self, decoder: Any, cancelled: threading.Event) -> None:
        self.decoder, self.cancelled = decoder, cancelled

    def prefill(self, ids: Tensor, mask: Tensor, n: int = 1) -> Tensor:
        return self.decoder.prefill(ids, mask, n)

    def step(self, tokens: Tensor) -> Tensor:
        if self.cancelled.is_set():
            raise Cancelled()
        return self.decoder.step(tokens)


# -- checkpoints ----------------------------------------------------------------------------------


def training_checkpoint(engine: Engine, body: None, cancelled: threading.Event) -> wire.TrainingCheckpointResult:
    ckpt = wire.TrainingCheckpoint(id=f"ckpt-train-{uuid.uuid4().hex[:12]}", step=engine.step, created_at=_now())
    path = engine.store.path_for(f"{ckpt.id}.pt")
    meta = {**engine.meta, "sample_rng": engine.sample_rng.get_state()}  # unseeded samples go on after a resume
    checkpoints.save_training(path, engine.trainer, engine.optim.state_dict(), engine.step, meta)
    engine.store.paths[ckpt.id] = path
    engine.training_checkpoints.append(ckpt)
    return wire.TrainingCheckpointResult(checkpoint=ckpt)


def inference_checkpoint(engine: Engine, body: None, cancelled: threading.Event) -> wire.InferenceCheckpointResult:
    ckpt = wire.InferenceCheckpoint(id=f"ckpt-infer-{uuid.uuid4().hex[:12]}", step=engine.step, created_at=_now())
    path = engine.store.path_for(ckpt.id)
    checkpoints.save_inference(path, engine.adapter, engine.trainer, engine.step, engine.meta)
    engine.store.paths[ckpt.id] = path
    engine.inference_checkpoints.append(ckpt)
    return wire.InferenceCheckpointResult(checkpoint=ckpt)


def _now() -> datetime:
    return datetime.now(UTC)


Handler = Callable[[Engine, Any, threading.Event], Any]
HANDLERS: dict[wire.OperationKind, Handler] = {
    wire.OperationKind.FORWARD_BACKWARD: forward_backward,
    wire.OperationKind.CUSTOM_FORWARD_BACKWARD: custom_forward_backward,
    wire.OperationKind.OPTIM_STEP: optim_step,
    wire.OperationKind.WEIGHTS_SYNC: weights_sync,
    wire.OperationKind.SAMPLE: sample,
    wire.OperationKind.TRAINING_CHECKPOINT: training_checkpoint,
    wire.OperationKind.INFERENCE_CHECKPOINT: inference_checkpoint,
}
"""Operation kind → handler. Every kind in ``wire.REQUEST_TYPES`` has one."""

"""What ``FakeBackend``'s operations check and return: the in-process engine's refusals (its codes and words) and the
fields of its results, without a model. Torch-free: the engine's own checks read tensors, so the ones a caller's
request trips (a loss's inputs, token ids, the other optimizer's params, sampling on a trainer-only session, a
non-finite loss or gradient) are made again over the body's plain lists, here and in ``fake_checks``."""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING

from rlnb import params as params_mod
from rlnb import wire
from rlnb.engine.refusals import TRAINER_ONLY, InvalidLossInput, check_given, check_read
from rlnb.engine.stops import StopMatcher
from rlnb.errors import GRADIENTS_KEPT, SUBMIT_AGAIN, OperationError
from rlnb.samples import LOGPROB_SLACK
from rlnb.testing import fake_checks
from rlnb.testing.fake_checks import read_sample
from rlnb.testing.fake_checks import refuse as _refuse
from rlnb.wire import OperationErrorCode as Code

if TYPE_CHECKING:
    from rlnb.testing.fake import FakeBackend

FAKE_LOGPROB = -1.0
"""The log-prob the fake gives every sampled token, every counted target and every prompt token after the first."""


def forward_backward(fake: FakeBackend, body: wire.ForwardBackwardBody) -> wire.ForwardBackwardResult:
    """The engine's refusals of the body, then ``fake.loss(step)``: ``NON_FINITE_LOSS`` where it is NaN or ±inf,
    as the engine (and the service) fail it; ``loss_fn_outputs`` when asked, ``FAKE_LOGPROB`` at counted targets."""
    problem = wire.loss_problem(body.loss)
    if problem is not None:
        raise _refuse(problem[1])
    loss_type = body.loss.type
    spec = wire.LOSSES[loss_type]
    inputs = [read_sample(fake, i, s) for i, s in enumerate(body.samples)]
    try:
        check_read(loss_type, [x for x, _ in inputs])
        beta = getattr(getattr(body.loss, spec.params_field) if spec.params_field else None, "beta", None)
        beta = spec.defaults.get("beta", 0.0) if beta is None else beta
        check_given(spec, beta, [x for x, _ in inputs])
        counted = [_counted(loss_type, spec, beta, i, x, n) for i, (x, n) in enumerate(inputs)]
    except InvalidLossInput as exc:
        raise _refuse(str(exc)) from None
    value = float(fake.loss(fake.step))
    if not math.isfinite(value):
        raise OperationError(Code.NON_FINITE_LOSS, f"loss is {value}; no gradients were accumulated")
    fake.accumulated = fake.accumulated or not body.forward_only
    outputs = None
    if body.return_loss_fn_outputs:
        outputs = [
            wire.LossFnOutput(
                tensors={"logprobs": wire.OutputTensor(data=[FAKE_LOGPROB if c else 0.0 for c in m], dtype="float32")}
            )
            for m in counted
        ]
    metrics: dict[str, float] = {wire.LossMetric.TOKENS: float(sum(map(sum, counted)))}
    return wire.ForwardBackwardResult(loss=value, metrics=metrics, loss_fn_outputs=outputs)


def custom_forward_backward(
    fake: FakeBackend, body: wire.CustomForwardBackwardBody
) -> wire.CustomForwardBackwardResult:
    """The engine's checks of the body (``fake_checks.custom_gradients``); then gradients are accumulated."""
    fake_checks.custom_gradients(fake, body)
    fake.accumulated = True
    return wire.CustomForwardBackwardResult()


def _counted(
    loss_type: str, spec: wire.LossSpec, beta: float, i: int, x: dict[str, wire.TensorData], n: int
) -> list[bool]:
    """Sample ``i``'s loss inputs (those it reads given: ``check_given``) checked in the engine's words
    (``rlnb.engine.loss_inputs.validate``), and the positions its loss counts: weights (or a policy loss's mask) not
    0, else every one."""
    reads = (*spec.required, *spec.optional)
    for key in reads:
        if key in x and len(x[key].data) != n:
            raise _refuse(f"sample {i}: input {key!r} must be 1-D of length {n} (the model input's), got "
                          f"({len(x[key].data)},)")  # fmt: skip
    mask = next((x[k] for k in ("weights", "mask") if k in x and k in reads), None)
    on = [True] * n if mask is None else [v != 0 for v in mask.data]
    if loss_type != wire.LOSS_CROSS_ENTROPY:  # the log-probs a policy loss reads are <= 0 where it reads them
        for key in ("logprobs", "reference_logprobs") if loss_type == wire.LOSS_GRPO and beta > 0 else ("logprobs",):
            at = next((j for j, v in enumerate(x[key].data) if on[j] and v > LOGPROB_SLACK), None)
            if at is not None:
                raise _refuse(f"sample {i}: input {key!r} is {x[key].data[at]:g} at position {at}: log-probabilities "
                              "are <= 0 (probabilities sent by mistake?)")  # fmt: skip
    return on


def optim_step(fake: FakeBackend, body: wire.OptimStepBody | None) -> wire.OptimStepResult:
    """The step's hyperparameters resolved and checked as the engine checks them (the other optimizer's params, an
    eps or a step size float32 weights cannot take: ``INVALID_INPUT``, the gradients kept), then the engine's
    metrics: ``fake.grad_norm`` as the pre-clip norm of the gradients accumulated since the last step, 0 where none
    were; a norm that is NaN or inf fails the step ``NON_FINITE_LOSS`` and drops them, as on the engine."""
    try:
        hp = params_mod.resolve(fake.optimizer, body if body is not None else wire.OptimStepBody())
        fake_checks.step_limits(hp)
    except ValueError as exc:
        raise OperationError(Code.INVALID_INPUT, f"{exc}{GRADIENTS_KEPT}{SUBMIT_AGAIN}") from None
    given = fake.grad_norm
    norm = float(given(fake.step) if callable(given) else given) if fake.accumulated else 0.0  # none: the engine's 0
    fake.accumulated = False
    if not math.isfinite(norm):
        raise OperationError(Code.NON_FINITE_LOSS, fake_checks.non_finite_gradients(norm))
    fake.step += 1
    clip = hp.grad_clip_norm
    coef = min(1.0, clip / (norm + 1e-6)) if clip > 0 else 1.0  # the engine's factor (0: clipping off)
    metrics = {"grad_norm": norm, "grad_clip_norm": clip, "clip_coef": coef, "learning_rate": hp.learning_rate}
    if isinstance(hp, params_mod.MuonHyperparams):  # the groups' shares: equal, their root sum of squares the norm
        metrics |= {"grad_norm/muon": norm / math.sqrt(2), "grad_norm/adam": norm / math.sqrt(2)}
        metrics["adam/learning_rate"] = hp.adam.learning_rate
    return wire.OptimStepResult(step=fake.step, metrics=metrics)


def sample(fake: FakeBackend, body: wire.SampleBody) -> wire.SampleOutput:
    """The request checked as the engine checks it (``fake_checks.sample_request``), then pseudo-random bytes
    (``FAKE_LOGPROB`` each) from the request's seed, else from the session's stream; greedy sampling
    (``fake_checks.greedy``) gives every completion of a prompt the same bytes, from the prompt and the weights version
    alone. Each is cut at a stop string as the engine cuts them (the token that completes it kept,
    ``STOP_REASON_STOP``)."""
    if fake.num_generator_replicas == 0:
        raise OperationError(Code.INVALID_INPUT, TRAINER_ONLY)
    sp, n, prompts = fake_checks.sample_request(fake, body)
    length, greedy = sp.max_tokens or wire.DEFAULT_MAX_TOKENS, fake_checks.greedy(sp)
    rng = random.Random(sp.seed if sp.seed is not None else fake.sample_rng.getrandbits(62))  # drawn when greedy too
    results = []
    for prompt in prompts:
        if greedy:
            one = _sequence(fake, random.Random(f"{fake.weights_version}:{prompt}"), length, sp.stop or ())
            seqs = [one.model_copy(deep=True) for _ in range(n)]
        else:
            seqs = [_sequence(fake, rng, length, sp.stop or ()) for _ in range(n)]
        segments = [wire.PolicyVersionSegment(start_token=0, version=fake.weights_version)]
        result = wire.SampleResult(policy_segments=segments, sequences=seqs)
        if body.prompt_logprobs or body.topk_prompt_logprobs:
            result.prompt_logprobs = [0.0] + [FAKE_LOGPROB] * (len(prompt) - 1)
            if body.topk_prompt_logprobs:
                result.topk_prompt_logprobs = [wire.PromptTopLogprobs()] + [
                    _top(t, body.topk_prompt_logprobs, fake.vocab_size or 256) for t in prompt[1:]
                ]
        results.append(result)
    return wire.SampleOutput(results=results)


def _sequence(fake: FakeBackend, rng: random.Random, length: int, stop: list[str] | tuple[()]) -> wire.SampledSequence:
    matcher = StopMatcher(fake.codec, stop) if stop else None
    tokens: list[int] = []
    reason = wire.STOP_REASON_LENGTH
    while len(tokens) < length:
        tokens.append(rng.randrange(fake.vocab_size or 256))  # bytes: the codec's
        if matcher is not None and matcher.push(tokens[-1]):
            reason = wire.STOP_REASON_STOP
            break
    return wire.SampledSequence(tokens=tokens, logprobs=[FAKE_LOGPROB] * len(tokens), stop_reason=reason)


def _top(token: int, k: int, vocab: int) -> wire.PromptTopLogprobs:
    """``k`` ids, the prompt's own first, each at ``FAKE_LOGPROB``."""
    ids = [token, *(j for j in range(min(k, vocab)) if j != token)][: min(k, vocab)]
    return wire.PromptTopLogprobs(token_ids=ids, logprobs=[FAKE_LOGPROB] * len(ids))

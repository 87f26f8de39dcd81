"""The optim-step's handler (``rlnb.engine.handlers``' table holds it) and its parts: the body's hyperparameters
resolved once for a loop's one body, its metrics (batched trials report the same, ``rlnb.batched``) and its result
built without pydantic's validation. Apart from the other handlers as the step's hot path, cut to the fewest Python
calls (``tests/engine/test_step_calls.py`` counts them)."""

from __future__ import annotations

import threading

from rlnb import params as params_mod
from rlnb import wire
from rlnb.engine.optim.failures import NonFiniteGradient, StepFailed
from rlnb.engine.optim.trainer import StepStats
from rlnb.engine.state import Engine
from rlnb.errors import GRADIENTS_KEPT, SUBMIT_AGAIN, OperationError
from rlnb.wire import OperationErrorCode as Code


def optim_step(engine: Engine, body: wire.OptimStepBody, cancelled: threading.Event) -> wire.OptimStepResult:
    try:
        hp = step_hyperparams(engine, body)
    except ValueError as exc:  # the other optimizer's params, or an eps these weights cannot take
        raise OperationError(Code.INVALID_INPUT, f"{exc}{GRADIENTS_KEPT}{SUBMIT_AGAIN}") from None
    try:
        stats = engine.optim.step(hp, checked=True)  # just above
    except NonFiniteGradient as exc:
        engine.optim.zero_grad()
        raise OperationError(Code.NON_FINITE_LOSS, exc.dropped()) from None
    except StepFailed as exc:  # out of memory part way: ``handlers.classify`` says what it left
        engine.optim.zero_grad()
        if exc.half:  # refused from now on: what would step, publish or save it (``refusals.HALF_STEPPED_REFUSES``)
            engine.half_stepped = True
        raise
    engine.optim.zero_grad()
    engine.step += 1
    return optim_result(engine.step, optim_metrics(stats, hp))


_FLOAT = frozenset({float})
_NEW, _SET = object.__new__, object.__setattr__


def optim_result(step: int, metrics: dict[str, float]) -> wire.OptimStepResult:
    """``wire.OptimStepResult(step=step, metrics=metrics)``: built as pydantic's ``model_construct`` builds it, in one
    Python call, where ``step`` is an int in int64's range and every metric a float (the engine's own values: their
    validation would be 5 Python calls a step); anything else validated (an int metric becomes its float). Kept
    apart from validation, the one rule, for those calls: ``tests/engine/test_step_calls.py`` pins the two alike."""
    if type(step) is not int or not 0 <= step <= wire.INT64_MAX or not {*map(type, metrics.values())} <= _FLOAT:
        return wire.OptimStepResult(step=step, metrics=metrics)
    out: wire.OptimStepResult = _NEW(wire.OptimStepResult)
    _SET(out, "__dict__", {"step": step, "metrics": metrics})
    _SET(out, "__pydantic_fields_set__", {"step", "metrics"})
    _SET(out, "__pydantic_extra__", {})
    _SET(out, "__pydantic_private__", None)
    return out


def step_hyperparams(engine: Engine, body: wire.OptimStepBody) -> params_mod.Hyperparams:
    """``body``'s hyperparameters, resolved and checked for this session's optimizer (a ``ValueError`` saying why
    not). The same body object again, holding what it held (a loop's one ``hp``, for which ``session.bodies.StepParams``
    gives one body), takes the last ones: ~10 Python calls a step fewer. A body of other params classes (``rlnb serve``
    parses a new one a request) is resolved each time."""
    held = (dict(body.__dict__), params_mod.params_state(body.adam_params or body.muon_params))
    last = engine.resolved
    if last is not None and last[0] is body and held[1] is not None and last[1] == held:
        return last[2]
    hp = params_mod.resolve(engine.kind, body)
    engine.optim.check(hp)
    engine.resolved = (body, held, hp)
    return hp


def optim_metrics(stats: StepStats, hp: params_mod.Hyperparams) -> dict[str, float]:
    """An optim-step's extension metrics: pre-clip grad norm(s), clip threshold and factor, learning rate(s)."""
    metrics = {
        "grad_norm": stats.grad_norm,
        "grad_clip_norm": hp.grad_clip_norm,
        "clip_coef": stats.clip_coef,
        "learning_rate": stats.learning_rate,
    }
    # each extra one where it is set, in this order: ``if``s, where a comprehension would be a Python call a step
    if stats.grad_norm_muon is not None:
        metrics["grad_norm/muon"] = stats.grad_norm_muon
    if stats.grad_norm_adam is not None:
        metrics["grad_norm/adam"] = stats.grad_norm_adam
    if stats.adam_learning_rate is not None:
        metrics["adam/learning_rate"] = stats.adam_learning_rate
    return metrics

"""The learning-rate range test (Smith, "Cyclical Learning Rates", 2017; fastai's ``lr_find``).

Train for ``steps`` steps while the learning rate grows exponentially from ``start_lr`` to ``end_lr``,
record the objective at each step, and suggest the rate where the smoothed objective improves fastest
per decade of learning rate — before the best point, below where training goes wrong. It runs on a copy
of the session's current weights (a training checkpoint loaded into a new session with a fresh
optimizer; the session itself only saves that checkpoint), or on a fresh session when none is given.

On Muon both rates grow together at the ratio ``base`` has (AdamW / Muon): the AdamW part trains the
embeddings and head, and a sweep of Muon's rate alone measured the AdamW part's progress at a fixed rate
(on notebook 05 it suggested Muon 0.0026 where 0.05 works). Muon's rate is in the session's scaling
convention; ``rlnb.sweep.lr.muon`` converts between conventions. The rates (the default range, ``base`` at a
rate) are ``rates``'s, the curve and its suggestion ``curve``'s, the result ``result``'s ``LRFind``.
"""

from __future__ import annotations

import math
import reprlib
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlnb import _secrets, wire
from rlnb._options import take
from rlnb.engine.models.tiny import SIZES
from rlnb.errors import InvalidParams, OperationFailed, OperationTimeout, RlnbError
from rlnb.history import new_run_id
from rlnb.params import DECAY_RULE, MuonHyperparams, MuonParams, OptimizerParams, kind_of
from rlnb.session import Session, connect
from rlnb.tasks import SEED_STRIDE, Task, digits_task, rl_step
from rlnb.tasks.task import session_prompt_ids
from rlnb.wire import OPERATION_TIMEOUT

from ..new_prompts import check_new_session_prompts
from ..options import RangeTestOptions, StepFn, check_base, check_range_test, given
from ..trial import Objective
from .curve import DIVERGE, FLAT, SMOOTHING, Diverging, diverged_from, significant, smooth, spaced, suggest
from .rates import DEFAULT_RANGES, SCALING_NAMES, check_lrs, lr_range, range_key, with_lr
from .result import LRFind

__all__ = ["DEFAULT_RANGES", "FLAT", "SCALING_NAMES", "SMOOTHING", "LRFind", "lr_find", "significant", "with_lr"]

LOGGED: dict[str, str] = {"reward": "reward", "loss": "lr_find_loss"}
"""The name each objective is logged under (``loss`` is a column of the steps table already)."""


def lr_find(
    base: OptimizerParams,
    session: Session | None = None,
    *,
    stop: threading.Event | None = None,
    progress: Callable[[int, int], None] | None = None,
    range_test: RangeTestOptions | None = None,
    **options: Any,
) -> LRFind:
    """Run a range test with ``base``'s other fields, growing its ``learning_rate`` from ``start_lr`` to
    ``end_lr`` over ``steps`` steps (Muon: Muon's rate, and the ``adam`` part's with it at ``base``'s ratio).

    ``options`` are first the fields of ``RangeTestOptions`` by name (``start_lr``, ``end_lr``, ``steps``,
    ``task``, ``step_fn``, ``objective``, ``seed``; a name wins over ``range_test`` given whole), then
    ``connect``'s (``target``, ``runs_dir``, ``model``, ``threads``, ...) for the session the test runs on. Without
    ``runs_dir`` a session's copy records beside its run (nowhere when it records nothing), not in ./rlnb-runs.
    A step is one RL step of ``task`` (default: the digits task) reporting the mean reward or the loss
    (``objective``), or your ``step_fn(session, params, i)``. ``stop`` ends it early; ``progress(done,
    total)`` after each step. Nothing is applied anywhere.

    ``session``: its current weights are copied (a training checkpoint, loaded into a new session with a
    fresh optimizer: a local one in this process — pass ``model=`` for a custom ``nn.Module`` —, a remote
    one on the same service; ``api_key`` from ``options`` or ``TOGETHER_API_KEY``). Without a session, a
    fresh session from ``rlnb.connect(**options)`` (``target`` "local" unless given).

    Every option is checked before anything is opened or sent: ``steps`` in ``RANGE_TEST_STEPS``,
    0 < start_lr < end_lr (a default that depends on a new remote Muon session's scaling: once that session
    is open).
    """
    check_base(base, session, stop, progress)
    _secrets.hide_option(options)  # first: no traceback's locals show the key
    test = take(RangeTestOptions, options, range_test)
    start_lr, end_lr, steps, objective, seed, step_fn = (
        test.start_lr,
        test.end_lr,
        test.steps,
        test.objective,
        test.seed or 0,
        test.step_fn,
    )
    target, runs_dir = options.pop("target", "local"), options.pop("runs_dir", None)
    kind = kind_of(base)
    resolved = base.resolved()
    ratio = resolved.adam.learning_rate / resolved.learning_rate if isinstance(resolved, MuonHyperparams) else None
    check_lrs(start_lr, end_lr, range_key(kind, session, target, options))  # before anything is opened or sent
    local = session.history.config.get("backend") != "remote" if session else target == "local"
    check_range_test(test, local, options, copied=session is not None)
    if step_fn is None:  # a bad prompt would fail the first step, the session copied (or a new one opened) by then
        _check_prompts(test.task or digits_task(), session, target, options)
    trial = _open(kind, session, target, seed, runs_dir, options)
    scaling = SCALING_NAMES.get(str(trial.history.config.get("muon_scaling")), trial.history.config.get("muon_scaling"))
    scaling = scaling if kind == "muon" else None
    try:  # checked above, unless a default is a new remote Muon session's: its scaling is the service's choice
        start_lr, end_lr = lr_range(start_lr, end_lr, scaling or "adam")
    except ValueError:
        trial.close()
        raise
    the_task = test.task or digits_task()
    run = step_fn or _rl_step(the_task, objective, seed)
    logs = step_fn is not None or objective != "reward"  # rl_step logs the reward itself: not twice a step
    lrs = spaced(start_lr, end_lr, steps)
    values: list[float] = []
    diverging = Diverging(objective)
    ended, hung, interrupted, failure, late = "", False, False, None, ""
    cut_short = False  # stopped short of end_lr by the user or an error, not by the curve (a divergence, the decay)
    try:
        for i, lr in enumerate(lrs):
            if stop is not None and stop.is_set():
                ended, cut_short = f"stopped after {i} steps", True
                break
            try:
                at_lr = with_lr(base, lr)
                if step_fn is None:  # rl_step's check first: the session's weights' limits (a step past float32)
                    trial.check_params(at_lr)
            except InvalidParams as exc:  # past it, base's decay would erase the weights: the range ends here
                if i == 0 or not any(DECAY_RULE in rule for *_, rule in exc.errors):
                    raise
                ended = f"stopped at lr {lr:.3g}: {exc}"
                break
            except ValueError as exc:  # as the decay's: the range ends at the first rate refused, nothing sent
                if i == 0:
                    raise
                ended = f"stopped at lr {lr:.3g}: {exc}"
                break
            try:
                value = _number(run(trial, at_lr, i), i, lr)
            except OperationFailed as exc:
                ended = f"{wire.short_name(exc.code or wire.OperationStatus.FAILED.name)} at lr {lr:.3g}"
                break
            except InvalidParams:
                raise
            except RlnbError as exc:  # the session closed, timed out, or the service failed: the steps measured stand
                ended, cut_short = f"{type(exc).__name__} at lr {lr:.3g}: {exc}", True
                hung = isinstance(exc, OperationTimeout)  # no wait for what timed out: the close stops it
                break
            values.append(value)
            trial.history.log(trial.step, **({LOGGED[objective]: value} if logs else {}), lr_find_lr=lr)
            if progress is not None:
                progress(i + 1, steps)
            if not math.isfinite(value) and i == 0:  # measured before any rate had moved the weights
                ended = (f"the {objective} was {value} at the first step, before any rate had acted: the model or "
                         "the objective is broken from the start, not diverged by a rate")  # fmt: skip
                break
            if not math.isfinite(value):
                ended = f"diverged at lr {lr:.3g} ({objective} {value})"
                break
            if diverging(value):
                ended = f"diverged at lr {lr:.3g}"
                break
    except KeyboardInterrupt:  # Ctrl-C, as ``stop``, in a step, the log or ``progress``: the steps measured stand
        ended, interrupted, cut_short = f"interrupted after {len(values)} steps", True, True
    except Exception as exc:  # the user's step_fn or progress (or a rate refused): raised below, with the result
        ended, failure, cut_short = f"{type(exc).__name__} after {len(values)} steps: {exc}", exc, True
    finally:
        try:
            if not hung:
                trial.wait(wait_deadline(trial))
        except KeyboardInterrupt:
            late, interrupted = "; interrupted in the wait for the copy's last operations", True
        except OperationTimeout as exc:  # a hung step: the close stops it
            late = f"; not waited for: {exc} (lr_find waits as long as an operation may take)"
        finally:  # a second Ctrl-C in the wait, or its error, left the copy open (remote: a paid session running)
            try:
                trial.close()
            except KeyboardInterrupt:  # as it stands after a Ctrl-C that propagated, but the result is kept
                late, interrupted = f"{late}; interrupted while the copy closed: it may still be open", True
    # A non-finite last value (only the last: it ends the run) stays in ``values`` but not in the curve: one
    # NaN or inf in the EMA would make every smoothed point NaN (or inf), read as "flat" with no suggestion.
    curve = values if not values or math.isfinite(values[-1]) else values[:-1]
    n = diverged_from(curve, objective)  # the curve judged: up to where a loss diverged
    smoothed = smooth(smooth(curve[:n])[::-1])[::-1] + [math.nan] * (len(values) - n)  # no lag
    measured, why = suggest(lrs[:n], smoothed[:n], objective, curve[:n], cut_short and n == len(curve))
    if n < len(curve):
        why += (f"; judged up to lr {lrs[n - 1]:.3g}: at lr {lrs[n]:.3g} the {objective} was over {DIVERGE:g}× its "
                "lowest (diverging)")  # fmt: skip
    params = with_lr(base, measured, rounded=True) if measured is not None else None
    suggestion = params.learning_rate if params is not None else None
    reason = why + (f"; ended early: {ended}" if ended else "")
    if isinstance(params, MuonParams) and ratio is not None:
        reason += f"; AdamW part at {ratio:.2g}× it: {params.resolved().adam.learning_rate}"
    path = str(trial.history.path) if trial.history.path else None
    found = LRFind(lrs[: len(values)], values, smoothed, suggestion, objective, kind, scaling, reason + late, path)
    found.adam_ratio, found.params, found.interrupted = ratio, params, interrupted
    if failure is not None:  # the error names the run folder, so the steps measured are not lost with the traceback
        where = f"in the run folder {path}" if path else "(no run folder: record=False)"
        failure.add_note(f"lr_find: the {len(values)} steps measured before this error are kept {where} and "
                         "as this exception's lr_find attribute (an LRFind)")  # fmt: skip
        setattr(failure, "lr_find", found)  # noqa: B010 (an attribute no exception type declares)
        raise failure
    return found


def wait_deadline(session: Session) -> float:
    """How long lr_find waits for a session's operations (a checkpoint, a copy's last steps): a remote session's
    ``operation_timeout`` (its poller fails them then), else as long (a local engine has no limit of its own)."""
    return float(getattr(session.backend, "operation_timeout", OPERATION_TIMEOUT))


def _number(raw: Any, i: int, lr: float) -> float:
    """A step's objective as a float; anything else (None from a ``step_fn`` without ``return``, a dict of
    metrics, a flag) is a ``TypeError`` naming ``step_fn``, not float()'s "must be a string or a real number"."""
    try:
        if isinstance(raw, bool | str | bytes):
            raise TypeError
        return float(raw)
    except (TypeError, ValueError, OverflowError, RuntimeError):  # 10**400; a tensor of many elements
        raise TypeError(f"step_fn returned {reprlib.repr(raw)} at step {i} (lr {lr:.3g}): it must return the "
                        "objective, a number a float holds") from None  # fmt: skip


def _check_prompts(task: Task, session: Session | None, target: str, options: dict[str, Any]) -> None:
    """The task's prompts as the test's session will read them, each refused naming it (``task 'x': prompts[i]``)
    where that reading is known before anything opens: a session's own codec, vocabulary and context (its copy's
    unless ``options`` give another tokenizer), or a new session's (``check_new_session_prompts``: a built-in or
    Hugging Face model, a remote ``base_model``); other models' first step refuses them. A session without a tokenizer
    is checked too (its copy reads token ids, no text): skipped while ``session_prompt_ids`` named no prompt there,
    the session was copied before the first step refused its text; the panel's check never skipped it."""
    if session is None:
        check_new_session_prompts(task, target, options)
    elif given(options, "tokenizer", None) is None:
        session_prompt_ids(task, session)


def _rl_step(task: Task, objective: Objective, seed: int) -> StepFn:
    def step(session: Session, params: OptimizerParams, i: int) -> float:
        report = rl_step(session, task, params, seed=seed * SEED_STRIDE + i)
        return report.reward if objective == "reward" else report.loss

    return step


def _open(
    kind: str, session: Session | None, target: str, seed: int, runs_dir: str | Path | None, options: dict[str, Any]
) -> Session:
    from ..trial import own_modules  # each model= module is copied: the test never trains the caller's

    record: dict[str, Any] = {"runs_dir": runs_dir, "run_id": new_run_id("lr-find")}
    if session is not None and runs_dir is None:  # where the session records, not ./rlnb-runs wherever Python runs
        if session.history.path is not None:
            record["runs_dir"] = session.history.path.parent
        elif "record" not in options:  # a session kept in memory only: its copy too
            record["record"] = False
    if session is None:
        extra: dict[str, Any] = {"seed": seed} if target == "local" else {}
        return connect(target, optimizer=kind, **record, **extra, **own_modules(options))
    if session.optimizer != kind:
        raise ValueError(f"the session's optimizer is {session.optimizer}; pass {session.optimizer} params")
    config = session.history.config
    model = str(config.get("model", "")).removeprefix("rlnb/")
    remote = config.get("backend") == "remote"
    if not remote and "model" not in options and model not in SIZES and not Path(model).is_dir():
        raise ValueError("lr_find copies a session on a custom model into model=<a fresh instance of it>; pass model=")
    wait = wait_deadline(session)
    try:  # after every step submitted so far
        ckpt = session.save_training_checkpoint().result(timeout=wait).checkpoint
    except OperationTimeout:  # it waited with no limit behind a hung step
        raise OperationTimeout(f"lr_find: the session's training checkpoint (the weights to copy) was not saved "
                               f"within {wait:g} s, the longest an operation may take: is a step hung? Nothing was "
                               "opened") from None  # fmt: skip
    if remote:
        fresh = {
            "base_model": config.get("model"),
            "muon_scaling": config.get("muon_scaling"),
            "lora": config.get("lora"),
            "resume_from_checkpoint_id": ckpt.id,
            "load_optimizer": False,
            **options,
        }
        return connect(str(config["base_url"]), optimizer=kind, **record, **fresh)
    copy = {
        "model": model if model in SIZES else config.get("model"),
        "muon_scaling": config.get("muon_scaling") if kind == "muon" else None,  # an Adam session refuses one
        "lora": config.get("lora"),
        "device": config.get("device", "auto"),
        "seed": config.get("seed", 0),  # the session's: it builds a LoRA checkpoint's base (the test's seeds its steps)
        **own_modules(options),
    }
    try:
        return connect(
            "local",
            optimizer=kind,
            resume_from=session.backend.checkpoint_path(ckpt.id),  # type: ignore[attr-defined]
            load_optimizer=False,
            **record,
            **copy,
        )
    finally:  # loaded (or refused): a copy nobody asked to keep, GBs on a real model at every Find LR click
        try:
            session.backend.discard_checkpoint(ckpt.id)  # type: ignore[attr-defined]
        except OSError as exc:  # the test goes on (or its own error is raised); the copy left behind is named
            warnings.warn(f"Find LR: {exc.strerror}", RuntimeWarning, stacklevel=3)

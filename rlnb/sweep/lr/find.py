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
rate) are ``rates``'s, the steps ``measure``'s, the curve and its suggestion ``curve``'s, the result
``result``'s ``LRFind``.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlnb import wire
from rlnb._input.options import take
from rlnb.engine.models.tiny import SIZES
from rlnb.errors import OperationTimeout
from rlnb.history import new_run_id
from rlnb.history.runconfig import LOCAL
from rlnb.params import MuonHyperparams, MuonParams, OptimizerParams, kind_of
from rlnb.secrets import redaction
from rlnb.session import Session, connect
from rlnb.session.connect import keywords
from rlnb.tasks import SEED_STRIDE, Task, VerifiedTask, digits_task, rl_step
from rlnb.tasks.task import session_prompt_ids
from rlnb.wire import OPERATION_TIMEOUT

from ..new_prompts import check_new_session_prompts
from ..options import RangeTestOptions, StepFn, check_base, check_range_test, given
from ..trial import Objective
from .curve import DIVERGE, FLAT, SMOOTHING, at_chance, diverged_from, significant, smooth, spaced, suggest
from .measure import LOGGED, Measured, measure
from .rates import DEFAULT_RANGES, SCALING_NAMES, check_lrs, check_rates, lr_range, range_key, with_lr
from .result import LRFind

__all__ = ["DEFAULT_RANGES", "FLAT", "SCALING_NAMES", "SMOOTHING", "LRFind", "lr_find", "significant", "with_lr"]


def lr_find(
    base: OptimizerParams,
    session: Session | None = None,
    *,
    stop: threading.Event | None = None,
    progress: Callable[[int, int], None] | bool | None = None,
    range_test: RangeTestOptions | None = None,
    opened: Callable[[Session], None] | None = None,
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
    total)`` after each step (False or None: nothing, as ``sweep``'s False; it draws no bar); ``opened(session)``
    with the session the test runs on, once it is open, before its first step (the widgets' Find LR follows a
    remote one's server there). Nothing is applied anywhere.

    ``session``: its current weights are copied (a training checkpoint, loaded into a new session with a
    fresh optimizer: a local one in this process — pass ``model=`` for a custom ``nn.Module`` —, a remote
    one on the same service; ``api_key`` from ``options`` or ``TOGETHER_API_KEY``). Without a session, a
    fresh session from ``rlnb.connect(**options)`` (``target`` "local" unless given).

    Every option is checked before anything is opened or sent: ``steps`` in ``RANGE_TEST_STEPS``,
    0 < start_lr < end_lr and ``base`` at start_lr within its rules (a default that depends on a new remote Muon
    session's scaling: once that session is open; refused, it is closed and its run folder removed).
    """
    check_base(base, session, stop, None if progress is False else progress, opened)  # False: no bar; True refused
    report = None if isinstance(progress, bool) else progress
    redaction.hide_option(options)  # first: no traceback's locals show the key
    test = take(RangeTestOptions, options, range_test)
    start_lr, end_lr, steps, objective, seed, step_fn = (
        test.start_lr,
        test.end_lr,
        test.steps,
        test.objective,
        test.seed or 0,
        test.step_fn,
    )
    own = sorted(set(options) & OWN_RUN)
    if own:  # the test's steps would go to a run of the user's, which a refused range then removed
        raise TypeError(f"lr_find records its range test in a run of its own (an lr-find run id): {', '.join(own)} "
                        "cannot be given; runs_dir= says where")  # fmt: skip
    target, runs_dir = options.pop("target", LOCAL), options.pop("runs_dir", None)
    local = not session.is_remote if session else target == LOCAL
    _refuse_unknown(options, local)
    kind = kind_of(base)
    resolved = base.resolved()
    ratio = resolved.adam.learning_rate / resolved.learning_rate if isinstance(resolved, MuonHyperparams) else None
    check_lrs(base, start_lr, end_lr, range_key(kind, session, target, options))  # before anything is opened or sent
    check_range_test(test, local, options, copied=session is not None)
    if step_fn is None:  # a bad prompt would fail the first step, the session copied (or a new one opened) by then
        _check_prompts(test.task or digits_task(), session, target, options)
    trial = _open(kind, session, target, seed, runs_dir, options)
    scaling = SCALING_NAMES.get(str(trial.history.config.get("muon_scaling")), trial.history.config.get("muon_scaling"))
    scaling = scaling if kind == wire.MUON else None
    try:  # checked above, unless a default is a new remote Muon session's: its scaling is the service's choice
        start_lr, end_lr = lr_range(start_lr, end_lr, scaling or wire.ADAM)
        check_rates(base, start_lr, end_lr)
    except ValueError as refused:
        trial.close()
        _remove_run(trial.history.path, refused)
        raise
    if opened is not None:
        try:
            opened(trial)
        except BaseException:  # the copy was open (remote: a paid session running)
            trial.close()
            raise
    the_task = test.task or digits_task()
    run = step_fn or _rl_step(the_task, objective, seed)
    logged = LOGGED[objective] if step_fn is not None or objective != "reward" else None  # rl_step logs the reward
    lrs = spaced(start_lr, end_lr, steps)
    measured = measure(trial, run, base, lrs, objective, logged, stop, report, wait_deadline(trial), step_fn is None)
    chance = the_task.chance if isinstance(the_task, VerifiedTask) and step_fn is None else None
    found = _judged(base, lrs, measured, objective, kind, scaling, ratio, trial.history.path, chance)
    if measured.failure is not None:  # the error names the run folder: the steps measured are not lost with it
        where = f"in the run folder {found.run_path}" if found.run_path else "(no run folder: record=False)"
        measured.failure.add_note(f"lr_find: the {len(measured.values)} steps measured before this error are kept "
                                  f"{where} and as this exception's lr_find attribute (an LRFind)")  # fmt: skip
        setattr(measured.failure, "lr_find", found)  # noqa: B010 (an attribute no exception type declares)
        raise measured.failure
    return found


def _judged(
    base: OptimizerParams,
    lrs: list[float],
    measured: Measured,
    objective: Objective,
    kind: wire.OptimizerKind,
    scaling: wire.MuonScaling | None,
    ratio: float | None,
    path: Path | None,
    chance: float | None = None,
) -> LRFind:
    """The result of the steps ``measured`` at ``lrs``: the curve smoothed without lag, judged up to where a loss
    diverged, the suggestion (``base`` at the suggested rate, rounded) and why, whether the reward rose only to
    ``chance`` (a ``VerifiedTask``'s), and why the test ended early."""
    values = measured.values
    # A non-finite last value (only the last: it ends the run) stays in ``values`` but not in the curve: one
    # NaN or inf in the EMA would make every smoothed point NaN (or inf), read as "flat" with no suggestion.
    curve = values if not values or math.isfinite(values[-1]) else values[:-1]
    n = diverged_from(curve, objective)  # the curve judged: up to where a loss diverged
    smoothed = smooth(smooth(curve[:n])[::-1])[::-1] + [math.nan] * (len(values) - n)  # no lag
    found, chosen = suggest(lrs[:n], smoothed[:n], objective, curve[:n], measured.cut_short and n == len(curve))
    why = chosen
    if n < len(curve):
        why += (f"; judged up to lr {lrs[n - 1]:.3g}: at lr {lrs[n]:.3g} the {objective} was over {DIVERGE:g}× its "
                "lowest (diverging)")  # fmt: skip
    constant = at_chance(smoothed[:n], chance) if objective == "reward" else ""
    why += f"; {constant}" if constant else ""
    params = with_lr(base, found, rounded=True) if found is not None else None
    suggestion = params.learning_rate if params is not None else None
    reason = why + (f"; ended early: {measured.ended}" if measured.ended else "")
    if isinstance(params, MuonParams) and ratio is not None:
        reason += f"; AdamW part at {ratio:.2g}× it: {params.resolved().adam.learning_rate}"
    where = str(path) if path else None
    result = LRFind(lrs[: len(values)], values, smoothed, suggestion, objective, kind, scaling, reason + measured.late,
                    where)  # fmt: skip
    result.adam_ratio, result.params, result.interrupted = ratio, params, measured.interrupted
    result.chance = chance if objective == "reward" else None
    result.chosen, result.ended, result.at_chance = chosen, measured.ended or None, constant or None
    return result


OWN_RUN = frozenset({"history", "run_id"})
"""``connect`` keywords lr_find sets itself: its range test is a run of its own."""


def _refuse_unknown(options: dict[str, Any], local: bool) -> None:
    """``TypeError`` naming a keyword that is neither lr_find's nor its session's, with both lists: passed on to
    ``connect``, a misspelt ``steps`` was blamed on ``LocalBackend()``, an internal class the caller never named."""
    unknown = sorted(set(options) - keywords(LOCAL if local else "remote"))
    if unknown:
        own = [f.name for f in dataclasses.fields(RangeTestOptions)]
        own += ["stop", "progress", "range_test", "opened", "target", "runs_dir"]
        session = sorted(keywords(LOCAL if local else "remote") - OWN_RUN - {"optimizer"})
        where = "a local session" if local else "a remote session"
        raise TypeError(
            f"lr_find got unexpected keyword argument(s): {', '.join(unknown)}; its options are {', '.join(own)}, "
            f"and those of {where} (rlnb.connect): {', '.join(session)}"
        )


def _remove_run(path: Path | None, refused: ValueError) -> None:
    """The run folder of a session opened only to learn its Muon scaling, no step in it (only one lr_find named:
    never a user's); one left is named."""
    try:
        if path is not None and "-lr-find-" in path.name:
            shutil.rmtree(path)
    except OSError as exc:
        refused.add_note(f"lr_find: its run folder, with no step in it, was left at {path}: {exc}")


def wait_deadline(session: Session) -> float:
    """How long lr_find waits for a session's operations (a checkpoint, a copy's last steps): a remote session's
    ``operation_timeout`` (its poller fails them then), else as long (a local engine has no limit of its own)."""
    return float(getattr(session.backend, "operation_timeout", OPERATION_TIMEOUT))


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
        extra: dict[str, Any] = {"seed": seed} if target == LOCAL else {}
        return connect(target, optimizer=kind, **record, **extra, **own_modules(options))
    if session.optimizer != kind:
        raise ValueError(f"the session's optimizer is {session.optimizer}; pass {session.optimizer} params")
    config = session.history.config
    model = str(config.get("model", "")).removeprefix("rlnb/")
    if not session.is_remote and "model" not in options and model not in SIZES and not Path(model).is_dir():
        raise ValueError("lr_find copies a session on a custom model into model=<a fresh instance of it>; pass model=")
    wait = wait_deadline(session)
    try:  # after every step submitted so far
        ckpt = session.save_training_checkpoint().result(timeout=wait).checkpoint
    except OperationTimeout:  # it waited with no limit behind a hung step
        raise OperationTimeout(f"lr_find: the session's training checkpoint (the weights to copy) was not saved "
                               f"within {wait:g} s, the longest an operation may take: is a step hung? Nothing was "
                               "opened") from None  # fmt: skip
    if session.is_remote:
        fresh = {**_remote_copy(session), "resume_from_checkpoint_id": ckpt.id, "load_optimizer": False, **options}
        return connect(str(config["base_url"]), optimizer=kind, **record, **fresh)
    copy = {  # its dtype, tokenizer, LoRA, ...: the copy of a bfloat16 session trained in float32
        "model": model if model in SIZES else config.get("model"),
        **session.backend.reopen_options(),  # type: ignore[attr-defined]
        **own_modules(options),
    }
    try:
        return connect(
            LOCAL,
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


def _remote_copy(session: Session) -> dict[str, Any]:
    """What the remote ``connect`` of ``session`` took that shapes its model and session, as ``connect`` takes it
    (the local branch's ``reopen_options``): its model, Muon scaling, LoRA and sampler copies, and its tokenizer
    (an object: not loaded again), without which the copy of an ``rlnb/...`` session encoded text as bytes and
    another model's took token ids only."""
    config = session.history.config
    shaped = {"base_model": config.get("model"), "muon_scaling": config.get("muon_scaling"), "lora": config.get("lora")}
    if config.get("num_generator_replicas") is not None:
        shaped["num_generator_replicas"] = config["num_generator_replicas"]
    if session.tokenizer is not None:
        shaped["tokenizer"] = session.tokenizer
    return shaped

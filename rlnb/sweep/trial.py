"""One trial: a training run of one (config, seed) for a number of RL steps, summarised as a row.

``run_trial`` is the same code on every executor (a thread here, a Ray worker elsewhere). It asks
its ``Control`` before each step whether the sweep is stopping, and reports the objective after each
step so that a pruner can end it early. Failures are data: the row says FAILED / STOPPED / PRUNED
and why, and what ran is in the trial's history.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from torch import nn

from rlnb.batched.reasons import failed_with, failure_reason
from rlnb.engine.options import MUON_ONLY
from rlnb.errors import OperationFailed, RateLimitError, describe
from rlnb.history import History
from rlnb.history.runconfig import LOCAL
from rlnb.params import OptimizerParams, kind_of
from rlnb.params.schedule import Schedule
from rlnb.session import Session, connect
from rlnb.tasks import SEED_STRIDE, Task, rl_step
from rlnb.tasks.exact import finite_mean
from rlnb.wire import MUON, OperationErrorCode, OptimizerKind, TrialStatus

from .applying import label
from .slot import Control, KeptResource, SlotWait, Stopped, paused

RATE_LIMIT_WAIT = (0.2, 5.0)
"""Seconds to wait before retrying a session the provider refused with 429 (doubling, capped)."""
SLOT_TIMEOUT = 3600.0
"""Seconds a trial waits for a session slot (the provider answering 429) before it fails, by default: a provider that
refused for ever (a resource whose one slot stayed taken) held the trial, and the sweep, without end."""
REWARD_WINDOW = 5
"""``final_reward`` is the mean over the last this-many steps (one step's reward is noisy)."""
Objective = Literal["reward", "loss"]
"""What a trial reports per step and is judged by: the mean reward (maximised) or the loss (minimised),
each as the mean over the last ``REWARD_WINDOW`` steps."""
TERMINAL = tuple(TrialStatus)
"""Every status a trial's row can end with."""
RESULT_COLUMNS = frozenset(
    {"trial", "variant", "label", "seed", "status", "reason", "steps_done", "final_loss", "best_loss", "final_reward",
     "best_reward", "value", "run_path", "wall_s", "executor", "host", "not_batched", "diverged_at"}
)  # fmt: skip
"""Every column of a trial's row that is not part of its config (the config's own fields are the others)."""
LOSS_IS_NOISE = (
    "a sweep trial's loss is the on-policy GRPO loss of its RL step, ~1e-10 at every rate (float "
    "rounding, which ranks configs by noise)"
)
LOSS_COLUMNS = ("final_loss", "best_loss")
"""Kept in the table, never ranked: ``LOSS_IS_NOISE`` (``ablate`` refuses them as its metric, ``search_plot`` stars
neither)."""
BEST_IS_HIGHEST = {"final_reward": True, "best_reward": True, "wall_s": False}
"""Whether a result column's best trial is its highest (a reward) or lowest (a loss, a time): ``search_plot``'s star.
``value`` is as its objective says; the others (``steps_done``, ``seed``) have no better end."""
METRIC_COLUMNS = ("final_reward", "best_reward", "value", "final_loss", "best_loss", "steps_done", "wall_s")
"""The numbers every trial's row has: what ``ablate`` can summarise, known before anything runs."""


@dataclass
class TrialSpec:
    """Everything a trial needs, picklable so that it can travel to a Ray worker."""

    trial: int
    config: dict[str, Any]
    params: OptimizerParams
    seed: int
    run_id: str
    steps: int
    task: Task
    target: str = LOCAL
    options: dict[str, Any] = field(default_factory=dict)
    schedule: Schedule | None = None
    objective: Objective = "reward"
    variant: str | None = None
    """The config's name (``ablate``'s variants): a ``variant`` column of the row and a field of its run."""
    slot_timeout: float = SLOT_TIMEOUT
    """Seconds to wait for a session slot (``TrialOptions.slot_timeout``)."""

    @property
    def kind(self) -> OptimizerKind:
        return kind_of(self.params)

    @property
    def session_options(self) -> dict[str, Any]:
        """``options`` as this trial's session takes them: a sweep's ``MUON_ONLY`` options are for its Muon trials
        (an Adam session refuses them: a sweep over both optimizers had its Adam trials FAILED)."""
        return {k: v for k, v in self.options.items() if self.kind == MUON or k not in MUON_ONLY}


def identity(spec: TrialSpec) -> dict[str, Any]:
    """The columns of a trial's row that its sweep decides (number, variant, label, config, seed): a resume
    checks a recorded row's against them."""
    named = {"variant": spec.variant} if spec.variant is not None else {}
    return {"trial": spec.trial, **named, "label": label(spec.config), **spec.config, "seed": spec.seed}


def base_row(spec: TrialSpec, status: str, reason: str | None = None) -> dict[str, Any]:
    """The identifying columns of a trial's row (also the whole row of a trial that never ran)."""
    return {**identity(spec), "status": status, "reason": reason, "steps_done": 0}


def objective_value(objective: Objective, rewards: list[float], losses: list[float]) -> float:
    """The objective so far: the mean of the last ``REWARD_WINDOW`` steps' reward (or loss)."""
    values = rewards if objective == "reward" else losses
    window = [v for v in values[-REWARD_WINDOW:] if math.isfinite(v)]
    return finite_mean(window) if window else math.nan  # fmean overflowed past 1e308


def run_annotations(spec: TrialSpec, runs_dir: Path) -> dict[str, Any]:
    """What a trial's run adds to its ``config.json``: its label (and variant), number, config and sweep."""
    named = {"variant": spec.variant} if spec.variant is not None else {}
    return {"label": label(spec.config), **named, "trial": spec.trial, "sweep_config": spec.config,
            "sweep": runs_dir.name}  # fmt: skip


def step_params(spec: TrialSpec, step: int) -> OptimizerParams:
    """The params a trial sends at ``step`` (its schedule applied)."""
    return spec.params.scaled(spec.schedule.multiplier(step)) if spec.schedule else spec.params


def run_trial(spec: TrialSpec, runs_dir: Path, control: Control) -> dict[str, Any]:
    """Run the trial, recording its history under ``runs_dir / spec.run_id``; return its row."""
    row = base_row(spec, TrialStatus.COMPLETED)
    start = time.perf_counter()
    session = None
    rewards: list[float] = []
    losses: list[float] = []
    try:
        session = _open(spec, runs_dir, control)
        session.history.annotate(**run_annotations(spec, runs_dir))
        for i in range(spec.steps):
            if control.stopping():
                row.update(status=TrialStatus.STOPPED, reason=f"stopped after {i} of {spec.steps} steps")
                break
            report = rl_step(session, spec.task, step_params(spec, i), seed=spec.seed * SEED_STRIDE + i)
            rewards.append(report.reward)
            losses.append(report.loss)  # rl_step logged the reward and the other RL metrics
            verdict = control.report(i + 1, objective_value(spec.objective, rewards, losses))
            if verdict is not None and i + 1 < spec.steps:
                row.update(status=TrialStatus.PRUNED, reason=verdict)
                break
    except OperationFailed as exc:
        row.update(status=TrialStatus.FAILED, reason=failure_reason(exc.code, exc.message))
    except Stopped as exc:  # with its notes (a resource kept running, named)
        row.update(
            status=TrialStatus.STOPPED,
            reason="; ".join(["stopped while waiting for a session", *getattr(exc, "__notes__", ())]),
        )
    except BaseException as exc:  # noqa: BLE001 - a failed trial is a row
        # a trial runs on a thread or in a Ray task, never on the thread a Ctrl-C reaches: a KeyboardInterrupt,
        # sys.exit() or another BaseException (a library's own, a GeneratorExit) here is the trial's own code (a
        # reward). Raised on a thread it would drop the trial's row and stop (or end) the sweep, or (another) lose
        # the row's history; in a Ray task it would be a STOPPED "cancelled" row, or a crashed worker
        row.update(status=TrialStatus.FAILED, reason=describe(exc))  # an exception whose str() raises keeps its row
    finally:
        if session is not None:
            session.wait()
            _close(session, row)
    history = session.history if session is not None else None
    row.update(summary(history, rewards, losses, spec.objective, row["reason"]))
    row["wall_s"] = time.perf_counter() - start
    return row


def _close(session: Session, row: dict[str, Any]) -> None:
    """Close the trial's session; a close that fails (the server gone: its stop unanswered) is said in the row's
    reason, with what may still run remotely, and the row is kept: raised, it replaced the row (steps_done 0, no
    run_path, the trial's own failure lost)."""
    try:
        session.close()
    except Exception as exc:  # noqa: BLE001 - the trial's row stands; the close's error goes with it
        said = f"its session's close failed: {describe(exc)}"
        row["reason"] = f"{row['reason']}; {said}" if row["reason"] else said


def summary(
    history: History | None, rewards: list[float], losses: list[float], objective: Objective, reason: str | None = None
) -> dict[str, Any]:
    """The result columns of a trial's row, from its run's History, its per-step rewards and losses, and why it ended
    (``reason``). A loss gone NaN / inf is ``diverged_at`` that step (1-based; the step a ``NON_FINITE_LOSS`` failure
    refused counts), and ``final_loss`` is NaN when the last step's loss was not finite: the last finite loss would
    make a run that diverged read as healthy."""
    recorded = list(history.steps["loss"].dropna()) if history is not None else []
    at = diverged_at(losses, reason)
    last_bad = at is not None and (at > len(losses) or not math.isfinite(losses[-1]))
    finite = [v for v in recorded if math.isfinite(v)]
    return {
        "steps_done": len(rewards),
        "final_loss": float(recorded[-1]) if recorded and not last_bad else math.nan,
        "best_loss": float(min(finite)) if finite else math.nan,
        "final_reward": objective_value("reward", rewards, losses),
        "best_reward": max(rewards) if rewards else math.nan,
        "value": objective_value(objective, rewards, losses),
        "run_path": str(history.path) if history is not None and history.path else None,
        "diverged_at": at,
    }


def diverged_at(losses: list[float], reason: str | None) -> int | None:
    """The first step (1-based) whose loss was not finite: one a step reported, else the step that failed
    ``NON_FINITE_LOSS`` (the local engine refuses such a step; a remote one may complete it); None if none."""
    bad = next((i + 1 for i, v in enumerate(losses) if not math.isfinite(v)), None)
    if bad is None and failed_with(reason, OperationErrorCode.NON_FINITE_LOSS):
        return len(losses) + 1
    return bad


def own_modules(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with each ``nn.Module`` (a ``model=``) replaced by a copy, so that a trial (or Find LR's range
    test) trains its own: given the one instance, a trial began where the one before it ended, concurrent trials
    shared weights, and the caller's module was trained (by Find LR, up to rates that make it diverge)."""
    return {k: copy.deepcopy(v) if isinstance(v, nn.Module) else v for k, v in options.items()}


def _open(spec: TrialSpec, runs_dir: Path, control: Control) -> Session:
    """A session for one trial. A remote provider at its session cap answers 429: wait for a slot, up to
    ``spec.slot_timeout`` seconds, then fail naming that option. The client's own retries wait through ``SlotWait``
    (``RetryPolicy.pause``): else each ``connect`` would first run its 5 retries, a 429's ``Retry-After`` (up to 60 s)
    each, past the slot_timeout and deaf to the sweep's stop. Its polls until the model resource and session are up
    wait through ``SlotWait.ready`` (``PollOptions.pause``): else a stop would wait out ``ready_timeout`` (1800 s by
    default). Its tries share one model resource (``KeptResource``), stopped at the end when no session opened on it."""
    delay, end, tries = RATE_LIMIT_WAIT[0], time.monotonic() + spec.slot_timeout, 0
    common: dict[str, Any] = {"optimizer": spec.kind, "runs_dir": runs_dir, "run_id": spec.run_id,
                              **own_modules(spec.session_options)}  # fmt: skip
    waits = SlotWait(control, end)
    options = common if spec.target == LOCAL else paused(common, waits)
    kept = KeptResource(spec.target, options) if spec.target != LOCAL else None
    opener: Callable[[], Session] = (
        (lambda: connect(LOCAL, seed=spec.seed, **options)) if kept is None else (lambda: kept.connect(options))
    )
    try:
        while True:
            try:
                return opener()
            except RateLimitError as exc:
                tries, left = tries + 1 + waits.take_retries(), end - time.monotonic()
                if control.stopping():
                    raise Stopped() from None
                if left <= 0:
                    raise TimeoutError(
                        f"no session slot within slot_timeout={spec.slot_timeout:g} s: the target answered 429 to "
                        f"each of {tries} requests (the last: {exc}); raise slot_timeout, or lower max_concurrent to "
                        "the provider's session cap"
                    ) from exc
                if control.wait(min(delay, left)):
                    raise Stopped() from None
                delay = min(delay * 2, RATE_LIMIT_WAIT[1])
            except Exception:
                if waits.stopped:  # a wait the stop called off (a readiness poll's, a 503's retry): the stop's error
                    raise Stopped() from None
                raise  # a failure of its own (a 400, a 503 that came before the stop) stays FAILED with it
    except BaseException as exc:
        if kept is not None:
            kept.stop(options, exc)  # no session opened on it: its close would have stopped it
        raise
    finally:
        waits.opened = True  # the session's own calls retry as any session's

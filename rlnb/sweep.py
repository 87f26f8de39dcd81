"""Teaching-sized hyperparameter sweeps and ablations.

``sweep`` runs one RL training run per (config, seed) — locally, or on a pool of remote sessions —
and returns a DataFrame with one row per trial. Failures are data: a failed or stopped trial keeps
its row (``status``, ``reason``) and its history on disk; stopping keeps every finished trial.
``ablate`` changes one factor at a time against a baseline and summarises mean ± std over seeds.

Config keys are optimizer fields (``"learning_rate"``, ``"momentum"``, ...; ``"adam.learning_rate"``
for Muon's AdamW sub-params) plus ``"optimizer"`` (``"adam"`` / ``"muon"``) to compare optimizers.
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import pandas as pd

from rlnb._exceptions import OperationFailed, RateLimitError, RlnbError
from rlnb.history import History, default_runs_dir, new_run_id
from rlnb.params import AdamParams, MuonParams, OptimizerParams
from rlnb.schedule import Schedule
from rlnb.session import Session, connect
from rlnb.tasks import Task, digits_task, rl_step

RATE_LIMIT_WAIT = (0.2, 5.0)
"""Seconds to wait before retrying a session the provider refused with 429 (doubling, capped)."""
REWARD_WINDOW = 5
"""``final_reward`` is the mean over the last this-many steps (one step's reward is noisy)."""

Progress = Callable[[int, int, dict[str, Any]], None]
"""``progress(done, total, row)`` after each finished trial."""


def grid(**axes: Sequence[Any]) -> list[dict[str, Any]]:
    """Every combination: ``grid(learning_rate=[1e-3, 1e-2], momentum=[0.9, 0.95])`` → 4 configs."""
    names = list(axes)
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*(axes[n] for n in names))]


def random_search(n: int, seed: int = 0, **space: Any) -> list[dict[str, Any]]:
    """``n`` configs drawn from ``space``: a list is a choice, ``(lo, hi)`` uniform, ``(lo, hi, "log")``
    log-uniform."""
    rng = random.Random(seed)
    configs = []
    for _ in range(n):
        config = {}
        for name, dom in space.items():
            if isinstance(dom, list):
                config[name] = rng.choice(dom)
            elif isinstance(dom, tuple) and len(dom) == 3 and dom[2] == "log":
                config[name] = math.exp(rng.uniform(math.log(dom[0]), math.log(dom[1])))
            elif isinstance(dom, tuple) and len(dom) == 2:
                config[name] = rng.uniform(*dom)
            else:
                raise ValueError(f"space[{name!r}] must be a list, (lo, hi) or (lo, hi, 'log'); got {dom!r}")
        configs.append(config)
    return configs


def apply(base: OptimizerParams, config: Mapping[str, Any]) -> OptimizerParams:
    """``base`` with the config's optimizer fields set (validated: a bad value raises before any run)."""
    kind = config.get("optimizer", "adam" if isinstance(base, AdamParams) else "muon")
    cls = AdamParams if kind == "adam" else MuonParams
    data = base.model_dump(exclude_unset=True) if isinstance(base, cls) else {}  # another kind starts from defaults
    for key, value in config.items():
        if key == "optimizer":
            continue
        head, _, sub = key.partition(".")
        if sub:
            data.setdefault(head, {})[sub] = value
        else:
            data[key] = value
    return cls(**data)


def label(config: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in config.items()) or "base"


def _run_trial(
    trial: int,
    config: dict[str, Any],
    params: OptimizerParams,
    seed: int,
    *,
    steps: int,
    task: Task,
    target: str,
    options: dict[str, Any],
    schedule: Schedule | None,
    runs_dir: Path,
    stop: threading.Event,
) -> dict[str, Any]:
    kind = "adam" if isinstance(params, AdamParams) else "muon"
    row: dict[str, Any] = {
        "trial": trial,
        "label": label(config),
        **config,
        "seed": seed,
        "status": "COMPLETED",
        "reason": None,
    }
    start = time.perf_counter()
    session = None
    rewards: list[float] = []
    try:
        session = _open(target, kind, seed, options, runs_dir, f"trial-{trial:03d}-seed{seed}", stop)
        session.history.annotate(label=row["label"], trial=trial, sweep_config=config)
        for i in range(steps):
            if stop.is_set():
                row.update(status="STOPPED", reason=f"stopped after {i} of {steps} steps")
                break
            step_params = params.scaled(schedule.multiplier(i)) if schedule else params
            report = rl_step(session, task, step_params, seed=seed * 1_000_003 + i)
            rewards.append(report.reward)
            session.history.log(report.step, reward=report.reward)
    except OperationFailed as exc:
        row.update(status="FAILED", reason=f"{exc.code}: {exc.message}")
    except RlnbError as exc:
        row.update(status="FAILED", reason=f"{type(exc).__name__}: {exc}")
    finally:
        if session is not None:
            session.wait()
            session.close()
    steps_table = session.history.steps if session is not None else pd.DataFrame({"loss": []})
    losses = steps_table["loss"].dropna()
    row.update(
        steps_done=len(rewards),
        final_loss=float(losses.iloc[-1]) if len(losses) else math.nan,
        best_loss=float(losses.min()) if len(losses) else math.nan,
        final_reward=statistics.fmean(rewards[-REWARD_WINDOW:]) if rewards else math.nan,
        best_reward=max(rewards) if rewards else math.nan,
        wall_s=time.perf_counter() - start,
        run_path=str(session.history.path) if session is not None and session.history.path else None,
    )
    return row


def _open(
    target: str, kind: str, seed: int, options: dict[str, Any], runs_dir: Path, run_id: str, stop: threading.Event
) -> Session:
    """A session for one trial. A remote provider at its session cap answers 429: wait for a slot."""
    delay = RATE_LIMIT_WAIT[0]
    while True:
        try:
            if target == "local":
                return connect("local", optimizer=kind, seed=seed, runs_dir=runs_dir, run_id=run_id, **options)
            return connect(target, optimizer=kind, runs_dir=runs_dir, run_id=run_id, **options)
        except RateLimitError:
            if stop.wait(delay):
                raise
            delay = min(delay * 2, RATE_LIMIT_WAIT[1])


def sweep(
    base: OptimizerParams,
    configs: Sequence[Mapping[str, Any]] | None = None,
    *,
    seeds: Sequence[int] = (0,),
    steps: int = 20,
    task: Task | Callable[[str, str], float] | None = None,
    target: str = "local",
    max_concurrent: int = 1,
    schedule: Schedule | None = None,
    runs_dir: str | Path | None = None,
    progress: Progress | bool = True,
    stop: threading.Event | None = None,
    **options: Any,
) -> pd.DataFrame:
    """Run every config × seed for ``steps`` RL steps; one row per trial.

    ``configs`` come from ``grid(...)``, ``random_search(...)`` or a list of dicts (default: just
    ``base``). ``task`` is a ``Task``, or a reward function ``reward(prompt, completion) -> float``
    used with the demo's prompts (default: the demo's digits task). ``target`` is ``"local"`` or a
    URL (Together, ``rlnb serve``) with ``options`` for ``rlnb.connect`` (``api_key``,
    ``model_resources_id`` to share one resource's session pool, ...). Up to ``max_concurrent``
    trials run at once. Set ``stop`` (or interrupt the kernel) to stop: finished trials are kept,
    running ones end STOPPED at their next step.
    """
    configs = [dict(c) for c in (configs or [{}])]
    plan = [(i, c, apply(base, c), s) for i, (c, s) in enumerate(itertools.product(configs, seeds))]
    if isinstance(task, Task):
        the_task = task
    elif task is None:
        the_task = digits_task()
    else:
        default = digits_task()
        the_task = Task("custom", default.prompts, task, default.max_tokens)
    folder = (Path(runs_dir) if runs_dir is not None else default_runs_dir()) / new_run_id("sweep")
    stop = stop or threading.Event()
    report = _progress(progress, len(plan))
    rows: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = dict(
        steps=steps, task=the_task, target=target, options=options, schedule=schedule, runs_dir=folder, stop=stop
    )
    with ThreadPoolExecutor(max_workers=max(1, max_concurrent), thread_name_prefix="rlnb-sweep") as pool:
        futures: dict[Future[dict[str, Any]], tuple[int, dict[str, Any], int]] = {}
        try:
            for trial, config, params, seed in plan:
                futures[pool.submit(_run_trial, trial, config, params, seed, **kwargs)] = (trial, config, seed)
            pending = set(futures)
            while pending:
                done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                for fut in done:
                    rows.append(fut.result())
                    report(len(rows), len(plan), rows[-1])
        except KeyboardInterrupt:
            stop.set()
            for fut, (trial, config, seed) in futures.items():
                if fut.cancel():  # never started
                    rows.append(
                        {
                            "trial": trial,
                            "label": label(config),
                            **config,
                            "seed": seed,
                            "status": "STOPPED",
                            "reason": "stopped before it started",
                            "steps_done": 0,
                        }
                    )
            for fut in futures:
                if not fut.cancelled():
                    rows.append(fut.result())
    frame = pd.DataFrame(rows).sort_values("trial", ignore_index=True)
    frame.attrs["path"] = str(folder)
    return frame


def _progress(progress: Progress | bool, total: int) -> Progress:
    if callable(progress):
        return progress
    if not progress:
        return lambda done, total, row: None
    from tqdm.auto import tqdm

    bar = tqdm(total=total, desc="sweep", unit="trial")

    def update(done: int, total: int, row: dict[str, Any]) -> None:
        bar.update(1)
        bar.set_postfix_str(f"{row['label']} seed {row['seed']}: {row['status'].lower()}")
        if done == total:
            bar.close()

    return update


def ablate(
    base: OptimizerParams,
    changes: Mapping[str, Mapping[str, Any]],
    *,
    seeds: Sequence[int] = (0, 1, 2),
    metric: str = "final_reward",
    **sweep_options: Any,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One factor at a time against the baseline: ``changes={"muon": {"optimizer": "muon"}, ...}``.

    Returns ``(trials, summary)``: every trial's row, and per variant the mean ± std of ``metric``
    over seeds with its delta against the baseline."""
    variants = {"baseline": {}, **{name: dict(change) for name, change in changes.items()}}
    trials = sweep(base, list(variants.values()), seeds=seeds, **sweep_options)
    names = {label(c): name for name, c in variants.items()}
    trials.insert(1, "variant", trials["label"].map(names))
    ok = trials[trials.status == "COMPLETED"]
    summary = ok.groupby("variant", sort=False)[metric].agg(["mean", "std", "count"]).reindex(list(variants))
    summary["delta"] = summary["mean"] - summary.loc["baseline", "mean"]
    summary["failed"] = trials.groupby("variant")["status"].apply(lambda s: int((s != "COMPLETED").sum()))
    summary.attrs["metric"] = metric
    return trials, summary


def histories(trials: pd.DataFrame) -> list[History]:
    """The saved history of every trial of a sweep (for ``rlnb.compare`` and ``plots.compare``)."""
    return [History.load(p) for p in trials["run_path"].dropna()]

"""``sweep``: run trials from a source (a list of configs, or an Optuna study) on executors (threads, Ray)
and collect one row per trial.

The sweep folder holds ``sweep.json`` (the settings), ``trials.jsonl`` (one line per finished trial,
flushed at once), each trial's run folder, and for Optuna ``study.db``. ``resume=<folder>`` continues a
stopped sweep there: finished trials are kept, the rest run.
"""

from __future__ import annotations

import collections
import itertools
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from rlnb.history import default_runs_dir, new_run_id
from rlnb.params import OptimizerParams
from rlnb.schedule import Schedule
from rlnb.tasks import Task, digits_task

from .executors import EXECUTORS, Executor, ThreadExecutor, route
from .space import apply, parse_space
from .trial import Objective, TrialSpec, base_row

Progress = Callable[[int, int, dict[str, Any]], None]
"""``progress(done, total, row)`` after each finished trial."""
SETTINGS_FILE, ROWS_FILE = "sweep.json", "trials.jsonl"
POLL_S = 0.2
"""How long the driver waits for a finished trial before checking Stop again."""
SEARCHES = (None, "optuna")


class _Plan:
    """A fixed list of trials (``configs`` × ``seeds``); on resume, those already finished are skipped."""

    def __init__(self, specs: list[TrialSpec], finished: set[int]):
        self.total = len(specs)
        self.done_before = len(finished)
        self._todo = collections.deque(s for s in specs if s.trial not in finished)

    def next_spec(self) -> TrialSpec | None:
        return self._todo.popleft() if self._todo else None

    def leftovers(self) -> list[TrialSpec]:
        left, self._todo = list(self._todo), collections.deque()
        return left

    def finish(self, row: dict[str, Any]) -> None:
        """Nothing to tell: a plan does not learn from results."""


def sweep(
    base: OptimizerParams,
    configs: Sequence[Mapping[str, Any]] | None = None,
    *,
    space: Mapping[str, Any] | None = None,
    n_trials: int | None = None,
    search: str | None = None,
    sampler: Any = "tpe",
    pruner: Any = "median",
    objective: Objective = "reward",
    seeds: Sequence[int] = (0,),
    steps: int = 20,
    task: Task | Callable[[list[int], list[int]], float] | None = None,
    target: str = "local",
    max_concurrent: int | None = None,
    executor: str = "threads",
    address: str | None = None,
    resources_per_trial: dict[str, float] | None = None,
    schedule: Schedule | None = None,
    runs_dir: str | Path | None = None,
    resume: str | Path | None = None,
    progress: Progress | bool = True,
    stop: threading.Event | None = None,
    **options: Any,
) -> pd.DataFrame:
    """Run trials of ``steps`` RL steps each; one row per trial (``.attrs["path"]`` is the sweep folder).

    *What runs.* ``configs`` from ``grid(...)``, ``random_search(...)`` or a list of dicts (default: just
    ``base``), each with every seed in ``seeds``. Or ``search="optuna"``: ``n_trials`` trials whose
    configs Optuna picks from ``space`` (``sampler`` ``"tpe"`` | ``"random"`` | ``"grid"``); each trial
    reports ``objective`` (``"reward"``, maximised, or ``"loss"``, minimised; the mean of the last 5
    steps) after every step, and ``pruner`` (``"median"`` | ``"asha"`` | None) stops bad ones early
    (status PRUNED). Optuna trial ``n`` uses ``seeds[n % len(seeds)]``.

    *The task.* A ``Task``, or a reward function ``reward(prompt, completion) -> float`` used with the
    demo's prompts (default: the demo's digits task). ``target`` is ``"local"`` or a URL (Together,
    ``rlnb serve``) with ``options`` for ``rlnb.connect`` (``api_key``, ``model_resources_id``, ...).

    *Where.* ``executor="threads"`` (this process) or ``"ray"`` (Ray tasks of ``resources_per_trial``
    ``{"cpu": 1, "gpu": 0}``, on the Ray this process is connected to, else at ``address``, else a new
    local one). Up to ``max_concurrent`` trials at once (default: 1 on threads, the cluster's CPUs on Ray).

    *Stopping.* Set ``stop`` (or interrupt the kernel): finished trials are kept, running ones end
    STOPPED at their next step, the rest are STOPPED before they start. ``resume=trials.attrs["path"]``
    continues that sweep in its folder with the same arguments.
    """
    if search not in SEARCHES:
        raise ValueError(f"search must be None (the configs as given) or 'optuna', got {search!r}")
    if executor not in EXECUTORS:
        raise ValueError(f"executor must be one of {', '.join(EXECUTORS)}, got {executor!r}")
    if objective not in ("reward", "loss"):
        raise ValueError(f"objective must be 'reward' or 'loss', got {objective!r}")
    if steps < 1 or not seeds:
        raise ValueError(f"need steps >= 1 and at least one seed, got steps={steps}, seeds={list(seeds)}")
    if max_concurrent is not None and max_concurrent < 1:
        raise ValueError(f"max_concurrent must be >= 1, got {max_concurrent}")
    if search == "optuna" and configs is not None:
        raise ValueError("search='optuna' takes a space={...}, not configs")
    if search is None and (space is not None or n_trials is not None):
        raise ValueError("space= and n_trials= need search='optuna' (or use grid()/random_search() for configs)")
    the_task = _task(task)
    folder = Path(resume) if resume is not None else _new_folder(runs_dir)
    settings = {
        "search": search,
        "base": base.request_body(),
        "configs": [dict(c) for c in configs] if configs is not None else None,
        "space": {k: repr(v) for k, v in (space or {}).items()},
        "sampler": sampler if search and isinstance(sampler, str) else None,
        "pruner": pruner if search and (pruner is None or isinstance(pruner, str)) else None,
        "objective": objective,
        "seeds": list(seeds),
        "steps": steps,
        "task": the_task.name,
        "target": target,
    }
    previous = _begin(folder, settings, resume is not None)

    def make_spec(trial: int, config: dict[str, Any], seed: int | None = None) -> TrialSpec:
        seed = seeds[trial % len(seeds)] if seed is None else seed
        run_id = _run_id(folder, trial, seed)
        params = apply(base, config)
        return TrialSpec(trial, config, params, seed, run_id, steps, the_task, target, options, schedule, objective)

    finished = {r["trial"] for r in previous if r["status"] in ("COMPLETED", "FAILED", "PRUNED")}
    source: Any
    if search == "optuna":
        from .optuna_search import OptunaSource

        dims = parse_space(base, space or {})
        source = OptunaSource(
            folder, dims, n_trials, make_spec, sampler=sampler, pruner=pruner, objective=objective, steps=steps
        )
        reporter = source.report
    else:
        plan = list(itertools.product([dict(c) for c in (configs or [{}])], seeds))
        for config, _ in plan:
            apply(base, config)  # every config is validated before anything runs
        source = _Plan([make_spec(i, c, s) for i, (c, s) in enumerate(plan)], finished)
        reporter = None
    stop = stop or threading.Event()
    executors: dict[str, Executor] = {}
    if executor == "ray":
        from .ray_executor import RayExecutor

        executors["ray"] = RayExecutor(folder, reporter, address=address, resources_per_trial=resources_per_trial)
    limit = max_concurrent or (executors["ray"].capacity() if executor == "ray" else 1)

    def executor_for(name: str) -> Executor:
        if name not in executors:  # only "threads" is made on demand (remote-target trials under executor="ray")
            executors[name] = ThreadExecutor(limit, folder, stop, reporter)
        return executors[name]

    report = _progress(progress, source.total)
    rows: list[dict[str, Any]] = []

    def record(row: dict[str, Any], where: str) -> None:
        row["executor"] = where
        with open(folder / ROWS_FILE, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row, default=str) + "\n")
        source.finish(row)
        rows.append(row)
        report(source.done_before + len(rows), source.total, row)

    def stop_all(kill: bool = False) -> None:
        for ex in list(executors.values()):
            for row in ex.kill() if kill else ex.stop():
                record(row, ex.name)
        for spec in source.leftovers() if isinstance(source, _Plan) else []:
            record(base_row(spec, "STOPPED", "stopped before it started"), route(spec, executor))

    try:
        _drive(source, executors, executor_for, executor, limit, stop, record, stop_all)
    finally:
        for ex in executors.values():
            ex.close()
    return _frame(previous + rows, folder, objective)


def _drive(
    source: Any,
    executors: dict[str, Executor],
    executor_for: Callable[[str], Executor],
    wanted: str,
    limit: int,
    stop: threading.Event,
    record: Callable[[dict[str, Any], str], None],
    stop_all: Callable[..., None],
) -> None:
    """Keep ``limit`` trials running until the source is used up or Stop; an interrupt stops, a second kills."""
    stopped = exhausted = False
    interrupts = 0
    while True:
        try:
            if stop.is_set() and not stopped:
                stopped = True
                stop_all()
            while not stopped and not exhausted and sum(ex.running() for ex in executors.values()) < limit:
                spec = source.next_spec()
                if spec is None:
                    exhausted = True
                    break
                executor_for(route(spec, wanted)).submit(spec)
            busy = [ex for ex in executors.values() if ex.running()]
            if not busy and (stopped or exhausted):
                return
            for ex in busy:
                for row in ex.poll(POLL_S / len(busy)):
                    record(row, ex.name)
        except KeyboardInterrupt:
            interrupts += 1
            stop.set()
            if interrupts > 1:
                stop_all(kill=True)


def _task(task: Task | Callable[[list[int], list[int]], float] | None) -> Task:
    if isinstance(task, Task):
        return task
    default = digits_task()
    return default if task is None else Task("custom", default.prompts, task, default.max_tokens)


def _new_folder(runs_dir: str | Path | None) -> Path:
    folder = (Path(runs_dir) if runs_dir is not None else default_runs_dir()) / new_run_id("sweep")
    folder.mkdir(parents=True)
    return folder


def _begin(folder: Path, settings: dict[str, Any], resume: bool) -> list[dict[str, Any]]:
    """Write the settings of a new sweep, or check a resumed one's; return the rows recorded so far."""
    path = folder / SETTINGS_FILE
    if not resume:
        path.write_text(json.dumps(settings, indent=2, default=str))
        return []
    if not path.exists():
        raise FileNotFoundError(f"resume: {folder} is not a sweep folder (no {SETTINGS_FILE})")
    stored = json.loads(path.read_text())
    now = json.loads(json.dumps(settings, default=str))
    changed = [f"{k}: {now.get(k)!r} (the sweep used {stored.get(k)!r})" for k in now if now.get(k) != stored.get(k)]
    if changed:
        raise ValueError("resume: run it with the same arguments; changed: " + "; ".join(changed))
    rows_path = folder / ROWS_FILE
    if not rows_path.exists():
        return []
    rows = []
    for line in rows_path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue  # a half-written last line of a killed sweep: that trial runs again
    return rows


def _run_id(folder: Path, trial: int, seed: int) -> str:
    """``trial-007-seed0``; a trial run again after a stop gets ``-r2``, ``-r3``, ... (never mixed with the old)."""
    run_id, attempt = f"trial-{trial:03d}-seed{seed}", 1
    while (folder / run_id).exists():
        attempt += 1
        run_id = f"trial-{trial:03d}-seed{seed}-r{attempt}"
    return run_id


def _frame(rows: list[dict[str, Any]], folder: Path, objective: Objective) -> pd.DataFrame:
    latest = {r["trial"]: r for r in rows}  # a trial run again after a stop replaces its STOPPED row
    frame = pd.DataFrame(list(latest.values()))
    if len(frame):
        frame = frame.sort_values("trial", ignore_index=True)
        for col in ("final_loss", "best_loss", "final_reward", "best_reward", "value", "wall_s"):
            if col in frame:
                frame[col] = frame[col].astype(float)
    frame.attrs.update(path=str(folder), objective=objective)
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
        if done >= total:
            bar.close()

    return update

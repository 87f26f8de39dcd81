"""``sweep``: run trials from a source (a list of configs, or an Optuna study) on executors (threads, Ray)
and collect one row per trial.

The sweep folder holds ``sweep.json`` (the settings), ``trials.jsonl`` (one line per finished trial,
flushed at once), each trial's run folder, and for Optuna ``study.db``. ``resume=<folder>`` continues a
stopped sweep there: finished trials are kept, the rest run.
"""

from __future__ import annotations

import collections
import itertools
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from rlnb.history import default_runs_dir
from rlnb.params import OptimizerParams
from rlnb.schedule import Schedule
from rlnb.tasks import Task, digits_task

from .batched_executor import MAX_MEMBERS, BatchedExecutor
from .executors import EXECUTORS, Executor, ThreadExecutor, route
from .folder import append_row, begin, new_folder, table, trial_run_id
from .space import apply, parse_space
from .trial import Objective, TrialSpec, base_row

Progress = Callable[[int, int, dict[str, Any]], None]
"""``progress(done, total, row)`` after each finished trial."""
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
    task: Task | Callable[[str, str], float] | None = None,
    target: str = "local",
    max_concurrent: int | None = None,
    executor: str = "auto",
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
    ``rlnb serve``) with ``options`` for ``rlnb.connect`` (``api_key``, ``model_resources_id``, ...);
    ``sinks=[rlnb.sinks.TensorBoard(...), ...]`` (an option for ``connect``) sends every trial there, as
    ``<sweep folder>/<trial>``.

    *Where.* ``executor="auto"`` (default) trains compatible local trials of a list of configs as stacked
    ensembles in this process (``"batched"``: one forward, backward and update for all; see
    ``rlnb.batched``) and the others on threads (Optuna trials too, asked one at a time); ``"threads"``
    (this process, one session per trial) or ``"ray"`` (Ray tasks of ``resources_per_trial``
    ``{"cpu": 1, "gpu": 0}``, on the Ray this process is connected to, else at ``address``, else a new
    local one). The ``executor`` column says where each trial ran, ``not_batched`` why a trial that could
    have been batched was not. Up to ``max_concurrent`` trials at once (default: 1 on threads, up to
    32 per ensemble, the cluster's CPUs on Ray).

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
    if executor == "ray":
        from .ray_executor import check_resources

        check_resources(resources_per_trial)
    if search == "optuna":
        from .optuna_search import STUDY_FILE, check_search, storage_url

        dims = parse_space(base, space or {})
        check_search(dims, n_trials, sampler, pruner)
        storage_url(Path(resume or runs_dir or default_runs_dir()) / STUDY_FILE)  # before the folder is made
    else:
        if configs is not None and not configs:
            raise ValueError("configs is empty: there is no trial to run (None runs the base config alone)")
        plan = list(itertools.product([dict(c) for c in (configs if configs is not None else [{}])], seeds))
        for config, _ in plan:
            apply(base, config)  # every config is validated before anything runs
    folder = Path(resume) if resume is not None else new_folder(runs_dir)
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
    previous = begin(folder, settings, resume is not None)

    def make_spec(trial: int, config: dict[str, Any], seed: int | None = None) -> TrialSpec:
        seed = seeds[trial % len(seeds)] if seed is None else seed
        run_id = trial_run_id(folder, trial, seed)
        params = apply(base, config)
        return TrialSpec(trial, config, params, seed, run_id, steps, the_task, target, options, schedule, objective)

    finished = {r["trial"] for r in previous if r["status"] in ("COMPLETED", "FAILED", "PRUNED")}
    source: Any
    if search == "optuna":
        from .optuna_search import OptunaSource

        source = OptunaSource(
            folder, dims, n_trials, make_spec, sampler=sampler, pruner=pruner, objective=objective, steps=steps
        )
        reporter = source.report
    else:
        source = _Plan([make_spec(i, c, s) for i, (c, s) in enumerate(plan)], finished)
        reporter = None
    stop = stop or threading.Event()
    executors: dict[str, Executor] = {}
    if executor == "ray":
        from .ray_executor import RayExecutor

        executors["ray"] = RayExecutor(folder, reporter, address=address, resources_per_trial=resources_per_trial)
    wanted = "threads" if executor == "auto" and search == "optuna" else executor
    if wanted in ("auto", "batched"):
        executors["batched"] = BatchedExecutor(folder, stop, reporter, max_members=max_concurrent or MAX_MEMBERS)
    capacity = {"ray": "ray", "auto": "batched", "batched": "batched"}.get(wanted)
    limit = max_concurrent or (executors[capacity].capacity() if capacity else 1)
    run = _Run(folder, source, wanted, stop, _progress(progress, source.total), limit, executors)
    run.make_threads = lambda: ThreadExecutor(max_concurrent or 1, folder, stop, reporter)
    try:
        run.drive()
    except BaseException:
        run.drain()  # an error escaping (say, from a progress callback): keep every row, then raise it
        raise
    finally:
        for ex in run.executors.values():
            ex.close()
    return table(previous + run.rows, folder, objective)


class _Run:
    """One call of ``sweep``: keeps ``limit`` trials running on their executors, records every row."""

    make_threads: Callable[[], Executor]
    """Builds the thread pool when a trial is first routed to it."""

    def __init__(
        self,
        folder: Path,
        source: Any,
        wanted: str,
        stop: threading.Event,
        report: Progress,
        limit: int,
        executors: dict[str, Executor],
    ):
        self.folder, self.source, self.wanted, self.stop, self.report = folder, source, wanted, stop, report
        self.limit, self.executors = limit, executors
        self.rows: list[dict[str, Any]] = []
        self.not_batched: dict[int, str] = {}
        """Trial → why it runs on a thread although batching was asked for."""

    def executor_for(self, name: str) -> Executor:
        if name not in self.executors:  # only "threads" is made on demand (remote-target trials under "ray")
            self.executors[name] = self.make_threads()
        return self.executors[name]

    def store(self, rows: list[dict[str, Any]], where: str) -> None:
        """Keep the rows (on disk at once) and tell the source; no user code runs here."""
        for row in rows:
            row["executor"] = where
            if self.wanted in ("auto", "batched"):
                row["not_batched"] = self.not_batched.get(row["trial"])
            else:  # the column is always there: the table's shape does not depend on the executor
                row["not_batched"] = f"executor={self.wanted!r} was asked for"
            self.rows.append(row)
            append_row(self.folder, row)
            self.source.finish(row)

    def record(self, rows: list[dict[str, Any]], where: str) -> None:
        """Store every row first, then call the progress callback (which may raise) for each."""
        self.store(rows, where)
        done = self.source.done_before + len(self.rows) - len(rows)
        for i, row in enumerate(rows, 1):
            self.report(done + i, self.source.total, row)

    def stop_all(self, kill: bool = False) -> list[tuple[list[dict[str, Any]], str]]:
        """Cancel what has not started (and with ``kill``, what runs); return those rows by executor."""
        out = [(ex.kill() if kill else ex.stop(), ex.name) for ex in list(self.executors.values())]
        for spec in self.source.leftovers() if isinstance(self.source, _Plan) else []:
            out.append(([base_row(spec, "STOPPED", "stopped before it started")], route(spec, self.wanted)[0]))
        return out

    def drive(self) -> None:
        """Run until the source is used up or Stop; an interrupt stops, a second one kills."""
        stopped = exhausted = False
        interrupts = 0
        while True:
            try:
                if self.stop.is_set() and not stopped:
                    stopped = True
                    for rows, where in self.stop_all():
                        self.record(rows, where)
                while not stopped and not exhausted and self.running() < self.limit:
                    spec = self.source.next_spec()
                    if spec is None:
                        exhausted = True
                        break
                    where, why = route(spec, self.wanted)
                    if why is not None:
                        self.not_batched[spec.trial] = why
                    self.executor_for(where).submit(spec)
                busy = [ex for ex in self.executors.values() if ex.running()]
                if not busy and (stopped or exhausted):
                    return
                for ex in busy:
                    self.record(ex.poll(POLL_S / len(busy)), ex.name)
            except KeyboardInterrupt:
                interrupts += 1
                self.stop.set()
                if interrupts > 1:
                    for rows, where in self.stop_all(kill=True):
                        self.record(rows, where)

    def running(self) -> int:
        return sum(ex.running() for ex in self.executors.values())

    def drain(self) -> None:
        """After an error: stop, and store what comes back (running trials end at their next step)."""
        self.stop.set()
        for rows, where in self.stop_all():
            self.store(rows, where)
        while self.running():
            for ex in [ex for ex in self.executors.values() if ex.running()]:
                self.store(ex.poll(POLL_S), ex.name)


def _task(task: Task | Callable[[str, str], float] | None) -> Task:
    if isinstance(task, Task):
        return task
    default = digits_task()
    return default if task is None else Task("custom", default.prompts, task, default.max_tokens)


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

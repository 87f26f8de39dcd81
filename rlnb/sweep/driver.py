"""``sweep``: run trials from a source (a list of configs, or an Optuna study) on executors (threads, Ray)
and collect one row per trial.

The sweep folder holds ``sweep.json`` (the settings), ``trials.jsonl`` (one line per finished trial,
flushed at once), each trial's run folder, and for Optuna ``study.db``. ``resume=<folder>`` continues a
stopped sweep there: finished trials are kept, the rest run.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from rlnb._options import take, user_path
from rlnb.history import default_runs_dir
from rlnb.params import OptimizerParams

from .batched_executor import MAX_MEMBERS, BatchedExecutor
from .executors import Executor, ThreadExecutor, route
from .folder import append_row, begin, lock, new_folder, settings, table, trial_run_id
from .options import ExecutorOptions, SearchOptions, TrialOptions, check_connect_options
from .space import apply, config_list, parse_space
from .trial import TrialSpec, base_row

Progress = Callable[[int, int, dict[str, Any]], None]
"""``progress(done, total, row)`` after each finished trial."""
POLL_S = 0.2
"""How long the driver waits for a finished trial before checking Stop again."""


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

    def superseded(self) -> set[int]:
        """None: a plan runs a stopped trial again under its own number, whose new row replaces the old."""
        return set()


def sweep(
    base: OptimizerParams,
    configs: Sequence[Mapping[str, Any]] | None = None,
    *,
    runs_dir: str | Path | None = None,
    resume: str | Path | None = None,
    progress: Progress | bool = True,
    stop: threading.Event | None = None,
    trial_options: TrialOptions | None = None,
    search_options: SearchOptions | None = None,
    executor_options: ExecutorOptions | None = None,
    **options: Any,
) -> pd.DataFrame:
    """Run trials of ``steps`` RL steps each; one row per trial (``.attrs["path"]`` is the sweep folder).

    ``options`` are the fields of three groups, by name (a name wins over a group given whole), and then
    ``rlnb.connect``'s options for every trial (``api_key``, ``model_resources_id``, ``sinks``, ...):

    * ``TrialOptions`` (``trial_options``): ``seeds`` (default ``(0,)``), ``steps`` (20), ``task`` (a
      ``Task`` or a reward function; default the demo's digits task), ``target`` (``"local"`` or a URL),
      ``schedule``, ``objective`` (``"reward"``, maximised, or ``"loss"``, minimised; the mean of the last
      5 steps).
    * ``SearchOptions`` (``search_options``): ``search="optuna"`` runs ``n_trials`` trials whose configs
      Optuna picks from ``space`` (``sampler`` ``"tpe"`` | ``"random"`` | ``"grid"``); each trial reports
      ``objective`` after every step, and ``pruner`` (``"median"`` | ``"asha"`` | None) stops bad ones early
      (status PRUNED). Optuna trial ``n`` uses ``seeds[n % len(seeds)]``.
    * ``ExecutorOptions`` (``executor_options``): ``executor="auto"`` (default) trains compatible local
      trials of a list of configs as stacked ensembles in this process (``"batched"``: one forward, backward
      and update for all; see ``rlnb.batched``) and the others on threads (Optuna trials too, asked one at
      a time); ``"threads"`` (this process, one session per trial) or ``"ray"`` (Ray tasks of
      ``resources_per_trial`` ``{"cpu": 1, "gpu": 0}``, on the Ray this process is connected to, else at
      ``address``, else a new local one). Up to ``max_concurrent`` trials at once (default: 1 on threads,
      up to 32 per ensemble, the cluster's CPUs on Ray).

    *What runs.* ``configs`` from ``grid(...)``, ``random_search(...)`` or a list of dicts (default: just
    ``base``), each with every seed; or the Optuna search. ``sinks=[rlnb.sinks.TensorBoard(...), ...]`` sends
    every trial there, as ``<sweep folder>/<trial>``. The ``executor`` column says where each trial ran,
    ``not_batched`` why a trial that could have been batched was not.

    *Stopping.* Set ``stop`` (or interrupt the kernel): finished trials are kept, running ones end
    STOPPED at their next step, the rest are STOPPED before they start. ``resume=trials.attrs["path"]``
    continues that sweep in its folder with the same arguments.
    """
    trial = take(TrialOptions, options, trial_options)
    study = take(SearchOptions, options, search_options)
    where = take(ExecutorOptions, options, executor_options)
    check_connect_options(options, trial.target)
    _check_args(runs_dir, resume, stop, progress)
    configs = config_list(configs)
    if where.executor == "ray" and trial.target == "local":  # a remote target's trials stay on threads
        from .ray_checks import check_picklable

        check_picklable(trial.the_task(), options)
    dims, plan = _trials(base, configs, trial, study, Path(resume or runs_dir or default_runs_dir()).expanduser())
    # absolute: a relative folder read after a %cd would be another one (trial runs, resume=trials.attrs["path"])
    folder = Path(resume).expanduser().absolute() if resume is not None else new_folder(runs_dir)
    with contextlib.closing(lock(folder, resume is not None)):  # one sweep at a time in a folder
        the_task = trial.the_task()
        previous = begin(folder, settings(base, configs, trial, study, the_task, options), resume is not None)

        def make_spec(n: int, config: dict[str, Any], seed: int | None = None) -> TrialSpec:
            seed = trial.seeds[n % len(trial.seeds)] if seed is None else seed
            run_id = trial_run_id(folder, n, seed)
            return TrialSpec(n, config, apply(base, config), seed, run_id, trial.steps, the_task, trial.target, options,
                             trial.schedule, trial.objective)  # fmt: skip

        finished = {r["trial"] for r in previous if r["status"] in ("COMPLETED", "FAILED", "PRUNED")}
        source: Any
        if study.search == "optuna":
            from .optuna_search import OptunaSource

            source = OptunaSource(folder, dims, study.n_trials, make_spec, sampler=study.sampler, pruner=study.pruner,
                                  objective=trial.objective, steps=trial.steps)  # fmt: skip
            reporter = source.report
        else:
            source = _Plan([make_spec(i, c, s) for i, (c, s) in enumerate(plan)], finished)
            reporter = None
        run = _start(folder, source, reporter, where, study, stop or threading.Event(), progress)
        try:
            run.drive()
        except BaseException:
            run.drain()  # an error escaping (say, from a progress callback): keep every row, then raise it
            raise
        finally:
            for ex in run.executors.values():
                ex.close()
        return table(previous + run.rows, folder, trial.objective, source.superseded())


def _check_args(runs_dir: object, resume: object, stop: object, progress: object) -> None:
    """Before the folder: ``runs_dir=5`` was a ``TypeError`` naming no argument, ``stop="yes"`` an ``AttributeError``
    after the sweep folder was made, ``progress=5`` (or ``"no"``) a progress bar."""
    for name, value in (("runs_dir", runs_dir), ("resume", resume)):
        if value is not None:
            user_path(name, value)
    if stop is not None and not (callable(getattr(stop, "set", None)) and callable(getattr(stop, "is_set", None))):
        raise TypeError(f"stop must be None or a threading.Event (set it to stop the sweep), got {stop!r}"[:300])
    if not (progress is None or isinstance(progress, bool) or callable(progress)):  # None: no bar, as False
        raise TypeError(f"progress must be True, False or a function (done, total, row), got {progress!r}"[:300])


def _trials(
    base: OptimizerParams,
    configs: Sequence[Mapping[str, Any]] | None,
    trial: TrialOptions,
    study: SearchOptions,
    parent: Path,
) -> tuple[dict[str, Any], list[tuple[dict[str, Any], int]]]:
    """The search space (Optuna) or the plan (configs × seeds), every config checked before anything runs;
    for Optuna, also that a database URL can carry the path of the study under ``parent``."""
    if study.search == "optuna":
        if configs is not None:
            raise ValueError("search='optuna' takes a space={...}, not configs")
        from .optuna_search import STUDY_FILE, check_search, import_optuna, storage_url

        import_optuna()  # the extra named, before storage_url's "No module named 'sqlalchemy'" (Optuna brings it)
        dims = parse_space(base, study.space or {})
        check_search(dims, study.n_trials, study.sampler, study.pruner)
        storage_url(parent / STUDY_FILE)  # before the sweep folder is made
        return dims, []
    if configs is not None and not configs:
        raise ValueError("configs is empty: there is no trial to run (None runs the base config alone)")
    plan = list(itertools.product([dict(c) for c in (configs if configs is not None else [{}])], trial.seeds))
    for config, _ in plan:
        apply(base, config)  # every config is validated before anything runs
    return {}, plan


def _start(
    folder: Path,
    source: Any,
    reporter: Any,
    where: ExecutorOptions,
    study: SearchOptions,
    stop: threading.Event,
    progress: Progress | bool,
) -> _Run:
    """The run of one sweep with its executors (the thread pool is made when a trial first needs it)."""
    executors: dict[str, Executor] = {}
    if where.executor == "ray":
        from .ray_executor import RayExecutor

        executors["ray"] = RayExecutor(folder, reporter, address=where.address,
                                       resources_per_trial=where.resources_per_trial)  # fmt: skip
    wanted = "threads" if where.executor == "auto" and study.search == "optuna" else where.executor
    if wanted in ("auto", "batched"):
        executors["batched"] = BatchedExecutor(folder, stop, reporter, max_members=where.max_concurrent or MAX_MEMBERS)
    capacity = {"ray": "ray", "auto": "batched", "batched": "batched"}.get(wanted)
    limit = where.max_concurrent or (executors[capacity].capacity() if capacity else 1)
    run = _Run(folder, source, wanted, stop, _progress(progress, source.total), limit, executors)
    run.make_threads = lambda: ThreadExecutor(where.max_concurrent or 1, folder, stop, reporter)
    return run


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
        """After an error: stop, and store what comes back (running trials end at their next step). An
        interrupt stops waiting, as a second one does in ``drive``: a trial stuck in its step held the error,
        and the kernel, for ever."""
        self.stop.set()
        for rows, where in self.stop_all():
            self.store(rows, where)
        try:
            while self.running():
                for ex in [ex for ex in self.executors.values() if ex.running()]:
                    self.store(ex.poll(POLL_S), ex.name)
        except KeyboardInterrupt:
            for rows, where in self.stop_all(kill=True):
                self.store(rows, where)


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

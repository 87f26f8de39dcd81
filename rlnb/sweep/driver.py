"""``sweep``: run trials from a source (a list of configs, or an Optuna study) on executors (threads, Ray)
and collect one row per trial.

The sweep folder holds ``sweep.json`` (the settings), ``trials.jsonl`` (one line per finished trial,
flushed at once), each trial's run folder, and for Optuna ``study.db``. ``resume=<folder>`` continues a
stopped sweep there: finished trials are kept, the rest run.
"""

from __future__ import annotations

import itertools
import os
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from rlnb._input.checks import check_bool, check_event, takes, user_path
from rlnb._input.options import take
from rlnb.engine.options import MUON_ONLY, MuonOptions, refuse_muon_only
from rlnb.errors import user_stacklevel
from rlnb.history import default_runs_dir
from rlnb.params import OptimizerParams, kind_of
from rlnb.secrets import redaction
from rlnb.sinks.left_out import gathered
from rlnb.wire import ADAM, MUON, TrialStatus

from .applying import apply
from .configs import check_distinct_params, check_variants, config_list
from .dispatch import Plan, Progress, start
from .fingerprint import same_task
from .folder import begin, held, new_folder, run_pythons, settings, trial_run_id
from .new_prompts import check_sweep_prompts
from .options import (
    ExecutorOptions,
    SearchOptions,
    TrialOptions,
    check_connect_options,
    check_params,
)
from .rows import planned_rows, ran_with, table
from .space import MAX_TRIALS, Categorical, check_once, parse_space
from .space_text import recorded_space, same_space
from .trial import TrialSpec


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
    variants: Sequence[str] | None = None,
    **options: Any,
) -> pd.DataFrame:
    """Run trials of ``steps`` RL steps each; one row per trial (``.attrs["path"]`` is the sweep folder).

    ``options`` are the fields of three groups, by name (a name wins over a group given whole), and then
    ``rlnb.connect``'s options for every trial (``api_key``, ``model_resources_id``, ``sinks``, ...):

    * ``TrialOptions`` (``trial_options``): ``seeds`` (default ``(0,)``), ``steps`` (20), ``task`` (a
      ``Task`` or a reward function; default the digits task, ``digits_task()``), ``target`` (``"local"`` or a URL),
      ``schedule``, ``objective`` (``"reward"``, maximised, the mean of the last 5 steps; ``"loss"`` is refused:
      an on-policy GRPO loss is ~0 at every rate), ``slot_timeout`` (seconds a trial waits for a session slot
      while the provider answers 429; an hour).
    * ``SearchOptions`` (``search_options``): ``search="optuna"`` runs ``n_trials`` trials whose configs
      Optuna picks from ``space`` (``sampler`` ``"tpe"`` | ``"random"`` | ``"grid"``); each trial reports
      ``objective`` after every step, and ``pruner`` (``"median"`` | ``"asha"`` | None) stops bad ones early
      (status PRUNED). Optuna trial ``n`` uses ``seeds[n % len(seeds)]`` (a stopped one asked again keeps its seed);
      ``"grid"`` runs every point on every seed.
    * ``ExecutorOptions`` (``executor_options``): ``executor="auto"`` (default) trains compatible local
      trials of a list of configs as stacked ensembles in this process (``"batched"``: one forward, backward
      and update for all; see ``rlnb.batched``) and the others on threads (Optuna trials too, asked one at
      a time); ``"threads"`` (this process, one session per trial) or ``"ray"`` (Ray tasks of
      ``resources_per_trial`` ``{"cpu": 1, "gpu": 0}``, on the Ray this process is connected to, else at
      ``address``, else a new local one; local trials only: a remote target's run on threads). Up to
      ``max_concurrent`` trials at once (default: 1 on threads, up to 32 per ensemble, the cluster's CPUs on Ray).

    *What runs.* ``configs`` from ``grid(...)``, ``random_search(...)`` or a list of dicts (default: just
    ``base``), each with every seed; or the Optuna search. ``sinks=[rlnb.sinks.TensorBoard(...), ...]`` sends
    every trial there, as ``<sweep folder>/<trial>``. The ``executor`` column says where each trial ran,
    ``not_batched`` why a trial that could have been batched was not. ``variants`` names the configs, one
    name each (``ablate``'s): each row's ``variant`` column, kept in ``trials.jsonl`` and the trial's run.

    *Stopping.* Set ``stop`` (or interrupt the kernel): finished trials are kept, running ones end
    STOPPED at their next step, the rest are STOPPED before they start. ``resume=trials.attrs["path"]``
    continues that sweep in its folder with the same arguments. A Ctrl-C ends the sweep so and sets
    ``trials.attrs["interrupted"]`` (a script sweeping in a loop stops on it, as on ``lr_find``'s ``interrupted``:
    ``if trials.attrs["interrupted"]: raise KeyboardInterrupt``).
    """
    redaction.hide_option(options)  # first: no traceback's locals show the key
    check_params(base)
    trial = take(TrialOptions, options, trial_options)
    misfit = trial.schedule.misfit(trial.steps) if trial.schedule is not None else ""
    if misfit:  # as a RunPanel warns past the end, in its words; a schedule cut short decayed only part way
        warnings.warn(f"sweep: in each trial, {misfit}. To decay over the trial, pass a Schedule of total_steps="
                      f"{trial.steps}", UserWarning, stacklevel=user_stacklevel())  # fmt: skip
    study = take(SearchOptions, options, search_options)
    where = take(ExecutorOptions, options, executor_options)
    if study.search == "optuna" and where.executor == "batched" and study.pruner is not None:
        raise ValueError(f"pruner={study.pruner!r} cannot stop batched trials: executor='batched' asks an "
                         "ensemble's trials together and they end together, so the pruner has no ended trial to "
                         "compare with; pass pruner=None, or executor='threads' (or 'auto') to prune")  # fmt: skip
    check_connect_options(options, trial.target)
    check_sweep_prompts(trial.the_task(), trial.target, options, ray=where.executor == "ray")
    _check_args(runs_dir, resume, stop, progress)
    check_bool("keep_resource", options.get("keep_resource", False))  # not each trial's FAILED row, nor a kept "no"
    configs = config_list(configs)
    names = check_variants(variants, configs)
    if configs is not None and names is None:  # a copy ran as a trial that summarize took for an agreeing seed
        check_once("configs", configs)  # (ablate's variants name each config: the same change under two names)
        check_distinct_params(base, configs)
    if where.executor == "ray":
        from .ray_checks import check_picklable, refuse_remote

        refuse_remote(trial.target)  # its trials would run on threads beside a local Ray started for nothing
        check_picklable(trial.the_task(), options)
    dims, plan = _trials(base, configs, trial, study, Path(resume or runs_dir or default_runs_dir()).expanduser())
    _refuse_unused_muon_options(base, dims, plan, options)
    # absolute: a relative folder read after a %cd would be another one (trial runs, resume=trials.attrs["path"])
    folder = Path(resume).expanduser().absolute() if resume is not None else new_folder(runs_dir)
    with held(folder, resume is not None) as state:  # one sweep at a time in a folder
        the_task = trial.the_task()
        recorded = {**settings(base, configs, trial, study, the_task, options), "variants": names}
        # what the space means: (1e-4, 1e-2, "log") on resume of Float(1e-4, 1e-2, log=True) is not refused
        recorded["space"] = recorded_space(dims)
        same = {
            "space": lambda stored: same_space(dims, stored),
            "task_detail": lambda t: same_task(the_task, t, lambda: run_pythons(folder)),  # which Python made it
        }
        previous = begin(folder, recorded, resume is not None, same=same)

        def make_spec(n: int, config: dict[str, Any], seed_of: int | None = None) -> TrialSpec:
            """Trial ``n``, with the seed of trial ``seed_of`` (default ``n``): an Optuna trial asked again after a
            stop keeps the seed it was stopped with (with the new number's, its row would replace the stopped row)."""
            seed = trial.seeds[(n if seed_of is None else seed_of) % len(trial.seeds)]
            run_id = trial_run_id(folder, n, seed)
            variant = names[n // len(trial.seeds)] if names is not None else None  # the plan: configs × seeds
            return TrialSpec(n, config, apply(base, config), seed, run_id, trial.steps, the_task, trial.target, options,
                             trial.schedule, trial.objective, variant, trial.slot_timeout)  # fmt: skip

        finished = {
            r["trial"]
            for r in previous
            if r["status"] in (TrialStatus.COMPLETED, TrialStatus.FAILED, TrialStatus.PRUNED)
        }
        source: Any
        if study.search == "optuna":
            from .optuna_search import OptunaSource

            source = OptunaSource(folder, dims, study.n_trials, make_spec, sampler=study.sampler, pruner=study.pruner,
                                  objective=trial.objective, steps=trial.steps, recorded=previous,
                                  seeds=len(trial.seeds))  # fmt: skip
            reporter = source.report
        else:
            source = Plan([make_spec(i, c) for i, (c, _) in enumerate(plan)], finished)  # configs × seeds
            reporter = None
        previous = planned_rows(folder, previous, source.expected)
        run = start(folder, source, reporter, where, study, stop or threading.Event(), progress)
        state["started"] = True

        def made() -> pd.DataFrame:
            """The table of every row so far, each config field filled in with the value its trial ran with."""
            return table(ran_with(previous + run.rows, base), folder, trial.objective, source.superseded())

        with gathered(options.get("sinks", [])):  # a dropped sink's left-out trials: said once, at the end
            try:
                run.drive()
            except BaseException as error:
                run.drain()  # an error escaping (say, from a progress callback): keep every row, then raise it
                _kept(error, folder, made)
                raise
            finally:
                for ex in run.executors.values():
                    ex.close()
        trials = made()
        trials.attrs["interrupted"] = run.interrupted  # it went no further: a loop over sweeps stops on it
        return trials


def _kept(error: BaseException, folder: Path, trials: Callable[[], pd.DataFrame]) -> None:
    """The sweep's table on ``error`` (its ``trials``), and a note naming the folder to resume: else both were lost
    with the return value, and the folder had to be found by hand among the runs folder's. A table that cannot be
    made leaves ``error`` as it is, the note saying why."""
    try:
        kept = trials()
    except Exception as failed:  # the error the caller must see is the first: this one only said in its note
        said = f"sweep: its rows are in {folder} (trials.jsonl; the table could not be made: {failed!r}); "
        error.add_note(f"{said}sweep(..., resume={str(folder)!r}) with the same arguments runs what is left")
        return
    counts = ", ".join(f"{n} {status}" for status, n in kept["status"].value_counts(sort=False).items())
    error.add_note(f"sweep: the table of its {len(kept)} trials ({counts}) is kept in {folder} and as this "
                   f"exception's trials attribute; sweep(..., resume={str(folder)!r}) with the same arguments runs "
                   "what is left")  # fmt: skip
    setattr(error, "trials", kept)  # noqa: B010 (an attribute no exception type declares)


def _check_args(runs_dir: object, resume: object, stop: object, progress: object) -> None:
    """Before the folder: ``runs_dir=5`` was a ``TypeError`` naming no argument, ``""`` the working folder,
    ``stop="yes"`` an ``AttributeError`` after the sweep folder was made, ``progress=5`` (or ``"no"``) a bar; a
    ``resume`` folder given with a ``runs_dir`` it is not directly in went on there, ``runs_dir`` dropped."""
    paths = {}
    for name, value in (("runs_dir", runs_dir), ("resume", resume)):
        if value == "":  # Path("") is the working folder: the sweep's folder went there (connect refuses it)
            raise ValueError(f"{name} must be a folder's path or None, got ''")
        if value is not None:
            paths[name] = user_path(name, value)
    # realpath, not Path.resolve: a link in a loop is refused by the folder checks after this, naming it
    if len(paths) == 2 and Path(os.path.realpath(paths["resume"])).parent != Path(os.path.realpath(paths["runs_dir"])):
        raise ValueError(f"resume={str(resume)!r} is not a folder in runs_dir={str(runs_dir)!r}: a sweep resumes in "
                         "its own folder, made in the runs_dir it started with; pass that runs_dir, or leave runs_dir "
                         "out")  # fmt: skip
    check_event(stop, "the sweep")
    if not (progress is None or isinstance(progress, bool) or takes(progress, 3)):  # None: no bar, as False
        raise TypeError(f"progress must be True, False or a function (done, total, row), got {progress!r}"[:300])


def _refuse_unused_muon_options(
    base: OptimizerParams, dims: dict[str, Any], plan: list[tuple[dict[str, Any], int]], options: dict[str, Any]
) -> None:
    """A sweep's ``MUON_ONLY`` options go to its Muon trials only (``TrialSpec.session_options``): where no trial can
    be Muon, nothing would use them, and they would be dropped in silence; refused before any trial runs."""
    picks = dims.get("optimizer")
    if isinstance(picks, Categorical):
        kinds = set(picks.choices)
    else:
        kinds = {kind_of(apply(base, c)) for c, _ in plan or [({}, 0)]}
    if MUON not in kinds:
        given = {k: v for k, v in options.items() if k in MUON_ONLY and v is not None}
        why = "no trial of this sweep is Muon (each is adam), so none would use them"
        refuse_muon_only(ADAM, MuonOptions(**given), why)


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
        from .optuna_search import STUDY_FILE, import_optuna, storage_url
        from .samplers import check_search

        import_optuna()  # the extra named, before storage_url's "No module named 'sqlalchemy'" (Optuna brings it)
        dims = parse_space(base, study.space or {})
        check_search(dims, study.n_trials, study.sampler, study.pruner, trial.seeds)
        storage_url(parent / STUDY_FILE)  # before the sweep folder is made
        return dims, []
    if configs is not None and not configs:
        raise ValueError("configs is empty: there is no trial to run (None runs the base config alone)")
    listed = configs if configs is not None else [{}]
    if len(listed) * len(trial.seeds) > MAX_TRIALS:  # each is planned (a spec) before the first runs
        raise ValueError(f"sweep has {len(listed) * len(trial.seeds)} trials ({len(listed)} configs × "
                         f"{len(trial.seeds)} seeds): at most {MAX_TRIALS}; use fewer configs or seeds")  # fmt: skip
    plan = list(itertools.product([dict(c) for c in listed], trial.seeds))
    for config, _ in plan:
        apply(base, config)  # every config is validated before anything runs
    return {}, plan

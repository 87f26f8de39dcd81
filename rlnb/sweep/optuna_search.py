"""Optuna as a sweep's source of trials: ask for a config when a slot frees, tell the result, and
let a pruner stop bad trials early from their per-step reports.

The study lives in the sweep folder (``study.db``, SQLite), so a stopped sweep resumes: trials that
were stopped (or running when the process died) are asked again with the same params, and finished
ones count towards ``n_trials``. Samplers and pruners are not stored by Optuna; they are rebuilt from
the sweep's arguments. All storage access goes through one lock: trials report from worker threads.
"""

from __future__ import annotations

import importlib
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from rlnb._options import check_int

from .space import MAX_CONFIGS, Categorical, Dimension, Float, Int
from .study_file import open_study
from .trial import Objective, TrialSpec, identity

STUDY_NAME = "rlnb-sweep"
"""Fixed, so that a resumed sweep finds its study (and Hyperband's brackets are reproducible)."""
STUDY_FILE = "study.db"
SAMPLER_SEED = 0
"""Samplers named by string are seeded with this plus the trials the study already has (0 for a new sweep):
a resumed sweep draws new points, not the ones it drew before. Pass an Optuna sampler object for another seed."""
MAX_GRID_POINTS = 10_000
"""The most points ``sampler='grid'`` runs: each is a trial, and far more is a search, not a grid."""
STOPPED_ATTR, RERUN_ATTR, SEED_OF_ATTR = "rlnb_stopped", "rlnb_rerun_of", "rlnb_seed_of"
"""Trial attributes: stopped by the user; asked again for that trial; runs with that (first) trial's seed."""


def import_optuna() -> Any:
    try:
        return importlib.import_module("optuna")
    except ImportError:
        raise ImportError("search='optuna' needs Optuna: pip install 'rlnb[optuna]'") from None


SAMPLERS, PRUNERS = ("tpe", "random", "grid"), ("median", "asha")


def storage_url(path: Path) -> str:
    """The SQLAlchemy URL of the SQLite file ``path``, percent-quoted: a ``?`` would start the URL's query
    (``runs_dir="exp?1"`` stored the study in ``exp``) and ``%2F`` would be unquoted to ``/``. A path the
    URL cannot carry exactly (one that is not valid UTF-8) is refused with ``ValueError``."""
    from sqlalchemy.engine import make_url

    text = str(path.resolve())
    try:
        url = "sqlite:///" + quote(text, safe="/")
    except UnicodeEncodeError:
        url = ""
    if not url or make_url(url).database != text:
        raise ValueError(
            f"the Optuna study cannot be stored under {text!r}: its path does not survive a database URL "
            "(not valid UTF-8); choose a runs_dir with another name"
        )
    return url


def check_search(
    dims: Mapping[str, Dimension], n_trials: int | None, sampler: Any, pruner: Any, seeds: Sequence[int]
) -> None:
    """The search's arguments, checked before the sweep folder is made or Optuna imported."""
    if isinstance(sampler, str) and sampler not in SAMPLERS:
        raise ValueError(f"sampler must be 'tpe', 'random', 'grid' or an Optuna sampler, got {sampler!r}")
    if isinstance(pruner, str) and pruner not in PRUNERS:
        raise ValueError(f"pruner must be 'median', 'asha', None or an Optuna pruner, got {pruner!r}")
    _check_objects(sampler, pruner)
    if sampler == "grid":
        grid_values(dims)  # raises for a Float range
    elif n_trials is None:
        raise ValueError("search='optuna' needs n_trials (only sampler='grid' knows its own size)")
    if n_trials is not None:  # 10**30 ran trials for ever, its progress bar counting toward 10**30
        why = "each is a trial, as grid() and random_search() make at most that many configs"
        n_trials = check_int("n_trials", n_trials, 1, MAX_CONFIGS, why=why)
        if sampler != "grid":  # the grid stops after its last point
            _check_repeats(dims, n_trials, seeds)


def _check_repeats(dims: Mapping[str, Dimension], n_trials: int, seeds: Sequence[int]) -> None:
    """A space of lists and Int ranges alone holds a finite number of points: trials past its points × seeds
    repeat one already run (``{"learning_rate": [1e-3]}`` with ``n_trials=3`` ran the same trial three times)."""
    if any(isinstance(dim, Float) for dim in dims.values()):
        return
    sizes = {name: len(d.choices) if isinstance(d, Categorical) else d.high - d.low + 1 for name, d in dims.items()}
    distinct = math.prod(sizes.values()) * len(seeds)
    if n_trials > distinct:
        each = " × ".join(f"{name} {size}" for name, size in sizes.items())
        raise ValueError(
            f"n_trials={n_trials} is more than the {distinct} distinct trials this space and seeds hold ({each} × "
            f"{len(seeds)} seeds): the rest would repeat a trial already run; use sampler='grid', which runs each "
            "point once, or n_trials <= " + str(distinct)
        )


def _check_objects(sampler: Any, pruner: Any) -> None:
    """A sampler or pruner given as an object is Optuna's: ``sampler=5`` raised an ``AttributeError`` after the sweep
    folder was made, ``pruner=5`` FAILED every trial (``'int' object has no attribute 'prune'``)."""
    if isinstance(sampler, str) and (pruner is None or isinstance(pruner, str)):
        return
    import optuna

    if not isinstance(sampler, str | optuna.samplers.BaseSampler):
        raise TypeError(f"sampler must be 'tpe', 'random', 'grid' or an Optuna sampler (optuna.samplers.*), "
                        f"got {sampler!r}")  # fmt: skip
    if isinstance(sampler, optuna.samplers.GridSampler):
        raise ValueError("use sampler='grid' (a GridSampler object stops the study from tell(), outside optimize())")
    if not (pruner is None or isinstance(pruner, str | optuna.pruners.BasePruner)):
        raise TypeError(f"pruner must be 'median', 'asha', None or an Optuna pruner (optuna.pruners.*), got {pruner!r}")


def make_sampler(optuna: Any, sampler: Any, dims: Mapping[str, Dimension], seed: int = SAMPLER_SEED) -> Any:
    if isinstance(sampler, optuna.samplers.GridSampler):
        raise ValueError("use sampler='grid' (a GridSampler object stops the study from tell(), outside optimize())")
    if not isinstance(sampler, str):
        return sampler
    if sampler == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    if sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if sampler == "grid":

        class AskTellGridSampler(optuna.samplers.GridSampler):
            """GridSampler calls ``study.stop()`` after the last point, which only works inside
            ``study.optimize``; with ask/tell the sweep checks ``is_exhausted`` itself."""

            def after_trial(self, *args: Any) -> None:
                return None

        return AskTellGridSampler(grid_values(dims), seed=seed)
    raise ValueError(f"sampler must be 'tpe', 'random', 'grid' or an Optuna sampler, got {sampler!r}")


def grid_values(dims: Mapping[str, Dimension]) -> dict[str, list[Any]]:
    """The points of ``sampler='grid'``: every choice of each dimension (a Float range has none), at most
    ``MAX_GRID_POINTS`` combinations (sized before any list is built: ``Int(1, 10**9)`` would fill memory)."""
    axes: dict[str, Sequence[Any]] = {}
    for name, dim in dims.items():
        if isinstance(dim, Float):
            raise ValueError(f"sampler='grid' needs a list of values for {name!r} (or an Int range), not {dim}")
        axes[name] = dim.choices if isinstance(dim, Categorical) else range(dim.low, dim.high + 1)
    points = math.prod(len(values) for values in axes.values())
    if points > MAX_GRID_POINTS:
        each = " × ".join(f"{name} {len(values)}" for name, values in axes.items())
        raise ValueError(
            f"sampler='grid' has {points} points ({each}): at most {MAX_GRID_POINTS}; "
            "use sampler='tpe' or 'random' with n_trials"
        )
    return {name: list(values) for name, values in axes.items()}


def make_pruner(optuna: Any, pruner: Any, steps: int) -> Any:
    """``"median"``: MedianPruner after 4 finished trials, judging from a quarter of the steps on;
    ``"asha"``: SuccessiveHalvingPruner with rungs at steps/9, steps/3, steps (reduction factor 3)."""
    if pruner is None:
        return optuna.pruners.NopPruner()
    if not isinstance(pruner, str):
        return pruner
    if pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=4, n_warmup_steps=max(1, steps // 4))
    if pruner == "asha":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=max(1, steps // 9), reduction_factor=3)
    raise ValueError(f"pruner must be 'median', 'asha', None or an Optuna pruner, got {pruner!r}")


def _distribution(optuna: Any, dim: Dimension) -> Any:
    d = optuna.distributions
    if isinstance(dim, Float):
        return d.FloatDistribution(dim.low, dim.high, log=dim.log)
    if isinstance(dim, Int):
        return d.IntDistribution(dim.low, dim.high, log=dim.log)
    return d.CategoricalDistribution(dim.choices)


class OptunaSource:
    """Trials from an Optuna study; ``make_spec(number, config)`` turns an asked trial into a TrialSpec."""

    def __init__(
        self,
        folder: Path,
        dims: Mapping[str, Dimension],
        n_trials: int | None,
        make_spec: Callable[[int, dict[str, Any], int | None], TrialSpec],
        *,
        sampler: Any,
        pruner: Any,
        objective: Objective,
        steps: int,
        recorded: int = 0,  # the trials' rows the sweep folder has (a resume's)
    ):
        optuna = self._optuna = import_optuna()
        self._lock = threading.Lock()
        self._distributions = {name: _distribution(optuna, dim) for name, dim in dims.items()}
        self.pruner_name = pruner if isinstance(pruner, str) else type(pruner).__name__
        level = optuna.logging.get_verbosity()
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "A new study created" line in the notebook
        try:
            self.study = open_study(
                optuna,
                folder / STUDY_FILE,
                recorded,
                storage=storage_url(folder / STUDY_FILE),
                study_name=STUDY_NAME,
                direction="maximize" if objective == "reward" else "minimize",
                sampler=make_sampler(optuna, sampler, dims),
                pruner=make_pruner(optuna, pruner, steps),
                load_if_exists=True,
            )
        finally:
            optuna.logging.set_verbosity(level)
        # seeded past the trials a resumed study has: seed 0 again would draw the same points again
        self.sampler = self.study.sampler = make_sampler(optuna, sampler, dims, SAMPLER_SEED + len(self.study.trials))
        self._make_spec = make_spec
        self._objective = objective
        self._trials: dict[int, Any] = {}
        finished = self.done_before = self._requeue_stopped()
        if n_trials is None:  # sampler="grid" (check_search): the grid's size
            n_trials = math.prod(len(v) for v in grid_values(dims).values())
        self.total = n_trials
        self._left = max(0, n_trials - finished)

    def _requeue_stopped(self) -> int:
        """Resume: trials stopped by the user, or left RUNNING by a process that died, are asked again
        with the same params and seed. Returns how many trials already finished for real."""
        state = self._optuna.trial.TrialState
        trials = self.study.get_trials(deepcopy=False)
        rerun = {t.user_attrs.get(RERUN_ATTR) for t in trials}
        self._known = {t.number: t for t in trials}
        finished = 0
        for t in trials:
            if t.state == state.RUNNING:
                self.study.tell(t.number, state=state.FAIL)  # its process is gone
            elif t.state != state.FAIL or not t.user_attrs.get(STOPPED_ATTR):
                finished += t.state in (state.COMPLETE, state.PRUNED, state.FAIL)
                continue
            if t.number not in rerun and t.params:
                first = t.user_attrs.get(SEED_OF_ATTR, t.number)  # a rerun stopped again: its first attempt's
                self.study.enqueue_trial(t.params, user_attrs={RERUN_ATTR: t.number, SEED_OF_ATTR: first})
        return finished

    def expected(self, trial: int) -> dict[str, Any] | None:
        """The identifying columns of ``trial``'s row as the study has them (its params, and the seed it ran with),
        or None for a trial the study did not have when the sweep (re)started: every recorded row's is one."""
        asked = self._known.get(trial)
        if asked is None:
            return None
        return identity(self._make_spec(trial, dict(asked.params), asked.user_attrs.get(SEED_OF_ATTR)))

    def superseded(self) -> set[int]:
        """Stopped trials that were asked again (under a new number): the table shows the new attempt only, as a
        plan's rerun replaces its STOPPED row (both rows stayed, and ``summarize`` counted a completed config's
        stopped attempt as not completed)."""
        waiting = self._optuna.trial.TrialState.WAITING
        with self._lock:
            trials = self.study.get_trials(deepcopy=False)
        return {t.user_attrs[RERUN_ATTR] for t in trials if RERUN_ATTR in t.user_attrs and t.state != waiting}

    def next_spec(self) -> TrialSpec | None:
        """The next trial to run, or None when the budget (or the grid) is used up."""
        with self._lock:
            if self._left <= 0:
                return None
            if isinstance(self.sampler, self._optuna.samplers.GridSampler) and self.sampler.is_exhausted(self.study):
                return None
            trial = self.study.ask(self._distributions)
            self._left -= 1
            self._trials[trial.number] = trial
            return self._make_spec(trial.number, dict(trial.params), trial.user_attrs.get(SEED_OF_ATTR))

    def report(self, spec: TrialSpec, step: int, value: float) -> str | None:
        """Called by a running trial after each step: report, and say whether the pruner stops it."""
        if not math.isfinite(value):
            return None
        with self._lock:
            trial = self._trials[spec.trial]
            trial.report(value, step)
            if trial.should_prune():
                return f"pruned ({self.pruner_name}) at step {step}: {self._objective} {value:.3g}"
        return None

    def finish(self, row: dict[str, Any]) -> None:
        """Tell the study how the trial ended (a STOPPED one is marked to run again on resume)."""
        state = self._optuna.trial.TrialState
        with self._lock:
            trial = self._trials.pop(row["trial"])
            trial.set_user_attr("rlnb_status", row["status"])
            if row.get("run_path"):
                trial.set_user_attr("rlnb_run_path", row["run_path"])
            value = row.get("value", math.nan)
            if row["status"] == "COMPLETED" and math.isfinite(value):
                self.study.tell(trial, value)
            elif row["status"] == "PRUNED":
                self.study.tell(trial, state=state.PRUNED)
            else:
                if row["status"] == "STOPPED":
                    trial.set_user_attr(STOPPED_ATTR, True)
                self.study.tell(trial, state=state.FAIL)

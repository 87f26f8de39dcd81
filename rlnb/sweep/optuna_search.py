"""Optuna as a sweep's source of trials: ask for a config when a slot frees, tell the result, and
let a pruner stop bad trials early from their per-step reports.

The study lives in the sweep folder (``study.db``, SQLite), so a stopped sweep resumes: trials that
were stopped (or running when the process died) are asked again with the same params, and finished
ones count towards ``n_trials``. Samplers and pruners are not stored by Optuna; they are rebuilt from
the sweep's arguments (``samplers``). All storage access goes through one lock: trials report from worker threads.
"""

from __future__ import annotations

import itertools
import math
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from rlnb._extras import need
from rlnb.wire import TrialStatus

from .rows import ROWS_FILE, run_path
from .samplers import SAMPLER_SEED, grid_values, make_pruner, make_sampler
from .space import Dimension, Float, Int, points
from .study_file import open_study
from .trial import Objective, TrialSpec, identity

STUDY_NAME = "rlnb-sweep"
"""Fixed, so that a resumed sweep finds its study (and Hyperband's brackets are reproducible)."""
STUDY_FILE = "study.db"
STOPPED_ATTR, RERUN_ATTR, SEED_OF_ATTR = "rlnb_stopped", "rlnb_rerun_of", "rlnb_seed_of"
"""Trial attributes: stopped (by the user, or by its process dying: to run again); asked again for that trial; runs
with that (first) trial's seed."""
REPEAT_ATTR = "rlnb_repeat_of"
"""A trial whose (params, seed) that trial already has: told FAIL, never run, not counted."""
REASKS = 3
"""Repeats told FAIL in a row before a point not asked yet is queued (each is a trial in the study's file)."""


def import_optuna() -> Any:
    return need("optuna", "optuna", "search='optuna'")


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
        recorded: Sequence[dict[str, Any]] = (),  # the trials' rows the sweep folder has (a resume's)
        seeds: int = 1,  # trial n runs with seed n % seeds (or its SEED_OF_ATTR's)
    ):
        optuna = self._optuna = import_optuna()
        self._lock = threading.Lock()
        self._seeds = seeds
        self._distributions = {name: _distribution(optuna, dim) for name, dim in dims.items()}
        self.pruner_name = pruner if isinstance(pruner, str) else type(pruner).__name__
        level = optuna.logging.get_verbosity()
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "A new study created" line in the notebook
        try:
            self.study, self._storage = open_study(
                optuna,
                folder / STUDY_FILE,
                len(recorded),
                storage=storage_url(folder / STUDY_FILE),
                study_name=STUDY_NAME,
                direction="maximize" if objective == "reward" else "minimize",
                sampler=make_sampler(optuna, sampler, dims),
                pruner=make_pruner(optuna, pruner, steps, self._seed_of if seeds > 1 else None),
                load_if_exists=True,
            )
        finally:
            optuna.logging.set_verbosity(level)
        # seeded past the trials a resumed study has: seed 0 again would draw the same points again
        self.sampler = self.study.sampler = make_sampler(optuna, sampler, dims, SAMPLER_SEED + len(self.study.trials))
        self._make_spec = make_spec
        self._objective = objective
        self._folder = folder
        self._trials: dict[int, Any] = {}
        finished = self.done_before = self._requeue_stopped({r["trial"]: r for r in recorded})
        if n_trials is None:  # sampler="grid" (check_search): every point on every seed
            n_trials = math.prod(len(v) for v in grid_values(dims).values()) * seeds
        self.total = n_trials
        self._left = max(0, n_trials - finished)
        self._grid = sampler == "grid"  # the points × seeds queued in order, not drawn: each (point, seed) once
        axes = {name: values for name, dim in dims.items() if (values := points(dim)) is not None}
        self._axes = axes if len(axes) == len(dims) else None  # None: a Float range makes the space infinite
        waiting = optuna.trial.TrialState.WAITING  # a rerun queued: its params are the stopped trial's
        self._asked = {self._key(t): t.number for t in self.study.trials
                       if REPEAT_ATTR not in t.user_attrs and t.state != waiting}  # fmt: skip
        self._fresh = self._unasked()  # one walk of the space: what it passed was asked, and stays so

    def _requeue_stopped(self, rows: Mapping[int, dict[str, Any]]) -> int:
        """Resume: trials stopped by the user, or left RUNNING by a process that died, are asked again
        with the same params and seed. Returns how many trials already finished for real. A RUNNING trial whose row
        the folder has (the process died between writing it and telling the study) is marked and told from that row,
        as ``finish`` would have: else it would run again, its new row replacing the finished one; a STOPPED one
        unmarked would be counted finished by the next resume."""
        state = self._optuna.trial.TrialState
        trials = self.study.get_trials(deepcopy=False)
        rerun = {t.user_attrs.get(RERUN_ATTR) for t in trials}
        self._known = {t.number: t for t in trials}
        finished, lost = 0, []
        for t in trials:
            if REPEAT_ATTR in t.user_attrs:  # never ran
                continue
            row = rows.get(t.number)
            if t.state == state.RUNNING and row is not None:
                recovered = {**row, "run_path": run_path(self._folder, row.get("run_path"))}
                self._told(self._storage_setter(t.number), t.number, recovered)
                if row["status"] != TrialStatus.STOPPED:
                    finished += 1
                    continue
            elif t.state == state.RUNNING:  # its process is gone: marked, or a later resume counted it finished
                self._storage_setter(t.number)(STOPPED_ATTR, True)
                self.study.tell(t.number, state=state.FAIL)
            elif t.state != state.FAIL or not (t.user_attrs.get(STOPPED_ATTR) or t.number in rerun):
                # finished: not stopped or killed and asked again (an older rlnb told a killed one FAIL unmarked)
                done = t.state in (state.COMPLETE, state.PRUNED, state.FAIL)
                finished += done
                lost += [t.number] if done and row is None else []
                continue
            if t.number not in rerun and t.params:
                first = t.user_attrs.get(SEED_OF_ATTR, t.number)  # a rerun stopped again: its first attempt's
                self.study.enqueue_trial(t.params, user_attrs={RERUN_ATTR: t.number, SEED_OF_ATTR: first})
        if lost:  # trials.jsonl deleted, or a line broken by hand: an empty table, without a word
            warnings.warn(f"{self._folder / STUDY_FILE} holds {len(lost)} finished trial{'s' * (len(lost) > 1)} "
                          f"({', '.join(map(str, lost[:10]))}) that {ROWS_FILE} has no row of (deleted, or edited?): "
                          "they count towards n_trials and are not run again, but the table lacks them; their runs "
                          "are in the sweep folder", stacklevel=4)  # fmt: skip
        return finished

    def _storage_setter(self, number: int) -> Callable[[str, Any], None]:
        """``set_user_attr`` for the trial ``number`` of this study, through its storage (no ``Trial`` is made for a
        trial asked by a process that is gone)."""
        storage = self._storage
        trial_id = storage.get_trial_id_from_study_id_trial_number(storage.get_study_id_from_name(STUDY_NAME), number)
        return lambda key, value: storage.set_trial_user_attr(trial_id, key, value)

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
            trial = self._ask()
            if trial is None:
                return None
            self._left -= 1
            self._trials[trial.number] = trial
            return self._make_spec(trial.number, dict(trial.params), trial.user_attrs.get(SEED_OF_ATTR))

    def _key(self, trial: Any) -> tuple[tuple[tuple[str, Any], ...], int]:
        """What makes a trial the same run: its params and the index of its seed."""
        return tuple(sorted(trial.params.items())), self._seed_of(trial)

    def _seed_of(self, trial: Any) -> int:
        """The index of ``trial``'s seed in the sweep's seeds."""
        return int(trial.user_attrs.get(SEED_OF_ATTR, trial.number)) % self._seeds

    def _ask(self) -> Any:
        """A new trial. In a finite space, a (params, seed) drawn again is told FAIL (marked ``REPEAT_ATTR``, never
        run) and drawn anew; after ``REASKS`` repeats, a point not asked yet is queued and asked. A grid draws
        nothing: a stopped trial queued again runs first, then each (point, seed) not asked yet, in order. None: every
        point is asked."""
        for _ in range(0 if self._grid else REASKS):
            trial = self.study.ask(self._distributions)
            key = self._key(trial)
            if self._axes is None or RERUN_ATTR in trial.user_attrs or key not in self._asked:
                self._asked[key] = trial.number
                return trial
            trial.set_user_attr(REPEAT_ATTR, self._asked[key])
            self.study.tell(trial, state=self._optuna.trial.TrialState.FAIL)
        waiting = self._optuna.trial.TrialState.WAITING
        if not (self._grid and self.study.get_trials(deepcopy=False, states=(waiting,))):
            fresh = next(self._fresh, None)
            if fresh is None:
                return None
            params, seed = fresh
            self.study.enqueue_trial(params, user_attrs={SEED_OF_ATTR: seed})
        trial = self.study.ask(self._distributions)
        self._asked[self._key(trial)] = trial.number
        return trial

    def _unasked(self) -> Any:
        """The finite space's (params, seed index) not asked yet, in the space's order: every point on the first seed,
        then on the next."""
        assert self._axes is not None
        for seed in range(self._seeds):
            for point in itertools.product(*self._axes.values()):
                params = dict(zip(self._axes, point, strict=True))
                if (tuple(sorted(params.items())), seed) not in self._asked:
                    yield params, seed

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
        with self._lock:
            trial = self._trials.pop(row["trial"])
            self._told(trial.set_user_attr, trial, row)

    def _told(self, set_attr: Callable[[str, Any], None], trial: Any, row: dict[str, Any]) -> None:
        """Mark ``trial`` (its ``Trial``, or its number) with the row's status and run, then tell the study."""
        set_attr("rlnb_status", row["status"])
        if row.get("run_path"):
            set_attr("rlnb_run_path", row["run_path"])
        if row["status"] == TrialStatus.STOPPED:
            set_attr(STOPPED_ATTR, True)
        self._tell(trial, row)

    def _tell(self, trial: Any, row: dict[str, Any]) -> None:
        """Tell the study ``trial`` (its ``Trial``, or its number) ended as ``row`` says."""
        state = self._optuna.trial.TrialState
        value = row.get("value", math.nan)
        if row["status"] == TrialStatus.COMPLETED and isinstance(value, int | float) and math.isfinite(value):
            self.study.tell(trial, value)
        elif row["status"] == TrialStatus.PRUNED:
            self.study.tell(trial, state=state.PRUNED)
        else:
            self.study.tell(trial, state=state.FAIL)

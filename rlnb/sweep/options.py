"""The option groups of ``sweep``: what each trial is (``TrialOptions``), how Optuna picks configs
(``SearchOptions``) and where trials run (``ExecutorOptions``); and of ``lr_find``: what the range test runs
(``RangeTestOptions``).

``sweep(base, configs, steps=50, seeds=(0, 1), max_concurrent=4)`` sets their fields by name; a group
can also be given whole (``trial_options=TrialOptions(steps=50)``) and reused across sweeps. Each group
checks its fields when it is built, before a sweep folder is made or a trial starts.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rlnb._input.checks import check_event, check_int, check_seconds, is_integer, set_int, takes
from rlnb.history.runconfig import LOCAL, REMOTE
from rlnb.params import OptimizerParams
from rlnb.params.schedule import Schedule
from rlnb.session import Session
from rlnb.session.connect import check_target
from rlnb.tasks import Task, check_steps, digits_task, seed_range
from rlnb.tasks.task import check_local_group_size

from .executors import EXECUTORS
from .space import MAX_CONFIGS, check_once
from .trial import LOSS_IS_NOISE, SLOT_TIMEOUT, Objective

SEARCHES = (None, "optuna")
RANGE_TEST_STEPS = (5, 10_000)
"""``lr_find``'s ``steps`` allowed: a curve needs a few points to smooth; the rates are listed before the first step."""

StepFn = Callable[[Session, OptimizerParams, int], float]
"""``step_fn(session, params, i) -> float``: one training step with ``params``, returning the objective."""


@dataclass(frozen=True)
class TrialOptions:
    """Each trial: ``steps`` RL steps of ``task`` on ``target``, once per seed in ``seeds``.

    ``task`` is a ``Task`` or a reward function ``reward(prompt, completion) -> float`` used with the digits
    task's prompts (default: the digits task, ``digits_task()``). ``target`` is ``"local"`` or a URL (Together,
    ``rlnb serve``).
    ``schedule`` scales each step's learning rate. ``objective`` is what a trial reports and is judged by:
    ``"reward"`` (maximised), the mean of the last 5 steps; ``"loss"`` is refused, as the GRPO loss of an on-policy
    RL step is ~0 at every rate. A trial whose provider answers
    429 (its session cap reached) waits for a slot up to ``slot_timeout`` seconds (default an hour), then FAILS."""

    seeds: Sequence[int] = (0,)
    steps: int = 20
    task: Task | Callable[[str, str], float] | None = None
    target: str = LOCAL
    schedule: Schedule | None = None
    objective: Objective = "reward"
    slot_timeout: float = SLOT_TIMEOUT

    def __post_init__(self) -> None:
        if self.objective != "reward":  # a loss ranked the configs (and Optuna minimised it) by float rounding
            raise ValueError(f"objective must be 'reward': {LOSS_IS_NOISE}; its final_loss column stays in the "
                             f"table, got {self.objective!r}")  # fmt: skip
        object.__setattr__(self, "steps", check_steps(self.steps))
        object.__setattr__(self, "slot_timeout", check_seconds("slot_timeout", self.slot_timeout))
        if not (self.task is None or isinstance(self.task, Task) or callable(self.task)):  # every trial FAILED
            raise TypeError(f"task must be a Task, a reward function reward(prompt, completion) -> float or None "
                            f"(the digits task), such as first_letter_task(), got {self.task!r}")  # fmt: skip
        task = self.the_task()  # a reward that cannot take (prompt, completion) is refused before the sweep folder
        check_target(self.target)
        check_local_group_size(task, self.target)  # every trial (batched: every member) FAILED
        if self.schedule is not None and not isinstance(self.schedule, Schedule):  # each trial FAILED: AttributeError
            raise TypeError(f"schedule must be None or a Schedule, such as Schedule('cosine', total_steps="
                            f"{self.steps}), got {self.schedule!r}")  # fmt: skip
        seeds = self.seeds  # a str is a sequence too: seeds="ab" ran seeds 'a' and 'b'
        arrayed = hasattr(seeds, "tolist") and getattr(seeds, "shape", None) != ()  # np.int64(5) has tolist, no len
        listed = isinstance(seeds, Sequence) and not isinstance(seeds, str | bytes) or arrayed
        if listed and len(seeds) > MAX_CONFIGS:  # range(10**7) would be read, checked and planned for minutes
            raise ValueError(f"seeds holds {len(seeds)} seeds: at most {MAX_CONFIGS}, each a trial of every config")
        if not listed or not len(seeds) or not all(is_integer(s) for s in seeds):
            raise ValueError(f"seeds must be a non-empty sequence of integers, such as (0, 1), got {seeds!r}")
        seeds = tuple(int(s) for s in seeds)  # np.arange(3) too; plain ints, which sweep.json's JSON takes
        object.__setattr__(self, "seeds", seeds)
        check_once("seeds", seeds)  # the same config and seed is the same run
        lowest, highest = seed_range(self.steps)
        outside = [s for s in seeds if not lowest <= s <= highest]
        if outside:  # a batched trial ran (its seeds wrapped), the same trial on a thread FAILED, after the folder
            raise ValueError(f"seeds must be in [{lowest}, {highest}] with steps={self.steps} (step i samples with "
                             f"seed * SEED_STRIDE + i, an int64), got {outside[0]}")  # fmt: skip

    def the_task(self) -> Task:
        """``task`` as a ``Task``."""
        if isinstance(self.task, Task):
            return self.task
        default = digits_task()
        return default if self.task is None else Task("custom", default.prompts, self.task, default.max_tokens)


@dataclass(frozen=True)
class SearchOptions:
    """``search="optuna"``: ``n_trials`` trials whose configs Optuna picks from ``space`` (``sampler``
    ``"tpe"`` | ``"random"`` | ``"grid"``, or an Optuna sampler); ``pruner`` (``"median"`` | ``"asha"`` |
    None, or an Optuna pruner) stops bad trials early. ``search=None`` (default) runs the configs given."""

    search: str | None = None
    space: Mapping[str, Any] | None = None
    n_trials: int | None = None
    sampler: Any = "tpe"
    pruner: Any = "median"

    def __post_init__(self) -> None:
        if self.search not in SEARCHES:
            raise ValueError(f"search must be None (the configs as given) or 'optuna', got {self.search!r}")
        if self.search is None and (self.space is not None or self.n_trials is not None):
            raise ValueError("space= and n_trials= need search='optuna' (or use grid()/random_search() for configs)")
        if self.search is None and (self.sampler != "tpe" or self.pruner != "median"):  # dropped in silence
            raise ValueError(f"sampler= and pruner= need search='optuna' (the configs given run as they are), got "
                             f"sampler={self.sampler!r}, pruner={self.pruner!r}"[:300])  # fmt: skip


@dataclass(frozen=True)
class ExecutorOptions:
    """Where trials run: ``executor`` ``"auto"`` (compatible local trials as stacked ensembles, the others on
    threads), ``"batched"``, ``"threads"`` or ``"ray"`` (Ray tasks of ``resources_per_trial``, on the Ray this
    process is connected to, else at ``address``, else a new local one); up to ``max_concurrent`` at once."""

    executor: str = "auto"
    max_concurrent: int | None = None
    address: str | None = None
    resources_per_trial: dict[str, float] | None = None

    def __post_init__(self) -> None:
        if self.executor not in EXECUTORS:
            raise ValueError(f"executor must be one of {', '.join(EXECUTORS)}, got {self.executor!r}")
        if self.max_concurrent is not None:
            set_int(self, "max_concurrent", 1)
        if self.executor != "ray" and (self.address is not None or self.resources_per_trial is not None):
            # ignored, resources_per_trial={"gpu": 1} on threads would train on the CPU (device= picks it there)
            raise ValueError(f"address= and resources_per_trial= need executor='ray', got executor={self.executor!r}")
        if not isinstance(self.address, str | None):
            raise ValueError(f"address must be None or a Ray address such as 'auto' or 'ray://head:10001', got "
                             f"{self.address!r}")  # fmt: skip
        if self.executor == "ray":
            from .ray_checks import check_resources

            check_resources(self.resources_per_trial)


@dataclass(frozen=True)
class RangeTestOptions:
    """What ``lr_find`` runs: ``steps`` steps (an integer in ``RANGE_TEST_STEPS``) as the rate grows from
    ``start_lr`` to ``end_lr`` (finite and > 0; None: the optimizer's default range), each one RL step of
    ``task`` (default: the digits task) reporting ``objective`` (the mean reward, or the loss), or your
    ``step_fn(session, params, i)`` (then no ``task``: it reads none). Step i of the task samples with ``seed``
    (None: 0), which also seeds a new local session (its initial weights, unseeded sampling); a session's copy goes on
    with that session's seed and generators, so beside a ``step_fn`` a seed is refused there (``check_range_test``)."""

    start_lr: float | None = None
    end_lr: float | None = None
    steps: int = 40
    task: Task | None = None
    step_fn: StepFn | None = None
    objective: Objective = "reward"
    seed: int | None = None

    def __post_init__(self) -> None:
        set_int(self, "steps", *RANGE_TEST_STEPS)
        set_int(self, "seed", *seed_range(self.steps), optional=True)  # step i samples with seed * SEED_STRIDE + i
        if self.objective not in ("reward", "loss"):
            raise ValueError(f"objective must be 'reward' or 'loss', got {self.objective!r}")
        if self.task is not None and not isinstance(self.task, Task):  # not at its first step, session open
            raise TypeError(f"task must be a Task, such as first_letter_task(), or None (the digits task), got "
                            f"{self.task!r}")  # fmt: skip
        if self.step_fn is not None and not takes(self.step_fn, 3):  # its first step raised, a session open
            raise TypeError(f"step_fn must be None or a function step_fn(session, params, i) returning the step's "
                            f"reward or loss, got {self.step_fn!r}"[:300])  # fmt: skip
        if self.step_fn is not None and self.task is not None:  # the task was dropped: the test measured the step_fn
            raise ValueError("task= and step_fn= both say what a step of the range test runs (a step_fn reads no "
                             "task): pass one")  # fmt: skip
        for name in ("start_lr", "end_lr"):
            lr = getattr(self, name)
            if lr is None:
                continue
            if isinstance(lr, bool) or not isinstance(lr, numbers.Real) or not 0 < float(lr) < math.inf:
                raise ValueError(f"{name} must be a finite number > 0 (None: the default), got {lr!r}")
            object.__setattr__(self, name, float(lr))  # np.float32(1e-4) is a number too: a float, as every rate sent


def check_params(base: Any) -> None:
    """``TypeError`` naming ``base`` (of ``lr_find``, ``sweep``, ``ablate``) unless it is an ``OptimizerParams``: a dict
    of fields was an ``AttributeError`` on ``request_body`` naming neither."""
    if not isinstance(base, OptimizerParams):
        raise TypeError(f"base must be an OptimizerParams, such as rlnb.AdamParams() or rlnb.MuonParams(), got "
                        f"{base!r}"[:300])  # fmt: skip


def check_base(base: Any, session: Any, stop: Any = None, progress: Any = None, opened: Any = None) -> None:
    """``TypeError`` naming ``base``, ``session``, ``stop``, ``progress`` or ``opened`` of ``lr_find`` when it is no
    ``OptimizerParams`` / ``Session`` / Event (``check_event``, as ``sweep`` and ``run_batched`` check it) /
    callable: an AttributeError on ``resolved`` or ``history`` named neither (``lr_find(params, "local")``: a
    target); ``stop=True`` failed at the first step, a run folder made."""
    check_params(base)
    if session is not None and not isinstance(session, Session):
        raise TypeError(f"session must be a Session or None (a fresh one; target= names where), got {session!r}")
    check_event(stop, "the test")
    if progress is not None and not takes(progress, 2):  # sweep's (done, total, row) would fail its first call
        raise TypeError(f"progress must be a callable progress(done, total), False or None (lr_find draws no "
                        f"progress bar), got {progress!r}")  # fmt: skip
    if opened is not None and not takes(opened, 1):
        raise TypeError(f"opened must be a callable opened(session) or None, got {opened!r}"[:300])


def check_range_test(test: RangeTestOptions, local: bool, options: Mapping[str, Any], copied: bool = False) -> None:
    """What ``lr_find``'s RL steps (no ``step_fn``) cannot run, refused before a session is copied or opened: a
    task's group past the in-process engine's cap (``local``), a trainer-only session (``num_generator_replicas=0``);
    beside a ``step_fn``, a ``seed`` where it seeds nothing (a session ``copied``, a remote one), dropped in silence."""
    if test.step_fn is not None:  # the user's step may well not sample
        if test.seed is not None and (copied or not local):
            where = "a copy of a session (it goes on with the session's seed and generators)" if copied else (
                "a remote session (the service seeds it)")  # fmt: skip
            raise ValueError(f"seed={test.seed} seeds nothing beside a step_fn on {where}: seed seeds the task's RL "
                             "steps and a new local session; leave it out, and seed what your step_fn "
                             "samples")  # fmt: skip
        return
    check_local_group_size(test.task or digits_task(), LOCAL if local else REMOTE)
    check_can_sample(options, "num_generator_replicas=0 starts a trainer-only session, which cannot sample, and each "
                     "step of the range test samples its group: leave it out (1), or pass a step_fn")  # fmt: skip


def check_can_sample(options: Mapping[str, Any], refusal: str) -> None:
    """``ValueError(refusal)`` when ``options`` start trainer-only sessions (``num_generator_replicas=0``, by name
    or in an option group given whole), which cannot sample."""
    if check_int("num_generator_replicas", given(options, "num_generator_replicas", 1), 0) == 0:
        raise ValueError(refusal)


def given(options: Mapping[str, Any], name: str, default: Any) -> Any:
    """The connect option ``name`` of ``options``, by name or in an option group given whole (a name wins), else
    ``default``."""
    grouped = [getattr(g, name, None) for g in options.values() if dataclasses.is_dataclass(g)]
    return options.get(name, next((v for v in grouped if v is not None), default))


SET_PER_TRIAL = frozenset({"optimizer", "run_id", "seed", "history"})
"""``rlnb.connect`` keywords the sweep sets for each trial itself (the seed from ``seeds``)."""


def check_connect_options(options: Mapping[str, Any], target: str) -> None:
    """``TypeError`` naming a keyword that is neither a group's field nor one ``rlnb.connect`` takes for
    ``target`` (or one the sweep sets per trial), and ``ValueError`` for trainer-only sessions
    (``num_generator_replicas=0``, by name or in a group), which no RL step can sample on: once, before the sweep
    folder is made, rather than as the reason of every trial's FAILED row."""
    from rlnb.session.connect import keywords

    unknown = sorted(set(options) - keywords(target))
    if unknown:
        raise TypeError(
            f"sweep() got unexpected keyword argument(s): {', '.join(unknown)} (neither a field of TrialOptions, "
            f"SearchOptions or ExecutorOptions nor an option of rlnb.connect for target {target!r})"
        )
    taken = sorted(set(options) & SET_PER_TRIAL)
    if taken:
        raise TypeError(f"sweep() sets {', '.join(taken)} for each trial itself (seeds= gives the seeds)")
    if options.get("record", True) is not True:  # every trial's run_path was None: no history, nothing to resume
        raise ValueError(f"record={options['record']!r}: a sweep records each trial's history in its folder (its "
                         "run_path, histories(), resume=); leave record out")  # fmt: skip
    check_can_sample(  # each trial FAILED INVALID_INPUT at its first sample
        options,
        "num_generator_replicas=0 starts trainer-only sessions, which cannot sample, and every trial's RL "
        "step samples its group: leave it out (1) or pass num_generator_replicas >= 1",
    )

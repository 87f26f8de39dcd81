"""A search's sampler and pruner, as the sweep's arguments name them: checked before the sweep folder is made or
Optuna imported (``check_search``), then built (``make_sampler``, ``make_pruner``). Optuna stores neither, so a resumed
sweep builds them again from its arguments; apart from ``optuna_search``, which runs the study they drive."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rlnb._input.checks import check_int

from .seed_pruning import SeedPruner
from .space import MAX_CONFIGS, Dimension, points

SAMPLER_SEED = 0
"""Samplers named by string are seeded with this plus the trials the study already has (0 for a new sweep):
a resumed sweep draws new points, not the ones it drew before. Pass an Optuna sampler object for another seed."""
MAX_GRID_POINTS = 10_000
"""The most points ``sampler='grid'`` runs: each is a trial, and far more is a search, not a grid."""
SAMPLERS, PRUNERS = ("tpe", "random", "grid"), ("median", "asha")


def check_search(
    dims: Mapping[str, Dimension], n_trials: int | None, sampler: Any, pruner: Any, seeds: Sequence[int]
) -> None:
    """The search's arguments, checked before the sweep folder is made or Optuna imported."""
    if isinstance(sampler, str) and sampler not in SAMPLERS:
        raise ValueError(f"sampler must be 'tpe', 'random', 'grid' or an Optuna sampler, got {sampler!r}")
    if isinstance(pruner, str) and pruner not in PRUNERS:
        raise ValueError(f"pruner must be 'median', 'asha', None or an Optuna pruner, got {pruner!r}")
    _check_objects(sampler, pruner, len(seeds))
    if sampler == "grid":
        count = math.prod(len(v) for v in grid_values(dims).values()) * len(seeds)  # raises for a Float range
        if n_trials is None and count > MAX_CONFIGS:  # each (point, seed) is a trial
            raise ValueError(f"seeds: sampler='grid' runs each of its points on each of the {len(seeds)} seeds, "
                             f"{count} trials: at most {MAX_CONFIGS}; give fewer seeds or points, or "
                             "n_trials")  # fmt: skip
    elif n_trials is None:
        raise ValueError("search='optuna' needs n_trials (only sampler='grid' knows its own size)")
    if n_trials is not None:  # 10**30 ran trials for ever, its progress bar counting toward 10**30
        why = "each is a trial, as grid() and random_search() make at most that many configs"
        n_trials = check_int("n_trials", n_trials, 1, MAX_CONFIGS, why=why)
        _check_repeats(dims, n_trials, seeds, sampler == "grid")


def _check_repeats(dims: Mapping[str, Dimension], n_trials: int, seeds: Sequence[int], grid: bool) -> None:
    """A space of lists and Int ranges alone holds a finite number of points: trials past its points × seeds
    repeat one already run (``{"learning_rate": [1e-3]}`` with ``n_trials=3`` would run the same trial three times);
    a ``grid`` ends there (it stopped short of ``n_trials`` without a word)."""
    axes = {name: points(dim) for name, dim in dims.items()}
    sizes = {name: len(values) for name, values in axes.items() if values is not None}
    if len(sizes) < len(axes):  # a Float range: no end of points
        return
    distinct = math.prod(sizes.values()) * len(seeds)
    if n_trials > distinct:
        each = " × ".join(f"{name} {size}" for name, size in sizes.items())
        raise ValueError(
            f"n_trials={n_trials} is more than the {distinct} distinct trials this space and seeds hold ({each} × "
            f"{len(seeds)} seeds): the rest would repeat a trial already run; "
            + (f"leave n_trials out (the grid runs each point on each seed once) or give n_trials <= {distinct}"
               if grid else f"use sampler='grid', which runs each point on each seed once, or n_trials <= {distinct}")
        )  # fmt: skip


def _check_objects(sampler: Any, pruner: Any, seeds: int) -> None:
    """A sampler or pruner given as an object is Optuna's: ``sampler=5`` would raise an ``AttributeError`` after the
    sweep folder is made, ``pruner=5`` fail every trial (``'int' object has no attribute 'prune'``). A
    HyperbandPruner reads its brackets' trials from the study's storage, past ``SeedPruner``: on several seeds it
    would judge a trial against other seeds' trials."""
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
    if seeds > 1 and isinstance(pruner, optuna.pruners.HyperbandPruner):
        raise ValueError(
            f"pruner: a HyperbandPruner judges a trial against every seed's trials, and a search on "
            f"{seeds} seeds must judge it against its own seed's: use pruner='asha', or one seed"
        )


def make_sampler(optuna: Any, sampler: Any, dims: Mapping[str, Dimension], seed: int = SAMPLER_SEED) -> Any:
    if isinstance(sampler, optuna.samplers.GridSampler):
        raise ValueError("use sampler='grid' (a GridSampler object stops the study from tell(), outside optimize())")
    if not isinstance(sampler, str):
        return sampler
    if sampler == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    if sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if sampler == "grid":  # the search queues each (point, seed) itself (optuna_search): no params left to draw
        grid_values(dims)
        return optuna.samplers.RandomSampler(seed=seed)
    raise ValueError(f"sampler must be 'tpe', 'random', 'grid' or an Optuna sampler, got {sampler!r}")


def grid_values(dims: Mapping[str, Dimension]) -> dict[str, list[Any]]:
    """The points of ``sampler='grid'``: every choice of each dimension (a Float range has none), at most
    ``MAX_GRID_POINTS`` combinations (sized before any list is built: ``Int(1, 10**9)`` would fill memory)."""
    axes: dict[str, Sequence[Any]] = {}
    for name, dim in dims.items():
        values = points(dim)
        if values is None:
            raise ValueError(f"sampler='grid' needs a list of values for {name!r} (or an Int range), not {dim}")
        axes[name] = values
    count = math.prod(len(values) for values in axes.values())
    if count > MAX_GRID_POINTS:
        each = " × ".join(f"{name} {len(values)}" for name, values in axes.items())
        raise ValueError(
            f"sampler='grid' has {count} points ({each}): at most {MAX_GRID_POINTS}; "
            "use sampler='tpe' or 'random' with n_trials"
        )
    return {name: list(values) for name, values in axes.items()}


def make_pruner(optuna: Any, pruner: Any, steps: int, seed_of: Callable[[Any], int] | None = None) -> Any:
    """The pruner; with ``seed_of`` (a search on several seeds), one judging each trial against the trials on its own
    seed alone (``SeedPruner``)."""
    built = _pruner(optuna, pruner, steps)
    if seed_of is None or isinstance(built, optuna.pruners.NopPruner):
        return built
    return SeedPruner(built, seed_of)


def _pruner(optuna: Any, pruner: Any, steps: int) -> Any:
    """``"median"``: MedianPruner after 4 finished trials, judging from a quarter of the steps on;
    ``"asha"``: SuccessiveHalvingPruner with rungs at ``steps // 9``, then ×3 (reduction factor 3): 4, 12 and 36
    for 40 steps."""
    if pruner is None:
        return optuna.pruners.NopPruner()
    if not isinstance(pruner, str):
        return pruner
    if pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=4, n_warmup_steps=max(1, steps // 4))
    if pruner == "asha":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=max(1, steps // 9), reduction_factor=3)
    raise ValueError(f"pruner must be 'median', 'asha', None or an Optuna pruner, got {pruner!r}")

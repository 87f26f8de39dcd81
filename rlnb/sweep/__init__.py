"""Hyperparameter sweeps, searches, ablations and the learning-rate range test.

``sweep`` runs one RL training run per trial — from a list of configs or an Optuna search, on a
thread pool, on Ray, or on a remote provider's sessions — and returns a DataFrame with one row per
trial. Failures are data: a failed, pruned or stopped trial keeps its row (``status``, ``reason``) and
its history on disk; stopping keeps every finished trial, and ``resume=`` continues a stopped sweep.
``ablate`` changes one factor at a time against a baseline; ``summarize`` gives mean / std / min / max
over seeds per config; ``lr_find`` runs a learning-rate range test.

Modules: ``options`` (the groups of ``sweep``'s options: ``TrialOptions``, ``SearchOptions``, ``ExecutorOptions``;
``lr_find``'s ``RangeTestOptions``), ``space`` (configs, search spaces, params; ``space_text``, a space as
``sweep.json`` records it), ``configs`` (a list of configs as given, checked), ``keys`` (a config or value as a key),
``trial`` (one run → one row), ``executors`` (threads, and the per-trial routing), ``ray_executor`` (Ray's driver
side) and ``ray_task`` (a trial on a Ray worker), ``optuna_search`` (and ``samplers``, its sampler and pruner;
``study_file``, its ``study.db``), ``driver`` (``sweep``), ``dispatch`` (its plan of trials and the loop that runs
them), ``folder`` (and ``fingerprint``, what a reward computes), ``lr/`` (the LR range test: ``find``, ``lr_find``;
``rates``, its rates; ``curve``, its curve; ``result``, its ``LRFind``; ``muon``, Muon rates between scaling
conventions), ``figures``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from rlnb.history import History
from rlnb.params import OptimizerParams
from rlnb.wire import TrialStatus

from .applying import BASELINE, applied, apply, label, meant
from .configs import flat_config, grid, random_search
from .driver import sweep
from .figures import check_column, check_trials, config_keys, keyed, search_plot
from .lr.find import LRFind, lr_find
from .lr.muon import convert_muon_lr, muon_shapes
from .options import ExecutorOptions, RangeTestOptions, SearchOptions, TrialOptions, check_params
from .space import Categorical, Float, Int
from .trial import LOSS_COLUMNS, LOSS_IS_NOISE, METRIC_COLUMNS, REWARD_WINDOW

__all__ = [
    "REWARD_WINDOW",
    "Categorical",
    "ExecutorOptions",
    "Float",
    "Int",
    "LRFind",
    "RangeTestOptions",
    "SearchOptions",
    "TrialOptions",
    "ablate",
    "apply",
    "convert_muon_lr",
    "grid",
    "histories",
    "label",
    "lr_find",
    "muon_shapes",
    "random_search",
    "search_plot",
    "summarize",
    "sweep",
]


def ablate(
    base: OptimizerParams,
    changes: Mapping[str, Mapping[str, Any]],
    *,
    seeds: Sequence[int] | None = None,
    metric: str = "final_reward",
    **sweep_options: Any,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One factor at a time against the baseline: ``changes={"muon": {"optimizer": "muon"}, ...}``; every row and the
    summary name their variant (``"baseline"`` for ``base`` unchanged, as its label).

    ``seeds``: default the ``seeds`` of a ``trial_options`` group if one is given, else (0, 1, 2). Returns
    ``(trials, summary)``: every trial's row, and per variant the mean ± std of ``metric`` over its COMPLETED trials
    (``count`` of them), its ``delta`` against the baseline paired by seed (over the ``pairs`` seeds on which both
    COMPLETED with a ``metric``; NaN for none), how many trials ``failed`` and were ``stopped``, how many
    COMPLETED with no ``metric`` (``no_value``) and how many ``diverged`` (their loss went NaN / inf)."""
    check_params(base)
    taken = [name for name in NOT_ABLATE if name in sweep_options]
    if taken:  # passed on to sweep: "got multiple values for keyword argument 'variants'", or "not configs"
        raise TypeError(f"ablate takes no {', '.join(taken)}: it runs the baseline and each of changes= (the variants, "
                        "named by its keys) on every seed; sweep(base, configs, variants=...) names configs, "
                        "sweep(base, search='optuna', space=...) searches")  # fmt: skip
    _check_ablation(base, changes, metric)
    variants = {BASELINE: {}, **{name: dict(change) for name, change in changes.items()}}
    if seeds is None:  # a fixed default here won over the group's seeds, as a field by name does
        group = sweep_options.get("trial_options")
        seeds = group.seeds if group is not None else (0, 1, 2)
    # Each trial's row names its variant (kept in trials.jsonl and its run): matching by label merged variants whose
    # configs share one (the same change twice, an empty change and the baseline, 1e-3 and 1.0004e-3).
    trials = sweep(base, list(variants.values()), seeds=seeds, variants=list(variants), **sweep_options)
    return trials, _ablation_summary(trials, list(variants), metric)


def _ablation_summary(trials: pd.DataFrame, variants: list[str], metric: str) -> pd.DataFrame:
    """``ablate``'s summary of its ``trials``, one row per variant (``BASELINE`` first)."""
    ok = trials[trials.status == TrialStatus.COMPLETED]
    summary = ok.groupby("variant", sort=False)[metric].agg(["mean", "std", "count"]).reindex(variants)
    summary["count"] = summary["count"].fillna(0).astype(int)  # a variant none of whose trials completed: 0, not NaN
    summary[["delta", "pairs"]] = [_paired(ok, variant, metric) for variant in variants]
    summary["pairs"] = summary["pairs"].astype(int)
    ended = trials.groupby("variant")["status"]  # a stopped trial is no failure: it runs again on resume
    summary["failed"] = ended.apply(lambda s: int((s == TrialStatus.FAILED).sum()))
    summary["stopped"] = ended.apply(lambda s: int((s == TrialStatus.STOPPED).sum()))
    summary[["no_value", "diverged"]] = _flags(trials, ["variant"], metric).reindex(list(variants)).fillna(0)
    summary.attrs["metric"] = metric
    return summary


def _paired(ok: pd.DataFrame, variant: str, metric: str) -> tuple[float, int]:
    """The mean of ``variant``'s ``metric`` minus the baseline's over the seeds on which both COMPLETED with one, and
    how many: a difference of the means over each one's survivors compared other seeds (one seed left of six against
    the baseline's others), and early rewards are mostly the seed's. NaN for no such seed."""
    values = [ok[ok.variant == name].set_index("seed")[metric].dropna() for name in (variant, BASELINE)]
    mine, theirs = values[0].align(values[1], join="inner")
    return (float((mine - theirs).mean()) if len(mine) else math.nan), len(mine)


NOT_ABLATE = ("configs", "variants", "search_options", *(f.name for f in dataclasses.fields(SearchOptions)))
"""``sweep``'s keywords that ``ablate`` sets itself or cannot run."""


def _check_ablation(base: OptimizerParams, changes: Mapping[str, Mapping[str, Any]], metric: str) -> None:
    """Before the sweep: a bad ``metric`` would be a ``KeyError`` once every trial has run, and the table lost; a bad
    change is an ``InvalidParams`` naming its variant."""
    if metric in LOSS_COLUMNS:  # its delta, ~5e-10, read as a result
        raise ValueError(f"metric={metric!r}: {LOSS_IS_NOISE}; compare final_reward or best_reward (the loss stays "
                         "in the trials' table)")  # fmt: skip
    if metric not in METRIC_COLUMNS:
        allowed = ", ".join(m for m in METRIC_COLUMNS if m not in LOSS_COLUMNS)
        raise ValueError(f"metric must be one of {allowed}, got {metric!r}")
    if not isinstance(changes, Mapping):
        raise TypeError(f"changes must be a dict of variant name -> changed fields, such as "
                        f"{{'higher lr': {{'learning_rate': 1e-2}}}}, got {type(changes).__name__}")  # fmt: skip
    for name, change in changes.items():
        if not (isinstance(name, str) and name):  # named "changes", the argument the caller passed
            raise ValueError(f"changes: each variant's name must be a non-empty string, got {name!r}")
        if not isinstance(change, Mapping):
            raise TypeError(f"changes[{name!r}] must be a dict of changed fields, such as {{'learning_rate': 1e-2}}, "
                            f"got {change!r}")  # fmt: skip
        flat = flat_config(f"changes[{name!r}]", change)  # as the sweep reads it (nested, numpy)
        if not flat:  # its trials shared the baseline's label and seeds: rlnb.compare refused them as one line
            raise ValueError(f"changes[{name!r}] is empty: it repeats {BASELINE!r}, the unchanged run every ablation "
                             "has; give it a changed field")  # fmt: skip
        sent = applied(f"changes[{name!r}]", base, flat).request_body()
        if meant(sent) == meant(base.request_body()):  # its delta read as "no difference", though nothing was tested
            said = (f" ({sent}): the base already has it" if sent == base.request_body() else f": {sent} against "
                    f"{base.request_body()}, and an empty group sets nothing (the session's defaults apply, as without "
                    "it)")  # fmt: skip
            raise ValueError(f"changes[{name!r}] {flat!r} sends the same params as {BASELINE!r}{said}; give it a "
                             "field changed to another value")  # fmt: skip
    if BASELINE in changes:  # it replaced the baseline itself, and every delta was against that change
        raise ValueError(f"changes: {BASELINE!r} is the name of the unchanged run; name your variant otherwise")


def summarize(trials: pd.DataFrame, metric: str = "final_reward") -> pd.DataFrame:
    """Per config (its own columns, sorted by config — 1e-5 before 3e-3 before 0.3, not as text; led by its variant
    where the trials name one, as ``ablate``'s do): mean, std, min and max of ``metric`` over the COMPLETED trials,
    how many trials ended otherwise, how many COMPLETED with no ``metric`` (NaN: ``no_value``) and how many
    ``diverged`` (their loss went NaN / inf: ``diverged_at`` in their rows)."""
    check_trials(trials, "summarize")
    check_column(trials, "metric", metric, numeric=True)
    keys = config_keys(trials)
    trials = keyed(trials, keys)  # a list typed into a config column: grouped by its values
    groups = trials.groupby(keys, dropna=False, sort=False)
    ok = trials[trials.status == TrialStatus.COMPLETED].groupby(keys, dropna=False, sort=False)[metric]
    table = ok.agg(["mean", "std", "min", "max", "count"]).reindex(groups.size().index)  # a config with none
    table["count"] = table["count"].fillna(0).astype(int)  # completed keeps its row
    table["not_completed"] = groups["status"].apply(lambda s: int((s != TrialStatus.COMPLETED).sum()))
    table[["no_value", "diverged"]] = _flags(trials, keys, metric)
    table.attrs["metric"] = metric
    try:
        return table.sort_index()
    except TypeError:  # a config column mixing text and numbers (an edited table): pandas' bare '<' error
        return table  # in the order the configs first appear


def _flags(trials: pd.DataFrame, keys: list[Any], metric: str) -> pd.DataFrame:
    """Per group, how many trials COMPLETED with no ``metric`` (NaN: ``no_value``; in neither count, the mean of the
    other seeds stood for the config, "count 2, not_completed 0" for three seeds) and how many ``diverged`` (a loss gone
    NaN / inf, ``diverged_at``: its reward may still be finite, and counted)."""
    diverged = trials["diverged_at"].notna() if "diverged_at" in trials else False
    flags = trials.assign(no_value=(trials.status == TrialStatus.COMPLETED) & trials[metric].isna(), diverged=diverged)
    return flags.groupby(keys, dropna=False, sort=False)[["no_value", "diverged"]].sum().astype(int)


def histories(trials: pd.DataFrame) -> list[History]:
    """The saved history of every trial of a sweep that has one (for ``rlnb.compare`` and ``plots.compare``, which
    label each by the ``label`` its run records); a trial stopped before it started has none and is left out, so
    labels taken from the table are those of ``trials[trials.run_path.notna()]``. Another table (``ablate``'s summary,
    ``summarize``'s) is a ``ValueError`` naming ``trials``, not a bare ``KeyError: 'run_path'``."""
    if not isinstance(trials, pd.DataFrame) or "run_path" not in trials.columns:
        got = f"a table of {', '.join(map(str, trials.columns))}" if isinstance(trials, pd.DataFrame) else repr(trials)
        raise ValueError(
            f"histories: trials must be a sweep's table of trials (with its run_path column), such as "
            f"sweep(...) or ablate(...)[0] return, got {got:.200}"
        )
    return [History.load(p) for p in trials["run_path"].dropna()]

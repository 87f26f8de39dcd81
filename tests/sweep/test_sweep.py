"""Sweeps and ablations: one row per trial, failures kept, stop keeps finished trials, remote pools."""

import _thread
import functools
import json
import math
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest
import torch

import rlnb
from rlnb.engine.models.tiny import TinyConfig, TinyTransformer
from rlnb.history import History
from rlnb.params.schedule import Schedule
from rlnb.sweep import TrialOptions, ablate, apply, grid, histories, random_search, summarize, sweep
from rlnb.sweep.trial import summary
from rlnb.tasks import Task
from rlnb.testing import FakeBackend

BASE = rlnb.AdamParams(learning_rate=3e-3, weight_decay=0.0)


def test_grid_and_random_search():
    assert grid(learning_rate=[1e-3, 1e-2], momentum=[0.9]) == [
        {"learning_rate": 1e-3, "momentum": 0.9},
        {"learning_rate": 1e-2, "momentum": 0.9},
    ]
    configs = random_search(
        20, seed=1, learning_rate=(1e-5, 1e-1, "log"), beta1=(0.8, 0.95), optimizer=["adam", "muon"]
    )
    assert len(configs) == 20 and configs == random_search(
        20, seed=1, learning_rate=(1e-5, 1e-1, "log"), beta1=(0.8, 0.95), optimizer=["adam", "muon"]
    )
    assert all(1e-5 <= c["learning_rate"] <= 1e-1 and 0.8 <= c["beta1"] <= 0.95 for c in configs)
    assert {c["optimizer"] for c in configs} == {"adam", "muon"}
    with pytest.raises(ValueError, match="space"):
        random_search(1, learning_rate=5)
    steps = [c["newton_schulz_steps"] for c in random_search(4, newton_schulz_steps=(3, 6, "int"))]  # distinct
    assert set(steps) == {3, 4, 5, 6} and all(isinstance(n, int) for n in steps)


def test_configs_given_as_a_generator_are_recorded_and_resume(tmp_path):
    """A generator of configs ran its trials but ``sweep.json`` recorded ``"configs": []`` (read a second time):
    the folder no longer said what ran, and a resume with the same configs was refused as changed."""
    first = sweep(BASE, (c for c in grid(learning_rate=[1e-3, 2e-3])), steps=1, runs_dir=tmp_path, progress=False)
    stored = json.loads((Path(first.attrs["path"]) / "sweep.json").read_text())
    assert stored["configs"] == [{"learning_rate": 1e-3}, {"learning_rate": 2e-3}]
    again = sweep(BASE, grid(learning_rate=[1e-3, 2e-3]), steps=1, resume=first.attrs["path"], progress=False)
    assert list(again.status) == ["COMPLETED", "COMPLETED"]


@pytest.mark.parametrize(
    ("configs", "words"),
    [
        ({"learning_rate": 1e-3}, r"configs must be a list of dicts, .*got \{'learning_rate': 0.001\} \(one config"),
        ([{"learning_rate": 1e-3}, "x"], r"configs\[1\] must be a dict of fields, .*got 'x'"),
        ([("learning_rate", 1e-3)], r"configs\[0\] must be a dict of fields, .*got \('learning_rate', 0.001\)"),
        ("lr", "configs must be a list of dicts"),
    ],
)
def test_configs_that_are_not_a_list_of_dicts_are_refused_naming_them(tmp_path, configs, words):
    """One dict, or a list holding a string or a pair, was dict()'s "dictionary update sequence element #0 has
    length 1; 2 is required", naming neither configs nor which one."""
    with pytest.raises(TypeError, match=words):
        sweep(BASE, configs, steps=1, runs_dir=tmp_path, progress=False)
    assert not any(tmp_path.iterdir())


def test_numpy_values_in_configs_and_spaces_are_plain_numbers(tmp_path):
    """``grid(newton_schulz_steps=np.arange(3, 5))`` (the docs take an array) was ``InvalidParams: np.int64(3) is
    invalid: must be an integer``; an ``np.float32`` rate ran, but its label read 0.0010000000474974513 and
    ``sweep.json`` / ``trials.jsonl`` stored it as the string "0.001" (so a read-back table sorted it as text)."""
    assert grid(newton_schulz_steps=np.arange(3, 5)) == [{"newton_schulz_steps": 3}, {"newton_schulz_steps": 4}]
    assert all(type(c["newton_schulz_steps"]) is int for c in grid(newton_schulz_steps=np.arange(3, 5)))
    drawn = random_search(2, newton_schulz_steps=list(np.arange(3, 6)), learning_rate=(np.float32(1e-3), 1e-1))
    assert all(type(c["newton_schulz_steps"]) is int and type(c["learning_rate"]) is float for c in drawn)
    trials = sweep(rlnb.MuonParams(), grid(newton_schulz_steps=np.arange(3, 4)) + [{"learning_rate": np.float32(1e-3)}],
                   steps=1, runs_dir=tmp_path, progress=False)  # fmt: skip
    assert list(trials.status) == ["COMPLETED", "COMPLETED"]
    assert list(trials.label) == ["newton_schulz_steps=3", "learning_rate=0.001"]
    rows = [json.loads(line) for line in (Path(trials.attrs["path"]) / "trials.jsonl").read_text().splitlines()]
    assert rows[1]["learning_rate"] == pytest.approx(1e-3) and rows[0]["newton_schulz_steps"] == 3


def test_a_config_with_a_nested_group_is_its_dotted_fields_and_summarizes(tmp_path):
    """``{"adam": {"learning_rate": 1e-3}}`` ran (MuonParams takes the group), but its table column held dicts:
    ``summarize`` raised ``TypeError: unhashable type: 'dict'`` and the label read ``adam={'learning_rate': 0.001}``."""
    configs = [{"adam": {"learning_rate": 1e-3}}, {"adam": {"learning_rate": 1e-2}}]
    trials = sweep(rlnb.MuonParams(), configs, steps=1, runs_dir=tmp_path, progress=False)
    assert list(trials.label) == ["adam.learning_rate=0.001", "adam.learning_rate=0.01"]
    assert list(summarize(trials).index) == [1e-3, 1e-2] and "adam" not in trials.columns


def test_a_sweep_stopped_before_any_trial_started_still_summarizes(tmp_path):
    """Every row was "stopped before it started", so the table had no ``final_reward`` / ``value`` / ``run_path``:
    ``summarize`` raised "metric='final_reward' is not a column", ``ablate`` a ``KeyError`` (its table lost)."""
    stop = threading.Event()
    stop.set()
    trials = sweep(BASE, grid(learning_rate=[1e-3, 2e-3]), steps=1, runs_dir=tmp_path, progress=False, stop=stop)
    assert list(trials.status) == ["STOPPED", "STOPPED"] and trials.value.isna().all()
    assert list(summarize(trials)["not_completed"]) == [1, 1] and trials.run_path.isna().all()
    variants, summary = ablate(BASE, {"wd": {"weight_decay": 0.1}}, seeds=[0], steps=1, runs_dir=tmp_path,
                               progress=False, stop=stop)  # fmt: skip
    assert list(variants.status) == ["STOPPED", "STOPPED"] and list(summary["stopped"]) == [1, 1]
    # stopped trials were counted failed, and no completed one was a count of NaN
    assert list(summary["failed"]) == [0, 0] and list(summary["count"]) == [0, 0]


@pytest.mark.parametrize("executor", ["threads", "batched"])
def test_a_sweep_over_both_optimizers_gives_muon_options_to_its_muon_trials_only(tmp_path, executor):
    """An Adam session refuses muon_scaling: with it, a sweep's Adam trials FAILED on threads (batched ran them, and
    an Adam ensemble refuses it now too)."""
    configs = [{"optimizer": "adam"}, {"optimizer": "muon", "learning_rate": 0.02}]
    trials = sweep(BASE, configs, steps=1, runs_dir=tmp_path, progress=False, executor=executor,
                   muon_scaling="match_adam")  # fmt: skip
    assert list(trials.status) == ["COMPLETED", "COMPLETED"], trials.reason.tolist()
    assert list(trials.executor) == [executor, executor]
    configs = [json.loads((Path(p) / "config.json").read_text()) for p in trials.run_path]
    assert [c.get("muon_scaling") for c in configs] == ["original", "match_adam"]  # the Adam session's default


def test_random_search_draws_distinct_configs_and_takes_a_numpy_seed():
    """``random_search(3, optimizer=["adam", "muon"])`` gave adam twice: the sweep ran it as two trials and
    ``summarize`` counted them as two seeds in perfect agreement (std 0); ``seed=np.int64(1)`` was random's
    bare ``TypeError``."""
    configs = random_search(4, seed=np.int64(1), newton_schulz_steps=(3, 6, "int"))
    assert sorted(c["newton_schulz_steps"] for c in configs) == [3, 4, 5, 6]
    log_lr = (1e-5, 1e-1, "log")
    assert random_search(2, seed=1, learning_rate=log_lr) == random_search(2, seed=np.int64(1), learning_rate=log_lr)
    with pytest.raises(
        ValueError,
        match=r"random_search: 3 distinct configs asked, but 60 draws from \{'optimizer'"
        r": \['adam', 'muon'\]\} gave 2: draw fewer, or use grid",
    ):
        random_search(3, optimizer=["adam", "muon"])
    with pytest.raises(ValueError, match="2 distinct configs asked, but 40 draws from an empty space gave 1"):
        random_search(2)
    with pytest.raises(ValueError, match="random_search: seed must be an integer, got 1.5"):
        random_search(2, seed=1.5, learning_rate=(1e-5, 1e-1))


@pytest.mark.parametrize("values", ["0.001", 1e-3, {"a": 1e-3}, np.array(1e-3), torch.tensor(1e-3)])
def test_a_grid_axis_must_be_a_list_of_values(values):
    """A string is iterable: grid(learning_rate="0.001") made one config per character. A 0-d array or tensor is a
    Collection whose len() is a bare TypeError ("len() of unsized object")."""
    with pytest.raises(ValueError, match=f"grid: learning_rate must be a list of values.*{re.escape(repr(values))}"):
        grid(learning_rate=values)
    assert len(grid(learning_rate=np.logspace(-4, -2, 3), newton_schulz_steps=range(4, 6))) == 6  # arrays, ranges


def test_apply_validates_before_anything_runs():
    muon = apply(BASE, {"optimizer": "muon", "learning_rate": 0.02, "adam.learning_rate": 1e-3})
    assert isinstance(muon, rlnb.MuonParams) and muon.adam.learning_rate == 1e-3
    assert apply(BASE, {"beta1": 0.8}).learning_rate == 3e-3
    with pytest.raises(rlnb.InvalidParams, match="beta1"):
        sweep(BASE, [{"beta1": 2.0}], steps=1, progress=False)


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_sweep_rows_histories_and_custom_reward(tmp_path):
    seen = []
    trials = sweep(
        BASE,
        grid(learning_rate=[1e-3, 3e-3]),
        seeds=[0, 1],
        steps=3,
        task=lambda prompt, completion: float(len(completion)) / 8,  # the user's own reward
        runs_dir=tmp_path,
        max_concurrent=2,
        progress=lambda done, total, row: seen.append((done, total, row["status"])),
    )
    assert list(trials.trial) == [0, 1, 2, 3] and list(trials.seed) == [0, 1, 0, 1]
    assert list(trials.learning_rate) == [1e-3, 1e-3, 3e-3, 3e-3]
    assert (trials.status == "COMPLETED").all() and (trials.steps_done == 3).all()
    assert trials.final_reward.between(0, 1).all() and trials.wall_s.gt(0).all()
    assert [s[0] for s in seen] == [1, 2, 3, 4] and {s[1] for s in seen} == {4}
    loaded = histories(trials)
    assert len(loaded) == 4 and all(len(h.steps) == 3 for h in loaded)
    assert loaded[0].config["sweep_config"] == {"learning_rate": 1e-3}
    assert list(rlnb.compare(loaded).run.unique()) == list(trials.label.unique())


@pytest.mark.parametrize("table", [pd.DataFrame({"mean": [0.5], "delta": [0.0]}, index=["baseline"]), ["a/run"]])
def test_histories_of_a_table_that_is_no_sweeps_names_trials(table):
    """``trials, summary = ablate(...)``, then ``histories(summary)``: a bare ``KeyError: 'run_path'``."""
    with pytest.raises(
        ValueError,
        match=r"histories: trials must be a sweep's table of trials \(with its run_path "
        r"column\).*got (a table of mean, delta|\['a/run'\])",
    ):
        histories(table)


def test_failed_trials_are_recorded_not_lost(tmp_path):
    def broken(prompt, completion):
        raise rlnb.SessionClosed("the reward service is down")

    trials = sweep(
        BASE, [{}], seeds=[0], steps=2, task=Task("broken", [[104, 105]], broken), runs_dir=tmp_path, progress=False
    )
    row = trials.iloc[0]
    assert row.status == "FAILED" and "reward service is down" in row.reason and row.steps_done == 0
    assert row.run_path and len(History.load(row.run_path)) >= 1  # what ran is on disk


def test_stopping_keeps_finished_trials(tmp_path):
    stop = threading.Event()

    def stop_after_first(done, total, row):
        stop.set()

    trials = sweep(
        BASE,
        grid(learning_rate=[1e-3, 2e-3, 3e-3]),
        seeds=[0],
        steps=4,
        runs_dir=tmp_path,
        max_concurrent=1,
        stop=stop,
        progress=stop_after_first,
    )
    assert list(trials.status) == ["COMPLETED", "STOPPED", "STOPPED"]
    assert trials.steps_done.iloc[0] == 4 and (trials.steps_done.iloc[1:] == 0).all()
    assert list(trials.reason.iloc[1:]) == ["stopped before it started"] * 2


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_ablation_summary(tmp_path):
    trials, summary = ablate(
        BASE,
        {"higher lr": {"learning_rate": 1e-2}, "muon": {"optimizer": "muon"}},
        seeds=[0, 1],
        steps=2,
        runs_dir=tmp_path,
        progress=False,
    )
    assert list(summary.index) == ["baseline", "higher lr", "muon"]
    assert list(summary["count"]) == [2, 2, 2] and summary.loc["baseline", "delta"] == 0
    expected = (
        trials[trials.variant == "higher lr"].final_reward.mean()
        - trials[trials.variant == "baseline"].final_reward.mean()
    )
    assert summary.loc["higher lr", "delta"] == pytest.approx(expected)
    assert set(trials.variant) == {"baseline", "higher lr", "muon"}


@pytest.mark.slow  # a trial of one RL step
def test_an_ablations_trial_stopped_mid_run_is_not_counted_in_its_variants_mean(tmp_path):
    """A trial stopped after its first step has a finite final_reward (that step's): it is ``stopped``, not a seed."""
    stop = threading.Event()

    def reward(prompt, completion):
        stop.set()  # the trial stops before its second step
        return 0.5

    trials, summary = ablate(BASE, {"wd": {"weight_decay": 0.1}}, seeds=[0], steps=3, task=reward, stop=stop,
                             executor="threads", max_concurrent=1, runs_dir=tmp_path, progress=False)  # fmt: skip
    assert list(trials.status) == ["STOPPED", "STOPPED"] and list(trials.steps_done) == [1, 0]
    assert trials.final_reward.iloc[0] == 0.5  # a number the mean could take
    assert list(summary["count"]) == [0, 0] and list(summary["stopped"]) == [1, 1] and summary["mean"].isna().all()


def test_ablation_takes_the_seeds_of_a_trial_options_group(tmp_path):
    """ablate's own default seeds (0, 1, 2) won over the group's, as a field by name does: three seeds ran."""
    trials, summary = ablate(BASE, {"wd": {"weight_decay": 0.1}}, trial_options=TrialOptions(steps=1, seeds=(4,)),
                             runs_dir=tmp_path, progress=False)  # fmt: skip
    assert list(trials.seed) == [4, 4] and list(summary["count"]) == [1, 1]


def test_ablation_variants_that_share_a_label_stay_apart(tmp_path):
    """Variants were matched to trials by label: a change whose label was the base's took the baseline's rows
    (its summary NaN), the same change under two names went all to the second (the first NaN, the second with both
    counts)."""
    changes = {"control": {"learning_rate": 3.0004e-3}, "wd": {"weight_decay": 0.1}, "wd again": {"weight_decay": 0.1}}
    trials, summary = ablate(BASE, changes, seeds=[0, 1], steps=1, runs_dir=tmp_path, progress=False)
    assert list(trials.variant) == ["baseline"] * 2 + ["control"] * 2 + ["wd"] * 2 + ["wd again"] * 2
    assert list(summary.index) == ["baseline", "control", "wd", "wd again"]
    assert list(summary["count"]) == [2, 2, 2, 2] and list(summary["failed"]) == [0, 0, 0, 0]
    assert summary.loc["wd", "delta"] == summary.loc["wd again", "delta"]  # the same params and seeds: the same numbers
    assert math.isfinite(summary.loc["control", "delta"])  # its label is the base's rate's, its rows its own
    with pytest.raises(ValueError, match="'baseline' is the name of the unchanged run"):
        ablate(BASE, {"baseline": {"learning_rate": 1e-2}}, seeds=[0], steps=1, runs_dir=tmp_path, progress=False)


def test_an_ablations_rows_name_their_variant_and_the_baseline_one_way_on_disk_too(tmp_path):
    """The unchanged config was labelled "base" where ablate called it "baseline", and only the table in memory
    named each trial's variant: its trials.jsonl and its runs did not ("control" and the baseline, or two variants
    of one change, could not be told apart once the kernel restarted)."""
    changes = {"control": {"learning_rate": 3.0004e-3}, "wd": {"weight_decay": 0.1}}
    trials, summary = ablate(BASE, changes, seeds=[0], steps=1, runs_dir=tmp_path, progress=False)
    assert list(trials.columns[:3]) == ["trial", "variant", "label"]
    assert list(trials.variant) == ["baseline", "control", "wd"] == list(summary.index)
    assert list(trials.label) == ["baseline", "learning_rate=0.003", "weight_decay=0.1"]
    folder = Path(trials.attrs["path"])
    rows = [json.loads(line) for line in (folder / "trials.jsonl").read_text().splitlines()]
    assert sorted((r["trial"], r["variant"], r["label"]) for r in rows) == [
        (0, "baseline", "baseline"), (1, "control", "learning_rate=0.003"), (2, "wd", "weight_decay=0.1")
    ]  # fmt: skip
    assert [History.load(p).config["variant"] for p in trials.run_path] == ["baseline", "control", "wd"]
    assert sweep(BASE, [{}], steps=1, runs_dir=tmp_path, progress=False).label.tolist() == ["baseline"]
    again, _ = ablate(BASE, changes, seeds=[0], steps=1, resume=folder, progress=False)  # a resume: the same names
    assert list(again.variant) == ["baseline", "control", "wd"]


@pytest.mark.parametrize(
    ("configs", "variants", "message"),
    [
        ([{}, {"weight_decay": 0.1}], ["a"], r"variants must be 2 distinct names .*one per config, got \['a'\]"),
        ([{}, {"weight_decay": 0.1}], ["a", "a"], "variants must be 2 distinct names"),
        ([{}], [""], "variants must be 1 distinct names"),
        ([{}], "a", "variants must be a list of names"),
        (None, ["a"], "variants names the configs one by one: pass configs"),
        # the table's text column refused it after every trial had run, in the sweep folder
        ([{}], ["a\ud800"], r"variants\[0\] \('a\\ud800'\) holds a lone surrogate"),
    ],
)
def test_sweep_variants_that_do_not_name_each_config_are_refused_before_anything_runs(
    tmp_path, configs, variants, message
):
    with pytest.raises((TypeError, ValueError), match=message):
        sweep(BASE, configs, variants=variants, steps=1, runs_dir=tmp_path, progress=False)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("changes", "metric", "error", "message"),
    [
        ({"wd": {"weight_decay": 0.1}}, "reward", ValueError, "metric must be one of final_reward, .*got 'reward'"),
        ({"lr": 1e-2}, "final_reward", TypeError, r"changes\['lr'\] must be a dict of changed fields.*got 0.01"),
        ([{"learning_rate": 1e-2}], "final_reward", TypeError, "changes must be a dict of variant name"),
        ({"x\udcff": {"weight_decay": 0.1}}, "final_reward", ValueError, r"variants\[1\] .* holds a lone surrogate"),
    ],
)
def test_an_ablation_with_a_bad_metric_or_change_is_refused_before_any_trial_runs(
    tmp_path, changes, metric, error, message
):
    """metric='reward' (the column is final_reward) ran every trial, then raised pandas' KeyError: the table was
    lost; a change given as a value ({"lr": 1e-2}) was 'float' object is not iterable."""
    with pytest.raises(error, match=message):
        ablate(BASE, changes, seeds=[0], steps=1, metric=metric, runs_dir=tmp_path, progress=False)
    assert list(tmp_path.iterdir()) == []  # no sweep folder, no trial


def test_remote_pool_waits_at_the_session_cap(server, tmp_path):
    """Four trials, four at a time, on one full-weight resource (cap 1 session): the provider answers
    429 to the others, and they wait their turn instead of failing."""
    resource = httpx.post(server + "/v1/rl/model-resources", json={"base_model": "rlnb/tiny"}).json()["id"]
    trials = sweep(
        BASE,
        grid(learning_rate=[1e-3, 3e-3]),
        seeds=[0, 1],
        steps=2,
        target=server,
        max_concurrent=4,
        model_resources_id=resource,
        runs_dir=tmp_path,
        progress=False,
    )
    assert (trials.status == "COMPLETED").all(), trials.reason.tolist()
    assert (trials.steps_done == 2).all()
    sessions = httpx.get(server + "/v1/rl/training-sessions", params={"model_resources_id": resource}).json()["data"]
    assert len(sessions) == 4 and all(s["step"] == "2" for s in sessions)
    assert httpx.get(f"{server}/v1/rl/model-resources/{resource}").json()["status"] == "MODEL_RESOURCES_STATUS_READY"


def test_a_trial_refused_with_429_for_ever_fails_once_its_slot_timeout_has_passed(tmp_path):
    """A provider that answers 429 for ever (a resource whose one session slot stays taken) held the trial, and the
    sweep, without end: the trial now FAILS after ``slot_timeout`` seconds, its reason naming the option."""
    asked: list[httpx.Request] = []

    def session_cap(request: httpx.Request) -> httpx.Response:
        asked.append(request)
        return httpx.Response(429, json={"error": {"message": "the resource's session cap is reached"}})

    trials = sweep(
        BASE,
        steps=1,
        target="http://rl.test",
        transport=httpx.MockTransport(session_cap),
        max_retries=0,
        slot_timeout=0.3,
        runs_dir=tmp_path,
        progress=False,
    )
    assert list(trials.status) == ["FAILED"] and list(trials.steps_done) == [0]
    reason = trials.reason[0]
    assert "TimeoutError: no session slot within slot_timeout=0.3 s" in reason, reason
    assert "session cap is reached" in reason and "raise slot_timeout" in reason
    assert len(asked) >= 2  # it waited for a slot and asked again before it gave up


@pytest.mark.parametrize("bad", [-1, math.nan, math.inf, "60", True])
def test_a_slot_timeout_that_is_no_number_of_seconds_is_refused_naming_it(bad):
    with pytest.raises(ValueError, match=r"slot_timeout must be a finite number of seconds in \[0, 86400\]"):
        TrialOptions(slot_timeout=bad)


def test_sweep_sends_the_scheduled_learning_rate(tmp_path):
    trials = sweep(
        BASE,
        [{}],
        steps=2,
        schedule=Schedule("linear", total_steps=2, min_lr_ratio=0.5),
        runs_dir=tmp_path,
        progress=False,
    )
    lrs = list(histories(trials)[0].steps.learning_rate)
    assert lrs == pytest.approx([3e-3, 3e-3 * 0.75])


def test_interrupt_keeps_finished_trials_and_the_folder_has_every_row(tmp_path):
    """Ctrl-C in the kernel reaches the driver as KeyboardInterrupt: raised here from the progress
    callback, which runs in the driver's loop, at the moment the first trial has finished."""

    def interrupt(done, total, row):
        if done == 1:
            raise KeyboardInterrupt

    trials = sweep(
        BASE, grid(learning_rate=[1e-3, 2e-3, 3e-3]), steps=2, runs_dir=tmp_path, progress=interrupt, executor="threads"
    )
    assert list(trials.status) == ["COMPLETED", "STOPPED", "STOPPED"]
    assert (trials.executor == "threads").all()
    lines = (Path(trials.attrs["path"]) / "trials.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["trial"] for line in lines) == [0, 1, 2]


def test_an_interrupted_sweep_says_so_on_its_table_and_a_finished_one_does_not(tmp_path):
    """The Ctrl-C went no further than the sweep and nothing on the table said so: a script's loop over sweeps went
    on to the next one. As ``lr_find``'s ``found.interrupted``."""

    def interrupt(done, total, row):
        raise KeyboardInterrupt

    kwargs = {"steps": 1, "runs_dir": tmp_path, "executor": "threads"}
    stopped = sweep(BASE, grid(learning_rate=[1e-3, 2e-3]), progress=interrupt, **kwargs)
    assert list(stopped.status) == ["COMPLETED", "STOPPED"] and stopped.attrs["interrupted"] is True
    assert sweep(BASE, progress=False, **kwargs).attrs["interrupted"] is False


@pytest.mark.slow  # waits out a trial stuck in its reward (~1.3 s each)
@pytest.mark.parametrize("executor", ["threads", "batched"])
def test_a_second_interrupt_ends_a_sweep_whose_reward_never_returns(tmp_path, executor):
    """A reward stuck for ever (a verifier that never answers): the first Ctrl-C asks each trial to stop at its
    next step, which never comes; the second (and every later one) did nothing, and the notebook was stuck."""
    entered, release, returned = threading.Semaphore(0), threading.Event(), threading.Event()

    def stuck(prompt, completion):
        entered.release()
        release.wait(300)  # the test's own deadline: set below if the sweep does not return
        return 0.0

    def interrupter():
        try:
            assert entered.acquire(timeout=120)  # a trial is inside its reward
            for _ in range(2):
                time.sleep(0.5)
                _thread.interrupt_main()  # Ctrl-C
            returned.wait(60)
        finally:
            release.set()  # without the fix: let the trials end, so the test fails rather than hangs

    helper = threading.Thread(target=interrupter, daemon=True)
    helper.start()
    start = time.monotonic()
    trials = sweep(BASE, grid(learning_rate=[1e-3, 2e-3]), steps=2, runs_dir=tmp_path, progress=False, task=stuck,
                   executor=executor, max_concurrent=2)  # fmt: skip
    returned.set()
    helper.join(60)
    assert not release.is_set() or time.monotonic() - start < 60
    assert list(trials.status) == ["STOPPED", "STOPPED"]
    assert all(r.startswith("abandoned by a second interrupt") for r in trials.reason)
    release.set()  # the abandoned threads end on their own; wait for them, not for the process's exit
    for thread in threading.enumerate():
        if thread.name.startswith("rlnb-sweep"):
            thread.join(120)
    lines = (Path(trials.attrs["path"]) / "trials.jsonl").read_text().splitlines()
    assert [json.loads(line)["status"] for line in lines] == ["STOPPED", "STOPPED"]  # nothing recorded after


ABANDON = """
import _thread, sys, threading, time
import rlnb
from rlnb.sweep import grid, sweep

inside = threading.Event()

def stuck(prompt, completion):
    inside.set()
    threading.Event().wait(600)  # a verifier that never answers
    return 0.0

def interrupter():
    inside.wait(120)
    for _ in range(2):
        time.sleep(0.5)
        _thread.interrupt_main()  # Ctrl-C, twice

threading.Thread(target=interrupter, daemon=True).start()
trials = sweep(rlnb.AdamParams(learning_rate=3e-3), grid(learning_rate=[1e-3]), steps=2, runs_dir=sys.argv[1],
               progress=False, task=stuck, executor="threads")
print(list(trials.status), flush=True)
"""


@pytest.mark.slow  # a Python process that sweeps
def test_a_process_exits_while_an_abandoned_trial_is_stuck_in_its_reward(tmp_path):
    """After a second Ctrl-C abandoned a trial stuck in its reward, the script ended and its process never exited:
    the trial's thread pool was joined at exit."""
    proc = subprocess.run([sys.executable, "-c", ABANDON, str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "['STOPPED']"


@pytest.mark.slow  # as above
def test_an_interrupt_ends_the_wait_after_an_error_for_a_trial_that_never_returns(tmp_path):
    """The progress callback raises while another trial's reward is stuck: the sweep waited for that trial
    before raising the error, for ever, and Ctrl-C then hung in the thread pool's shutdown."""
    fast, release, returned = [], threading.Event(), threading.Event()
    stuck_in = threading.Semaphore(0)

    def reward(prompt, completion):
        if not fast:
            fast.append(threading.current_thread())
        if threading.current_thread() is not fast[0]:
            stuck_in.release()
            release.wait(300)  # the test's own deadline: set below if the sweep does not return
        return 0.0

    def boom(done, total, row):
        raise RuntimeError("my progress bar broke")

    def interrupter():
        try:
            assert stuck_in.acquire(timeout=120)
            time.sleep(1.0)
            _thread.interrupt_main()  # Ctrl-C while the sweep waits to raise the error
            returned.wait(60)
        finally:
            release.set()

    helper = threading.Thread(target=interrupter, daemon=True)
    helper.start()
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="my progress bar broke"):
        sweep(BASE, grid(learning_rate=[1e-3, 2e-3]), steps=1, runs_dir=tmp_path, progress=boom, task=reward,
              executor="threads", max_concurrent=2)  # fmt: skip
    returned.set()
    assert time.monotonic() - start < 60  # before the test let the stuck reward go
    release.set()
    for thread in threading.enumerate():
        if thread.name.startswith("rlnb-sweep"):
            thread.join(120)
    folder = next(tmp_path.iterdir())
    rows = [json.loads(line) for line in (folder / "trials.jsonl").read_text().splitlines()]
    assert sorted((r["status"], (r["reason"] or "")[:9]) for r in rows) == [("COMPLETED", ""), ("STOPPED", "abandoned")]


@pytest.mark.slow  # three sweeps of four trials (~1 s); test_configs_given_as_a_generator_... resumes one fast
def test_resume_runs_what_was_stopped_and_keeps_what_finished(tmp_path):
    stop = threading.Event()
    configs = grid(learning_rate=[1e-3, 2e-3])
    first = sweep(
        BASE, configs, seeds=[0, 1], steps=2, runs_dir=tmp_path, stop=stop, progress=lambda *a: stop.set(),
        executor="threads",
    )  # fmt: skip
    assert list(first.status) == ["COMPLETED", "STOPPED", "STOPPED", "STOPPED"]
    with pytest.raises(ValueError, match="steps: 3"):
        sweep(BASE, configs, seeds=[0, 1], steps=3, resume=first.attrs["path"], progress=False)
    done = []
    again = sweep(
        BASE, configs, seeds=[0, 1], steps=2, resume=first.attrs["path"], progress=lambda d, t, r: done.append((d, t))
    )
    assert (again.status == "COMPLETED").all() and list(again.trial) == [0, 1, 2, 3]
    assert done == [(2, 4), (3, 4), (4, 4)]  # trial 0 was not run again
    assert again.run_path.iloc[0] == first.run_path.iloc[0]
    assert all(len(h.steps) == 2 for h in histories(again))


def test_a_sweep_folder_runs_one_sweep_at_a_time(tmp_path):
    """Two resumes of one stopped sweep at once both ran its trials; the second's rows (FAILED: "run folder
    trial-000-seed0 is being written by another session", for every trial) were recorded after the first's, so
    a later resume showed the finished trials FAILED and never ran them again."""
    stop = threading.Event()
    stop.set()
    configs = grid(learning_rate=[1e-3, 2e-3])
    first = sweep(BASE, configs, steps=2, runs_dir=tmp_path, stop=stop, progress=False)
    folder = Path(first.attrs["path"])
    assert list(first.status) == ["STOPPED", "STOPPED"]
    started, release = threading.Event(), threading.Event()

    def hold(done, total, row):  # the first resume keeps the folder while the second one tries
        started.set()
        assert release.wait(120)

    out: dict[str, pd.DataFrame] = {}
    runner = threading.Thread(target=lambda: out.update(a=sweep(BASE, configs, steps=2, resume=folder, progress=hold)))
    runner.start()
    try:
        assert started.wait(120)
        with pytest.raises(rlnb.RunLocked, match="is being run by another sweep"):
            sweep(BASE, configs, steps=2, resume=folder, progress=False)
    finally:
        release.set()
        runner.join(120)
    assert list(out["a"].status) == ["COMPLETED", "COMPLETED"]
    again = sweep(BASE, configs, steps=2, resume=folder, progress=False)  # the lock went with the first sweep
    assert list(again.status) == ["COMPLETED", "COMPLETED"]
    assert list(again.run_path) == list(out["a"].run_path)
    rows = [json.loads(line) for line in (folder / "trials.jsonl").read_text().splitlines()]
    assert [r["status"] for r in rows] == ["STOPPED", "STOPPED", "COMPLETED", "COMPLETED"]


def test_a_hand_edited_trials_file_is_resumed_with_its_bad_lines_skipped(tmp_path):
    """A line of trials.jsonl that is JSON but not a trial's row (``{"trial": 5}``, ``[1, 2]``) ended the resume
    with a bare ``KeyError: 'status'``."""
    configs = grid(learning_rate=[1e-3, 2e-3])
    first = sweep(BASE, configs, steps=1, runs_dir=tmp_path, progress=False)
    folder = Path(first.attrs["path"])
    with open(folder / "trials.jsonl", "a") as fh:
        fh.write('{"trial": 5}\n[1, 2]\n{"trial": true, "status": "COMPLETED"}\n')
    with open(folder / "trials.jsonl", "ab") as fb:  # saved in Latin-1: a bare UnicodeDecodeError ended the resume
        fb.write(b'{"trial": 0, "status": "COMPLETED", "label": "caf\xe9"}\n')
    with pytest.warns(UserWarning) as caught:
        again = sweep(BASE, configs, steps=1, resume=folder, progress=False)
    skipped = [str(w.message) for w in caught if "is not a trial's row" in str(w.message)]
    assert [m.split(" line ")[1].split()[0] for m in skipped] == ["3", "4", "5"]
    assert any("line 6 is not UTF-8 text; skipped" in str(w.message) for w in caught)
    assert list(again.trial) == [0, 1] and (again.status == "COMPLETED").all()
    assert list(again.run_path) == list(first.run_path)  # nothing ran again


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_a_resume_with_another_schedule_or_model_option_is_refused(tmp_path):
    """sweep.json did not record the schedule or the connect options: resuming a Muon sweep with
    muon_scaling="match_adam" (or a schedule) ran its other trials in other units, in one table."""
    stop = threading.Event()
    configs = grid(learning_rate=[1e-3, 2e-3])
    muon = rlnb.MuonParams()
    first = sweep(muon, configs, steps=1, runs_dir=tmp_path, stop=stop, progress=lambda *a: stop.set(),
                  executor="threads", muon_scaling="original", threads=1)  # fmt: skip
    folder = first.attrs["path"]
    assert list(first.status) == ["COMPLETED", "STOPPED"]
    with pytest.raises(ValueError, match=r"changed: options: \{'muon_scaling': 'match_adam'\} \(the sweep used "
                                         r"\{'muon_scaling': 'original'\}\)"):  # fmt: skip
        sweep(muon, configs, steps=1, resume=folder, progress=False, muon_scaling="match_adam", threads=1)
    with pytest.raises(ValueError, match="changed: schedule: .*'kind': 'linear'.* \\(the sweep used None\\)"):
        sweep(muon, configs, steps=1, resume=folder, progress=False, muon_scaling="original",
              schedule=Schedule("linear", total_steps=1))  # fmt: skip
    # options that do not change the numbers (threads, sinks, keys, timeouts) may differ
    again = sweep(muon, configs, steps=1, resume=folder, progress=False, muon_scaling="original", threads=2)
    assert list(again.status) == ["COMPLETED", "COMPLETED"]


def test_summarize_sorts_learning_rates_as_numbers():
    rows = [
        {"trial": i, "label": f"learning_rate={lr}", "learning_rate": lr, "seed": s, "status": st, "final_reward": r}
        for i, (lr, s, st, r) in enumerate(
            [
                (0.3, 0, "COMPLETED", 1.0),
                (1e-5, 0, "COMPLETED", 0.04),
                (3e-3, 0, "COMPLETED", 0.5),
                (0.3, 1, "COMPLETED", 0.0),
                (3e-3, 1, "FAILED", float("nan")),
                (3e-3, 2, "COMPLETED", 0.7),
            ]
        )
    ]
    table = summarize(pd.DataFrame(rows))
    assert list(table.index) == [1e-5, 3e-3, 0.3]  # as text, "0.003" < "0.3" < "1e-05"
    assert table.loc[0.3, "min"] == 0.0 and table.loc[0.3, "max"] == 1.0 and table.loc[0.3, "mean"] == 0.5
    assert table.loc[3e-3, "count"] == 2 and table.loc[3e-3, "not_completed"] == 1
    assert table.loc[3e-3, "mean"] == pytest.approx(0.6)


def test_summarize_leaves_a_pruned_trials_finite_metric_out_of_its_configs_mean():
    """A trial Optuna pruned has a finite final_reward (the steps it ran): it is not_completed, not a seed's result."""
    config = {"label": "lr=0.1", "learning_rate": 0.1}
    rows = [{**config, "trial": i, "seed": i, "status": st, "final_reward": r}
            for i, (st, r) in enumerate([("COMPLETED", 0.8), ("PRUNED", 0.1), ("COMPLETED", 0.6)])]  # fmt: skip
    table = summarize(pd.DataFrame(rows))
    assert table.loc[0.1, "mean"] == pytest.approx(0.7) and table.loc[0.1, "min"] == 0.6
    assert table.loc[0.1, ["count", "not_completed"]].tolist() == [2, 1]


def test_a_trials_row_has_its_best_reward_and_loss_and_the_mean_of_its_last_five_rewards():
    """A mid-run peak in the rewards and a dip in the logged losses: the row's best is that step's, not the last
    one's nor the worst; final_reward is the mean of the last 5 rewards of a ramp, not the last one."""
    losses = [1.0, 0.8, 0.2, 0.6, 0.5]
    with rlnb.Session(FakeBackend(loss=lambda step: losses[step]), record=False) as session:
        for _ in losses:
            session.forward_backward([rlnb.samples.cross_entropy([1, 2, 3])])
            session.optim_step(rlnb.AdamParams()).result(timeout=30)
        rewards = [0.0, 0.1, 0.2, 2.0, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
        row = summary(session.history, rewards, losses, "reward")
    assert list(session.history.steps["loss"]) == losses  # what the row reads
    assert row["best_reward"] == 2.0 and row["best_loss"] == 0.2 and row["final_loss"] == 0.5
    assert row["final_reward"] == pytest.approx(0.7) == row["value"]  # (0.5 + 0.6 + 0.7 + 0.8 + 0.9) / 5


def test_bad_sweep_arguments_are_refused_before_anything_runs(tmp_path):
    for kwargs, words in [
        ({"search": "hyperband"}, "search must be"),
        ({"executor": "dask"}, "executor must be"),
        ({"objective": "accuracy"}, "objective must be"),
        ({"space": {"learning_rate": (1e-4, 1e-2)}}, "need search='optuna'"),
        ({"max_concurrent": 0}, "max_concurrent"),
    ]:
        with pytest.raises(ValueError, match=words):
            sweep(BASE, steps=1, runs_dir=tmp_path, progress=False, **kwargs)
    assert not any(tmp_path.iterdir())


def test_summarize_keeps_a_config_where_nothing_completed():
    frame = pd.DataFrame(
        [
            {"trial": 0, "label": "a", "learning_rate": 1.0, "seed": 0, "status": "FAILED", "final_reward": None},
            {"trial": 1, "label": "b", "learning_rate": 0.1, "seed": 0, "status": "COMPLETED", "final_reward": 0.5},
        ]
    )
    table = summarize(frame)
    assert list(table.index) == [0.1, 1.0] and table.loc[1.0, "count"] == 0 and table.loc[1.0, "not_completed"] == 1


def test_an_error_in_a_progress_callback_reaches_the_user_and_no_row_is_lost(tmp_path):
    """Three trials, two at a time, and a callback that fails on the first finished trial: the error
    reaches the caller after every trial has a row on disk — the other running one finished or
    STOPPED at its next step, the third STOPPED before it started."""

    def broken(done, total, row):
        raise RuntimeError("my progress bar broke")

    with pytest.raises(RuntimeError, match="progress bar broke"):
        sweep(
            BASE, grid(learning_rate=[1e-3, 2e-3, 3e-3]), steps=3, max_concurrent=2, runs_dir=tmp_path, progress=broken
        )
    (folder,) = tmp_path.iterdir()
    rows = {r["trial"]: r for r in map(json.loads, (folder / "trials.jsonl").read_text().splitlines())}
    assert sorted(rows) == [0, 1, 2] and rows[2]["reason"] == "stopped before it started"
    assert {rows[0]["status"], rows[1]["status"]} <= {"COMPLETED", "STOPPED"} and "COMPLETED" in (
        rows[0]["status"],
        rows[1]["status"],
    )


@pytest.mark.parametrize(
    ("module", "kwargs", "hint"),
    [
        ("optuna", {"search": "optuna", "space": {"learning_rate": (1e-4, 1e-2)}, "n_trials": 1}, "rlnb[optuna]"),
        ("ray", {"executor": "ray"}, "rlnb[ray]"),
    ],
)
def test_missing_extras_say_how_to_install_them(tmp_path, monkeypatch, module, kwargs, hint):
    monkeypatch.setitem(sys.modules, module, None)  # as if it were not installed
    with pytest.raises(ImportError, match=re.escape(f"pip install '{hint}'")):
        sweep(BASE, steps=1, runs_dir=tmp_path, progress=False, **kwargs)


@pytest.mark.slow  # trains a batched ensemble (~1.5 s)
def test_compatible_local_trials_train_as_one_ensemble_with_the_rows_of_lone_trials(tmp_path):
    """The default executor batches a grid of local trials (one stacked ensemble): the same rows, rewards
    and run folders as the same trials on threads, and the table says where each ran."""
    configs = grid(learning_rate=[3e-3, 1e-2])
    batched = sweep(BASE, configs, seeds=[0, 1], steps=3, runs_dir=tmp_path / "b", progress=False)
    alone = sweep(BASE, configs, seeds=[0, 1], steps=3, runs_dir=tmp_path / "t", progress=False, executor="threads")
    assert (batched.executor == "batched").all() and batched.not_batched.isna().all()
    assert (alone.executor == "threads").all() and (alone.not_batched == "executor='threads' was asked for").all()
    for col in ("trial", "label", "seed", "status", "steps_done"):
        assert list(batched[col]) == list(alone[col]), col
    np.testing.assert_allclose(batched.final_reward, alone.final_reward, rtol=1e-6)
    for b, a in zip(histories(batched), histories(alone), strict=True):
        assert list(b.df.kind) == list(a.df.kind)
        assert b.config["sweep_config"] == a.config["sweep_config"] and b.config["label"] == a.config["label"]


def test_trials_that_cannot_be_batched_run_on_threads_and_say_why(tmp_path):
    tiny = TinyTransformer(TinyConfig(n_layer=1, n_embd=32))
    trials = sweep(BASE, [{}], steps=1, runs_dir=tmp_path, progress=False, model=tiny)
    assert list(trials.executor) == ["threads"] and "not a built-in model" in trials.not_batched.iloc[0]


@pytest.mark.slow  # trains a batched ensemble (~1.5 s)
def test_stop_during_an_ensemble_keeps_every_member_as_a_row(tmp_path):
    stop = threading.Event()
    configs = grid(learning_rate=[1e-3, 2e-3, 3e-3])
    timer = threading.Timer(1.0, stop.set)
    timer.start()
    trials = sweep(BASE, configs, steps=400, runs_dir=tmp_path, stop=stop, progress=False)
    timer.cancel()
    assert (trials.status == "STOPPED").all() and (trials.executor == "batched").all()
    assert all(0 < n < 400 for n in trials.steps_done)
    assert [len(h.steps) for h in histories(trials)] == list(trials.steps_done)


def test_an_empty_grid_or_config_list_is_refused_not_run_as_the_base(tmp_path):
    with pytest.raises(ValueError, match="grid: learning_rate has no values"):
        grid(learning_rate=[], momentum=[0.9])
    with pytest.raises(ValueError, match=r"grid: learning_rate lists 0.001 more than once, got \[0.001, 0.01, 0.001\]"):
        grid(learning_rate=[1e-3, 1e-2, 1e-3])  # the same config ran twice, summarized as two seeds that agree
    with pytest.raises(ValueError, match="configs is empty"):
        sweep(BASE, [], steps=1, runs_dir=tmp_path, progress=False)
    assert not list(tmp_path.iterdir())  # refused before a folder was made


@pytest.mark.parametrize("executor", ["threads", "batched"])
def test_threads_in_the_options_fix_every_trials_count(tmp_path, executor):
    """``threads=1`` among the sweep's options reaches each trial, batched or not, and each run records it."""
    trials = sweep(BASE, [{}], seeds=[0, 1], steps=1, runs_dir=tmp_path, progress=False, executor=executor, threads=1)
    assert list(trials.executor) == [executor] * 2 and (trials.status == "COMPLETED").all()
    for h in histories(trials):
        assert (h.config["threads"], h.config["thread_policy"]) == (1, "fixed")


@pytest.mark.slow  # two sweeps of trials (~2 s)
def test_option_groups_are_the_flat_keywords(tmp_path):
    """A group given whole and the same fields by name run the same sweep; a name wins over its group,
    and a keyword no group has goes to rlnb.connect for every trial."""
    from rlnb.sweep import ExecutorOptions, TrialOptions

    trial = TrialOptions(steps=5, seeds=(3,), task=lambda prompt, completion: 0.5)
    where = ExecutorOptions(executor="threads", max_concurrent=1)
    trials = sweep(BASE, trial_options=trial, executor_options=where, steps=2, runs_dir=tmp_path, progress=False,
                   device="cpu")  # fmt: skip
    assert list(trials.seed) == [3] and list(trials.steps_done) == [2] and list(trials.executor) == ["threads"]
    assert list(trials.final_reward) == [0.5]
    assert History.load(trials.run_path.iloc[0]).config["device"] == "cpu"
    with pytest.raises(ValueError, match=r"steps must be an integer in \[1, 1000003\], got 0"):
        TrialOptions(steps=0)


def _within(seconds, call):
    """``call()``'s result (or its exception, raised here), or a failed test if it has not returned within
    ``seconds``: a hung sweep."""
    out = []

    def target():
        try:
            out.append((True, call()))
        except BaseException as exc:  # noqa: BLE001 - raised again in the test's thread
            out.append((False, exc))

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"still running after {seconds} s: hung"
    ok, value = out[0]
    if not ok:
        raise value
    return value


@pytest.mark.parametrize("value", [2.5, True, "2", 0])
def test_max_concurrent_must_be_an_integer_before_a_folder_is_made(tmp_path, value):
    with pytest.raises(ValueError, match=rf"max_concurrent must be an integer >= 1, got {re.escape(repr(value))}"):
        _within(10, lambda: sweep(BASE, steps=1, runs_dir=tmp_path, progress=False, max_concurrent=value))
    assert not any(tmp_path.iterdir())


def test_an_error_escaping_the_batched_executor_is_a_failed_row_per_trial_not_a_hang(tmp_path, monkeypatch):
    """A bug in the batched executor's own thread (here: grouping the trials fails) ends every trial
    FAILED, naming the error; the sweep returns."""
    from rlnb.sweep import batched_executor

    def broken(spec):
        raise RuntimeError("grouping broke")

    monkeypatch.setattr(batched_executor, "_key", broken)
    trials = _within(10, lambda: sweep(BASE, grid(learning_rate=[1e-3, 2e-3]), steps=1, runs_dir=tmp_path,
                                       progress=False, executor="batched"))  # fmt: skip
    assert list(trials.status) == ["FAILED", "FAILED"]
    assert (trials.reason == "batched executor: RuntimeError: grouping broke").all()


def test_a_member_whose_row_cannot_be_made_is_still_a_row(tmp_path, monkeypatch):
    """``on_done`` puts a FAILED row when building the row raises; a member that never ends is FAILED
    by the ensemble's error: the sweep returns with one row per trial."""
    from rlnb.sweep import batched_executor

    def fake_run_batched(model, kind, members, *, on_done, **kwargs):
        on_done(0, object())  # not a MemberResult: making its row raises
        raise RuntimeError("ensemble broke")

    monkeypatch.setattr(batched_executor, "run_batched", fake_run_batched)
    trials = _within(10, lambda: sweep(BASE, grid(learning_rate=[1e-3, 2e-3]), steps=1, runs_dir=tmp_path,
                                       progress=False, executor="batched"))  # fmt: skip
    assert list(trials.status) == ["FAILED", "FAILED"]
    assert trials.reason[0].startswith("its row could not be made: AttributeError")
    assert trials.reason[1] == "RuntimeError: ensemble broke"


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"steps": 2.5}, r"steps must be an integer in \[1, 1000003\], got 2\.5"),
        ({"steps": "3"}, r"steps must be an integer in \[1, 1000003\], got '3'"),
        ({"steps": True}, r"steps must be an integer in \[1, 1000003\], got True"),
        ({"seeds": 5}, "seeds must be a non-empty sequence of integers.*got 5"),
        ({"seeds": "ab"}, "seeds must be a non-empty sequence of integers.*got 'ab'"),
        ({"seeds": [1.5]}, r"seeds must be a non-empty sequence of integers.*got \[1.5\]"),
        ({"seeds": [True]}, r"seeds must be a non-empty sequence of integers.*got \[True\]"),
        ({"seeds": []}, r"seeds must be a non-empty sequence of integers.*got \[\]"),
        ({"seeds": [0, 1, 0]}, r"seeds lists 0 more than once, got \[0, 1, 0\]"),
        ({"seeds": [2**44]}, r"seeds must be in \[-9223344366821, 9223344366821\] with steps=1 .*got 17592186044416"),
    ],
)
def test_trial_options_are_refused_naming_the_field_before_a_folder_is_made(tmp_path, kwargs, words):
    with pytest.raises(ValueError, match=words):
        sweep(BASE, **{"steps": 1, **kwargs}, runs_dir=tmp_path, progress=False)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"stpes": 3}, "unexpected keyword argument.*: stpes .*for target 'local'"),
        ({"target": "http://127.0.0.1:9", "device": "cpu"}, "unexpected keyword argument.*: device"),
        ({"seed": 3}, "sweep\\(\\) sets seed for each trial itself"),
        ({"optimizer": "muon"}, "sweep\\(\\) sets optimizer for each trial itself"),
    ],
)
def test_a_connect_option_no_trial_can_take_is_one_type_error_up_front(tmp_path, kwargs, words):
    """A misspelt option made every trial FAILED with the same TypeError, after the sweep folder was made."""
    with pytest.raises(TypeError, match=words):
        sweep(BASE, grid(learning_rate=[1e-3, 2e-3]), steps=1, runs_dir=tmp_path, progress=False, **kwargs)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("task", ["first_letter", 5])
def test_a_task_that_is_neither_a_task_nor_a_reward_is_refused_before_a_folder_is_made(tmp_path, task):
    """``task="first_letter"`` (the demo's --task name) became a reward "function" that every trial called after
    sampling: each row FAILED "'str' object is not callable", in a sweep folder."""
    with pytest.raises(TypeError, match=rf"task must be a Task, a reward function .*got {task!r}"):
        sweep(BASE, steps=1, task=task, runs_dir=tmp_path, progress=False)
    assert not any(tmp_path.iterdir())
    with pytest.raises(TypeError, match="Task.reward must be a function reward"):
        Task("t", ["n="], task)  # type: ignore[arg-type]


@pytest.mark.parametrize("schedule", ["cosine", {"kind": "cosine"}])
def test_a_schedule_that_is_no_schedule_is_refused_before_a_folder_is_made(tmp_path, schedule):
    """``schedule="cosine"`` made every trial FAILED "AttributeError: 'str' object has no attribute 'multiplier'"."""
    with pytest.raises(
        TypeError,
        match=r"schedule must be None or a Schedule, such as Schedule\('cosine', "
        r"total_steps=3\), got",
    ):
        sweep(BASE, steps=3, schedule=schedule, runs_dir=tmp_path, progress=False)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("target", "error", "words"),
    [
        (None, TypeError, "target must be 'local' or an http"),
        (5, TypeError, "got int 5"),
        ("locl", ValueError, "unknown target 'locl': use 'local' or an http"),
        ("http://", ValueError, r"the target \(the base_url\) 'http://' names no host"),
    ],
)
def test_a_target_no_session_can_connect_to_is_refused_before_a_folder_is_made(tmp_path, target, error, words):
    """``target="locl"`` (or None) made every trial FAILED with connect's error, in a sweep folder."""
    with pytest.raises(error, match=words):
        sweep(BASE, steps=1, target=target, runs_dir=tmp_path, progress=False)
    assert not any(tmp_path.iterdir())


def test_a_reward_that_cannot_take_a_prompt_and_a_completion_is_refused_before_a_folder_is_made(tmp_path):
    """``task=lambda completion: ...`` made every trial sample its first step, then FAILED "<lambda>() takes 1
    positional argument but 2 were given", in a sweep folder."""
    with pytest.raises(TypeError, match=r"Task.reward must be a function reward\(prompt, completion\) -> float"):
        sweep(BASE, steps=1, task=lambda completion: 1.0, runs_dir=tmp_path, progress=False)
    assert not any(tmp_path.iterdir())
    with pytest.raises(TypeError, match=r"Task.reward must be a function reward\(prompt, completion\)"):
        Task("t", ["n="], lambda prompt, completion, answer: 1.0)
    assert Task("t", ["n="], lambda *texts: 1.0).reward("n=", "7") == 1.0  # anything that takes the two texts


def test_a_sweep_folder_and_its_resume_expand_home(tmp_path, monkeypatch):
    """``~`` is the home folder in runs_dir and resume, as in connect's runs_dir (not a ``./~`` folder)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    first = sweep(BASE, grid(learning_rate=[1e-3]), steps=1, runs_dir="~/sweeps", progress=False)
    folder = Path(first.attrs["path"])
    assert folder.parent == tmp_path / "home" / "sweeps" and not (tmp_path / "~").exists()
    again = sweep(BASE, grid(learning_rate=[1e-3]), steps=1, resume=f"~/sweeps/{folder.name}", progress=False)
    assert list(again.status) == ["COMPLETED"] and again.run_path.iloc[0] == first.run_path.iloc[0]


def _reward_a(prompt, completion):
    return float(completion.startswith("1"))


def _reward_b(prompt, completion):
    return float(completion.startswith("2"))


@pytest.mark.slow
def test_a_resume_with_another_reward_function_or_prompts_is_refused(tmp_path):
    """Every reward passed as a function is the task "custom": a resume with another one ran the rest of the sweep
    with it, its rows beside the first's in one table. The same function (or the same Task) resumes."""
    stop = threading.Event()
    configs = grid(learning_rate=[1e-3, 2e-3])
    first = sweep(BASE, configs, steps=1, runs_dir=tmp_path, stop=stop, progress=lambda *a: stop.set(),
                  executor="threads", task=_reward_a)  # fmt: skip
    folder = first.attrs["path"]
    assert list(first.status) == ["COMPLETED", "STOPPED"]
    with pytest.raises(ValueError, match=r"changed: task_detail: 'reward .*_reward_b \(.*\(the sweep used 'reward "
                                         r".*_reward_a"):  # fmt: skip
        sweep(BASE, configs, steps=1, resume=folder, progress=False, task=_reward_b)
    other_prompts = Task("custom", ["a=", "b="], _reward_a, 8)
    with pytest.raises(ValueError, match=r"changed: task_detail: .*2 prompts"):
        sweep(BASE, configs, steps=1, resume=folder, progress=False, task=other_prompts)
    again = sweep(BASE, configs, steps=1, resume=folder, progress=False, task=_reward_a)
    assert list(again.status) == ["COMPLETED", "COMPLETED"]


@pytest.mark.slow
def test_a_sweep_folder_made_before_the_task_detail_was_recorded_still_resumes(tmp_path):
    """``sweep.json`` of an older rlnb has no ``task_detail``: nothing to compare, the resume goes on."""
    stop = threading.Event()
    configs = grid(learning_rate=[1e-3, 2e-3])
    first = sweep(BASE, configs, steps=1, runs_dir=tmp_path, stop=stop, progress=lambda *a: stop.set(),
                  executor="threads")  # fmt: skip
    path = Path(first.attrs["path"]) / "sweep.json"
    stored = json.loads(path.read_text())
    del stored["task_detail"]
    path.write_text(json.dumps(stored))
    again = sweep(BASE, configs, steps=1, resume=first.attrs["path"], progress=False)
    assert list(again.status) == ["COMPLETED", "COMPLETED"]


def _reward_for(first: str):
    return lambda prompt, completion: float(completion.startswith(first))


@pytest.mark.slow
def test_a_resume_compares_what_a_reward_computes_not_where_it_is_written(tmp_path):
    """A lambda written in the sweep call resumes from a call that adds ``resume=`` (its source line changed, its
    code did not); another lambda, or the same factory closing over another value, is refused."""
    stop = threading.Event()
    configs = grid(learning_rate=[1e-3, 2e-3])
    first = sweep(BASE, configs, steps=1, runs_dir=tmp_path, stop=stop, progress=lambda *a: stop.set(),
                  executor="threads", task=lambda p, c: float(c.startswith("1")))  # fmt: skip
    folder = first.attrs["path"]
    with pytest.raises(ValueError, match="changed: task_detail"):
        sweep(BASE, configs, steps=1, resume=folder, progress=False, task=lambda p, c: float(c.startswith("2")))
    with pytest.raises(ValueError, match="changed: task_detail"):
        sweep(BASE, configs, steps=1, resume=folder, progress=False, task=_reward_for("1"))
    again = sweep(BASE, configs, steps=1, progress=False, task=lambda p, c: float(c.startswith("1")), resume=folder)
    assert list(again.status) == ["COMPLETED", "COMPLETED"]
    stop2 = threading.Event()
    made = sweep(BASE, configs, steps=1, runs_dir=tmp_path, stop=stop2, progress=lambda *a: stop2.set(),
                 executor="threads", task=_reward_for("1"))  # fmt: skip
    with pytest.raises(ValueError, match="changed: task_detail"):
        sweep(BASE, configs, steps=1, resume=made.attrs["path"], progress=False, task=_reward_for("2"))
    assert list(sweep(BASE, configs, steps=1, resume=made.attrs["path"], progress=False,
                      task=_reward_for("1")).status) == ["COMPLETED", "COMPLETED"]  # fmt: skip


def _starts(prompt, completion, first):
    return float(completion.startswith(first))


def _ends(prompt, completion, first):
    return float(completion.endswith(first))


class _StartsWith:
    def __init__(self, first):
        self.first = first

    def __call__(self, prompt, completion):
        return float(completion.startswith(self.first))


@pytest.mark.slow
def test_a_resume_tells_partials_and_reward_objects_apart_by_what_they_bind(tmp_path):
    """Every ``functools.partial`` was one digest, "reward functools.partial (eeac...)", whatever its function and
    arguments; a reward object was its class's ``__call__`` alone: ``_StartsWith("2")`` resumed a sweep of
    ``_StartsWith("1")``, and ``partial(_ends, ...)`` one of ``partial(_starts, ...)``."""
    configs = grid(learning_rate=[1e-3, 2e-3])
    partial = functools.partial
    for made, others in [
        (partial(_starts, first="1"), [partial(_starts, first="2"), partial(_ends, first="1")]),
        (_StartsWith("1"), [_StartsWith("2")]),
    ]:
        stop = threading.Event()
        first = sweep(BASE, configs, steps=1, runs_dir=tmp_path, stop=stop, progress=lambda *a: stop.set(),  # noqa: B023
                      executor="threads", task=made)  # fmt: skip
        for other in others:
            with pytest.raises(ValueError, match="changed: task_detail"):
                sweep(BASE, configs, steps=1, resume=first.attrs["path"], progress=False, task=other)
        again = sweep(BASE, configs, steps=1, resume=first.attrs["path"], progress=False, task=made)
        assert list(again.status) == ["COMPLETED", "COMPLETED"]


@pytest.mark.slow
def test_a_relative_sweep_folder_is_absolute_and_survives_a_change_of_folder(tmp_path, monkeypatch):
    """adv5b: the sweep folder and its trials' run paths stayed relative; after a ``%cd`` they named other folders."""
    monkeypatch.chdir(tmp_path)
    first = sweep(BASE, grid(learning_rate=[1e-3]), steps=1, runs_dir="sweeps", progress=False)
    folder = Path(first.attrs["path"])
    assert folder.is_absolute() and folder.parent == tmp_path / "sweeps"
    assert Path(first.run_path.iloc[0]).is_absolute()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert len(histories(first)) == 1  # read from where they are, not from ./sweeps under the new folder
    again = sweep(BASE, grid(learning_rate=[1e-3]), steps=1, resume=str(folder), progress=False)
    assert list(again.status) == ["COMPLETED"]


@pytest.mark.parametrize("text", ["", '{"search": nu', "[1, 2]", "null", "\xff"])
def test_a_damaged_sweep_json_is_refused_naming_the_file(tmp_path, text):
    """sweep.json cut short (a sweep killed while writing it) ended a resume with a bare JSONDecodeError naming no
    file; a list resumed comparing nothing, ``null`` raised ``TypeError: argument of type 'NoneType'``."""
    folder = tmp_path / "sweep-x"
    folder.mkdir()
    (folder / "sweep.json").write_bytes(text.encode("latin-1"))
    with pytest.raises(ValueError, match=r"resume: .*sweep\.json (is damaged|is not a sweep's settings)"):
        sweep(BASE, grid(learning_rate=[1e-3]), steps=1, resume=folder, progress=False)
    assert not (folder / "trials.jsonl").exists()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"runs_dir": 5}, r"runs_dir must be a path \(str or os.PathLike\), got int: 5"),  # a TypeError naming nothing
        ({"resume": 5}, r"resume must be a path"),
        # stop: an AttributeError after the folder was made
        ({"stop": "yes"}, r"stop must be None or a threading.Event \(set it to stop the sweep\), got 'yes'"),
        ({"progress": 5}, r"progress must be True, False or a function .*got 5"),  # a progress bar
        ({"progress": "no"}, r"progress must be True, False or a function .*got 'no'"),  # a progress bar too
    ],
)
def test_a_bad_runs_dir_resume_or_stop_is_refused_before_the_folder(tmp_path, monkeypatch, kwargs, match):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TypeError, match=match):
        sweep(BASE, grid(learning_rate=[1e-3]), steps=1, **{"progress": False, **kwargs})
    assert not list(tmp_path.iterdir())


def test_an_enormous_grid_or_random_search_is_refused_before_it_is_built():
    """``grid`` of three 1000-value axes built 10**9 dicts (memory filled); ``random_search(10**9)`` drew for ever."""
    with pytest.raises(ValueError, match=r"grid has 120000 configs \(eps 200 x beta1 200 x beta2 3\): at most 10000"):
        grid(eps=range(200), beta1=range(200), beta2=range(3))
    with pytest.raises(ValueError, match=r"n must be an integer in \[1, 10000\], got 10001"):
        random_search(10_001, learning_rate=(1e-5, 1e-1, "log"))
    assert len(grid(learning_rate=list(range(1, 101)), beta1=[0.5 + i / 1000 for i in range(100)])) == 10_000


@pytest.mark.parametrize(
    ("schedule", "said"),
    [
        (Schedule("linear", total_steps=3, min_lr_ratio=0.5), "sweep: in each trial, step 4 of 5 is past the end of "
         "the linear schedule (total steps 3): every step from here gets its floor, 0.5× the base rate"),
        (Schedule("cosine", total_steps=50), "sweep: in each trial, step 5, the last of 5, comes before the end of the "
         "cosine schedule (total steps 50): it gets 0.99× the base rate, not the floor 0.1×"),
    ],
)  # fmt: skip
def test_a_schedule_of_another_length_than_steps_is_warned_about_as_the_run_panel_does(tmp_path, schedule, said):
    """A schedule of 3 steps in a sweep of 5 gave the last 2 steps the floor, one of 50 decayed 4% by the end: no
    word of either (a RunPanel says the first, in these words). Said before the sweep folder is made, its steps
    numbered from 1 as the trial's ``history.steps`` and the run panel number them (it said "step 3 of 5" for the
    fourth step, the first at the floor)."""
    stop = threading.Event()
    stop.set()  # every trial STOPPED before it starts: the warning is what is read
    with pytest.warns(UserWarning) as caught:
        sweep(BASE, steps=5, schedule=schedule, runs_dir=tmp_path, progress=False, stop=stop)
    assert [str(w.message).split(". To")[0] for w in caught] == [said]
    assert caught[0].filename == __file__


def test_the_schedule_warning_through_ablate_points_at_the_users_line(tmp_path):
    """Through ``ablate`` the warning named rlnb/sweep/__init__.py's line, not the cell that called ``ablate``."""
    stop = threading.Event()
    stop.set()
    with pytest.warns(UserWarning, match="past the end of the linear schedule") as caught:
        ablate(BASE, {"low": {"learning_rate": 1e-4}}, steps=5, schedule=Schedule("linear", total_steps=3),
               runs_dir=tmp_path, progress=False, stop=stop)  # fmt: skip
    assert [w.filename for w in caught] == [__file__]


def test_a_schedule_as_long_as_steps_or_constant_is_not_warned_about(tmp_path):
    """Guard: a schedule that ends with the trials, or a constant one (no end), says nothing (warnings are errors)."""
    stop = threading.Event()
    stop.set()
    for schedule in (Schedule("cosine", warmup_steps=2, total_steps=5), Schedule("constant", total_steps=2)):
        assert len(sweep(BASE, steps=5, schedule=schedule, runs_dir=tmp_path, progress=False, stop=stop)) == 1

"""Optuna search: spaces with today's field names, per-step reports and pruning, PRUNED rows, the study
in the sweep folder (SQLite) and resuming a stopped or killed sweep."""

import json
import math
import os
import threading
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

import rlnb
from rlnb.sweep import Float, Int, histories, summarize, sweep
from rlnb.sweep.options import TrialOptions
from rlnb.sweep.space import parse_space
from rlnb.tasks import Task

ADAM = rlnb.AdamParams(learning_rate=3e-3, weight_decay=0.0)
MUON = rlnb.MuonParams(adam={"learning_rate": 3e-3})


def study_of(trials):
    storage = f"sqlite:///{Path(trials.attrs['path']) / 'study.db'}"
    return optuna.load_study(study_name="rlnb-sweep", storage=storage)


@pytest.mark.slow  # an Optuna study of several trials (~1 s)
def test_space_of_floats_ints_and_choices_reaches_the_params(tmp_path):
    space = {
        "learning_rate": Float(1e-3, 1e-1, log=True),
        "momentum": (0.8, 0.95),
        "newton_schulz_steps": Int(3, 6),
        "adam.learning_rate": [1e-3, 3e-3],
    }
    trials = sweep(
        MUON, space=space, n_trials=3, search="optuna", sampler="random", pruner=None, steps=2,
        runs_dir=tmp_path, max_concurrent=2, progress=False,
    )  # fmt: skip
    assert list(trials.trial) == [0, 1, 2] and (trials.status == "COMPLETED").all()
    assert trials.learning_rate.between(1e-3, 1e-1).all() and trials.momentum.between(0.8, 0.95).all()
    assert all(isinstance(n, int) and 3 <= n <= 6 for n in trials.newton_schulz_steps)
    assert set(trials["adam.learning_rate"]) <= {1e-3, 3e-3}
    study = study_of(trials)
    assert study.direction == optuna.study.StudyDirection.MAXIMIZE
    dists = study.trials[0].distributions
    assert dists["learning_rate"] == optuna.distributions.FloatDistribution(1e-3, 1e-1, log=True)
    assert dists["newton_schulz_steps"] == optuna.distributions.IntDistribution(3, 6)
    for t, row in zip(study.trials, trials.itertuples(), strict=True):
        assert t.value == pytest.approx(row.final_reward) and t.params["learning_rate"] == row.learning_rate
        assert sorted(t.intermediate_values) == [1, 2]  # one report per step
    for h, (_, row) in zip(histories(trials), trials.iterrows(), strict=True):  # each trial sent its own params
        sent = h.df[h.df.kind == "optim-step"].params.iloc[0]
        assert sent["newton_schulz_steps"] == row["newton_schulz_steps"]
        assert sent["adam"]["learning_rate"] == row["adam.learning_rate"]


N_TRIALS = r"n_trials must be an integer in \[1, 10000\]"


@pytest.mark.parametrize(
    ("space", "kwargs", "error", "words"),
    [
        ({"beta1": (0.5, 1.5)}, {}, rlnb.InvalidParams, "beta1"),
        ({"lr": (1e-4, 1e-2, "log")}, {}, rlnb.InvalidParams, "unknown field"),
        ({"optimizer": ["adam", "muon"], "momentum": [0.9]}, {}, rlnb.InvalidParams, "momentum"),
        ({"learning_rate": (0.0, 1e-2, "log")}, {}, ValueError, "low > 0"),
        ({"learning_rate": (1e-4, 1e-2)}, {"sampler": "grid"}, ValueError, "list of values"),
        ({"learning_rate": (1e-4, 1e-2)}, {"n_trials": None}, ValueError, "needs n_trials"),
        ({"learning_rate": (1e-4, 1e-2)}, {"sampler": "cmaes"}, ValueError, "sampler must be"),
        ({"learning_rate": (1e-4, 1e-2)}, {"pruner": "hyperband"}, ValueError, "pruner must be"),
        ({}, {}, ValueError, "space is empty"),
        ({"learning_rate": (1e-4, 1e-2)}, {"n_trials": 0}, ValueError, N_TRIALS),
        ({"learning_rate": (1e-4, 1e-2)}, {"n_trials": 2.5}, ValueError, N_TRIALS + " .*got 2.5"),
        ({"learning_rate": (1e-4, 1e-2)}, {"n_trials": True}, ValueError, N_TRIALS + " .*got True"),
        # 10**30 ran trials for ever (1 s each here), its progress bar counting toward 10**30
        ({"learning_rate": (1e-4, 1e-2)}, {"n_trials": 10**30}, ValueError, N_TRIALS + r" \(each is a trial"),
        ({"learning_rate": Int(1, 10**9)}, {"sampler": "grid"}, ValueError, r"1000000000 points .*at most 10000"),
        (
            {"learning_rate": [1e-3, 0.001]},
            {"sampler": "grid"},
            ValueError,
            r"space\['learning_rate'\] lists 0.001 more than once",
        ),  # the grid ran that point twice
        # an object not Optuna's: AttributeError after the folder was made / every trial FAILED
        ({"learning_rate": (1e-4, 1e-2)}, {"sampler": 5}, TypeError, r"sampler must be .* Optuna sampler.*got 5"),
        ({"learning_rate": (1e-4, 1e-2)}, {"pruner": 5}, TypeError, r"pruner must be .* Optuna pruner.*got 5"),
        (
            {"learning_rate": [1e-4, 1e-2]},
            {"sampler": optuna.samplers.GridSampler({"learning_rate": [1e-4]})},
            ValueError,
            "use sampler='grid'",
        ),
        # a space of one point ran the same trial n_trials times; 2 points x 1 seed hold 2 distinct trials
        (
            {"learning_rate": [1e-3]},
            {"n_trials": 3},
            ValueError,
            r"n_trials=3 is more than the 1 distinct trials .*\(learning_rate 1 × 1 seeds\).*use sampler='grid'",
        ),
        (
            {"learning_rate": [1e-3, 1e-2], "newton_schulz_steps": Int(4, 5)},
            {"n_trials": 9, "base": MUON, "seeds": [0, 1]},
            ValueError,
            r"n_trials=9 is more than the 8 distinct trials",
        ),
    ],
)
def test_bad_spaces_are_refused_naming_the_field(tmp_path, space, kwargs, error, words):
    options = {"n_trials": 2, **kwargs}
    base = options.pop("base", ADAM)
    with pytest.raises(error, match=words):
        sweep(base, space=space, search="optuna", steps=1, runs_dir=tmp_path, progress=False, **options)
    assert not list(tmp_path.iterdir())  # refused before the sweep folder was made


@pytest.mark.slow  # an Optuna study of several trials (~1 s)
def test_pruned_trials_are_rows_with_their_history(tmp_path):
    """A learning rate of ~1e-7 learns nothing: the mean reward stays far below 0.5, so a threshold
    pruner stops every trial at its first report after warm-up."""
    pruner = optuna.pruners.ThresholdPruner(lower=0.5, n_warmup_steps=2)
    trials = sweep(
        ADAM, space={"learning_rate": (1e-7, 2e-7, "log")}, n_trials=2, search="optuna", pruner=pruner,
        steps=6, runs_dir=tmp_path, progress=False,
    )  # fmt: skip
    assert list(trials.status) == ["PRUNED", "PRUNED"]
    assert (trials.steps_done == 2).all() and trials.reason.str.startswith("pruned (ThresholdPruner) at step 2").all()
    assert [len(h.steps) for h in histories(trials)] == [2, 2]  # what ran is kept
    study = study_of(trials)
    assert [t.state for t in study.trials] == [TrialState.PRUNED] * 2
    assert [sorted(t.intermediate_values) for t in study.trials] == [[1, 2], [1, 2]]


@pytest.mark.slow  # an Optuna study of a trial (~1 s)
def test_a_trial_its_pruner_would_stop_at_its_last_step_completed(tmp_path):
    """A prune at the last step stops nothing: the trial ran every step, and is COMPLETED (in the study too)."""
    pruner = optuna.pruners.ThresholdPruner(lower=0.5, n_warmup_steps=2)  # prunes from step 2, the last
    trials = sweep(
        ADAM, space={"learning_rate": (1e-7, 2e-7, "log")}, n_trials=1, search="optuna", pruner=pruner,
        steps=2, runs_dir=tmp_path, progress=False,
    )  # fmt: skip
    assert list(trials.status) == ["COMPLETED"] and list(trials.steps_done) == [2] and trials.reason.isna().all()
    assert trials.final_reward.iloc[0] < 0.5  # the pruner's threshold: it said prune
    assert [t.state for t in study_of(trials).trials] == [TrialState.COMPLETE]


@pytest.mark.slow  # long trainings: 9 trials of 6 RL steps; the pruners judge what they learn
@pytest.mark.parametrize("pruner", ["median", "asha"])
def test_named_pruners_stop_bad_trials_early(tmp_path, pruner):
    """Six learning rates that learn within 6 steps and three (~1e-7) that learn nothing. Every trial
    has seed 0, so all start from the same reward, and one that never improves on it falls below the
    others. "median": pruned from step 2 on (warm-up: steps // 4 = 1), never among the first 4 trials
    (start-up), and every bad trial after those is pruned. "asha": pruned only at its rungs, steps 1
    and 3 (min_resource max(1, 6 // 9) = 1, reduction factor 3)."""
    good, bad = [0.05, 0.07, 0.1, 0.12, 0.15, 0.2], [1e-7, 2e-7, 3e-7]
    trials = sweep(
        ADAM, space={"learning_rate": good + bad}, search="optuna", sampler="grid", pruner=pruner, steps=6,
        runs_dir=tmp_path, progress=False,
    )  # fmt: skip
    pruned = trials[trials.status == "PRUNED"]
    assert len(trials) == 9 and set(trials.status) <= {"COMPLETED", "PRUNED"} and len(pruned) >= 1
    assert pruned.reason.str.contains(f"({pruner})", regex=False).all()
    assert [len(h.steps) for h in histories(pruned)] == list(pruned.steps_done)
    assert trials.loc[trials.final_reward.idxmax(), "status"] == "COMPLETED"
    if pruner == "median":
        assert (pruned.trial >= 4).all() and (pruned.steps_done >= 2).all()
        late_bad = trials[(trials.trial >= 4) & trials.learning_rate.isin(bad)]
        assert (late_bad.status == "PRUNED").all()
    else:
        assert set(pruned.steps_done) <= {1, 3}


@pytest.mark.slow  # a grid of trials (~1.7 s)
def test_grid_sampler_runs_each_point_once(tmp_path):
    trials = sweep(
        ADAM, space={"learning_rate": [1e-3, 3e-3], "beta1": [0.9]}, search="optuna", sampler="grid",
        steps=1, runs_dir=tmp_path, progress=False,
    )  # fmt: skip
    assert sorted(trials.learning_rate) == [1e-3, 3e-3] and (trials.status == "COMPLETED").all()


@pytest.mark.parametrize("search", [None, "optuna"])
def test_a_loss_objective_is_refused_naming_objective_before_the_folder(tmp_path, search):
    """A trial's loss is the on-policy GRPO loss of its RL step, ~1e-10 at every rate: ranking (or an Optuna study
    minimising it, a pruner pruning on it) would follow float rounding, which the executor alone flips."""
    space = {"space": {"learning_rate": (1e-4, 1e-2, "log")}, "n_trials": 1} if search else {}
    with pytest.raises(ValueError, match=r"objective must be 'reward'.*GRPO loss.*float rounding.*got 'loss'"):
        sweep(ADAM, search=search, objective="loss", steps=2, runs_dir=tmp_path, progress=False, **space)
    with pytest.raises(ValueError, match="objective must be 'reward'"):
        TrialOptions(objective="loss")
    assert not any(tmp_path.iterdir())


@pytest.mark.slow  # an Optuna study of several trials (~1 s)
def test_a_stopped_search_resumes_and_reruns_the_stopped_trial(tmp_path):
    """The reward function sets Stop during trial 1's second step (8 rewards per step): trial 1 ends
    STOPPED; resuming runs its params again, then the rest of the budget."""
    stop = threading.Event()
    calls = []

    def reward(prompt, completion):
        calls.append(1)
        if len(calls) == 3 * 8 + 8 + 1:
            stop.set()
        return float(len(completion)) / 8

    task = Task("count", [[104, 105]], reward)
    args = dict(space={"learning_rate": (1e-4, 1e-2, "log")}, n_trials=3, search="optuna", steps=3, task=task)
    first = sweep(ADAM, **args, runs_dir=tmp_path, stop=stop, progress=False)
    assert list(first.status) == ["COMPLETED", "STOPPED"] and first.steps_done.iloc[1] == 2
    again = sweep(ADAM, **args, resume=first.attrs["path"], progress=False)
    # trial 2 is trial 1 run again, and replaces its STOPPED row, as a plan's rerun does (both rows stayed, and
    # summarize counted the completed config's stopped attempt as not completed)
    assert list(again.trial) == [0, 2, 3] and (again.status == "COMPLETED").all()
    assert again.learning_rate.iloc[1] == first.learning_rate.iloc[1]  # the stopped trial, run again
    assert list(summarize(again)["not_completed"]) == [0, 0, 0]
    rows = (Path(first.attrs["path"]) / "trials.jsonl").read_text().splitlines()
    assert [json.loads(line)["status"] for line in rows][:2] == ["COMPLETED", "STOPPED"]  # the record keeps it
    study = study_of(again)
    assert study.trials[2].user_attrs["rlnb_rerun_of"] == 1
    assert sum(t.state == TrialState.COMPLETE for t in study.trials) == 3
    assert Path(again.run_path.iloc[0]) == Path(first.run_path.iloc[0])


@pytest.mark.slow  # an Optuna study of several trials (~1 s)
def test_a_killed_search_resumes(tmp_path):
    """A process killed mid-trial leaves the trial RUNNING in the study: resuming marks it failed and
    asks its params again."""
    args = dict(space={"learning_rate": (1e-4, 1e-2, "log")}, search="optuna", steps=1, progress=False)
    first = sweep(ADAM, n_trials=1, runs_dir=tmp_path, **args)
    study = study_of(first)
    orphan = study.ask({"learning_rate": optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True)})
    again = sweep(ADAM, n_trials=2, resume=first.attrs["path"], **args)
    assert len(again) == 2 and (again.status == "COMPLETED").all()
    assert again.learning_rate.iloc[1] == orphan.params["learning_rate"]
    assert study_of(again).trials[orphan.number].state == TrialState.FAIL
    assert math.isfinite(again.final_reward.iloc[1])


class _Crash(Exception):
    """The process dying between a trial's row written and the study told."""


@pytest.mark.slow  # an Optuna study of several trials
def test_a_search_that_died_after_writing_a_trials_row_resumes_from_the_row_not_running_it_again(tmp_path, monkeypatch):
    """The row is appended to trials.jsonl before the study is told: a crash between them left the trial RUNNING,
    and the resume asked its params again, ran it a second time, and its new row replaced the completed one."""
    from rlnb.sweep.optuna_search import OptunaSource

    told = OptunaSource.finish

    def dies_at_the_second(self, row):
        if row["trial"] == 1:
            raise _Crash()
        told(self, row)

    monkeypatch.setattr(OptunaSource, "finish", dies_at_the_second)
    args = dict(space={"learning_rate": (1e-4, 1e-2, "log")}, search="optuna", steps=1, n_trials=2, progress=False)
    with pytest.raises(_Crash):
        sweep(ADAM, runs_dir=tmp_path, **args)
    monkeypatch.undo()
    (folder,) = tmp_path.iterdir()
    rows = [json.loads(line) for line in (folder / "trials.jsonl").read_text().splitlines()]
    assert [(r["trial"], r["status"]) for r in rows] == [(0, "COMPLETED"), (1, "COMPLETED")]
    again = sweep(ADAM, resume=folder, **args)
    assert list(again.trial) == [0, 1] and (again.status == "COMPLETED").all()
    assert Path(again.run_path.iloc[1]) == folder / rows[1]["run_path"] and again.wall_s.iloc[1] == rows[1]["wall_s"]
    assert len((folder / "trials.jsonl").read_text().splitlines()) == 2
    study = study_of(again)
    assert [t.state for t in study.trials] == [TrialState.COMPLETE, TrialState.COMPLETE]
    assert study.trials[1].value == rows[1]["value"]
    assert [t.user_attrs["rlnb_status"] for t in study.trials] == ["COMPLETED", "COMPLETED"]  # marked as finish marks
    assert Path(study.trials[1].user_attrs["rlnb_run_path"]) == folder / rows[1]["run_path"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["exp?1", "a%2Fb", "a%3Fb", "{SCHEMA_VERSION} #1"])
def test_the_study_is_stored_in_the_sweep_folder_whatever_the_runs_dir_is_called(tmp_path, name):
    """An unquoted ``?`` started the URL's query (the study went to ``<parent>/exp``, shared by every sweep
    there); ``%2F`` and ``%3F`` were unquoted into another path (a raw sqlite error)."""
    args = dict(space={"learning_rate": (1e-4, 1e-2, "log")}, n_trials=1, search="optuna", steps=1, progress=False)
    first = sweep(ADAM, runs_dir=tmp_path / name, **args)
    second = sweep(ADAM, runs_dir=tmp_path / (name + "-other"), **args)  # its own study, not the first one's
    for trials in (first, second):
        assert len(trials) == 1 and (trials.status == "COMPLETED").all()
        assert (Path(trials.attrs["path"]) / "study.db").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([name, name + "-other"])


def test_a_runs_dir_a_database_url_cannot_carry_is_refused_before_anything_is_made(tmp_path):
    bad = tmp_path / os.fsdecode(b"runs-\xff")
    with pytest.raises(ValueError, match="cannot be stored under .*not valid UTF-8"):
        sweep(ADAM, space={"learning_rate": [1e-3]}, search="optuna", sampler="grid", steps=1, runs_dir=bad)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("sampler", ["random", "tpe"])
def test_a_resumed_search_draws_new_points_not_the_ones_it_drew(tmp_path, sampler):
    """Two trials asked and told, then the study reloaded as ``resume=`` does: the next two are new
    points (a sampler seeded 0 again drew the first two again). No training: the source alone."""
    from rlnb.sweep.optuna_search import OptunaSource

    dims = parse_space(ADAM, {"learning_rate": (1e-4, 1e-1, "log")})

    rows: list[dict] = []  # what trials.jsonl has: the resume reads them

    def source():
        return OptunaSource(tmp_path, dims, 4, lambda n, config, seed_of: (n, config), sampler=sampler, pruner=None,
                            objective="reward", steps=1, recorded=list(rows))  # fmt: skip

    drawn = []
    for _ in range(2):  # the first sweep, then its resume
        study = source()
        for _ in range(2):
            n, config = study.next_spec()
            drawn.append(config["learning_rate"])
            rows.append({"trial": n, "status": "COMPLETED", "value": config["learning_rate"]})
            study.finish(rows[-1])
    assert len(set(drawn)) == 4, drawn

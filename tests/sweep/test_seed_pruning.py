"""A search on several seeds prunes each trial against the trials on its own seed: early rewards are mostly the
seed's, so a pruner comparing seeds stops a good config for its seed."""

from types import SimpleNamespace

import optuna
import pytest

import rlnb
from rlnb.sweep.space import parse_space

ADAM = rlnb.AdamParams(learning_rate=3e-3, weight_decay=0.0)
RATES = [0.003, 0.01, 0.03, 0.1, 0.3]
GAIN = dict(zip(RATES, [0.02, 0.05, 0.1, 0.08, 0.01], strict=True))  # the reward a rate adds per step
START = {0: 0.5, 1: 0.1}  # the reward a seed starts from, whatever the rate


def grid_search(tmp_path, pruner):
    """A grid of RATES on seeds 0 and 1 (every rate on seed 0, then on seed 1), 4 steps, each trial run to its end
    or its pruning before the next is asked, reporting START[seed] + GAIN[rate] × step. No training: the source
    alone. Returns {(rate, seed index): (status, steps reported)}."""
    from rlnb.sweep.optuna_search import OptunaSource

    dims = parse_space(ADAM, {"learning_rate": RATES})

    def spec(n, config, seed_of):
        return SimpleNamespace(trial=n, config=config, seed=seed_of)

    source = OptunaSource(tmp_path, dims, None, spec, sampler="grid", pruner=pruner, objective="reward", steps=4,
                          seeds=2)  # fmt: skip
    ended = {}
    while (spec := source.next_spec()) is not None:
        rate, status = spec.config["learning_rate"], "COMPLETED"
        for step in range(1, 5):
            value = START[spec.seed] + GAIN[rate] * step
            if source.report(spec, step, value) is not None:
                status = "PRUNED"
                break
        source.finish({"trial": spec.trial, "status": status, "value": value})
        ended[rate, spec.seed] = (status, step)
    return ended


@pytest.mark.slow  # an Optuna study of 10 trials in SQLite (~4 s on 2 loaded cores)
def test_median_pruning_judges_a_trial_against_its_own_seeds_trials(tmp_path):
    """Seed 1 starts 0.4 below seed 0 at every rate. Its first 4 trials are not pruned (MedianPruner's 4 start-up
    trials are 4 on seed 1: on seed 0's they were all pruned at step 1 for their seed), and its fifth, the worst rate
    (0.3), is pruned as seed 0's is: below the median of its seed's trials."""
    ended = grid_search(tmp_path, "median")
    assert len(ended) == 10
    pruned = {key for key, (status, _) in ended.items() if status == "PRUNED"}
    assert pruned == {(0.3, 0), (0.3, 1)}, ended


@pytest.mark.slow  # an Optuna study of 10 trials in SQLite (~4 s on 2 loaded cores)
def test_asha_judges_a_trial_against_its_own_seeds_trials(tmp_path):
    """SuccessiveHalving's rungs compare a trial with its seed's trials at that rung: seed 1's rates go on where seed
    0's do, the best (0.03) among them (against seed 0's rung values every seed-1 trial was pruned at the first
    rung)."""
    ended = grid_search(tmp_path, "asha")
    kept = {rate for (rate, seed), (status, _) in ended.items() if seed == 1 and status == "COMPLETED"}
    assert kept == {rate for (rate, seed), (status, _) in ended.items() if seed == 0 and status == "COMPLETED"}
    assert 0.03 in kept, ended


def test_a_hyperband_pruner_on_several_seeds_is_refused_naming_pruner(tmp_path):
    """HyperbandPruner reads its brackets' trials from the study's storage itself: it cannot be kept to one seed."""
    from rlnb.sweep import sweep

    with pytest.raises(ValueError, match=r"pruner: a HyperbandPruner .* 2 seeds .* pruner='asha'"):
        sweep(ADAM, search="optuna", space={"learning_rate": RATES}, sampler="grid", seeds=[0, 1], steps=2,
              pruner=optuna.pruners.HyperbandPruner(), runs_dir=tmp_path, progress=False)  # fmt: skip
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("direction", "best"), [("maximize", 0.2), ("minimize", 0.1)])
def test_the_best_trial_a_pruner_reads_is_its_seeds(direction, best):
    """WilcoxonPruner compares a trial with ``study.best_trial``: of its own seed's trials, not the study's (0.5 and
    0.05 are seed 0's)."""
    from rlnb.sweep.seed_pruning import _SeedView

    study = optuna.create_study(direction=direction)
    for value in (0.05, 0.1, 0.5, 0.2):  # trial n on seed n % 2
        study.add_trial(optuna.trial.create_trial(value=value))
    view = _SeedView(study, lambda t: t.number % 2, 1)
    assert view.best_trial.value == best and [t.number for t in view.trials] == [1, 3]
    with pytest.raises(ValueError, match="no trial on seed index 1 is completed yet"):
        print(_SeedView(study, lambda t: 0, 1).best_trial)  # every trial on seed 0

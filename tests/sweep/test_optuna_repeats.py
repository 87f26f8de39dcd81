"""A space of lists and Int ranges alone holds a finite number of (config, seed) trials, and ``check_search`` lets
``n_trials`` up to that number through so that no trial repeats one already run. Optuna's samplers draw with
replacement: a point drawn again is told FAIL (marked, never run, not counted) and drawn anew, and after
``REASKS`` repeats a point not asked yet is queued. Without this, ``[1e-3, 2e-3, 5e-3]`` with ``n_trials=3`` ran
5e-3 twice (summarised as two seeds agreeing to the digit) and never 1e-3. No training: the source alone."""

import pytest

from rlnb.params import AdamParams
from rlnb.sweep.optuna_search import REPEAT_ATTR, OptunaSource
from rlnb.sweep.space import parse_space

optuna = pytest.importorskip("optuna")


def source(folder, space, n_trials, seeds=1, sampler="tpe", recorded=()):
    dims = parse_space(AdamParams(), space)
    return OptunaSource(folder, dims, n_trials, lambda n, config, seed_of: (n, config, seed_of), sampler=sampler,
                        pruner=None, objective="reward", steps=1, recorded=recorded, seeds=seeds)  # fmt: skip


def run(study, rows, seeds=1):
    """Asks until the budget is used, telling each trial a value: the (config, seed index) pairs run."""
    ran = []
    while (spec := study.next_spec()) is not None:
        n, config, seed_of = spec
        ran.append((config["learning_rate"], (n if seed_of is None else seed_of) % seeds))
        rows.append({"trial": n, "status": "COMPLETED", "value": 0.5})
        study.finish(rows[-1])
    return ran


@pytest.mark.parametrize("sampler", ["tpe", "random"])
def test_every_point_of_a_finite_space_runs_once(tmp_path, sampler):
    ran = run(source(tmp_path, {"learning_rate": [1e-3, 2e-3, 5e-3]}, 3, sampler=sampler), [])
    assert sorted(ran) == [(1e-3, 0), (2e-3, 0), (5e-3, 0)]


def test_with_two_seeds_every_config_runs_once_on_each(tmp_path):
    ran = run(source(tmp_path, {"learning_rate": [1e-3, 2e-3]}, 4, seeds=2), [], seeds=2)
    assert sorted(ran) == [(1e-3, 0), (1e-3, 1), (2e-3, 0), (2e-3, 1)]


def test_a_resume_does_not_count_the_repeats_told_fail_and_does_not_run_them(tmp_path):
    rows: list[dict] = []
    first = source(tmp_path, {"learning_rate": [1e-3, 2e-3, 5e-3, 1e-2]}, 4)
    ran = []
    for _ in range(2):
        n, config, _ = first.next_spec()
        ran.append(config["learning_rate"])
        rows.append({"trial": n, "status": "COMPLETED", "value": 0.5})
        first.finish(rows[-1])
    repeats = sum(REPEAT_ATTR in t.user_attrs for t in first.study.trials)
    resumed = source(tmp_path, {"learning_rate": [1e-3, 2e-3, 5e-3, 1e-2]}, 4, recorded=rows)
    assert resumed.done_before == 2, f"{repeats} repeat(s) told FAIL were counted as finished"
    ran += [lr for lr, _ in run(resumed, rows)]
    assert sorted(ran) == [1e-3, 2e-3, 5e-3, 1e-2]


@pytest.mark.parametrize("pruner", ["median", "asha"])
def test_a_pruner_with_batched_trials_is_refused_before_the_folder_is_made(tmp_path, pruner):
    """Batched trials are asked together and end together, so a pruner has no ended trial to compare with (every
    trial ran to its end with ``pruner="median"``, in silence) and a sampler learns nothing inside an ensemble."""
    from rlnb.sweep import sweep

    with pytest.raises(ValueError, match=r"pruner=.*executor='batched'.*pruner=None.*executor='threads'"):
        sweep(AdamParams(), space={"learning_rate": (1e-4, 1e-2, "log")}, search="optuna", n_trials=2, steps=2,
              executor="batched", pruner=pruner, runs_dir=tmp_path / "runs")  # fmt: skip
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("n_trials", [None, 4])
def test_a_grid_runs_every_point_on_every_seed(tmp_path, n_trials):
    """Two points, two seeds: the grid ran each point once, 1e-2 on seed 0 and 1e-4 on seed 1 (rate confounded with
    seed), and stopped at 2 trials even with n_trials=4."""
    grid = source(tmp_path, {"learning_rate": [1e-4, 1e-2]}, n_trials, seeds=2, sampler="grid")
    assert grid.total == 4
    ran = run(grid, [], seeds=2)
    assert sorted(ran) == [(1e-4, 0), (1e-4, 1), (1e-2, 0), (1e-2, 1)]
    assert ran[:2] == [(1e-4, 0), (1e-2, 0)]  # every point on the first seed before any on the second


def test_a_resumed_grid_runs_its_stopped_trial_again_and_the_rest_once(tmp_path):
    rows: list[dict] = []
    first = source(tmp_path, {"learning_rate": [1e-4, 1e-2]}, None, seeds=2, sampler="grid")
    for status in ("COMPLETED", "STOPPED"):
        n, config, seed_of = first.next_spec()
        rows.append({"trial": n, "status": status, "value": 0.5})
        first.finish(rows[-1])
    resumed = source(tmp_path, {"learning_rate": [1e-4, 1e-2]}, None, seeds=2, sampler="grid", recorded=rows)
    ran = run(resumed, rows, seeds=2)
    assert sorted(ran) == [(1e-4, 1), (1e-2, 0), (1e-2, 1)]


def test_a_grid_refuses_more_trials_than_its_points_times_seeds():
    from rlnb.sweep.samplers import check_search

    dims = parse_space(AdamParams(), {"learning_rate": [1e-4, 1e-2]})
    with pytest.raises(ValueError, match=r"n_trials=5 is more than the 4 .*leave n_trials out"):
        check_search(dims, 5, "grid", None, (0, 1))


def test_a_grid_of_more_point_seed_pairs_than_a_sweep_runs_is_refused_naming_seeds():
    from rlnb.sweep.samplers import check_search

    dims = parse_space(AdamParams(), {"learning_rate": [1e-4 * (i + 1) for i in range(5000)]})
    with pytest.raises(ValueError, match=r"seeds: sampler='grid' runs each of its points on each of the 3 seeds"):
        check_search(dims, None, "grid", None, (0, 1, 2))

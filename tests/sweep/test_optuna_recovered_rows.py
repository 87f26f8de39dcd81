"""An Optuna trial left RUNNING by a process that died between appending its row to ``trials.jsonl`` and telling the
study: the resume tells the study from the row, and marks the trial as ``finish`` does (``rlnb_status``,
``rlnb_run_path``, and ``rlnb_stopped`` for a STOPPED row). Without the marks a recovered trial had no status or run
in the study, and a recovered STOPPED trial, FAIL unmarked, was counted as finished by the next resume: one trial
of ``n_trials`` less ran."""

import warnings

import pytest

from rlnb.params import AdamParams
from rlnb.sweep.optuna_search import RERUN_ATTR, SEED_OF_ATTR, STOPPED_ATTR, OptunaSource
from rlnb.sweep.space import parse_space

optuna = pytest.importorskip("optuna")
DIMS = parse_space(AdamParams(), {"learning_rate": (1e-4, 1e-1, "log")})


def source(folder, recorded=()) -> OptunaSource:
    return OptunaSource(folder, DIMS, 4, lambda n, config, seed_of: (n, config, seed_of), sampler="random",
                        pruner=None, objective="reward", steps=1, recorded=recorded)  # fmt: skip


def died_running(folder) -> int:
    """A search that asked trial 0 and died before telling the study how it ended: its number."""
    n, _, _ = source(folder).next_spec()
    return n


@pytest.mark.slow  # an Optuna study on disk, opened three times
def test_a_trial_recovered_from_its_completed_row_is_marked_as_a_finished_one(tmp_path):
    n = died_running(tmp_path)
    row = {"trial": n, "status": "COMPLETED", "value": 0.5, "run_path": "trial-000-seed0"}
    (tmp_path / "trial-000-seed0").mkdir()
    resumed = source(tmp_path, [row])
    (trial,) = resumed.study.trials
    assert trial.state == optuna.trial.TrialState.COMPLETE and trial.value == 0.5
    assert trial.user_attrs == {"rlnb_status": "COMPLETED", "rlnb_run_path": str(tmp_path / "trial-000-seed0")}
    assert resumed.done_before == 1


@pytest.mark.slow  # an Optuna study on disk, opened three times
def test_a_trial_recovered_from_its_stopped_row_is_marked_stopped_and_not_counted_finished_later(tmp_path):
    n = died_running(tmp_path)
    resumed = source(tmp_path, [{"trial": n, "status": "STOPPED", "run_path": None}])
    trial = resumed.study.trials[n]  # and its rerun, waiting
    assert trial.user_attrs == {"rlnb_status": "STOPPED", STOPPED_ATTR: True}
    assert resumed.done_before == 0
    rerun, config, seed_of = resumed.next_spec()  # asked again, then stopped too
    assert seed_of == n
    resumed.finish({"trial": rerun, "status": "STOPPED"})
    assert source(tmp_path, [{"trial": n, "status": "STOPPED"}, {"trial": rerun, "status": "STOPPED"}]).done_before == 0


@pytest.mark.slow  # an Optuna study on disk, opened three times
def test_a_trial_killed_twice_before_its_row_is_asked_again_each_time_and_never_counted_finished(tmp_path):
    """A trial left RUNNING without a row (its process killed mid-trial) was told FAIL and asked again, unmarked:
    killed again, the next resume counted the first attempt as finished, and the search ran one trial less."""
    n = died_running(tmp_path)
    resumed = source(tmp_path)
    assert resumed.done_before == 0
    rerun, _, seed_of = resumed.next_spec()  # killed during it too: neither finished nor told
    assert seed_of == n
    again = source(tmp_path)
    assert again.done_before == 0 and again.total == 4
    last, _, seed_of = again.next_spec()
    assert last == rerun + 1 and seed_of == n  # the rerun asked again, with the first attempt's seed


@pytest.mark.slow  # an Optuna study on disk, opened twice
def test_finished_trials_whose_rows_are_gone_are_warned_about(tmp_path):
    """``trials.jsonl`` deleted (or a finished trial's line broken by hand): the study's finished trials count
    towards ``n_trials`` but are in no table, and the resume returned an empty one without a word."""
    first = source(tmp_path)
    for _ in range(2):
        n, _, _ = first.next_spec()
        first.finish({"trial": n, "status": "COMPLETED", "value": 0.5})
    with pytest.warns(UserWarning, match=r"study\.db holds 1 finished trial \(1\) that trials\.jsonl has no row of"):
        resumed = source(tmp_path, [{"trial": 0, "status": "COMPLETED", "value": 0.5}])
    assert resumed.done_before == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every finished trial has its row: not a word
        source(tmp_path, [{"trial": n, "status": "COMPLETED", "value": 0.5} for n in (0, 1)])


@pytest.mark.slow  # an Optuna study on disk, opened twice
def test_an_older_rlnbs_unmarked_killed_trial_that_was_asked_again_is_not_counted_finished(tmp_path):
    """An older rlnb told a killed trial FAIL without a mark and asked it again: that first attempt is no finished
    trial (nor a finished trial whose row is missing)."""
    older = source(tmp_path)
    trial = older.study.ask(older._distributions)  # killed; an older rlnb's resume then did as follows
    older.study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
    older.study.enqueue_trial(trial.params, user_attrs={RERUN_ATTR: trial.number, SEED_OF_ATTR: trial.number})
    older.study.ask(older._distributions)  # the rerun, killed too
    assert source(tmp_path).done_before == 0

"""A sweep folder that stays true when it is moved, copied, resumed, edited by hand or read back; and the sweep's
configs, ablations and docs lines that failed as written."""

import json
import re
import shutil
import threading
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import pytest

import rlnb
from rlnb.history import History
from rlnb.sweep import ablate, grid, histories, random_search, summarize, sweep
from rlnb.sweep.optuna_search import OptunaSource
from rlnb.sweep.space import parse_space

BASE = rlnb.AdamParams(learning_rate=3e-3, weight_decay=0.0)
CONFIGS = grid(learning_rate=[1e-3, 2e-3])
DOCS = Path(__file__).resolve().parents[2] / "docs" / "sweeps.md"


def rows_of(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "trials.jsonl").read_text().splitlines()]


def test_a_moved_sweep_folder_resumes_and_its_table_reads_the_runs_where_they_are_now(tmp_path):
    """Rows stored absolute run paths: after a move the table named the old folder (histories() raised
    FileNotFoundError), after a copy it named the original's runs, silently."""
    first = sweep(BASE, CONFIGS, steps=1, runs_dir=tmp_path / "a", progress=False)
    old = Path(first.attrs["path"])
    assert [r["run_path"] for r in rows_of(old)] == ["trial-000-seed0", "trial-001-seed0"]  # relative on disk
    moved = tmp_path / "b" / "moved"
    moved.parent.mkdir()
    shutil.move(old, moved)
    again = sweep(BASE, CONFIGS, steps=1, resume=moved, progress=False)
    assert list(again.run_path) == [str(moved / "trial-000-seed0"), str(moved / "trial-001-seed0")]
    assert [len(h.steps) for h in histories(again)] == [1, 1]
    copy = tmp_path / "copy"
    shutil.copytree(moved, copy)
    lines = rows_of(copy)  # as an older rlnb wrote them: absolute, naming the folder where the trials ran
    (copy / "trials.jsonl").write_text("".join(json.dumps({**r, "run_path": str(old / r["run_path"])}) + "\n"
                                               for r in lines))  # fmt: skip
    copied = sweep(BASE, CONFIGS, steps=1, resume=copy, progress=False)
    assert list(copied.run_path) == [str(copy / "trial-000-seed0"), str(copy / "trial-001-seed0")]


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_an_optuna_trial_asked_again_after_a_stop_keeps_its_seed(tmp_path):
    """Trial 0 (seed 0), stopped, was asked again as trial 1 with seeds[1]: another run of its config, whose row
    replaced the stopped one as if it were that trial's."""
    stop = threading.Event()

    def reward(prompt, completion):
        stop.set()  # trial 0 stops at its next step
        return 0.0

    options = dict(search="optuna", space={"learning_rate": (1e-4, 1e-1, "log")}, n_trials=2, steps=3, seeds=[0, 1],
                   task=reward, sampler="random", pruner=None, max_concurrent=1, progress=False)  # fmt: skip
    first = sweep(BASE, runs_dir=tmp_path, stop=stop, **options)
    assert list(first.status) == ["STOPPED"] and list(first.seed) == [0]
    again = sweep(BASE, resume=first.attrs["path"], **options)
    rerun = again[again.learning_rate == first.learning_rate.iloc[0]]
    assert list(rerun.trial) == [1] and list(rerun.seed) == [0] and list(rerun.status) == ["COMPLETED"]
    assert History.load(rerun.run_path.iloc[0]).config["seed"] == 0


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_a_trial_stopped_again_keeps_its_first_attempts_seed(tmp_path):
    """A rerun stopped again is asked once more with the seed of the first attempt, not of the rerun's number."""
    dims = parse_space(BASE, {"learning_rate": (1e-4, 1e-1, "log")})

    def source():
        return OptunaSource(tmp_path, dims, 4, lambda n, config, seed_of: (n, config, seed_of), sampler="random",
                            pruner=None, objective="reward", steps=1)  # fmt: skip

    asked = []
    for _ in range(3):  # the sweep, then two resumes, each stopped during its first trial
        study = source()
        n, config, seed_of = study.next_spec()
        asked.append((n, config, seed_of))
        study.finish({"trial": n, "status": "STOPPED"})
    assert [(n, seed_of) for n, _, seed_of in asked] == [(0, None), (1, 0), (2, 0)]
    assert asked[0][1] == asked[1][1] == asked[2][1]


def test_a_hand_edited_trials_file_warns_for_a_broken_line_and_ignores_a_trial_outside_the_sweep(tmp_path):
    """A line that is no JSON (a comma too many) was skipped without a word, and a row of trial 99 in a sweep of two
    was a row of the table (its config NaN) and counted done: "done 3 of 2"."""
    first = sweep(BASE, CONFIGS, steps=1, runs_dir=tmp_path, progress=False)
    folder = Path(first.attrs["path"])
    lines = (folder / "trials.jsonl").read_text().splitlines()
    lines[0] = lines[0].replace(",", ",,", 1)  # a comma too many
    lines.append(json.dumps({"trial": 99, "status": "COMPLETED", "final_reward": 5.0}))
    (folder / "trials.jsonl").write_text("\n".join(lines) + "\n")
    done = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = sweep(BASE, CONFIGS, steps=1, resume=folder, progress=lambda d, t, r: done.append((d, t, r["trial"])))
    messages = [str(w.message) for w in caught]
    assert any("trials.jsonl line 1 is not JSON" in m and "runs again" in m for m in messages), messages
    assert any("trial 99 is not a trial of this sweep; its row is ignored" in m for m in messages), messages
    assert done == [(2, 2, 0)]  # trial 0 ran again; trial 99 is not done work
    assert list(again.trial) == [0, 1] and not again.learning_rate.isna().any()


def resume_warnings(folder: Path, **options) -> tuple[list[str], object]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = sweep(BASE, resume=folder, **options)
    return [str(w.message) for w in caught], again


def test_a_planned_trials_row_edited_by_hand_is_warned_about_and_takes_the_plans_config(tmp_path):
    """Trial 1's row edited to learning_rate=0.5 (and trial 0's given a weight_decay) was taken as it stood on resume:
    the table showed the result of the run at 2e-3 as the result of 0.5, without a word."""
    first = sweep(BASE, CONFIGS, steps=1, runs_dir=tmp_path, progress=False)
    folder = Path(first.attrs["path"])
    rows = rows_of(folder)
    rows[0]["weight_decay"] = 0.1
    rows[1].update(learning_rate=0.5, label="learning_rate=0.5")
    (folder / "trials.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    done = []
    messages, again = resume_warnings(folder, configs=CONFIGS, steps=1, progress=lambda *a: done.append(a))
    trials_file = folder / "trials.jsonl"
    assert any(f"{trials_file}: trial 0's row differs from the sweep's plan" in m and "weight_decay: 0.1 (the plan has "
               "no weight_decay)" in m for m in messages), messages  # fmt: skip
    assert any(f"{trials_file}: trial 1's row differs from the sweep's plan" in m and "learning_rate: 0.5 (the plan "
               "has 0.002)" in m and "the plan's is kept" in m for m in messages), messages  # fmt: skip
    assert done == []  # both trials were done: neither ran again
    assert list(again.learning_rate) == [1e-3, 2e-3] and list(again.label) == list(first.label)
    assert "weight_decay" not in again and list(again.final_loss) == list(first.final_loss)
    assert History.load(again.run_path.iloc[1]).config["sweep_config"] == {"learning_rate": 2e-3}  # what it ran with


def test_an_optuna_trials_row_edited_by_hand_takes_the_studys_params_and_seed(tmp_path):
    """The study's params (and the seed the trial ran with) are the plan of a search: an edited row was taken."""
    options = dict(search="optuna", space={"learning_rate": (1e-4, 1e-1, "log")}, n_trials=1, steps=1, seeds=[0, 1],
                   sampler="random", pruner=None, progress=False)  # fmt: skip
    first = sweep(BASE, runs_dir=tmp_path, **options)
    folder = Path(first.attrs["path"])
    (row,) = rows_of(folder)
    (folder / "trials.jsonl").write_text(json.dumps({**row, "learning_rate": 0.5, "seed": 1}) + "\n")
    messages, again = resume_warnings(folder, **options)
    assert any("trial 0's row differs from the sweep's plan" in m and "learning_rate: 0.5" in m and "seed: 1 (the plan "
               "has 0)" in m for m in messages), messages  # fmt: skip
    assert list(again.learning_rate) == list(first.learning_rate) and list(again.seed) == [0]


def test_the_docs_comparison_line_runs_after_a_stopped_sweep(tmp_path):
    """docs/sweeps.md's line raised "labels has 2 entries for 0 runs" for a sweep stopped before its trials started:
    histories() leaves out the rows without a run, the labels taken from the table did not."""
    (line,) = [
        ln
        for ln in DOCS.read_text().splitlines()
        if ln.startswith("rlnb.viz.plots.compare(rlnb.compare(rlnb.sweep.histories(")
    ]
    stop = threading.Event()
    stopped = sweep(BASE, CONFIGS, steps=1, runs_dir=tmp_path, stop=stop, progress=lambda *a: stop.set(),
                    executor="threads")  # fmt: skip
    assert list(stopped.status) == ["COMPLETED", "STOPPED"] and stopped.run_path.isna().tolist() == [False, True]
    for trials in (stopped, stopped.iloc[1:]):  # one run; none
        namespace = {"rlnb": rlnb, "trials": trials}
        exec(compile(line, str(DOCS), "exec"), namespace)
    plt.close("all")


def test_an_empty_change_in_an_ablation_is_refused_naming_it(tmp_path):
    """``{"same": {}}`` ran the baseline again, and the docs' compare line refused its runs: "share label 'baseline'
    and seed 0"."""
    with pytest.raises(ValueError, match=r"changes\['same'\] is empty: it repeats 'baseline'"):
        ablate(BASE, {"muon": {"optimizer": "muon"}, "same": {}}, seeds=[0], steps=1, runs_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "build",
    [lambda: random_search(3, lr=(1e-5, 1e-1, "log")), lambda: grid(lr=[1e-3]), lambda: grid(**{"adam.lr": [1e-3]})],
)
def test_grid_and_random_search_name_a_field_no_optimizer_has(build):
    """docs/sweeps.md's ``random_search(n, lr=...)`` built configs that every sweep then refused."""
    with pytest.raises(ValueError, match=r"unknown field '(adam\.)?lr'; allowed fields are optimizer, learning_rate"):
        build()
    (line,) = [ln for ln in DOCS.read_text().splitlines() if "`random_search(n, " in ln]
    assert 'random_search(n, learning_rate=(1e-5, 1e-1, "log")' in line


def test_a_sweep_of_muons_adam_clip_which_no_step_reads_is_refused():
    """``grid(**{"adam.grad_clip_norm": [...]})`` ran trials that differed in nothing: a Muon step clips one global
    norm by Muon's own grad_clip_norm, never by its ``adam``'s."""
    with pytest.raises(ValueError, match=r"unknown field 'adam\.grad_clip_norm'; allowed fields are optimizer, "):
        grid(**{"adam.grad_clip_norm": [0.5, 2.0]})
    assert grid(grad_clip_norm=[0.5, 2.0]) == [{"grad_clip_norm": 0.5}, {"grad_clip_norm": 2.0}]


def test_a_list_with_a_config_twice_is_refused_as_a_grid_is(tmp_path):
    """A copied config ran as a trial that summarize took for a seed in perfect agreement."""
    with pytest.raises(ValueError, match=r"configs lists \{'learning_rate': 0.001\} more than once"):
        sweep(BASE, [{"learning_rate": 1e-3}, {"learning_rate": 1e-3}], steps=1, runs_dir=tmp_path, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_a_grid_of_nans_is_refused():
    """Two NaNs passed grid's distinct-values check (NaN != NaN)."""
    with pytest.raises(ValueError, match="grid: learning_rate lists NaN"):
        grid(learning_rate=[float("nan"), float("nan")])


def test_a_sweep_without_recording_is_refused_naming_record(tmp_path):
    """record=False left every run_path None, against the docs' "each trial's history is saved"."""
    with pytest.raises(ValueError, match="record=False: a sweep records each trial's history"):
        sweep(BASE, CONFIGS, steps=1, runs_dir=tmp_path, progress=False, record=False)
    assert list(tmp_path.iterdir()) == []


def test_runs_lists_a_sweeps_trials_from_its_folder_as_the_docs_say(tmp_path):
    trials = sweep(BASE, CONFIGS, steps=1, runs_dir=tmp_path, progress=False)
    assert '`rlnb.runs(trials.attrs["path"])`' in re.sub(r"\s+", " ", DOCS.read_text())
    assert sorted(rlnb.runs(trials.attrs["path"]).path) == sorted(trials.run_path)


def test_an_optuna_search_stopped_before_its_first_trial_still_summarizes(tmp_path):
    """It returned a table without a single column: ``summarize`` raised "metric='final_reward' is not a column",
    and ``trials[["trial", "status"]]`` a KeyError, where a plan's stopped sweep has every column."""
    stop = threading.Event()
    stop.set()
    trials = sweep(BASE, search="optuna", space={"learning_rate": (1e-4, 1e-1, "log")}, n_trials=2, steps=1,
                   runs_dir=tmp_path, stop=stop, progress=False)  # fmt: skip
    assert len(trials) == 0 and {"trial", "status", "final_reward", "value", "run_path"} <= set(trials.columns)
    assert len(summarize(trials)) == 0 and histories(trials) == []


DEEP = "[" * 100_000 + "]" * 100_000
"""JSON nested past what Python's decoder reads (a hand edit, or damage): ``json.loads`` raises ``RecursionError``."""


def test_a_trials_line_nested_past_the_json_decoder_is_skipped_with_the_usual_warning(tmp_path):
    """It ended the resume with a bare ``RecursionError`` naming no file: it is a line that is not JSON."""
    from rlnb.history.jsontext import config_text
    from rlnb.sweep.folder import begin

    (tmp_path / "sweep.json").write_text(config_text({}))
    (tmp_path / "trials.jsonl").write_text(DEEP + "\n" + json.dumps({"trial": 0, "status": "COMPLETED"}) + "\n")
    with pytest.warns(UserWarning, match=r"trials\.jsonl line 1 is not JSON .*runs again"):
        rows = begin(tmp_path, {}, resume=True)
    assert [row["trial"] for row in rows] == [0]


def test_a_sweep_json_nested_past_the_json_decoder_is_called_damaged(tmp_path):
    """As a ``sweep.json`` cut short is: it was a bare ``RecursionError``."""
    from rlnb.sweep.folder import begin

    (tmp_path / "sweep.json").write_text(DEEP)
    with pytest.raises(ValueError, match=r"resume: .*sweep\.json is damaged \(nested deeper"):
        begin(tmp_path, {}, resume=True)


def test_resuming_a_sweep_folder_that_is_a_link_to_nothing_names_the_link(tmp_path):
    """It said "resume: .../link is not a sweep folder (no sweep.json)": the folder's target gone (unmounted, moved)
    was not said."""
    (tmp_path / "link").symlink_to(tmp_path / "gone")
    with pytest.raises(ValueError, match=r"resume '.*link': .*link is a link to '.*gone', which does not exist"):
        sweep(BASE, CONFIGS, steps=1, resume=tmp_path / "link", progress=False)
    assert not (tmp_path / "gone").exists()

"""A resume whose reward cannot be compared with the one the sweep recorded: an older rlnb's folder (its reward by a
bytecode digest, the Python unnamed) on another Python, and a reward that has no source now (``python -c``, a
REPL) in a folder that recorded it by its source. Both were refused "changed: task_detail" though nothing could
tell; now they go on with a warning naming what could not be checked, and what cannot be told is refused saying
how to go on."""

import json
import warnings

import pytest

from rlnb.sweep import fingerprint, sweep
from rlnb.sweep.fingerprint import PYTHON, same_task, task_detail
from rlnb.sweep.folder import run_pythons
from rlnb.sweep.options import TrialOptions
from rlnb.tasks import Task
from tests.support.digests import BASE, CONFIGS, another_pythons_bytecode, stopped_after_one


def _reward(prompt, completion):
    return float(completion.startswith("1"))


def _other(prompt, completion):
    return float(completion.startswith("2"))


def typed(name: str, body: str = "1.0") -> object:
    """A function named as this module's ``name`` whose source Python cannot give (typed into ``python -c``)."""
    made: dict = {"__name__": __name__}
    exec(compile(f"def {name}(prompt, completion):\n    return {body}\n", "<typed>", "exec"), made)
    return made[name]


def older_rlnbs_detail_on_another_python(task: Task, monkeypatch) -> str:
    """``task_detail`` as an older rlnb wrote it (unlabelled bytecode) on a Python that compiles differently."""
    another_pythons_bytecode(monkeypatch)
    older = fingerprint._detail(task, None, fingerprint._bytecode)
    monkeypatch.undo()
    assert "(source" not in older and "bytecode" not in older
    return older


def test_an_older_rlnbs_folder_from_another_python_resumes_with_a_warning_naming_the_python_its_runs_record(
    monkeypatch,
):
    task = Task("custom", ["1+0="], _reward, 8)
    older = older_rlnbs_detail_on_another_python(task, monkeypatch)
    with pytest.warns(UserWarning, match=r"recorded by its bytecode on Python 3\.99 \(by an older rlnb\).*not checked"):
        assert same_task(task, older, lambda: {"3.99"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not same_task(task, older, lambda: {PYTHON})  # made on this Python: the reward changed
        assert not same_task(task, older, lambda: {"3.99", PYTHON})
        assert not same_task(Task("custom", ["1+0="], _other, 8), older, lambda: {"3.99"})  # another reward's name
        assert not same_task(Task("custom", ["2+0="], _reward, 8), older, lambda: {"3.99"})  # other prompts


def test_an_older_rlnbs_folder_whose_runs_name_no_python_is_refused_saying_how_to_go_on(monkeypatch):
    task = Task("custom", ["1+0="], _reward, 8)
    older = older_rlnbs_detail_on_another_python(task, monkeypatch)
    with pytest.raises(ValueError, match=r"resume: task_detail: .*older rlnb.*no trial's run.*resume it on the Python"):
        same_task(task, older, set)


def test_a_reward_without_source_now_resumes_a_folder_that_recorded_its_source_with_a_warning():
    here = task_detail(Task("custom", ["1+0="], _reward, 8))
    assert "(source, " in here
    no_source = Task("custom", ["1+0="], typed("_reward"), 8)
    assert "(bytecode, " in task_detail(no_source)
    with pytest.warns(UserWarning, match=r"_reward was recorded by its source, which Python cannot give here .*"
                                         r"not checked.*define it in a file or a notebook cell") as caught:  # fmt: skip
        assert same_task(no_source, here, set)
    assert caught[0].filename == __file__  # the caller's line, not one inside rlnb or pytest
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # another name, or other prompts: refused as before
        assert not same_task(Task("custom", ["1+0="], typed("_other"), 8), here, set)
        assert not same_task(Task("custom", ["2+0="], typed("_reward"), 8), here, set)


def test_run_pythons_reads_the_python_each_trial_run_recorded(tmp_path):
    for run, config in {"trial-000-seed0": {"versions": {"python": "3.11.9"}}, "trial-001-seed0": {"versions": 5},
                        "trial-002-seed0": [1], "other": {"versions": {"python": "3.7.1"}}}.items():  # fmt: skip
        (tmp_path / run).mkdir()
        (tmp_path / run / "config.json").write_text(json.dumps(config))
    (tmp_path / "trial-003-seed0").mkdir()  # no config.json: a trial stopped before its session opened
    assert run_pythons(tmp_path) == {"3.11"}


@pytest.mark.slow
def test_an_older_rlnbs_sweep_folder_copied_to_another_python_resumes(tmp_path, monkeypatch):
    _, folder = stopped_after_one(tmp_path, _reward)
    settings = json.loads((folder / "sweep.json").read_text())
    task = TrialOptions(task=_reward).the_task()  # the task a bare reward makes, as the sweep recorded it
    assert settings["task_detail"] == task_detail(task)
    settings["task_detail"] = older_rlnbs_detail_on_another_python(task, monkeypatch)
    (folder / "sweep.json").write_text(json.dumps(settings))
    with pytest.raises(ValueError, match="changed: task_detail"):  # its runs say this Python: the reward changed
        sweep(BASE, CONFIGS, steps=1, resume=folder, progress=False, task=_reward)
    config = json.loads((folder / "trial-000-seed0" / "config.json").read_text())
    (folder / "trial-000-seed0" / "config.json").write_text(json.dumps({**config, "versions": {"python": "3.99.0"}}))
    with pytest.warns(UserWarning, match=r"on Python 3\.99") as caught:
        again = sweep(BASE, CONFIGS, steps=1, resume=folder, progress=False, task=_reward)
    assert [w.filename for w in caught if "3.99" in str(w.message)] == [__file__]  # the user's sweep(...) line
    assert list(again.status) == ["COMPLETED", "COMPLETED"]

"""A sweep folder copied to a machine with another Python resumes: the reward was digested by its bytecode, which
each Python minor version compiles differently, so ``resume=`` there refused "changed: task_detail" though the
reward was the same. A function with source is digested by its source text; a lambda (or a function without source)
by its bytecode, the detail naming the Python, and a folder of another Python is taken with a warning."""

import warnings

import pytest

from rlnb.sweep import fingerprint, sweep
from rlnb.sweep.fingerprint import PYTHON, same_task, task_detail
from rlnb.tasks import Task
from tests.support.digests import BASE, CONFIGS, another_pythons_bytecode, stopped_after_one


def _reward(prompt, completion):
    return float(completion.startswith("1"))


def _other(prompt, completion):
    return float(completion.startswith("2"))


def test_a_function_with_source_has_the_same_detail_on_another_python(monkeypatch):
    task = Task("custom", ["1+0="], _reward, 8)
    here = task_detail(task)
    assert here.startswith(f"reward {__name__}._reward (source, ")
    another_pythons_bytecode(monkeypatch)
    assert task_detail(task) == here and same_task(task, here, set)
    assert not same_task(Task("custom", ["1+0="], _other, 8), here, set)


def test_a_lambda_is_digested_by_its_bytecode_naming_the_python():
    detail = task_detail(Task("custom", ["1+0="], lambda p, c: 1.0, 8))
    assert f"<lambda> (bytecode, Python {PYTHON}, " in detail
    made: dict = {}
    exec(compile("def no_source(p, c):\n    return 1.0\n", "<typed>", "exec"), made)  # python -c: no source to read
    assert f".no_source (bytecode, Python {PYTHON}, " in task_detail(Task("custom", ["1+0="], made["no_source"], 8))


def test_a_folder_of_an_older_rlnb_still_resumes_on_the_same_python():
    """An older rlnb wrote ``reward <name> (<bytecode digest>), ...``: no form, no Python named."""
    task = Task("custom", ["1+0="], _reward, 8)
    older = fingerprint._detail(task, None, fingerprint._bytecode)
    assert "(source" not in older and "bytecode" not in older
    assert same_task(task, older, set) and not same_task(Task("custom", ["1+0="], _other, 8), older, set)
    assert not same_task(task, older.replace("1 prompts", "2 prompts"), set) and not same_task(task, None, set)


def test_a_lambdas_folder_from_another_python_is_taken_with_a_warning(monkeypatch):
    task = Task("custom", ["1+0="], lambda p, c: 1.0, 8)
    another_pythons_bytecode(monkeypatch)
    there = task_detail(task)
    monkeypatch.undo()
    with pytest.warns(UserWarning, match=r"recorded by its bytecode, Python 3\.99, .*resume on Python 3\.99"):
        assert same_task(task, there, set)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # another reward's name, or other prompts: refused, without a word
        assert not same_task(Task("custom", ["1+0="], _other, 8), there, set)
        assert not same_task(Task("custom", ["2+0="], lambda p, c: 1.0, 8), there, set)
        here = task_detail(Task("custom", ["1+0="], lambda p, c: 2.0, 8))  # this Python's, of another lambda
        assert not same_task(task, here, set)


@pytest.mark.slow
def test_a_sweep_folder_copied_to_another_python_resumes(tmp_path, monkeypatch):
    first, folder = stopped_after_one(tmp_path, _reward)
    assert list(first.status) == ["COMPLETED", "STOPPED"]
    assert "(source, " in (folder / "sweep.json").read_text()
    another_pythons_bytecode(monkeypatch)
    with pytest.raises(ValueError, match="changed: task_detail"):
        sweep(BASE, CONFIGS, steps=1, resume=folder, progress=False, task=_other)
    again = sweep(BASE, CONFIGS, steps=1, resume=folder, progress=False, task=_reward)
    assert list(again.status) == ["COMPLETED", "COMPLETED"]


def _commented(prompt, completion):
    # a comment, and spacing, a reader may edit
    return float(completion.startswith("1"))


def _commented_edited(prompt, completion):
    # the comment reworded: the same reward

    return float( completion.startswith( "1" ) )  # fmt: skip


def _changed(prompt, completion):
    # the same comment
    return float(completion.startswith("2"))


def test_an_edited_comment_or_spacing_is_the_same_reward_and_an_edited_expression_is_not():
    """The source's tokens are digested, comments, blank lines and spacing left out (the bytecode ignored them too)."""
    detail = fingerprint._source(_commented.__code__)
    strip = lambda d: d.split(b"\0", 3)[3]  # noqa: E731 - after `def`, the name and `(`
    assert strip(fingerprint._source(_commented_edited.__code__)) == strip(detail)
    assert strip(fingerprint._source(_changed.__code__)) != strip(detail)

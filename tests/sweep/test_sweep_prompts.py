"""A sweep's prompts on a Hugging Face model, checked once before its folder is made, from the model's tokenizer and
config alone (no weights loaded): a prompt past its context, a token past its vocabulary, or a chat prompt for a
tokenizer without a chat template failed every trial at its first step, each after the model had loaded (and after
the trials before it had run). The models are tiny ones built at test time (``tests/support/hf_models.py``)."""

import json
import shutil
from pathlib import Path

import pytest

import rlnb
from rlnb.engine.models import hf
from rlnb.sweep import grid, sweep
from rlnb.sweep.new_prompts import check_sweep_prompts
from rlnb.tasks import Task
from tests.support.hf_models import VOCAB

BASE = rlnb.AdamParams(learning_rate=1e-3, weight_decay=0.0)


def zero(prompt, completion):
    return 0.0


def without_chat_template(folder: str, to: Path) -> str:
    """A copy of the model at ``folder`` whose tokenizer has no chat template."""
    shutil.copytree(folder, to)
    (to / "chat_template.jinja").unlink(missing_ok=True)
    config = to / "tokenizer_config.json"
    config.write_text(json.dumps({k: v for k, v in json.loads(config.read_text()).items() if k != "chat_template"}))
    return str(to)


@pytest.mark.slow
def test_a_hugging_face_models_unreadable_prompts_are_refused_before_the_sweep_folder(tmp_path, hf_dirs, monkeypatch):
    model = hf_dirs["gpt2"]
    bare = without_chat_template(model, tmp_path / "no-template")

    def loaded(*args, **kwargs):
        raise AssertionError("the model's weights were loaded")

    monkeypatch.setattr(hf, "load_weights", loaded)
    cases = [
        (model, ["n=", "a " * 300], r"prompts\[1\]: \d+ tokens \+ max_tokens 8 exceed the model's context of 256$"),
        (model, ["n=", [5, VOCAB]], rf"prompts\[1\]: token {VOCAB} is outside the vocabulary \[0, {VOCAB}\)$"),
        (
            bare,
            ["n=", [{"role": "user", "content": "hi"}]],
            r"prompts\[1\]: the tokenizer \(\w+\) has no chat template: pass text",
        ),
    ]
    for folder, prompts, match in cases:
        with pytest.raises(ValueError, match=r"^task 'bad': " + match):
            sweep(BASE, grid(learning_rate=[1e-3, 2e-3]), task=Task("bad", prompts, zero), model=folder, steps=1,
                  runs_dir=tmp_path / "runs", progress=False)  # fmt: skip
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_a_hugging_face_models_readable_prompts_run(tmp_path, hf_dirs):
    """The last token of the vocabulary and a chat prompt its template renders pass the check, and the trial runs."""
    prompts = ["n=", [5, VOCAB - 1], [{"role": "user", "content": "hi"}]]
    trials = sweep(BASE, task=Task("ok", prompts, zero, group_size=2), model=hf_dirs["gpt2"], steps=1,
                   runs_dir=tmp_path, progress=False)  # fmt: skip
    assert list(trials.status) == ["COMPLETED"], list(trials.reason)


def test_on_ray_a_model_this_machine_cannot_load_is_left_to_the_workers(tmp_path):
    """A Ray cluster's workers may hold a model the driver's machine does not: the sweep is not refused for it there
    (its trials load, and check, it on their node); on this process's threads it is refused, naming the folder."""
    task = Task("ok", ["n="], zero)
    check_sweep_prompts(task, "local", {"model": str(tmp_path)}, ray=True)
    with pytest.raises(hf.ModelLoadError, match=r"is a directory but holds no config\.json"):
        check_sweep_prompts(task, "local", {"model": str(tmp_path)}, ray=False)

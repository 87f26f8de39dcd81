"""``lr_find`` without a session, and a builder's Find LR with no RunPanel, on a new Hugging Face model or a remote
``target=``: a task's prompt the new session cannot read was found only at the range test's first step, after the
model had loaded or a remote session had started for it. Now refused before anything is loaded or sent, naming the
prompt (``prompts[i]``). The remote service is the in-process fake API (``tests/support/fake_api.py``)."""

import html
import re
import shutil

import httpx
import pytest

import rlnb
from rlnb.engine.models import hf
from rlnb.sweep import lr_find
from rlnb.tasks import Task
from rlnb.widgets import OptimizerBuilder
from tests.support.fake_api import BASE, KEY, FakeAPI

DEADLINE = 60.0


def remote_options(api: FakeAPI, **more):
    return {"target": BASE, "api_key": KEY, "transport": httpx.MockTransport(api), "ready_timeout": 5, **more}


def test_text_prompts_for_a_remote_model_without_a_tokenizer_are_refused_before_a_session_starts(tmp_path):
    """A remote ``base_model`` given no ``tokenizer=`` takes token ids only: the session was started (a model
    resource and a session POSTed, billed) and the first step said "session ... has no tokenizer"."""
    api = FakeAPI()
    with pytest.raises(ValueError, match=r"^task 'digits': prompts\[0\]: model 'org/model-a' has no tokenizer: pass "):
        lr_find(rlnb.AdamParams(), steps=5, runs_dir=tmp_path, **remote_options(api, base_model="org/model-a"))
    assert api.calls() == [] and list(tmp_path.iterdir()) == []


def test_a_prompt_past_a_remote_builtin_models_context_is_refused_before_a_session_starts(tmp_path):
    """rlnb serve's byte-level ``rlnb/tiny`` (256 positions): a 300-byte prompt failed the first step."""
    api = FakeAPI()
    bad = Task("long", ["n=", "a" * 300], lambda prompt, completion: 0.0, max_tokens=8)
    with pytest.raises(ValueError, match=r"^task 'long': prompts\[1\]: 300 tokens \+ max_tokens 8 exceed the model's "):
        lr_find(rlnb.AdamParams(), steps=5, task=bad, runs_dir=tmp_path, **remote_options(api, base_model="rlnb/tiny"))
    assert api.calls() == [] and list(tmp_path.iterdir()) == []


def test_a_builders_find_lr_with_no_panel_refuses_a_remote_prompt_at_the_click():
    """The builder on its own, ``lr_finder.options`` naming a remote target: the click started a session."""
    api = FakeAPI()
    lr = OptimizerBuilder("adam").lr_finder
    lr.options.update(remote_options(api, base_model="org/model-a", record=False))
    lr.button.click()
    assert lr.join(DEADLINE) and not lr.running
    said = html.unescape(re.sub(r"<[^>]+>", "", lr.status.value))
    assert re.search(r"task 'digits': prompts\[0\]: model 'org/model-a' has no tokenizer", said), said
    assert isinstance(lr.error, ValueError) and not lr.button.disabled
    assert api.calls() == []


@pytest.mark.slow
def test_a_hugging_face_models_prompts_are_refused_before_it_loads(tmp_path, hf_dirs, monkeypatch):
    """A prompt past a Hugging Face model's context (its config's), and text for one saved without a tokenizer:
    the model loaded, a run folder opened, and the first step refused it."""

    def loaded(*args, **kwargs):
        raise AssertionError("the model's weights were loaded")

    monkeypatch.setattr(hf, "load_weights", loaded)
    bad = Task("long", ["n=", "a " * 300], lambda prompt, completion: 0.0, max_tokens=8)
    with pytest.raises(ValueError, match=r"^task 'long': prompts\[1\]: \d+ tokens \+ max_tokens 8 exceed the model's"):
        lr_find(rlnb.AdamParams(), steps=5, task=bad, model=hf_dirs["gpt2"], runs_dir=tmp_path / "runs")
    bare = tmp_path / "bare"
    shutil.copytree(hf_dirs["gpt2"], bare, ignore=shutil.ignore_patterns(*hf.TOKENIZER_FILES, "*.txt", "vocab*"))
    with pytest.raises(ValueError, match=r"^task 'digits': prompts\[0\]: model '.*bare' has no tokenizer"):
        lr_find(rlnb.AdamParams(), steps=5, model=str(bare), runs_dir=tmp_path / "runs")
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow  # near a second on a loaded machine
def test_a_builders_find_lr_with_no_panel_runs_on_a_remote_target():
    """``lr_finder.options`` naming a remote target: the builder's ``model=`` ("tiny") went to ``rlnb.connect`` too,
    and every click failed ``RemoteBackend.connect() got unexpected keyword argument(s): model``."""
    api = FakeAPI()
    lr = OptimizerBuilder("adam").lr_finder

    def step_fn(session, params, i):
        session.optim_step(params).result(timeout=DEADLINE)
        return float(i)

    lr.options.update(remote_options(api, base_model="org/model-a", record=False, steps=5, step_fn=step_fn))
    lr.button.click()
    assert lr.join(DEADLINE) and not lr.running
    assert lr.error is None, lr.error
    assert lr.result is not None and len(lr.result.values) == 5
    started = api.calls("POST", "/model-resources$")
    assert len(started) == 1 and b'"org/model-a"' in started[0].content

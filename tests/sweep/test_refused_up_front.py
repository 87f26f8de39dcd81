"""A sweep whose every trial would fail the same way is refused once, before its folder is made: a group larger
than the in-process engine samples per prompt, a prompt a local built-in model cannot read, and trainer-only
sessions, which cannot sample at all."""

import re
import sys
import threading
import types
from pathlib import Path

import pytest
import torch

import rlnb
from rlnb.engine.options import ModelOptions
from rlnb.remote.start import SessionOptions
from rlnb.sweep import TrialOptions, ablate, sweep
from rlnb.sweep.new_prompts import check_sweep_prompts
from rlnb.tasks import Task

BASE = rlnb.AdamParams(learning_rate=3e-3)
NOWHERE = "http://127.0.0.1:9"
"""A remote target nothing listens on: a sweep refused up front never reaches it."""


def task(group_size: int) -> Task:
    return Task("wide", ["n="], lambda prompt, completion: 0.0, group_size=group_size)


@pytest.mark.parametrize("executor", ["auto", "threads", "batched"])
def test_a_group_larger_than_the_engine_samples_is_refused_before_the_sweep_folder(tmp_path, executor):
    """``Task(group_size=1000)``: every local trial FAILED at its first sample (the engine takes 256 per prompt),
    and a batched sweep failed every member, after the sweep folder was made."""
    with pytest.raises(ValueError, match=r"Task\.group_size must be in \[2, 256\] for target 'local' .* got 1000"):
        sweep(BASE, task=task(1000), steps=1, runs_dir=tmp_path, progress=False, executor=executor)
    assert list(tmp_path.iterdir()) == []
    assert TrialOptions(task=task(256)).the_task().group_size == 256
    assert TrialOptions(task=task(1000), target=NOWHERE).target == NOWHERE  # Together's API publishes no cap


UNREADABLE = [
    ("", r"task 'bad': prompts\[1\] encodes to no tokens: a prompt needs at least one$"),
    ("a" * 100_000, r"task 'bad': prompts\[1\]: 100000 tokens \+ max_tokens 8 exceed the model's context of 256$"),
    ("a\ud800=", r"task 'bad': prompts\[1\] holds a lone surrogate, '\\ud800' at position 1: it is not valid Unicode"),
]


@pytest.mark.parametrize("executor", ["auto", "threads", "batched"])
@pytest.mark.parametrize(("prompt", "match"), UNREADABLE)
def test_a_prompt_the_builtin_model_cannot_read_is_refused_before_the_sweep_folder(tmp_path, executor, prompt, match):
    """An empty prompt, one past the model's context or a lone surrogate: every trial was a FAILED row, after the sweep
    folder was made; now ``run_batched``'s check, in its words, before the folder (``ablate`` too)."""
    bad = Task("bad", ["n=", prompt], lambda prompt, completion: 0.0)
    with pytest.raises(ValueError, match=match):
        sweep(BASE, task=bad, steps=1, runs_dir=tmp_path, progress=False, executor=executor, model="small")
    with pytest.raises(ValueError, match=match):
        ablate(BASE, {"hi": {"learning_rate": 1e-2}}, task=bad, steps=1, runs_dir=tmp_path, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_a_prompt_is_left_to_the_session_where_only_it_knows_the_tokenizer():
    """A remote session whose model the service picks (no ``base_model``, a ``model_resources_id``), another service's
    model (its vocabulary and context are the service's), a module: known once a trial's session opens, and its first
    step refuses the prompt there (its row FAILED). An ``rlnb/...`` model's, and a local built-in's, are refused."""
    long = Task("bad", [[7] * 100_000], lambda prompt, completion: 0.0)
    check_sweep_prompts(long, NOWHERE, {}, ray=False)
    check_sweep_prompts(long, NOWHERE, {"base_model": "org/model-a"}, ray=False)
    check_sweep_prompts(long, NOWHERE, {"base_model": "rlnb/tiny", "model_resources_id": "mr-1"}, ray=False)
    check_sweep_prompts(long, "local", {"model": torch.nn.Linear(2, 2)}, ray=False)
    with pytest.raises(ValueError, match=r"^task 'bad': prompts\[0\]: 100000 tokens \+ max_tokens \d+ exceed .* 256$"):
        check_sweep_prompts(long, NOWHERE, {"base_model": "rlnb/tiny"}, ray=False)
    with pytest.raises(ValueError, match="exceed the model's context of 256"):
        check_sweep_prompts(long, "local", {"model_options": ModelOptions()}, ray=False)


def test_a_token_past_a_remote_builtin_models_vocabulary_is_refused_before_the_sweep_folder(tmp_path):
    """rlnb serve's ``rlnb/tiny`` reads 256 byte tokens: a prompt holding token 300 failed every trial at its first
    step, each after a model resource and a session were started (billed) for it."""
    bad = Task("ids", [[104, 105], [104, 300]], lambda prompt, completion: 0.0)
    with pytest.raises(ValueError, match=r"^task 'ids': prompts\[1\]: token 300 is outside the vocabulary \[0, 256\)$"):
        sweep(BASE, task=bad, target=NOWHERE, api_key="sk-any-key", base_model="rlnb/tiny", steps=1, runs_dir=tmp_path,
              progress=False)  # fmt: skip
    assert list(tmp_path.iterdir()) == []


def test_text_for_a_remote_model_without_a_tokenizer_is_refused_before_the_sweep_folder(tmp_path):
    """A remote ``base_model`` given no ``tokenizer=`` takes token ids only: each trial started a session and failed
    its first step ("session ... has no tokenizer", naming no prompt)."""
    with pytest.raises(ValueError, match=r"^task 'digits': prompts\[0\]: model 'org/model-a' has no tokenizer: pass "):
        sweep(BASE, target=NOWHERE, api_key="sk-any-key", base_model="org/model-a", steps=1, runs_dir=tmp_path,
              progress=False)  # fmt: skip
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("call", ["sweep", "ablate"])
@pytest.mark.parametrize("base", [{"learning_rate": 1e-3}, None])
def test_a_base_that_is_not_optimizer_params_is_refused_naming_it(tmp_path, call, base):
    """An ``AttributeError: 'dict' object has no attribute 'request_body'`` named neither the argument nor what it
    takes (``lr_find`` named both)."""
    with pytest.raises(TypeError, match=r"base must be an OptimizerParams, such as rlnb\.AdamParams\(\) or "):
        if call == "sweep":
            sweep(base, runs_dir=tmp_path, progress=False)
        else:
            ablate(base, {"hi": {"learning_rate": 1e-2}}, runs_dir=tmp_path, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_the_event_class_as_stop_is_refused_before_the_sweep_folder(tmp_path):
    """``stop=threading.Event`` (the class: its ``set`` and ``is_set`` are callable) passed the check and failed once
    the sweep ran, leaving a folder with ``sweep.json`` and ``sweep.lock`` only."""
    with pytest.raises(TypeError, match=r"stop must be None or a threading\.Event .*got <class 'threading\.Event'>"):
        sweep(BASE, runs_dir=tmp_path, progress=False, stop=threading.Event)
    assert list(tmp_path.iterdir()) == []


def test_a_runs_dir_that_is_a_file_is_refused_naming_runs_dir(tmp_path):
    """A bare ``NotADirectoryError: [Errno 20] Not a directory: '<file>/<sweep id>'``."""
    file = tmp_path / "notes.txt"
    file.write_text("mine")
    for runs_dir in (file, file / "sub"):
        with pytest.raises(NotADirectoryError, match=rf"runs_dir must be a folder .*but {file}(/sub)? is a file or"):
            sweep(BASE, runs_dir=runs_dir, progress=False)
    assert file.read_text() == "mine" and list(tmp_path.iterdir()) == [file]


@pytest.mark.parametrize("option", [{"sampler": "random"}, {"pruner": None}, {"pruner": "asha"}])
def test_optuna_only_options_without_an_optuna_search_are_refused(tmp_path, option):
    """``sweep(base, configs, sampler="random")`` (or ``pruner=``) ran the configs as given, the option dropped in
    silence, where ``space=`` and ``n_trials=`` without ``search="optuna"`` are refused."""
    with pytest.raises(ValueError, match=r"sampler= and pruner= need search='optuna'"):
        sweep(BASE, [{"learning_rate": 1e-3}], steps=1, runs_dir=tmp_path, progress=False, **option)
    assert list(tmp_path.iterdir()) == []


def test_a_progress_function_of_other_arguments_is_refused_before_the_folder(tmp_path):
    """``progress=lambda done, total: ...`` (``lr_find``'s kind) ran the first trial, then raised ``<lambda>() takes 2
    positional arguments but 3 were given`` naming no option, a sweep folder made."""
    with pytest.raises(TypeError, match=r"progress must be True, False or a function \(done, total, row\)"):
        sweep(BASE, steps=1, runs_dir=tmp_path, progress=lambda done, total: None)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["runs_dir", "resume"])
def test_an_empty_runs_dir_or_resume_is_refused_as_connect_refuses_it(tmp_path, monkeypatch, name):
    """``runs_dir=""`` (say, an unset environment variable's default) made the sweep folder in the working folder,
    where ``rlnb.connect(runs_dir="")`` is refused; ``resume=""`` read the working folder as the sweep's."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=rf"{name} must be a folder's path or None, got ''"):
        sweep(BASE, steps=1, progress=False, **{name: ""})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("target", "options"),
    [
        (NOWHERE, {"num_generator_replicas": 0}),
        (NOWHERE, {"session": SessionOptions(num_generator_replicas=0)}),
        ("local", {"num_generator_replicas": 0}),
        ("local", {"model_options": ModelOptions(num_generator_replicas=0)}),
    ],
)
def test_trainer_only_sessions_are_refused_before_the_sweep_folder(tmp_path, target, options):
    """Every trial FAILED ``INVALID_INPUT: this session is trainer-only`` at its first sample, after the sweep
    folder was made."""
    with pytest.raises(ValueError, match=r"num_generator_replicas=0 starts trainer-only sessions, which cannot"):
        sweep(BASE, target=target, steps=1, runs_dir=tmp_path, progress=False, **options)
    with pytest.raises(ValueError, match=r"num_generator_replicas must be an integer >= 0, got -1"):
        sweep(BASE, target=target, steps=1, runs_dir=tmp_path, progress=False, num_generator_replicas=-1)
    assert list(tmp_path.iterdir()) == []


def test_a_sweep_whose_ray_is_refused_leaves_no_folder(tmp_path, monkeypatch):
    """``executor="ray"`` without Ray installed: the error named the cause, and an empty sweep folder (sweep.json, the
    lock) stayed behind in runs_dir at each try (as at an address no Ray answers, or on a cluster too small:
    tests/sweep/test_ray.py). A resumed sweep keeps its folder."""
    resumed = sweep(BASE, steps=1, runs_dir=tmp_path, progress=False, executor="threads").attrs["path"]
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    with pytest.raises(ImportError, match=r"executor='ray' needs ray: pip install 'rlnb\[ray\]'"):
        sweep(BASE, steps=1, runs_dir=tmp_path, progress=False, executor="ray")
    with pytest.raises(ImportError, match=r"executor='ray' needs ray"):
        sweep(BASE, steps=1, resume=resumed, progress=False, executor="ray", max_concurrent=1)
    assert list(tmp_path.iterdir()) == [Path(resumed)]


def test_ray_for_a_remote_targets_trials_is_refused_before_ray_or_a_folder(tmp_path, monkeypatch):
    """A remote target's trials train on the provider and run on threads here: ``executor="ray"`` started a local Ray
    (or joined one) that ran none of them, and took its CPUs. It is refused, naming both options, before Ray is
    imported or the sweep folder made."""
    monkeypatch.setitem(sys.modules, "ray", None)  # it is not imported: the refusal comes first
    with pytest.raises(ValueError, match=r"executor='ray' runs local trials.*target='http://127\.0\.0\.1:9'.*use "
                       r"executor='threads'"):  # fmt: skip
        sweep(BASE, target=NOWHERE, api_key="sk-any-key", steps=1, runs_dir=tmp_path, progress=False, executor="ray")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("configs", "options", "search"),
    [
        (None, {"muon_scaling": "match_adam"}, {}),
        ([{"learning_rate": 1e-3}, {"optimizer": "adam"}], {"muon_split": {"*": "adam"}}, {}),
        (None, {"ns_dtype": "float32"}, {"search": "optuna", "n_trials": 2, "space": {"learning_rate": [1e-3, 1e-2]}}),
    ],
)
def test_muon_options_for_a_sweep_without_a_muon_trial_are_refused_before_it_runs(tmp_path, configs, options, search):
    """A sweep's Muon-only options go to its Muon trials; where none is Muon, they were dropped in silence and every
    trial ran without what was asked (a sweep over both optimizers keeps them for its Muon trials: test_sweep.py)."""
    ((name, value),) = options.items()
    said = "^" + re.escape(f"{name}={value!r}") + r": muon_scaling, ns_dtype and muon_split are for Muon sessions "
    said += r"\(optimizer='muon'\) "
    with pytest.raises(ValueError, match=said + r"only; no trial of this sweep is Muon \(each is adam\)"):
        sweep(BASE, configs, steps=1, runs_dir=tmp_path, progress=False, **options, **search)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("kwargs", "where"),
    [
        ({"configs": [{"learning_rate": 1e-3}, {5: 1e-3}]}, r"configs\[1\]"),
        ({"search": "optuna", "n_trials": 1, "space": {5: [1e-3, 1e-2]}}, "space"),
    ],
    ids=["config", "space"],
)
def test_a_field_name_that_is_not_a_string_is_refused_naming_it_and_the_allowed_ones(tmp_path, kwargs, where):
    """``{5: 1e-3}`` was ``AttributeError: 'int' object has no attribute 'partition'``, naming no config or field."""
    if "space" in kwargs:
        pytest.importorskip("optuna")
    with pytest.raises(ValueError, match=rf"^{where}: unknown field 5; allowed fields are optimizer, learning_rate"):
        sweep(BASE, steps=1, runs_dir=tmp_path, progress=False, **kwargs)
    assert list(tmp_path.iterdir()) == []


def test_a_ray_that_does_not_start_is_an_error_naming_executor_ray_and_leaves_no_folder(tmp_path, monkeypatch):
    """On a loaded machine ``ray.init`` raised its bare ``Exception: The current node timed out during startup``,
    naming neither ``executor='ray'`` nor a way on (seen on this project's 2-core machine at load 15)."""

    def timed_out(*args, **kwargs):
        raise Exception("The current node timed out during startup.")  # Ray's own type and words

    words = r"^executor=.ray.: a local Ray did not start \(Exception: The current node timed out during startup\.\);"
    with monkeypatch.context() as patch, pytest.raises(RuntimeError, match=words + r" call ray\.init"):
        # a stand-in, gone when the test ends: importing Ray takes seconds (the fast tier does not)
        pickles = types.SimpleNamespace(dumps=lambda value: b"")  # cloudpickle takes the default task's lambdas
        stand_in = types.SimpleNamespace(is_initialized=lambda: False, init=timed_out, cloudpickle=pickles)
        patch.setitem(sys.modules, "ray", stand_in)
        sweep(BASE, steps=1, runs_dir=tmp_path, progress=False, executor="ray")
    assert list(tmp_path.iterdir()) == []


def test_more_configs_than_grid_makes_are_refused_and_an_endless_generator_is_not_read_for_ever(tmp_path):
    """A list of 10,001 configs ran them all (``grid`` and ``random_search`` stop at 10,000), and an endless
    generator of configs (``itertools.count``'s) was read until memory ran out, before anything ran."""
    import itertools

    from rlnb.sweep.space import MAX_CONFIGS

    many = [{"learning_rate": 1e-4 * (1 + i / MAX_CONFIGS)} for i in range(MAX_CONFIGS + 1)]
    endless = ({"learning_rate": 1e-4 * (1 + i / 1e9)} for i in itertools.count())
    for configs in (many, endless):
        with pytest.raises(ValueError, match=r"configs holds more than 10000 configs: at most 10000"):
            sweep(BASE, configs, steps=1, runs_dir=tmp_path, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_two_configs_that_send_the_same_params_are_refused_naming_both(tmp_path):
    """``{}`` (the base, at 1e-3) and ``{"learning_rate": 1e-3}`` ran one trial twice, "baseline" and
    "learning_rate=0.001" with the same reward, which the "listed twice" check missed. A field left unset is the
    target's default, which a remote service may choose otherwise: ``{}`` beside the local default is two trials."""
    base = rlnb.AdamParams(learning_rate=1e-3, weight_decay=0.0)
    said = "configs[0] {} and configs[1] {'learning_rate': 0.001} send the same params ({\"adam_params\": {"
    with pytest.raises(ValueError, match=re.escape(said)):
        sweep(base, [{}, {"learning_rate": 1e-3}], steps=1, runs_dir=tmp_path, progress=False)
    assert list(tmp_path.iterdir()) == []
    unset = rlnb.AdamParams(weight_decay=0.0)
    trials = sweep(unset, [{}, {"learning_rate": 1e-4}], steps=1, runs_dir=tmp_path, progress=False)
    assert list(trials.label) == ["baseline", "learning_rate=0.0001"]


def test_two_configs_that_differ_by_an_empty_group_are_refused_as_the_same_params(tmp_path):
    """``{}`` and ``{"adam.learning_rate": None}`` on ``MuonParams()`` send ``{}`` and ``{"adam": {}}``: an Adam group
    that overrides nothing, so the session's defaults apply as without it. One trial ran twice under two labels."""
    said = ("configs[0] {} and configs[1] {'adam.learning_rate': None} send the same params "
            '({"muon_params": {}} and {"muon_params": {"adam": {}}}: an empty group sets nothing)')  # fmt: skip
    with pytest.raises(ValueError, match=re.escape(said)):
        sweep(rlnb.MuonParams(), [{}, {"adam.learning_rate": None}], steps=1, runs_dir=tmp_path, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_configs_listed_twice_are_found_by_hash_not_by_comparing_every_pair():
    """``check_once`` compared each config with every earlier one: 10,000 configs (a grid's most) took 7 s before the
    first trial. Counted here as ``==`` calls between distinct values: none is needed to find none repeated."""
    from rlnb.sweep.space import check_once

    calls = []

    class Counted(float):
        def __eq__(self, other):
            calls.append(other)
            return float(self) == float(other)

        __hash__ = float.__hash__

    configs = [{"learning_rate": Counted(1e-4 * (1 + i))} for i in range(300)]
    check_once("configs", configs)
    assert len(calls) < 300  # one pass (every pair: 44,850)
    with pytest.raises(ValueError, match=r"configs lists \{'learning_rate': 0.0001\} more than once"):
        check_once("configs", [*configs, {"learning_rate": 1e-4}])
    with pytest.raises(ValueError, match=r"configs lists \{'b': \[1\]\} more than once"):
        check_once("configs", [{"b": [1]}, {"b": [2]}, {"b": [1]}])  # unhashable values: compared one by one


def test_a_resume_outside_the_runs_dir_given_is_refused_naming_both(tmp_path):
    """``sweep(runs_dir=X, resume=Y)`` resumed ``Y`` and dropped ``X`` in silence: a notebook that moved its runs to
    ``X`` went on writing in an old folder elsewhere. Nothing is read or made before the refusal."""
    elsewhere, runs = tmp_path / "old" / "sweep-1", tmp_path / "runs"
    elsewhere.mkdir(parents=True)
    with pytest.raises(ValueError) as info:
        sweep(BASE, steps=1, progress=False, runs_dir=runs, resume=elsewhere)
    said = str(info.value)
    assert f"resume={str(elsewhere)!r}" in said and f"runs_dir={str(runs)!r}" in said
    assert "is not a folder in" in said and not runs.exists() and list(elsewhere.iterdir()) == []


@pytest.mark.slow  # one sweep of one step, then its resume
def test_a_resume_of_a_sweep_made_in_the_runs_dir_given_is_taken(tmp_path, monkeypatch):
    """``runs_dir`` beside ``resume`` names the folder the sweep was made in, as a notebook passes both on a rerun:
    taken, spelt relatively or through ``~``."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    trials = sweep(BASE, steps=1, progress=False, runs_dir="runs")
    path = Path(trials.attrs["path"])
    again = sweep(BASE, steps=1, progress=False, runs_dir="~/runs/.", resume=Path("runs") / path.name)
    assert again.attrs["path"] == str(path) and list(again.status) == ["COMPLETED"]


@pytest.mark.parametrize(
    "config",
    [{"adam.learning_rate": 1e-3, "adam": {"learning_rate": 2e-3}}, {"adam": {"learning_rate": 2e-3},
                                                                      "adam.learning_rate": 1e-3}],
)  # fmt: skip
def test_a_field_given_in_both_spellings_is_refused_naming_both(tmp_path, config):
    """``{"adam.learning_rate": 1e-3, "adam": {"learning_rate": 2e-3}}`` ran with 0.002, the other value dropped
    without a word; an ablation's change alike."""
    said = r"configs\[0\] gives adam\.learning_rate twice: as 'adam\.learning_rate' and in 'adam'; give it once"
    with pytest.raises(ValueError, match=said):
        sweep(rlnb.MuonParams(), [config], seeds=[0], steps=1, runs_dir=tmp_path, progress=False)
    with pytest.raises(ValueError, match=said.replace(r"configs\[0\]", r"changes\['both'\]")):
        ablate(rlnb.MuonParams(), {"both": config}, seeds=[0], steps=1, runs_dir=tmp_path, progress=False)
    assert list(tmp_path.iterdir()) == []

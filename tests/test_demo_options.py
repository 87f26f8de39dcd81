"""``DemoOptions``: ``rlnb demo``'s options as one frozen object, each field checked when it is built, the error
naming the option and what it takes (``demo()`` took eleven parameters, checked only by the command line)."""

import dataclasses

import numpy as np
import pytest

from rlnb.cli.demo.options import DemoOptions


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("task", "reverse", "--task must be one of first_letter, addition, digits, got 'reverse'"),
        ("optimizer", "sgd", "--optimizer must be one of adam, muon, got 'sgd'"),
        ("dtype", "float64", "--dtype must be one of auto, float32, bfloat16, float16, got 'float64'"),
        ("dtype", "float16", "--dtype float16: float16's backward is not loss-scaled"),
        ("out", " ", "--out is empty (an unset variable?): give a folder"),
        ("force", "yes", "--force must be True or False, got 'yes'"),
        ("steps", 0, "--steps must be an integer in [1, 1000003]"),
        ("lora", 2.5, "--lora must be >= 0 (0 = train all weights), got 2.5"),
        ("lr", float("inf"), "--lr must be a finite number > 0, got inf"),
        ("lr", "1e-3", "--lr must be a finite number > 0, got '1e-3'"),
        ("lr", 10**400, "--lr must be a finite number > 0, got 1000000000"),  # an OverflowError from math.isfinite
        ("seed", 1.5, "--seed must be in [-9223344366821, 9223344366821] for 40 steps, got 1.5"),
        ("device", "tpu", "device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got 'tpu'"),
        ("threads", 0, "--threads must be an integer in [1, 1024] (leave it out: the engine's thread policy decides)"),
        ("threads", 2.0, "--threads must be an integer in [1, 1024]"),
        # passed, then Path(123) raised a TypeError naming no option, or the model's loader failed on it
        ("out", 123, "--out must be a folder's path (a str or a Path), got 123"),
        ("model", 7, "--model must be tiny, small, a folder or a hub id (a str or a Path), got 7"),
        ("out", "a\0b", "--out holds a NUL character, which no path can"),  # os's "embedded null byte", no option
    ],
)
def test_each_demo_option_is_checked_naming_it_and_what_it_takes(field, value, words):
    with pytest.raises(ValueError) as refused:
        DemoOptions(**{field: value})
    assert words in str(refused.value)


def test_demo_options_are_frozen_and_keep_what_was_given():
    options = DemoOptions(task="digits", optimizer="muon", steps=3, threads=2, lr=0.01, force=True)
    assert (options.task, options.optimizer, options.steps, options.threads, options.lr) == (
        "digits",
        "muon",
        3,
        2,
        0.01,
    )
    assert DemoOptions().threads is None  # the engine's thread policy decides, as rlnb.connect's default
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.steps = 4  # type: ignore[misc]


@pytest.mark.slow  # builds the tiny model and trains a step (~3 s)
def test_demo_threads_fixes_the_count_and_says_it(tmp_path, capsys):
    """A seeded demo differed with the engine's thread count (Muon's step-10 accuracy 0.61 on one thread, 0.78 on
    two) and ``rlnb demo`` could not fix it: ``--threads N`` does, as ``rlnb.connect(threads=N)``, and says it."""
    import rlnb
    from rlnb.cli import main

    assert main(["demo", "--steps", "1", "--device", "cpu", "--threads", "1", "--out", str(tmp_path)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("rlnb demo: task=first_letter ") and " threads=1 params=" in first
    config = rlnb.History.load(tmp_path / "run").config
    assert (config["threads"], config["thread_policy"]) == (1, "fixed")


def test_numpy_numbers_are_taken_as_every_other_entry_takes_them_and_kept_plain():
    """``seed=np.int64(1)`` was refused as "--seed must be in [...], got np.int64(1)" (in range), ``lora`` and
    ``lr=np.float32(...)`` alike, where ``rlnb.connect`` and ``sweep`` take numpy numbers (``test_integers``)."""
    options = DemoOptions(
        steps=np.int64(3), seed=np.int64(1), lora=np.int32(2), lr=np.float32(0.5), threads=np.int64(2)
    )
    assert (options.steps, options.seed, options.lora, options.lr, options.threads) == (3, 1, 2, 0.5, 2)
    assert [type(v) for v in (options.steps, options.seed, options.lora, options.lr, options.threads)] == [
        int,
        int,
        int,
        float,
        int,
    ]
    with pytest.raises(ValueError, match="--lora must be >= 0"):
        DemoOptions(lora=np.int64(-1))
    with pytest.raises(ValueError, match="--lr must be a finite number > 0, got True"):
        DemoOptions(lr=True)


def test_out_expands_a_tilde_as_every_other_folder_option_does(monkeypatch, tmp_path):
    """``--out=~/demo`` (no shell expands a ``~`` after ``=``) and ``DemoOptions(out="~/demo")`` wrote into a folder
    named ``~`` in the working folder, where ``runs_dir``, ``checkpoint_dir`` and ``History.save`` expand it."""
    monkeypatch.setenv("HOME", str(tmp_path))
    assert DemoOptions(out="~/demo").out == tmp_path / "demo"


def _refused(tmp_path, capsys, *options: str) -> str:
    from rlnb.cli import main

    assert main(["demo", "--steps", "1", "--device", "cpu", "--out", str(tmp_path / "out"), *options]) == 2
    return capsys.readouterr().err


def test_a_model_the_engine_cannot_load_is_refused_naming_model(tmp_path, capsys):
    """``rlnb demo --model FOLDER`` (no config.json) said the folder's fault without naming the option."""
    err = _refused(tmp_path, capsys, "--model", str(tmp_path))
    assert err.startswith(f"rlnb demo: --model: '{tmp_path}' is a directory but holds no config.json"), err
    err = _refused(tmp_path, capsys, "--model", "no-such/model")
    assert err.startswith("rlnb demo: --model 'no-such/model' is not a local directory"), err


@pytest.mark.slow  # builds the model
def test_a_lora_rank_past_the_models_layers_is_refused_naming_lora(tmp_path, capsys):
    """``--lora 100000`` was refused as ``lora: rank ...``, the engine's keyword, not the option typed."""
    err = _refused(tmp_path, capsys, "--lora", "100000")
    assert err.startswith("rlnb demo: --lora: rank 100000 is more than any adapted layer can use"), err


def test_a_device_this_torch_lacks_is_refused_naming_device(tmp_path, capsys, monkeypatch):
    """``--device cuda`` on a torch without CUDA was refused as ``device='cuda' but ...``."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    from rlnb.cli import main

    assert main(["demo", "--steps", "1", "--device", "cuda", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlnb demo: --device 'cuda' but this torch has no CUDA device"), err


def test_the_engines_refusal_of_an_option_carries_the_field_the_command_line_names(monkeypatch):
    """``as_option`` read the engine's message's first words (``device=``, ``lora: ``, ``model ``) to name the option:
    the refusal carries the field, and a message that only begins with those words names no option."""
    import torch

    from rlnb.cli.demo.options import as_option
    from rlnb.engine.model_setup import resolve_device
    from rlnb.errors import OptionRefused

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(OptionRefused) as caught:
        resolve_device("cuda")
    assert caught.value.field == "device"
    assert str(caught.value).startswith("device='cuda' but this torch has no CUDA device")  # the engine's words
    assert str(as_option(caught.value)).startswith("--device 'cuda' but this torch has no CUDA device")
    assert str(as_option(OptionRefused("lora", "lora: rank 9 is more"))) == "--lora: rank 9 is more"
    assert str(as_option(OptionRefused("model", "'x' is a directory"))) == "--model: 'x' is a directory"
    plain = ValueError("model output was not finite")  # no option's refusal, whatever its first word
    assert as_option(plain) is plain


@pytest.mark.slow  # imports peft and transformers
def test_a_lora_rank_and_a_model_the_engine_refuses_are_refusals_of_those_fields(tmp_path):
    from rlnb.engine.backend import LocalBackend
    from rlnb.errors import OptionRefused

    with pytest.raises(OptionRefused) as caught:
        LocalBackend("adam", model=str(tmp_path), device="cpu")
    assert caught.value.field == "model" and "is a directory but holds no config.json" in str(caught.value)
    with pytest.raises(OptionRefused) as caught:
        LocalBackend("adam", model="tiny", device="cpu", lora={"rank": 100000, "alpha": 1})
    assert caught.value.field == "lora" and str(caught.value).startswith("lora: rank 100000 is more than")


def test_demo_into_a_device_says_a_device(capsys):
    """``rlnb demo --out /dev/null`` said /dev/null "is a file", where ``rlnb serve`` says "a device"."""
    from rlnb.cli import main

    assert main(["demo", "--out", "/dev/null"]) == 2
    assert capsys.readouterr().err == (
        "rlnb demo: cannot write the demo's files in /dev/null: /dev/null is a device, not a folder\n"
    )

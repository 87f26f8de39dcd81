"""The command line's words as a new user reads them (review40a): an option offered that is always refused, an internal
constant in a refusal, a value echoed as no one typed it, an error naming what the usage does not, "1 steps"."""

import argparse

import pytest

from rlnb.cli import demo, main, serve


def exit_code(argv):
    """``main``'s exit status, argparse's own refusals (``SystemExit``) and the range checks' (returned) alike."""
    try:
        return main(argv)
    except SystemExit as stopped:
        return stopped.code


def choices(command, option):
    parser = argparse.ArgumentParser()
    command.arguments(parser)
    action = next(a for a in parser._actions if option in a.option_strings)
    return tuple(action.choices or ()), action.help or ""


def test_the_demo_offers_no_dtype_it_refuses(capsys):
    """``rlnb demo --help`` listed float16, which the demo refuses at every start (its backward is not loss-scaled)."""
    offered, said = choices(demo, "--dtype")
    assert offered == ("auto", "float32", "bfloat16") and "float16 is for rlnb serve" in said
    assert "float16" in choices(serve, "--dtype")[0]
    with pytest.raises(SystemExit) as stopped:
        main(["demo", "--dtype", "float16"])
    assert stopped.value.code == 2 and "invalid choice: 'float16'" in capsys.readouterr().err


def test_a_steps_refusal_says_the_number_not_the_constants_name(capsys):
    assert main(["demo", "--steps", "1000004"]) == 2  # the reason is said past the top bound, which it explains
    err = capsys.readouterr().err
    assert "step i of seed s samples with seed s * 1000003 + i" in err and "SEED_STRIDE" not in err
    assert main(["demo", "--steps", "-5"]) == 2
    assert "--steps must be an integer in [1, 1000003], got -5" in capsys.readouterr().err


@pytest.mark.parametrize("typed", ["1e-400", "-1e-999", "0.0000e-5000001"])
def test_a_learning_rate_that_underflows_is_echoed_as_typed(typed, capsys):
    """``--lr 1e-400`` said "got 0.0": the user typed no 0."""
    assert exit_code(["demo", f"--lr={typed}"]) == 2
    err = capsys.readouterr().err
    if typed.startswith("0.0000"):  # a zero as typed is no underflow: the range check says so
        assert "--lr must be a finite number > 0, got 0.0" in err and "underflows" not in err
    else:
        assert "got 0.0" not in err
        assert f"argument --lr: {typed!r} underflows to 0 in a float" in err


def test_bare_rlnb_names_the_command_as_its_usage_does(capsys):
    with pytest.raises(SystemExit) as stopped:
        main([])
    usage, *_, error = capsys.readouterr().err.strip().splitlines()
    assert stopped.value.code == 2 and usage.startswith("usage: rlnb [-h] command")
    assert error == "rlnb: error: the following arguments are required: command (demo or serve)"


@pytest.mark.slow  # builds the tiny model and trains three steps
def test_the_demos_last_line_says_step_for_one_step(tmp_path, capsys):
    """``--steps 3`` compares the first and last step each: "first 1 steps ... last 1 steps"."""
    assert main(["demo", "--steps", "3", "--device", "cpu", "--threads", "1", "--out", str(tmp_path)]) == 0
    (line,) = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("mean reward:")]
    assert line.startswith("mean reward: first step ") and " -> last step " in line and "steps" not in line


@pytest.mark.slow  # builds, saves and loads a tiny model
def test_the_demo_on_a_float16_checkpoint_says_which_dtype_option_to_give(tmp_path, capsys):
    """``--dtype auto`` loads a float16 checkpoint as float16, where the demo's AdamW eps is 0: the refusal told the
    user to give ``adam_params.eps`` (no demo option) or ``dtype='bfloat16'`` (Python, not the option)."""
    import torch

    from tests.support.hf_models import build_model, build_tokenizer

    checkpoint = tmp_path / "fp16"
    model = build_model("llama").to(torch.float16)
    model.config.dtype = torch.float16
    model.save_pretrained(checkpoint)
    build_tokenizer(checkpoint)
    argv = ["demo", "--model", str(checkpoint), "--steps", "2", "--threads", "1", "--device", "cpu"]
    assert exit_code([*argv, "--out", str(tmp_path / "out")]) == 2
    said = capsys.readouterr().err
    assert "--dtype auto gave float16 (the checkpoint's); give --dtype bfloat16" in said and "eps >=" not in said
    assert not (tmp_path / "out").exists()


def numeric_options(command):
    """``command``'s options that take a number (``--port``'s text is read as one by its own check)."""
    from rlnb.cli.options import integer, number

    parser = argparse.ArgumentParser()
    command.arguments(parser)
    typed = [a.option_strings[0] for a in parser._actions if a.type in (integer, number)]
    return typed + (["--port"] if command is serve else [])


def test_every_numeric_option_is_found():
    """The test below reads the options off the parsers: an option that lost its ``type`` would drop out of it."""
    assert numeric_options(demo) == ["--steps", "--seed", "--lr", "--lora", "--threads"]
    assert numeric_options(serve) == ["--op-delay", "--fail-rate", "--threads", "--offload-results-over", "--port"]


@pytest.mark.parametrize("value", ["-1e-400", "-1e-3", "-1e3", "-inf", "-nan", "-1x"])
@pytest.mark.parametrize("name", ["demo", "serve"])
def test_a_negative_value_after_a_space_is_refused_as_after_an_equals_sign(name, value, tmp_path, capsys, monkeypatch):
    """argparse took ``-1e-400`` for an option name: ``--lr -1e-400`` was "argument --lr: expected one argument",
    where ``--lr=-1e-400`` named the value and what is wrong with it (review40f F7). Every value here is refused."""
    monkeypatch.chdir(tmp_path)  # nothing may be written, but not into the tests' folder if it were
    monkeypatch.setattr("uvicorn.Server.run", lambda *a, **k: pytest.fail("rlnb serve started listening"))
    command = {"demo": demo, "serve": serve}[name]
    for option in numeric_options(command):
        assert exit_code([name, f"{option}={value}"]) == 2
        joined = capsys.readouterr().err
        assert exit_code([name, option, value]) == 2
        spaced = capsys.readouterr().err
        assert "expected one argument" not in spaced and option in spaced and spaced == joined
    assert not list(tmp_path.iterdir())


def test_a_delay_that_underflows_is_refused_though_0_is_in_range(capsys):
    """``--op-delay 1e-400`` would run at 0 s, a value no one typed: refused as every number option refuses one."""
    assert exit_code(["serve", "--op-delay", "1e-400"]) == 2
    assert "argument --op-delay: '1e-400' underflows to 0 in a float" in capsys.readouterr().err


def test_the_top_help_spells_the_command_as_its_usage_does(capsys):
    """It said "command ... (rlnb COMMAND --help)": two spellings of one word."""
    assert exit_code(["--help"]) == 0
    said = capsys.readouterr().out
    assert "usage: rlnb [-h] command ..." in said and "COMMAND" not in said
    assert "(their options: rlnb demo -h, rlnb serve -h)" in said


@pytest.mark.parametrize("tail", [["-abcdefgh12"], []])
def test_a_value_that_begins_with_a_dash_after_a_space_says_to_join_it_and_is_not_echoed(tail, capsys):
    """``rlnb serve --token -abcdefgh12`` (a token that begins with '-') was "argument --token: expected one argument":
    it said neither why nor how to pass it. It says to join it with '=', and never shows the token; an option given
    no value at all says the same."""
    assert exit_code(["serve", "--token", *tail]) == 2
    err = capsys.readouterr().err
    assert err.endswith("rlnb serve: error: argument --token: expected one argument (a value that begins with '-' "
                        "is read as an option's name: give it joined, --token=VALUE)\n")  # fmt: skip
    assert "abcdefgh12" not in err

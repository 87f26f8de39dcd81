"""``rlnb demo --help`` and ``rlnb serve --help`` name the range each option is checked against: a user learnt
``--seed``'s, ``--lr``'s or ``--token``'s only from the error that refused a value."""

import argparse

import pytest

from rlnb.cli import demo, serve


@pytest.mark.parametrize(
    "command, option, words",
    [
        ("demo", "--steps", "1-1000003"),
        ("demo", "--seed", "about -9.2e12 to 9.2e12"),  # "--seed must be in [-9223344366821, 9223344366821] ..."
        ("demo", "--lr", "a finite number > 0"),  # "--lr must be a finite number > 0"
        ("demo", "--lora", "0 or more"),  # "--lora must be >= 0 (0 = train all weights)"
        ("serve", "--port", "1-65535, or 0"),
        ("serve", "--op-delay", "0-86400"),
        ("serve", "--fail-rate", "in [0, 1)"),
        ("serve", "--token", "8 characters or more, no whitespace"),  # "token is 1 character(s) long: ... at least 8"
        ("serve", "--offload-results-over", "0 or more"),  # "--offload-results-over must be >= 0 bytes"
        ("serve", "--limit", "docs/server.md#limits"),  # a name or value out of range lists them
    ],
)
def test_every_checked_option_names_its_range_in_its_help(command, option, words):
    parser = argparse.ArgumentParser(prog=f"rlnb {command}")
    {"demo": demo, "serve": serve}[command].arguments(parser)
    action = next(a for a in parser._actions if option in a.option_strings)
    shown = (action.help or "") % {**vars(action), "prog": parser.prog}  # as argparse expands it
    assert words in shown, (option, shown)


@pytest.mark.parametrize(
    "argv, said",
    [
        (["serve", "--prot", "8000"], "rlnb serve: error: unrecognized arguments: --prot 8000 (did you mean --port?)"),
        (["demo", "--stesp", "3"], "rlnb demo: error: unrecognized arguments: --stesp 3 (did you mean --steps?)"),
        (["serve", "--xyzzy"], "rlnb serve: error: unrecognized arguments: --xyzzy\n"),
    ],
)
def test_an_unknown_option_is_named_with_its_subcommand_and_the_nearest_option(argv, said, capsys):
    """A misspelt option was answered by the top level, ``usage: rlnb [-h] {demo,serve} ...`` and ``rlnb: error:
    unrecognized arguments``: neither the subcommand's options nor the one meant."""
    from rlnb.cli import main

    with pytest.raises(SystemExit) as stopped:
        main(argv)
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and said in err, err
    assert err.startswith(f"usage: rlnb {argv[0]} "), err


def test_both_subcommands_take_the_engines_weight_dtypes():
    """``--dtype``'s choices were two copies inside the CLI ("auto", "float32", "bfloat16") while the engine took
    float16 too: both read ``WEIGHT_DTYPES``, the one list the engine checks against (the demo all but float16)."""
    from rlnb.engine.dtypes import WEIGHT_DTYPES

    offered = {}
    for command in (demo, serve):
        parser = argparse.ArgumentParser()
        command.arguments(parser)
        action = next(a for a in parser._actions if "--dtype" in a.option_strings)
        offered[command] = tuple(action.choices or ())
    assert offered[serve] == WEIGHT_DTYPES == ("auto", "float32", "bfloat16", "float16")
    assert offered[demo] == WEIGHT_DTYPES[:3]  # float16: refused at every start of the demo (tests/test_cli_words.py)


def test_the_demos_choices_are_the_catalogues_they_copy():
    """``--task`` and ``--optimizer`` are written out for ``--help``'s speed (no tasks, no pydantic): each is the
    catalogue it copies, in its order, and every optimizer kind has a demo preset. Their defaults, spelt again for
    the same reason, are ``DemoOptions``' and among the choices (argparse does not check a default)."""
    from rlnb import wire
    from rlnb.cli.demo.options import DEMO_PARAMS, DemoOptions
    from rlnb.tasks import TASKS

    parser = argparse.ArgumentParser()
    demo.arguments(parser)
    choices = {a.dest: tuple(a.choices or ()) for a in parser._actions}
    assert choices["task"] == tuple(TASKS) and choices["optimizer"] == tuple(DEMO_PARAMS) == wire.OPTIMIZERS
    defaults = {a.dest: a.default for a in parser._actions}
    assert defaults["optimizer"] == DemoOptions().optimizer == wire.ADAM
    assert defaults["task"] == DemoOptions().task in TASKS

"""The command line refuses bad arguments with a message naming them, before a model loads or a server starts."""

import pytest

from rlnb.cli import main


@pytest.mark.parametrize(
    "argv, words",
    [
        (["demo", "--steps", "0"], "--steps must be >= 1, got 0"),
        (["demo", "--lora", "-1"], "--lora must be >= 0"),
        (["demo", "--lr", "nan"], "--lr must be a finite number > 0, got nan"),
        (["serve", "--model", "rlnb/tiny=tiny"], "--model rlnb/tiny: the name is already served"),
        (["serve", "--limit", "no_such_limit=1"], "no_such_limit"),
        (["train"], "invalid choice: 'train'"),
    ],
)
def test_bad_arguments_exit_2_naming_them(argv, words, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2 and words in capsys.readouterr().err

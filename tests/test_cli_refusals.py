"""What ``rlnb demo`` and ``rlnb serve`` say when they refuse what was typed: never the value of an option that may
name a secret, each option once and spelt in full, a bad variable named as the variable, a missing extra's install,
a run folder that is a file said as one; and the process's own ``main`` ignores Ctrl-C once it has said how it ended."""

import signal
import sys

import pytest

from rlnb.cli import main
from rlnb.testing import free_port

SECRET = "sk-SECRETSECRET123"


@pytest.mark.parametrize(
    "argv, shown",
    [
        (["serve", "--tokn", SECRET], "--tokn *** (did you mean --token?)"),
        (["serve", f"--tokn={SECRET}"], "--tokn=*** (did you mean --token?)"),
        (["serve", "--tok", SECRET], "--tok *** (did you mean --token?)"),  # no abbreviation is taken
        (["demo", "--token", SECRET, "--stesp", "3"], "--token *** --stesp 3 (did you mean --task or --steps?)"),
        (["serve", "--api-key", SECRET, "--prot", "8"], "--api-key *** --prot 8 (did you mean --op-delay or --port?)"),
        (["demo", f"--hf-token={SECRET}"], "--hf-token=***"),
    ],
)  # fmt: skip
def test_a_refused_option_that_may_name_a_secret_never_shows_its_value(argv, shown, capsys):
    """``rlnb serve --tokn sk-...`` printed the key on stderr, which CI logs and notebooks keep."""
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and SECRET not in err, err
    assert err.endswith(f"rlnb {argv[0]}: error: unrecognized arguments: {shown}\n"), err


def test_a_secret_before_the_command_is_not_shown_as_the_command_typed(capsys):
    """``rlnb --tokn sk-... serve``: the key was taken for the command, ``invalid choice: 'sk-...'``; a command
    misspelt (``rlnb train``) is still quoted."""
    for argv, said in ((["--tokn", SECRET, "serve"], "***"), (["train"], "'train'")):
        with pytest.raises(SystemExit):
            main(argv)
        err = capsys.readouterr().err
        assert err.endswith(f"rlnb: error: argument command: invalid choice: {said} (choose from 'demo', 'serve')\n")


@pytest.mark.parametrize(
    "argv, option",
    [
        (["demo", "--steps", "1", "--steps", "3"], "--steps"),
        (["demo", "--seed=1", "--seed", "2"], "--seed"),
        (["serve", "--port", "1", "--port", "2"], "--port"),
        (["serve", "--token", SECRET, f"--token={SECRET}x"], "--token"),
    ],
)
def test_an_option_given_twice_is_refused_without_its_values(argv, option, capsys):
    """The last value was taken without a word (``--steps 1 ... --steps 3`` ran 3 steps), as ``--limit`` refuses."""
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and SECRET not in err
    assert err.endswith(f"rlnb {argv[0]}: error: argument {option}: given twice: give it once\n"), err


def test_an_abbreviated_option_is_refused_and_help_says_to_spell_them_out(capsys):
    """``rlnb demo --ste 5`` ran a full demo with --steps 5."""
    with pytest.raises(SystemExit) as stopped:
        main(["demo", "--ste", "5"])
    assert stopped.value.code == 2
    assert "unrecognized arguments: --ste 5 (did you mean --steps?)" in capsys.readouterr().err
    for command in ("demo", "serve"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        assert "Give each option once, spelt in full" in " ".join(capsys.readouterr().out.split())


def test_a_bad_token_variable_is_named_as_the_variable(monkeypatch, capsys):
    """``RLNB_SERVE_TOKEN=short rlnb serve`` was refused as ``--token``, a flag that was not given."""
    from rlnb.cli.serve import TOKEN_ENV

    monkeypatch.setenv(TOKEN_ENV, "short")
    assert main(["serve", "--device", "cpu", "--port", str(free_port())]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rlnb serve: ${TOKEN_ENV} is 5 character(s) long: an API key has at least 8"), err
    assert "short" not in err  # nor the value


@pytest.mark.parametrize("command", ["demo", "serve"])
def test_a_hub_id_without_huggingface_hub_names_the_install(command, monkeypatch, tmp_path, capsys):
    """A core install running ``--model Qwen/Qwen3-0.6B`` got a bare "No module named 'huggingface_hub'"."""
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # an import of it raises ImportError
    argv = {
        "demo": ["demo", "--model", "org/model", "--device", "cpu", "--out", str(tmp_path / "out")],
        "serve": ["serve", "--model", "q=org/model", "--device", "cpu", "--port", str(free_port())],
    }[command]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "'org/model', a Hugging Face hub id, needs huggingface_hub: pip install 'rlnb[hf]'" in err, err
    assert err.startswith(f"rlnb {command}: ") and err.count("\n") == 1


def test_a_run_folder_that_is_a_file_is_said_to_be_one(tmp_path, capsys):
    """``OUT/run`` as a plain file "holds other files"."""
    (tmp_path / "run").write_text("mine")
    assert main(["demo", "--device", "cpu", "--out", str(tmp_path)]) == 2
    said = f"rlnb demo: {tmp_path / 'run'} is a file, not a folder: the demo's run folder goes there; move it away"
    assert capsys.readouterr().err.startswith(said)
    assert (tmp_path / "run").read_text() == "mine"


def test_the_processs_own_command_ignores_ctrl_c_once_it_returned(monkeypatch, capsys):
    """A second Ctrl-C in the seconds of exit (torch's atexit callbacks) printed a ``KeyboardInterrupt`` traceback
    after the command had said how it ended; a caller's ``main(argv)`` keeps its own handler."""
    before = signal.getsignal(signal.SIGINT)
    try:
        assert main(["demo", "--steps", "0"]) == 2
        assert signal.getsignal(signal.SIGINT) is before
        monkeypatch.setattr(sys, "argv", ["rlnb", "demo", "--steps", "0"])
        assert main() == 2
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)
    assert capsys.readouterr().err.count("--steps must be") == 2

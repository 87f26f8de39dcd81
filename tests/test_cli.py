"""The command line refuses bad arguments with a message naming them, before a model loads or a server starts."""

import pytest

from rlnb.cli import main


@pytest.fixture(autouse=True)
def never_serve(monkeypatch):
    """A bad option must stop ``rlnb serve`` before it listens: a test that reached uvicorn would hang."""
    monkeypatch.setattr("uvicorn.run", lambda *a, **k: pytest.fail("rlnb serve started listening"))


@pytest.mark.parametrize(
    "argv, words",
    [
        (["demo", "--steps", "0"], "--steps must be >= 1, got 0"),
        (["demo", "--lora", "-1"], "--lora must be >= 0"),
        (["demo", "--lr", "nan"], "--lr must be a finite number > 0, got nan"),
        (["serve", "--model", "rlnb/tiny=tiny"], "--model rlnb/tiny: the name is already served"),
        (["serve", "--limit", "no_such_limit=1"], "no_such_limit"),
        (["serve", "--port", "70000"], "argument --port: must be 1-65535, got 70000"),  # it listened on 4464
        (["serve", "--port", "0"], "argument --port: must be 1-65535, got 0"),  # it announced :0
        (["serve", "--port", "-1"], "argument --port: must be 1-65535, got -1"),
        (["train"], "invalid choice: 'train'"),
    ],
)
def test_bad_arguments_exit_2_naming_them(argv, words, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2 and words in capsys.readouterr().err


@pytest.mark.parametrize(
    "options, words",
    [
        (["--op-delay", "nan"], "op_delay must be a finite number >= 0, got nan"),  # every operation failed
        (["--op-delay", "inf"], "op_delay must be a finite number >= 0, got inf"),
        (["--op-delay=-1"], "op_delay must be a finite number >= 0, got -1.0"),
        (["--fail-rate", "2"], "fail_rate must be in [0, 1), got 2.0"),
        (["--offload-results-over=-5"], "result_offload_bytes must be None or an integer >= 0, got -5"),
        (["--public-url", "ftp://x"], "public_url must start with http:// or https://"),
        (["--state-dir", "{file}"], "cannot keep the server's state in"),
    ],
)
def test_bad_serve_options_stop_it_with_one_line_and_exit_2(options, words, tmp_path, capsys):
    (tmp_path / "file").write_text("not a folder")
    assert main(["serve", *(o.format(file=tmp_path / "file") for o in options)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlnb serve: ") and words in err and err.count("\n") == 1

"""What ``rlnb serve`` says as it starts: the address a client takes, and a warning when anyone may reach it."""

import socket

import pytest

from rlnb.cli import main
from rlnb.testing import free_port

WARNING = "takes requests from other machines and there is no --token"
LINKS = "which only this machine reaches: give --public-url"


@pytest.mark.parametrize(
    "options, warned",
    [
        (["--host", "0.0.0.0"], True),  # every interface, no auth: it started without a word
        (["--host", "0.0.0.0", "--token", "a-long-enough-token"], False),
        (["--host", "127.0.0.1"], False),
        (["--host", "localhost"], False),
    ],
)
def test_serve_on_every_interface_without_a_token_warns_and_announces_an_address_a_client_takes(
    options, warned, monkeypatch, capsys
):
    """``--host 0.0.0.0`` announced ``http://0.0.0.0:P``, not an address to connect to everywhere (the presigned URLs
    already took 127.0.0.1), and said nothing of serving every machine that reaches it without a token."""
    served = []
    monkeypatch.setattr("rlnb.server.app.run", lambda app, sock, **_: served.append(app) or sock.close())
    port = free_port()
    assert main(["serve", "--device", "cpu", "--port", str(port), *options]) == 0
    captured = capsys.readouterr()
    assert (WARNING in captured.err) == warned
    assert captured.err.count("\n") == warned + ("0.0.0.0" in options)  # and the presigned links' warning
    announced = captured.out.splitlines()[0].split()[2]
    host = "localhost" if "localhost" in options else "127.0.0.1"
    assert announced == f"http://{host}:{port}" == served[0].state.registry.settings.public_url


@pytest.mark.parametrize(
    "options, warned",
    [
        (["--host", "0.0.0.0", "--token", "a-long-enough-token"], True),
        (["--host", "::", "--token", "a-long-enough-token"], True),
        (["--host", "0.0.0.0", "--token", "a-long-enough-token", "--public-url", "http://rl.lan:8000"], False),
        (["--host", "127.0.0.1"], False),
    ],
)
def test_serve_on_every_interface_without_a_public_url_warns_that_its_links_name_this_machine(
    options, warned, monkeypatch, capsys
):
    """``--host 0.0.0.0`` (a team's workstation) made presigned links on ``http://127.0.0.1:P`` without a word: another
    machine's checkpoint download, and the SDK's upload of a body over 0.5 MiB, went to that machine's own loopback
    (refused, or to whatever listens there)."""
    if options[1] == "::" and not socket.has_ipv6:
        pytest.skip("no IPv6 here")
    monkeypatch.setattr("rlnb.server.app.run", lambda app, sock, **_: sock.close())
    port = free_port()
    assert main(["serve", "--device", "cpu", "--port", str(port), *options]) == 0
    err = capsys.readouterr().err
    assert (LINKS in err) == warned
    if warned:
        assert f"name http://127.0.0.1:{port}" in err and f"--host {options[1]} " in err and err.count("\n") == 1


@pytest.mark.parametrize("command", ["demo", "serve"])
def test_every_option_with_a_default_says_it_in_its_help(command):
    """``rlnb demo --help`` left out the defaults of --task, --out, --device, --model and --lora; ``rlnb serve
    --help`` those of --host, --device, --op-delay and --fail-rate (the docs had them)."""
    import argparse

    from rlnb import cli

    parser = argparse.ArgumentParser(prog=f"rlnb {command}")
    getattr(cli, command).arguments(parser)
    for action in parser._actions:
        if action.default in (None, False, [], argparse.SUPPRESS):
            continue
        shown = (action.help or "") % {**vars(action), "prog": parser.prog}  # as argparse expands it
        assert f"(default: {action.default}" in shown, (action.option_strings, shown)


def test_serve_takes_its_token_from_the_environment_and_never_says_it(monkeypatch, capsys):
    """``--token`` was the only way: its value sat in the command line, which every user of the machine reads."""
    from rlnb.cli.serve import TOKEN_ENV

    served = []
    monkeypatch.setattr("rlnb.server.app.run", lambda app, sock, **_: served.append(app) or sock.close())
    monkeypatch.setenv(TOKEN_ENV, "a-token-from-the-env")
    assert main(["serve", "--device", "cpu", "--port", str(free_port()), "--host", "0.0.0.0"]) == 0
    assert served[0].state.registry.settings.token == "a-token-from-the-env"
    captured = capsys.readouterr()
    assert "a-token-from-the-env" not in captured.out + captured.err and WARNING not in captured.err
    assert main(["serve", "--device", "cpu", "--port", str(free_port()), "--token", "the-flag-wins"]) == 0
    assert served[1].state.registry.settings.token == "the-flag-wins"


def test_serve_with_an_empty_token_variable_stops_with_one_line(monkeypatch, capsys):
    from rlnb.cli.serve import TOKEN_ENV

    monkeypatch.setenv(TOKEN_ENV, "")
    assert main(["serve", "--device", "cpu", "--port", str(free_port())]) == 2
    said = f"rlnb serve: ${TOKEN_ENV} is empty: give a token there, or unset it to turn auth off\n"
    assert capsys.readouterr().err == said


def test_serve_on_port_0_listens_on_a_free_port_and_announces_it(monkeypatch, capsys):
    """``--port 0`` was refused (the address announced and the presigned URLs needed the real port, and the server
    then bound after they were made); it is bound first now, so the port it got is said."""
    served = []

    def listen(app, sock, **_):
        served.append((app, sock.getsockname()[1]))
        sock.close()

    monkeypatch.setattr("rlnb.server.app.run", listen)
    assert main(["serve", "--device", "cpu", "--port", "0"]) == 0
    app, port = served[0]
    assert port != 0 and app.state.registry.settings.public_url == f"http://127.0.0.1:{port}"
    assert capsys.readouterr().out.startswith(f"rlnb serve: http://127.0.0.1:{port} (")


def test_serve_names_what_its_stop_abandoned_and_how_each_ends(monkeypatch, capsys):
    """The stop's abandoned items are data (``stopping.Abandoned``): a build ends its session ERROR, an operation
    FAILED. The line's ending was chosen by sniffing the English "the build of" at the start of the words."""
    from rlnb import wire
    from rlnb.server.stopping import Abandoned

    gone = [
        Abandoned("the build of session sess-1's model", wire.SessionStatus.ERROR),
        Abandoned("forward-backward operation op-2 of session sess-3", wire.OperationStatus.FAILED),
    ]

    def listen(app, sock, **_):
        sock.close()
        app.state.registry.abandoned = gone  # as a stop that gave up on them leaves it

    monkeypatch.setattr("rlnb.server.app.run", listen)
    exits = []
    monkeypatch.setattr("rlnb.cli.serve.os._exit", exits.append)  # its workers still run: it exits at once
    main(["serve", "--device", "cpu", "--port", "0"])
    assert exits == [0]
    assert capsys.readouterr().err.splitlines() == [
        "rlnb serve: abandoned the build of session sess-1's model, unfinished when the stop gave up on it (its "
        "session ERROR)",
        "rlnb serve: abandoned forward-backward operation op-2 of session sess-3, unfinished when the stop gave up "
        "on it (FAILED)",
    ]


REFUSED = {
    "--host": ("", "--host is empty"),
    "--port": ("70000", "--port must be 0-65535"),
    "--token": ("k", "--token is 1 character(s) long"),
    "--device": ("tpu", "--device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got 'tpu'"),
    "--op-delay": ("90000", "--op-delay must be a finite number of seconds in [0, 86400], got 90000.0"),
    "--checkpoint-dir": ("{file}", "--checkpoint-dir '{file}' is a file: checkpoints go into a folder"),
    "--fail-rate": ("2", "--fail-rate must be in [0, 1), got 2.0"),
    "--model": ("x=/no/such/folder", "--model x: model '/no/such/folder' is neither a local directory nor"),
    "--dtype": ("float64", "argument --dtype: invalid choice: 'float64'"),
    "--offload-results-over": ("-5", "--offload-results-over must be 0 to 2**63 - 1 bytes"),
    "--state-dir": ("{file}", "--state-dir '{file}' is a file: the server's state goes into a folder"),
    "--public-url": ("ftp://x", "--public-url must start with http:// or https://, got 'ftp://x'"),
    "--limit": ("x=1", "--limit 'x=1': the limits are"),
    "--threads": ("0", "--threads must be an integer in [1, 1024]"),
}
"""A value each ``rlnb serve`` option refuses, and what the refusal says: its option first."""


@pytest.mark.parametrize("option", sorted(REFUSED))
def test_every_serve_option_refused_names_itself_as_typed(option, tmp_path, capsys):
    """``--op-delay 90000`` was refused as ``op_delay must be ...``, and so were ``--fail-rate``, ``--public-url``,
    ``--token``, ``--device`` and ``--checkpoint-dir`` (their settings' field names), ``--state-dir`` by its folder
    alone and ``--model`` by its spec alone; every option that takes a value is here."""
    import argparse

    from rlnb.cli import serve

    parser = argparse.ArgumentParser(prog="rlnb serve")
    serve.arguments(parser)
    assert {a.option_strings[-1] for a in parser._actions if a.option_strings and a.nargs != 0} == set(REFUSED)
    (tmp_path / "file").write_text("not a folder")
    value, said = (text.format(file=tmp_path / "file") for text in REFUSED[option])
    try:
        status = main(["serve", *(["--device", "cpu"] if option != "--device" else []), option, value])
    except SystemExit as exc:  # argparse's own refusal (a choice): its usage, then "argument --dtype: ..."
        status = exc.code
    err = capsys.readouterr().err
    assert status == 2 and said in err
    assert err.startswith(f"rlnb serve: {option}") or f"rlnb serve: error: {said}" in err


def test_a_python_caller_of_the_server_sees_the_settings_field_names():
    """``rlnb serve`` says its options; ``create_app`` (and ``ServerSettings``) the keywords a caller gave."""
    from rlnb.server.app import create_app

    given = {"op_delay": 90000, "fail_rate": 2, "token": "k", "device": "tpu", "public_url": "ftp://x"}
    for field, value in given.items():
        with pytest.raises(ValueError, match=f"^{field} "):
            create_app(**{field: value})


@pytest.mark.parametrize("url", ["http://[::1", "http://[::1]:x/", "http://h:99999"])
def test_a_public_url_no_url_parser_reads_is_refused_naming_the_option_on_a_loopback_host(url, capsys):
    """On a loopback host without a token the server answers its ``--public-url``'s name too: that name was read
    before the URL was checked, so ``http://[::1`` stopped it with urllib's bare "Invalid IPv6 URL"."""
    assert main(["serve", "--device", "cpu", "--port", "0", "--public-url", url]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rlnb serve: --public-url {url!r} is not a valid URL"), err


def test_a_python_caller_on_a_loopback_host_sees_the_public_url_named():
    from rlnb.server.app import app_for

    with pytest.raises(ValueError, match=r"^public_url 'http://\[::1' is not a valid URL"):
        app_for("127.0.0.1", 8000, public_url="http://[::1", device="cpu")


def test_a_device_this_torch_lacks_is_refused_in_the_demos_words(capsys, monkeypatch):
    """``rlnb serve --device cuda`` said ``--device='cuda' but ...``, where ``rlnb demo`` says ``--device 'cuda'``."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["serve", "--device", "cuda", "--port", "0"]) == 2
    assert capsys.readouterr().err.startswith("rlnb serve: --device 'cuda' but this torch has no CUDA device")

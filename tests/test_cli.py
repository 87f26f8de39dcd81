"""The command line refuses bad arguments with a message naming them, before a model loads or a server starts."""

import os

import pytest

from rlnb.cli import main
from rlnb.cli.demo.files import _set_aside_run
from rlnb.cli.options import threads_said
from rlnb.history.store import RunStore


@pytest.fixture(autouse=True)
def never_serve(monkeypatch):
    """A bad option must stop ``rlnb serve`` before it listens: a test that reached uvicorn would hang."""
    monkeypatch.setattr("uvicorn.Server.run", lambda *a, **k: pytest.fail("rlnb serve started listening"))


ASCII_INTEGER = "must be an integer in ASCII digits 0-9, got"
LONG = "must be an integer of at most 40 digits (each option's range fits in 20), got one of"
SEEDS = "[-9223344366821, 9223344366821]"  # every step's seed (seed * 1_000_003 + i) must be an int64


@pytest.mark.parametrize(
    "argv, words",
    [
        (["train"], "invalid choice: 'train'"),
        (["demo", "--steps", "1.5"], f"argument --steps: {ASCII_INTEGER} '1.5'"),  # no number: argparse's usage
        # int() and float() read other scripts' digits: each was taken as the number they write
        (["demo", "--steps", "\uff14\uff10"], f"argument --steps: {ASCII_INTEGER} '\uff14\uff10'"),  # fullwidth 40
        (["demo", "--seed", "\u0663"], f"argument --seed: {ASCII_INTEGER} '\u0663'"),  # Arabic-Indic 3
        (["demo", "--lora", "\u0968"], f"argument --lora: {ASCII_INTEGER} '\u0968'"),  # Devanagari 2
        (["demo", "--steps", "4_0"], f"argument --steps: {ASCII_INTEGER} '4_0'"),
        # 4301 digits were "must be an integer in ASCII digits 0-9" (int's limit); 4300, echoed whole by the range's
        (["demo", "--steps", "9" * 4301], f"argument --steps: {LONG} 4301 digits: '{'9' * 40}'... (4301 characters)"),
        (
            ["demo", "--seed", "-" + "9" * 4000],
            f"argument --seed: {LONG} 4000 digits: '-{'9' * 39}'... (4001 characters)",
        ),
        (["demo", "--lr", "\uff11e-3"], "argument --lr: must be a number in ASCII digits 0-9, got '\uff11e-3'"),
        # float() reads "_" between digits and spaces around, as int() does: --lr 1_0e-3 trained at 0.01
        (["demo", "--lr", "1_0e-3"], "argument --lr: must be a number in ASCII digits 0-9, got '1_0e-3'"),
        (["serve", "--op-delay", " 5"], "argument --op-delay: must be a number in ASCII digits 0-9, got ' 5'"),
        (["serve", "--offload-results-over", "\uff11"], f"argument --offload-results-over: {ASCII_INTEGER} '\uff11'"),
        (["serve", "--op-delay", "\uff11"], "argument --op-delay: must be a number in ASCII digits 0-9, got '\uff11'"),
        (["serve", "--fail-rate", "\uff10.5"], "argument --fail-rate: must be a number in ASCII digits 0-9, got"),
    ],
)
def test_bad_arguments_exit_2_naming_them(argv, words, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2 and words in capsys.readouterr().err


STEPS = (
    "--steps must be an integer in [1, 1000003] (step i of seed s samples with seed s * 1000003 + i: more "
    "steps would sample with the next seed's seeds), got"
)


@pytest.mark.parametrize(
    "options, words",
    [  # each was argparse's usage and "rlnb: error: ...", where the others were one line "rlnb demo: ..."
        (["--steps", "0"], "--steps must be an integer in [1, 1000003], got 0"),  # the reason is the top bound's
        (["--steps", "1000004"], f"{STEPS} 1000004"),  # past it, a seed's step seeds run into the next seed's
        (["--steps", str(10**20)], f"{STEPS} {10**20}"),  # blamed --seed: "must be in [-9223344366821, -9077635...]"
        (["--lora", "-3"], "--lora must be >= 0 (0 = train all weights), got -3"),
        (["--lr", "nan"], "--lr must be a finite number > 0, got nan"),
        (["--lr=-inf"], "--lr must be a finite number > 0, got -inf"),
        (["--seed", str(2**62)], f"--seed must be in {SEEDS} for 40 steps, got {2**62}"),  # failed late
        (["--seed", str(-(2**62))], f"--seed must be in {SEEDS}"),
        (["--seed", str(2**63)], f"--seed must be in {SEEDS} for 40 steps, got {2**63}"),
        # an unset variable: the demo wrote history.csv, rewards.csv, demo.png and run/ into the working folder
        (["--out", ""], "--out is empty (an unset variable?): give a folder"),
        (["--model", " "], "--model is empty (an unset variable?): give a folder or a model"),
        (["--device", "meta"], "--device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got 'meta'"),  # then a traceback
        (["--device", "mps"], "--device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got 'mps'"),
        (["--device", "tpu"], "--device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got 'tpu'"),
        (["--threads", "0"], "--threads must be an integer in [1, 1024] (leave it out: the engine's thread policy"),
        (["--threads", "1025"], "decides), got 1025"),  # rlnb.connect(threads=N)'s range: torch starts them all
    ],
)
def test_bad_demo_options_stop_it_with_one_line_and_exit_2(options, words, tmp_path, capsys):
    """As ``rlnb serve``'s: one line naming the option and its range, exit 2, before anything is written."""
    out = [] if "--out" in options else ["--out", str(tmp_path / "out")]  # each option is given once
    assert main(["demo", *out, *options]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("rlnb demo: ") and words in captured.err and captured.err.count("\n") == 1
    assert not captured.out and not (tmp_path / "out").exists()


PORT = "--port must be an integer in 0-65535 (0: any free port), got"


@pytest.mark.parametrize(
    "options, words",
    [
        (["--op-delay", "nan"], "--op-delay must be a finite number of seconds in [0, 86400], got nan"),  # all failed
        (["--op-delay", "inf"], "--op-delay must be a finite number of seconds in [0, 86400], got inf"),
        (["--op-delay=-1"], "--op-delay must be a finite number of seconds in [0, 86400], got -1.0"),
        (["--op-delay", "1e300"], "--op-delay must be a finite number of seconds in [0, 86400], got 1e+300"),
        (["--fail-rate", "2"], "--fail-rate must be in [0, 1), got 2.0"),
        (
            ["--offload-results-over=-5"],
            "--offload-results-over must be 0 to 2**63 - 1 bytes (leave it out: never), got -5",
        ),
        (
            ["--offload-results-over", "9" * 39],
            f"--offload-results-over must be 0 to 2**63 - 1 bytes (leave it out: never), got {'9' * 39}",
        ),  # was taken
        (
            ["--offload-results-over", str(2**63)],
            "--offload-results-over must be 0 to 2**63 - 1 bytes (leave it out: never), got 9223372036854775808",
        ),
        (["--limit", "no_such_limit=1"], "--limit 'no_such_limit=1': the limits are"),  # argparse's usage, "rlnb:"
        (["--limit", "body_timeout=1e300"], "body_timeout must be an integer in [1, 86400]"),  # was taken
        (["--port", "70000"], "--port must be 0-65535 (0: any free port), got 70000"),  # it listened on 4464
        (["--port=-1"], "--port must be 0-65535 (0: any free port), got -1"),
        (["--port", "http"], "--port must be an integer in 0-65535 (0: any free port), got 'http'"),
        (["--port", "\uff18\uff10\uff10\uff10"], f"{PORT} '\uff18\uff10\uff10\uff10'"),  # fullwidth: listened on 8000
        (["--port", "\u0668\u0660\u0660\u0660"], f"{PORT} '\u0668\u0660\u0660\u0660'"),  # Arabic-Indic 8000
        (["--port", " 8000"], f"{PORT} ' 8000'"),
        (["--port", "9" * 4000], f"{PORT} '{'9' * 40}'... (4000 characters)"),  # echoed whole
        (["--limit", "max_live_sessions=\uff18"], "max_live_sessions must be an integer in [1, "),  # taken as 8
        (["--public-url", "ftp://x"], "--public-url must start with http:// or https://"),
        (["--public-url", "http://"], "--public-url must name a host, such as"),  # every link read http:///v1/...
        (["--public-url", "http://h:99999"], "--public-url 'http://h:99999' is not a valid URL: Port out of range"),
        (["--public-url", "http://h/?a#f"], "--public-url cannot hold a query or fragment"),  # links went to h/?a
        (["--public-url", "http://h/x?"], "--public-url cannot hold a query or fragment"),
        (["--public-url", "http://h/?sig=SECRETQ"], "links append their path, got http://h/ and more"),  # echoed sig
        (["--public-url", "http://u:hunter22@h"], "--public-url cannot hold a user or password"),  # in every link
        (["--public-url", "http://h\n:8000"], "--public-url cannot hold whitespace or a control character: got 'http"),
        (["--public-url", "http://h:8000/a b"], "--public-url cannot hold whitespace"),  # each link: no URL httpx takes
        (["--state-dir", "{file}"], "rlnb serve: --state-dir '{file}' is a file: the server's state goes into a fo"),
        (["--checkpoint-dir", "{file}"], "--checkpoint-dir '{file}' is a file: checkpoints go into a folder"),
        (
            ["--checkpoint-dir", "/proc/rlnb-ckpt"],
            "--checkpoint-dir '/proc/rlnb-ckpt' cannot hold checkpoints",
        ),  # failed at each save
        (["--host", "localhost\0"], "--host 'localhost\\x00' is not an address of this machine"),  # named neither
        (["--host", "a" * 64], f"--host '{'a' * 64}' is not an address of this machine"),  # an idna error, unnamed
        (["--state-dir", "s\0x"], "--state-dir holds a NUL character, which no path can"),  # "embedded null byte"
        (["--device", "tpu"], "--device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got 'tpu'"),  # listened, then 400s
        (["--token="], "--token is empty (an unset variable?)"),  # listened, then 401 to every key
        (["--threads", "0"], "--threads must be an integer in [1, 1024] (leave it out: the engine's thread policy"),
        (["--threads", "1025"], "decides), got 1025"),  # as rlnb demo's and rlnb.connect(threads=N)'s
        (["--state-dir="], "--state-dir is empty (an unset variable?)"),  # registry and signing.key in the cwd
        (["--checkpoint-dir="], "--checkpoint-dir is empty (an unset variable?)"),  # ignored: a temporary folder
        (["--token", "secret\n"], "--token holds whitespace at position 6"),
        (["--token", "k"], "--token is 1 character(s) long: an API key has at least 8"),  # no client could send it
        (["--model", "rlnb/tiny=tiny"], "--model rlnb/tiny: the name is already served"),  # usage, "rlnb: error:"
        (
            ["--limit", "max_pending_bytes=5"],  # a body max_body_bytes let in was a 400 at every send
            "--limit max_pending_bytes must be an integer in [33554432, 9223372036854775807] (at least max_body_bytes,"
            " 33554432), got 5",
        ),
        (
            ["--limit", "max_pending_bytes=999", "--limit", "max_body_bytes=1000"],
            "--limit max_pending_bytes must be an integer in [1000, 9223372036854775807] (at least max_body_bytes, "
            "1000), got 999",
        ),
        (
            ["--limit", "body_timeout=60", "--limit", "body_timeout=9"],  # the last was taken without a word
            "--limit body_timeout is given twice ('body_timeout=60', then 'body_timeout=9'): give it once",
        ),
    ],
)
def test_bad_serve_options_stop_it_with_one_line_and_exit_2(options, words, tmp_path, capsys):
    (tmp_path / "file").write_text("not a folder")
    # --port 0 where a row gives none (each option is given once): a server on the default port must not answer
    port = [] if any(o.split("=")[0] == "--port" for o in options) else ["--port", "0"]
    assert main(["serve", *port, *(o.format(file=tmp_path / "file") for o in options)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlnb serve: ") and words.format(file=tmp_path / "file") in err and err.count("\n") == 1


def test_a_public_url_with_a_password_is_refused_without_showing_it(capsys):
    """Every presigned link the API answers with would hold it; and a port out of range echoed the URL whole."""
    for url in ("http://u:hunter22@h", "http://u:hunter22@h:99999/x?y"):
        assert main(["serve", "--public-url", url]) == 2
        err = capsys.readouterr().err
        assert "--public-url cannot hold a user or password" in err and "hunter22" not in err, err


@pytest.mark.parametrize("under", ["", "sub"])
def test_demo_into_a_file_stops_with_one_line_and_exit_2(under, tmp_path, capsys):
    """The line named a temporary file's name under the file: "Not a directory: '.../file/tmpgdge4jqb'"."""
    (tmp_path / "file").write_text("not a folder")
    out = tmp_path / "file" / under
    assert main(["demo", "--out", str(out)]) == 2
    said = f"rlnb demo: cannot write the demo's files in {out}: {tmp_path / 'file'} is a file, not a folder\n"
    assert capsys.readouterr().err == said


def test_demo_into_a_folder_that_takes_no_file_stops_before_training(capsys):
    """An --out that exists but cannot be written (a read-only mount, another user's folder): the run trained in
    memory under a RunStoreWarning, then writing history.csv raised a traceback and the run was lost."""
    assert main(["demo", "--steps", "1", "--device", "cpu", "--out", "/proc/self"]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("rlnb demo: cannot write the demo's files in /proc/self: ")
    assert captured.err.count("\n") == 1 and "step" not in captured.out  # nothing trained


def test_demo_into_a_folder_that_cannot_be_made_names_no_temporary_file(capsys):
    """/proc/x: the line named the probe's own temporary file ("No such file or directory: '/proc/tmp30wiey90'"), a
    file the user never gave, and not what was wrong."""
    assert main(["demo", "--steps", "1", "--device", "cpu", "--out", "/proc/rlnb-x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlnb demo: cannot write the demo's files in /proc/rlnb-x: /proc takes no new file (")
    assert "tmp" not in err and err.count("\n") == 1


def test_demo_keeps_a_run_folder_it_did_not_write(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "notes.txt").write_text("precious")  # the demo used to delete it without a word
    (tmp_path / "run" / "ops.jsonl").write_text("")
    assert main(["demo", "--steps", "1", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"rlnb demo: {tmp_path / 'run'} is not an rlnb run folder (it holds other files); move it away or pick "
        "another --out\n"
    )
    assert (tmp_path / "run" / "notes.txt").read_text() == "precious"


def test_demo_replaces_a_run_folder_only_when_no_session_writes_it(tmp_path, capsys):
    store = RunStore(tmp_path / "run")  # what an earlier demo's session leaves
    store.write_config({"run_id": "run"})
    store.write_op({"kind": "sample"})
    store.write_completions([{"step": 1, "completion": "a"}])
    assert main(["demo", "--steps", "1", "--out", str(tmp_path), "--force"]) == 2  # still open: a live session's
    assert f"is being written by another rlnb session (pid {os.getpid()})" in capsys.readouterr().err
    assert (tmp_path / "run" / "ops.jsonl").read_text()
    store.close()
    assert _set_aside_run(tmp_path / "run", tmp_path / "aside")
    assert not (tmp_path / "run").exists() and (tmp_path / "aside" / "run" / "ops.jsonl").read_text()


@pytest.mark.parametrize("name", ["history.csv", "rewards.csv", "demo.png"])
def test_demo_keeps_a_users_file_in_out_unless_told_to_replace_it(tmp_path, capsys, name):
    """A ``history.csv`` (``rewards.csv``, ``demo.png``) of the user's in ``--out`` was overwritten without a word."""
    (tmp_path / name).write_text("precious")
    assert main(["demo", "--steps", "1", "--device", "cpu", "--out", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert captured.err == (f"rlnb demo: {tmp_path} holds files no earlier rlnb demo wrote there ({name}): pass "
                            "--force to replace them, or pick another --out\n")  # fmt: skip
    assert "step" not in captured.out and sorted(p.name for p in tmp_path.iterdir()) == [name]  # nothing trained
    assert (tmp_path / name).read_text() == "precious"


def test_demo_never_replaces_a_folder_or_a_link_in_place_of_its_files(tmp_path, capsys):
    (tmp_path / "demo.png").mkdir()  # a folder of the user's, or a link writing through to a file elsewhere
    (tmp_path / "elsewhere.csv").write_text("precious")
    (tmp_path / "history.csv").symlink_to(tmp_path / "elsewhere.csv")
    assert main(["demo", "--steps", "1", "--device", "cpu", "--out", str(tmp_path), "--force"]) == 2
    assert capsys.readouterr().err.startswith(f"rlnb demo: {tmp_path / 'history.csv'} is not a file an rlnb demo ")
    (tmp_path / "history.csv").unlink()
    assert main(["demo", "--steps", "1", "--device", "cpu", "--out", str(tmp_path), "--force"]) == 2
    assert capsys.readouterr().err == (f"rlnb demo: {tmp_path / 'demo.png'} is not a file an rlnb demo wrote; move "
                                       "it away or pick another --out\n")  # fmt: skip
    assert (tmp_path / "elsewhere.csv").read_text() == "precious" and (tmp_path / "demo.png").is_dir()


@pytest.mark.slow  # trains the tiny model for a step, twice (~6 s)
def test_demo_replaces_its_own_earlier_output_and_others_only_with_force_and_averages_only_rewards(tmp_path, capsys):
    """A second demo in the same --out replaces what the first wrote (the README's command, run again); a file of
    its names that the user wrote or changed since is kept unless --force."""
    import rlnb

    low, high = (s.strip() for s in SEEDS.strip("[]").split(","))
    demo = ["demo", "--steps", "1", "--device", "cpu", "--out", str(tmp_path), "--seed"]
    assert main([*demo, low]) == 0
    (tmp_path / "history.csv").write_text("the user's edit")
    assert main([*demo, high]) == 2
    refused = f"rlnb demo: {tmp_path} holds files no earlier rlnb demo wrote there (history.csv): pass --force"
    assert capsys.readouterr().err == f"{refused} to replace them, or pick another --out\n"
    assert (tmp_path / "history.csv").read_text() == "the user's edit"
    assert main([*demo, high, "--force"]) == 0  # both ends of the seed range train
    assert main([*demo, low]) == 0  # its own output, unchanged since: replaced without --force
    out = capsys.readouterr().out
    assert len(rlnb.History.load(tmp_path / "run").steps) == 1  # replaced, not continued
    assert (tmp_path / "history.csv").read_text() != "the user's edit"
    means = [ln for ln in out.splitlines() if ln.startswith("mean reward:")]
    assert len(means) == 2 and "nan" not in "".join(means)  # the eval/accuracy rows have no reward


@pytest.mark.slow  # builds the tiny model and fails two steps (~4 s)
def test_demo_whose_every_step_fails_says_why_and_exits_1(tmp_path, capsys, monkeypatch):
    # every optim-step failing (here, the weights diverged: NaN gradients) was said only by its code, and the demo
    # exited 0 as if it had trained
    from rlnb.engine.optim.failures import NonFiniteGradient
    from rlnb.engine.optim.trainer import TrainerOptimizer

    def diverged(self, hp, *, checked=False):
        raise NonFiniteGradient(float("nan"), ["wte.weight"])

    monkeypatch.setattr(TrainerOptimizer, "step", diverged)
    assert main(["demo", "--steps", "2", "--device", "cpu", "--out", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert "NON_FINITE_LOSS: gradient norm is nan" in captured.out  # the failed step says why
    assert "none of the 2 steps completed" in captured.err and "gradient norm is nan" in captured.err
    assert (tmp_path / "history.csv").exists()  # what was recorded is still written


@pytest.mark.slow  # builds the tiny model (~2 s), and trains nothing
@pytest.mark.parametrize(
    "options, field",
    [
        (["--lr", "1e308"], "adam_params.learning_rate"),
        (["--optimizer", "muon", "--lr", "1e39"], "muon_params.learning_rate"),
    ],
)
def test_demo_with_an_lr_the_weights_cannot_take_stops_before_training(options, field, tmp_path, capsys):
    """``--lr 1e308`` (finite and > 0) sampled, then failed all 40 optim-steps INVALID_INPUT, each "the update would
    multiply by inf", and exited 1. The engine's own check of a step's params (``TrainerOptimizer.check``) now runs
    once the model is built, before anything is sampled: one line naming --lr, the field and the bound, exit 2.
    It ran once --out and its run/ were made (an empty run/ was left behind) and the earlier demo's files there
    deleted: now it runs before --out is touched."""
    fresh, earlier = tmp_path / "fresh", tmp_path / "earlier"
    assert main(["demo", "--steps", "2", "--device", "cpu", "--out", str(fresh), *options]) == 2
    captured = capsys.readouterr()
    said = (
        f"rlnb demo: the optimizer's params do not fit this model (--lr {float(options[-1]):g}): {field} is too large"
    )
    assert captured.err.startswith(said) and "the weights' dtype holds" in captured.err
    assert captured.err.count("\n") == 1 and not captured.out  # nothing sampled, no step
    assert not fresh.exists()  # no empty run/, nor the folder
    assert main(["demo", "--steps", "1", "--device", "cpu", "--out", str(earlier)]) == 0
    kept = {p.relative_to(earlier): p.read_bytes() for p in earlier.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main(["demo", "--steps", "2", "--device", "cpu", "--out", str(earlier), *options]) == 2
    assert capsys.readouterr().err.startswith(said)
    assert {p.relative_to(earlier): p.read_bytes() for p in earlier.rglob("*") if p.is_file()} == kept  # untouched
    assert main(["demo", "--steps", "1", "--device", "cpu", "--out", str(earlier)]) == 0  # the folder takes a demo


def test_serve_on_a_port_in_use_touches_no_state_dir(tmp_path, capsys):
    """The state directory was made, given a signing key and locked before the bind failed (an in-process caller
    then held the lock until its registry was collected)."""
    import socket

    state = tmp_path / "state"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--device", "cpu", "--port", str(port), "--state-dir", str(state)]) == 2
    assert "is already in use" in capsys.readouterr().err and not state.exists()


def test_serve_on_a_port_in_use_or_a_host_not_here_says_which_option_and_exits_2(capsys):
    # uvicorn's "[Errno 98] error while attempting to bind" came after "rlnb serve: http://...": the address
    # was announced as served, and neither --port nor --host was named
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--device", "cpu", "--port", str(port)]) == 2
        captured = capsys.readouterr()
        assert captured.err == f"rlnb serve: --port {port}: 127.0.0.1:{port} is already in use; pick another --port\n"
        assert "http://" not in captured.out  # not announced
    assert main(["serve", "--device", "cpu", "--host", "no-such-host.invalid", "--port", str(port)]) == 2
    assert capsys.readouterr().err.startswith("rlnb serve: --host 'no-such-host.invalid' is not an address of this")
    from rlnb.server.app import bind

    with bind("", port) as every_interface:  # --host '' is every interface, as uvicorn bound it
        assert every_interface.getsockname()[1] == port


def test_serve_on_an_ipv6_host_writes_its_urls_with_brackets(monkeypatch, capsys):
    """``--host ::1`` was refused naming ``public_url`` (never given): the address it made, ``http://::1:8000``, is no
    URL; the announced address was written so too."""
    import socket

    served = []
    monkeypatch.setattr("rlnb.server.app.run", lambda app, sock, **_: served.append(app) or sock.close())
    with socket.socket(socket.AF_INET6) as probe:
        try:
            probe.bind(("::1", 0))
        except OSError:
            pytest.skip("no IPv6 loopback here")
        port = probe.getsockname()[1]
    assert main(["serve", "--device", "cpu", "--host", "::1", "--port", str(port)]) == 0
    assert served[0].state.registry.settings.public_url == f"http://[::1]:{port}"
    assert capsys.readouterr().out.startswith(f"rlnb serve: http://[::1]:{port} (")
    from rlnb.server.app import app_for  # rlnb.server.serve(host="::1") builds the same URL: one rule for both

    assert app_for("::1", 8000, device="cpu").state.registry.settings.public_url == "http://[::1]:8000"


def test_serve_announces_the_address_a_client_takes(monkeypatch, capsys):
    """It announced ``http://127.0.0.1:P/v1/rl``, the API's root: pasted into ``rlnb.connect`` (or the Together SDK's
    ``base_url``), which add ``/v1/rl`` themselves, every call was a 404 on ``/v1/rl/v1/rl/...``."""
    import socket

    from rlnb.remote.call_spec import API_PREFIX

    monkeypatch.setattr("rlnb.server.app.run", lambda app, sock, **_: sock.close())
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert main(["serve", "--device", "cpu", "--port", str(port)]) == 0
    announced = capsys.readouterr().out.splitlines()[0].split()[2]
    assert announced == f"http://127.0.0.1:{port}" and not announced.endswith(API_PREFIX)


def test_serve_threads_are_each_sessions_thread_count_and_said(monkeypatch, capsys):
    """review42d: ``rlnb serve`` had no thread count, so a seeded remote run could not repeat an in-process one bit
    for bit (the policy's count follows the load). ``--threads N`` is the settings' ``threads`` (each session's
    engine's count, ``tests/server/test_served_settings.py``), said where it announces its models."""
    import socket

    served = []
    monkeypatch.setattr("rlnb.server.app.run", lambda app, sock, **_: served.append(app) or sock.close())
    for given, said in ((["--threads", "2"], "threads per session on the CPU: 2"), ([], "auto (the policy may")):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        assert main(["serve", "--device", "cpu", "--port", str(port), *given]) == 0
        assert said in capsys.readouterr().out.splitlines()[1]
    assert [app.state.registry.settings.threads for app in served] == [2, None]


def test_serve_and_demo_say_the_thread_policys_count_in_the_same_words():
    """A seeded run repeats bit for bit at a fixed count only: both commands say so alike, ``rlnb serve`` before any
    session started (no count yet), ``rlnb demo`` with the count its run's config.json records."""
    from rlnb.cli.demo.command import _threads

    said = "the policy may change it with the load; --threads N fixes it"
    assert _threads({"thread_policy": "auto", "threads": 3}) == f"3 (auto: {said})"
    assert _threads({"thread_policy": "fixed", "threads": 2}) == "2"
    assert _threads({"thread_policy": None, "threads": None}) == "n/a (on the GPU)"
    assert threads_said(None) == f"auto ({said})" and threads_said(4, 4) == "4"


def test_serve_says_when_its_checkpoints_folder_cannot_be_removed_at_the_stop(tmp_path, monkeypatch, capsys):
    """The stop removed the temporary folder of checkpoints with ``ignore_errors``: one that stayed (a file it
    could not remove) was said nowhere. Now a line names the folder and the error; the stop still succeeds and
    removes the rest. (As root a read-only file is removable: the one unlink refused is patched in.)"""
    import shutil
    import socket

    from rlnb.engine import held

    monkeypatch.setattr(held.tempfile, "tempdir", str(tmp_path))
    unlink = os.unlink

    def refuse(path, *args, **kwargs):
        if os.fspath(path).endswith("stuck.pt"):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return unlink(path, *args, **kwargs)

    def run(app, sock, **_):  # the server "ran": it wrote two checkpoints, one of which cannot be removed
        sock.close()
        (scratch,) = tmp_path.glob(f"{held.SCRATCH_PREFIX}*")
        (scratch / "ckpt.pt").write_bytes(b"w")
        (scratch / "stuck.pt").write_bytes(b"w")
        monkeypatch.setattr(os, "unlink", refuse)

    monkeypatch.setattr("rlnb.server.app.run", run)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert main(["serve", "--device", "cpu", "--port", str(port)]) == 0
    monkeypatch.setattr(os, "unlink", unlink)
    (scratch,) = tmp_path.glob(f"{held.SCRATCH_PREFIX}*")
    assert [p.name for p in scratch.iterdir()] == ["stuck.pt"]  # the rest went
    err = capsys.readouterr().err
    assert f"rlnb serve: could not remove the checkpoints' temporary folder {scratch} (" in err
    assert "stuck.pt: Permission denied" in err
    shutil.rmtree(scratch)


def test_a_long_limit_value_is_cut_as_every_message_cuts_one(capsys):
    """``--limit NAME=VALUE`` cut the item to 97 characters and "..." but echoed a value that is no number whole (5,000
    characters on one line); the CLI's options cut to 37 and "...", the server's messages to 40 and the length: one
    rule now (``wire.shown``)."""
    from rlnb import wire

    value = "x" * 5000
    assert main(["serve", "--limit", f"max_body_bytes={value}"]) == 2
    err = capsys.readouterr().err
    item = f"'max_body_bytes={'x' * 85}'... (5015 characters)"
    assert err == f"rlnb serve: --limit {item}: {wire.shown(value)} is not a number\n"
    assert wire.shown(value) == f"'{'x' * 40}'... (5000 characters)"


def test_serve_with_an_empty_host_stops_rather_than_listen_on_every_interface(capsys):
    """``--host "$HOST"`` with ``HOST`` unset bound every interface (the default is this machine only) and announced
    ``http://:8000/v1/rl``."""
    assert main(["serve", "--device", "cpu", "--host", ""]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlnb serve: --host is empty (an unset variable?)") and err.count("\n") == 1


@pytest.mark.slow  # builds the tiny model and trains a step (~3 s)
def test_demo_interrupted_says_where_the_run_is_and_exits_130(tmp_path, capsys, monkeypatch):
    """Ctrl-C during the demo: a KeyboardInterrupt traceback through torch, and no word of the run folder it kept."""
    import rlnb
    import rlnb.tasks

    real, calls = rlnb.tasks.rl_step, []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(rlnb.tasks, "rl_step", interrupted)
    assert main(["demo", "--steps", "5", "--device", "cpu", "--out", str(tmp_path)]) == 130
    err = capsys.readouterr().err
    assert err == f"rlnb demo: interrupted; the steps so far are in {tmp_path / 'run'} (rlnb.History.load)\n"
    assert len(rlnb.History.load(tmp_path / "run").steps) == 1


@pytest.mark.slow  # a process that imports torch and builds the tiny model (~8 s)
def test_demo_whose_output_is_closed_stops_with_one_line(tmp_path):
    """``rlnb demo | head -2``: a ``BrokenPipeError`` traceback at the next row, then "Exception ignored ... BrokenPipe"
    as Python flushed the closed pipe at exit."""
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    argv = [sys.executable, "-m", "rlnb.cli", "demo", "--steps", "20", "--device", "cpu", "--out", str(tmp_path)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True) as proc:
        assert proc.stdout.readline().startswith("rlnb demo: task=first_letter")
        proc.stdout.close()  # as head does once it has its lines
        err = proc.stderr.read()
    assert proc.returncode == 141
    kept = f"the steps so far are in {tmp_path / 'run'} (rlnb.History.load)"
    assert err == f"rlnb demo: stopped, its output was closed; {kept}\n"

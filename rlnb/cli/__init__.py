"""``rlnb`` command line: a thin layer over the public API, one module per subcommand.

rlnb demo [--task first_letter|addition|digits] [--optimizer adam|muon] [--steps N] [--model ...]  the RL loop
rlnb serve [--host 127.0.0.1] [--port 8000] [--token TOKEN]  a Together-compatible local server

This module holds only the parser and the choice of runner; ``demo`` and ``serve`` hold each subcommand's
arguments and what it does, and import torch or the server only when they run (``--help`` stays fast). It imports
them, and argparse, inside ``main``: a Ctrl-C while they are imported at module level (the first milliseconds of every
command) would be a ``KeyboardInterrupt`` traceback.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # as in ``rlnb/__init__``: ``typing`` and ``collections.abc`` were imported before main's handler
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any


def main(argv: Sequence[str] | None = None) -> int:
    """``rlnb ...`` (``argv``, or the process's arguments): the subcommand's exit status. A Ctrl-C before a
    subcommand's own handler runs is one line and 130, as within it (a ``KeyboardInterrupt`` traceback before); one
    during an import is held until it returns (``interrupts``: a library could lose it or turn it into an error)."""
    from rlnb.cli.interrupts import HeldDuringImports
    from rlnb.cli.output import lenient, opened

    opened()  # before anything opens a file: a closed stdout's descriptor is no file's
    lenient()
    try:
        with HeldDuringImports():
            from rlnb.cli import demo, serve
            from rlnb.cli.options import Parser

            about = "rlnb command line: a thin layer over the public API."
            parser = Parser(prog="rlnb", description=about)  # its subcommands' parsers are of its class
            parser.typed = tuple(sys.argv[1:] if argv is None else argv)
            # "command" in the usage, as the error names it: {demo,serve} there was "command" nowhere else
            words = "demo or serve (their options: rlnb demo -h, rlnb serve -h)"
            sub = parser.add_subparsers(dest="command", metavar="command", help=words)
            once = "Give each option once, spelt in full; --model and --limit (rlnb serve) may repeat."
            commands = {
                "demo": sub.add_parser("demo", help="run the RL loop on the in-process torch backend", epilog=once),
                "serve": sub.add_parser(
                    "serve", help="serve the Together RL API on the in-process backend", epilog=once
                ),
            }
            demo.arguments(commands["demo"])
            serve.arguments(commands["serve"])
            args, unknown = parser.parse_known_args(argv)
            if args.command is None:
                parser.error("the following arguments are required: command (demo or serve)")
            if unknown:  # said by the subcommand's parser: the top level's usage listed no option of it
                commands[args.command].error(_unrecognized(unknown, commands[args.command]))
            status: int = {"demo": demo.run, "serve": serve.run}[args.command](args, parser)
            return status
    except KeyboardInterrupt:
        print("rlnb: stopped (Ctrl-C)", file=sys.stderr)
        return 130
    finally:
        if argv is None:  # the process's own command: it has said how it ended
            _interrupts_ignored()


def _interrupts_ignored() -> None:
    """Ctrl-C ignored from here to the process's exit: the subcommand has returned and said how it ended, and a second
    Ctrl-C in the seconds of exit (torch's atexit callbacks) printed a ``KeyboardInterrupt`` traceback after it."""
    import signal

    if hasattr(signal, "SIGINT"):
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _unrecognized(unknown: list[str], parser: Any) -> str:
    """argparse's words for options ``parser`` does not take, with the nearest one it does for each misspelt one. The
    value of one that may name a secret (``--tokn sk-...``, ``--api-key=...``: its name holds token or key, or its
    nearest option is ``--token``) is masked: stderr goes into CI logs and notebooks."""
    import difflib

    from rlnb.cli.options import may_name_secret
    from rlnb.secrets.masks import MASK

    known = [o for action in parser._actions for o in action.option_strings if o.startswith("--")]
    said: list[str] = []
    near: list[str] = []
    masked = False  # the word before was an option that may name a secret: this one is its value
    for word in unknown:
        if masked and not word.startswith("--"):
            said.append(MASK)
            masked = False
            continue
        name, joined, _ = word.partition("=")
        match = difflib.get_close_matches(name, known, 1) if name.startswith("--") else []
        near += match
        secret = may_name_secret(name) or match == ["--token"]
        masked = secret and not joined
        said.append(f"{name}={MASK}" if secret and joined else word)
    meant = f" (did you mean {' or '.join(near)}?)" if near else ""
    return f"unrecognized arguments: {' '.join(said)}{meant}"

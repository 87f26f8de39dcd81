"""``rlnb`` command line: a thin layer over the public API, one module per subcommand.

rlnb demo [--task first_letter|addition|digits] [--optimizer adam|muon] [--steps N] [--model ...]  the RL loop
rlnb serve [--host 127.0.0.1] [--port 8000] [--token TOKEN]  a Together-compatible local server

This module holds only the parser and the table of runners; ``demo`` and ``serve`` hold each subcommand's
arguments and what it does, and import torch or the server only when they run (``--help`` stays fast).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from rlnb.cli import demo, serve


def main(argv: Sequence[str] | None = None) -> int:
    """``rlnb ...`` (``argv``, or the process's arguments): the subcommand's exit status. A Ctrl-C before a
    subcommand's own handler runs is one line and 130, as within it (a ``KeyboardInterrupt`` traceback before)."""
    try:
        about = "rlnb command line: a thin layer over the public API."
        parser = argparse.ArgumentParser(prog="rlnb", description=about)
        sub = parser.add_subparsers(dest="command", required=True)
        demo.arguments(sub.add_parser("demo", help="run the RL loop on the in-process torch backend"))
        serve.arguments(sub.add_parser("serve", help="serve the Together RL API on the in-process backend"))
        args = parser.parse_args(argv)
        return COMMANDS[args.command](args, parser)
    except KeyboardInterrupt:
        print("rlnb: stopped (Ctrl-C)", file=sys.stderr)
        return 130


Runner = Callable[[argparse.Namespace, argparse.ArgumentParser], int]

COMMANDS: dict[str, Runner] = {"demo": demo.run, "serve": serve.run}
"""Each subcommand's runner: parsed arguments in, exit status out."""

"""The options both subcommands take (``--device``, ``--dtype``), written once so they read and check alike."""

from __future__ import annotations

import argparse


def device_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--device", default="auto", help="auto (CUDA when available), cpu, cuda, cuda:N (default: %(default)s)"
    )


def dtype_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "float32", "bfloat16"],
        help="weights' dtype; auto: the checkpoint's own, float32 for the built-ins (default: auto)",
    )


def exit_with_stdin_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--exit-with-stdin",
        action="store_true",
        help="stop, as at SIGTERM, when stdin reaches its end: the process that started the server holds the pipe, "
        "so the server does not outlive it, even SIGKILLed (rlnb.testing.ServerProcess passes it)",
    )

"""Writing to a terminal or pipe that may be gone: both subcommands stop with one line, never a traceback into it.

``rlnb demo | head`` or ``rlnb serve 2>&1 | ...`` whose reader has exited: a print raises ``BrokenPipeError``, and
what the stream still holds raises again when Python flushes it at exit (exit status 120).
"""

from __future__ import annotations

import os
import sys
from typing import Any


def quiet(stream: Any) -> None:
    """Send ``stream`` (a closed pipe) to the null device: what it still holds is flushed there at exit, where the
    closed pipe's ``BrokenPipeError`` made Python exit 120."""
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, stream.fileno())
    os.close(null)


def say(line: str) -> None:
    """``line`` on stderr, which may be the closed pipe too (``rlnb demo 2>&1 | head``: raised in the handler of the
    first ``BrokenPipeError``, the line would be a traceback no one sees, exit status 1)."""
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:
        quiet(sys.stderr)


def opened() -> None:
    """A closed stdout or stderr (``rlnb serve >&-``, a service manager's closed streams) as the null device:
    Python leaves the stream ``None``, where uvicorn's log setup calls ``sys.stdout.isatty()`` (a traceback, exit 1),
    and the descriptor free, where the next file opened (a lock, the journal, a socket) would take it and a write to
    stdout (a C library's, a child's) would land in that file."""
    for fd, name in ((1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_WRONLY)
            if null != fd:  # stdin closed too: the null device came as descriptor 0
                os.dup2(null, fd)
                os.close(null)
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, "w", closefd=False))  # noqa: SIM115 - the process's stream, never closed


def lenient() -> None:
    """stdout and stderr write a character their encoding lacks as an escape (``\\xfc``), not a
    ``UnicodeEncodeError``: a demo that wrote every file exited 2 (a refused option) when an ASCII or cp1252 stdout
    could not print its ``--out`` name."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)  # a TextIOWrapper's; a caller's own stream may lack it
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")


class StdoutFailed(OSError):
    """A write to stdout failed (``>/dev/full``, a full disk), said so: its ``OSError`` names no file, as an open
    file's does not, and ``[Errno 28] No space left on device`` alone read as --out's disk."""


def show(line: str) -> None:
    """``line`` on stdout, flushed, so that a failure is raised here as ``StdoutFailed`` (not at exit, as Python's
    "Exception ignored" and exit status 120); a closed pipe stays ``BrokenPipeError``, said by each command."""
    try:
        print(line, flush=True)
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise StdoutFailed(exc.errno, f"cannot write to stdout: {exc.strerror or exc}") from None

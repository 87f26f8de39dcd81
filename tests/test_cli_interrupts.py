"""A Ctrl-C in the first moments of ``rlnb demo`` / ``rlnb serve``, while libraries are imported: one line and exit
status 130, never a traceback, an unrelated error or a Ctrl-C lost inside a library's import."""

import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rlnb.cli.interrupts import HeldDuringImports

ROOT = str(Path(__file__).resolve().parents[1])
EXIT_DEADLINE = 120.0
"""Seconds an interrupted command may take to exit: it may import torch first, slowly on a loaded machine."""

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def _module(tmp_path: Path, name: str, body: str) -> None:
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))


def test_a_ctrl_c_inside_an_import_is_raised_once_the_import_has_returned(tmp_path, monkeypatch):
    _module(
        tmp_path,
        "rlnb_test_interrupted",
        """
        import os, signal, time
        os.kill(os.getpid(), signal.SIGINT)
        deadline = time.monotonic() + 0.3
        while time.monotonic() < deadline:  # the handler runs here, inside the import
            pass
        FINISHED = True
    """,
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt), HeldDuringImports():
        import rlnb_test_interrupted  # noqa: F401

        deadline = __import__("time").monotonic() + 10
        while __import__("time").monotonic() < deadline:  # outside the import: delivered here
            pass
    assert sys.modules["rlnb_test_interrupted"].FINISHED  # the import ran to its end: no half-imported module
    assert signal.getsignal(signal.SIGINT) is before


def test_a_ctrl_c_outside_imports_and_a_third_one_inside_are_raised_at_once(tmp_path, monkeypatch):
    with pytest.raises(KeyboardInterrupt), HeldDuringImports():
        os.kill(os.getpid(), signal.SIGINT)
        __import__("time").sleep(10)  # interrupted at once
    _module(
        tmp_path,
        "rlnb_test_hung",
        """
        import os, signal, time
        for _ in range(3):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
        time.sleep(10)  # an import that hangs: the third Ctrl-C ends it
        FINISHED = True
    """,
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(KeyboardInterrupt), HeldDuringImports():
        import rlnb_test_hung  # noqa: F401
    assert "rlnb_test_hung" not in sys.modules


_INTERRUPTED_IN = textwrap.dedent("""
    import os, signal, sys

    class Interrupt:  # Ctrl-C as the module sys.argv[1] starts to be imported
        def __init__(self, module):
            self.module = module

        def find_spec(self, name, path=None, target=None):
            if name == self.module:
                sys.meta_path.remove(self)
                os.kill(os.getpid(), signal.SIGINT)

    sys.meta_path.insert(0, Interrupt(sys.argv.pop(1)))
    from rlnb.cli import main
    sys.exit(main())
""")


def _interrupted(module: str, argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": ROOT, "TMPDIR": str(tmp_path)}
    command = [sys.executable, "-c", _INTERRUPTED_IN, module, *argv]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=EXIT_DEADLINE)


@pytest.mark.slow  # a Python process that imports torch
@pytest.mark.parametrize("command", ["demo", "serve"])
def test_ctrl_c_while_torch_imports_numpy_stops_the_command(command, tmp_path):
    """torch's C initialisation imports numpy and clears the error when that import is interrupted: the Ctrl-C was
    lost (the demo ran to its end, exit 0; the server started serving), or came back as ``rlnb demo:
    initialization failed`` (exit 2) or an AttributeError traceback from a half-imported numpy."""
    argv = {"demo": ["demo", "--steps", "1", "--device", "cpu", "--out", str(tmp_path / "out")],
            "serve": ["serve", "--port", "0", "--device", "cpu"]}[command]  # fmt: skip
    done = _interrupted("numpy", argv, tmp_path)
    assert done.returncode == 130, done.stderr
    assert done.stderr.startswith(("rlnb demo: interrupted", "rlnb serve: stopped (Ctrl-C)")), done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr


@pytest.mark.slow  # a Python process
@pytest.mark.parametrize("module", ["argparse", "rlnb.cli.serve"])
def test_ctrl_c_while_the_command_line_imports_its_own_modules_is_one_line_and_130(module, tmp_path):
    """``from rlnb.cli import main`` imported argparse and both subcommands before ``main``'s handler: a Ctrl-C
    there (the first ~25 ms) was a ``KeyboardInterrupt`` traceback and status -2."""
    done = _interrupted(module, ["serve", "--port", "0", "--device", "cpu"], tmp_path)
    assert done.returncode == 130, done.stderr
    # the held Ctrl-C is raised at the first moment out of every import: before serve's own handler, or in it
    assert re.fullmatch(r"rlnb( serve)?: stopped \(Ctrl-C\)( before it listened)?\n", done.stderr), done.stderr


@pytest.mark.slow  # a Python process
def test_the_console_script_imports_no_library_before_main_holds_a_ctrl_c():
    """The console script's ``from rlnb.cli import main`` runs before ``main`` installs its handler: a Ctrl-C there is
    a traceback. It imported ``typing`` (for ``TYPE_CHECKING``) and ``collections.abc``: ~2 ms of it. What is left is
    rlnb's own two short modules (``re`` and ``sys``, the script's others, are loaded by Python's start-up)."""
    code = "import sys\nbefore = set(sys.modules)\nfrom rlnb.cli import main\nprint(sorted(set(sys.modules) - before))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=EXIT_DEADLINE,
                         env={**os.environ, "PYTHONPATH": ROOT})  # fmt: skip
    assert (out.returncode, out.stdout) == (0, "['rlnb', 'rlnb.cli']\n"), out.stderr

"""A Ctrl-C while the first ``connect("local")`` imports torch (seconds): it landed inside torch's import and left torch
half-imported for good, so the retry failed with ``module 'torch' has no attribute '_utils'``, then a ``SystemError``
or a segmentation fault, saying nothing of why."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rlnb.session.engine_import import HALF_IMPORTED

pytestmark = pytest.mark.slow  # each test imports torch in a Python process of its own

CTRL_C_IN_TORCH = """
import os, signal, sys, threading, time
import rlnb
from rlnb import samples

def ctrl_c_once_torch_imports():
    while {trigger!r} not in sys.modules:
        time.sleep(0.001)
    os.kill(os.getpid(), signal.SIGINT)

threading.Thread(target=ctrl_c_once_torch_imports, daemon=True).start()
try:
    {first}
    print("NOT INTERRUPTED", flush=True)
except KeyboardInterrupt:
    print("INTERRUPTED", flush=True)
try:
    with rlnb.connect("local", model="tiny", device="cpu", record=False) as s:
        s.forward_backward([samples.cross_entropy([1, 2, 3])]).result(60)
    print("RETRY OK", flush=True)
except RuntimeError as exc:
    print("RETRY:", exc, flush=True)
"""


def _run(first: str, trigger: str) -> list[str]:
    """The script's lines: ``first`` interrupted once ``trigger`` is being imported, then a connect."""
    script = CTRL_C_IN_TORCH.format(first=first, trigger=trigger)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.splitlines()


def test_a_ctrl_c_during_connects_torch_import_is_raised_after_it_and_the_retry_works():
    assert _run('rlnb.connect("local", model="tiny", device="cpu", record=False).close()', "torch.torch_version") == [
        "INTERRUPTED",
        "RETRY OK",
    ]


def test_a_torch_left_half_imported_is_one_clear_error():
    """An ``import torch`` of the user's interrupted once torch's C part is initialised (``torch._tensor`` comes
    after it): the next connect says so, before it goes on into a torch that may crash the process."""
    assert _run("import torch", "torch._tensor") == ["INTERRUPTED", f"RETRY: {HALF_IMPORTED}"]

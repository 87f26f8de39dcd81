"""Freed memory stays in the process while an engine runs: glibc's malloc tuned for training steps on the CPU.

A training step frees its activations and gradients, and the next step allocates them again. glibc's malloc
gives freed memory back to the system (it trims the top of a heap, and unmaps chunks of over 128 KiB that it
mapped on their own), so every step touches fresh pages and the kernel faults each one in, zeroed. A session's
worker thread took ~930 page faults per `small` step on this project's machine, and the session ran 1.21x a
bare loop against 1.07x with the settings below (``bench/bench_optim.py --overhead --model small``). So while
a local session or batched ensemble runs on the CPU, two of glibc's ``mallopt`` thresholds are raised for the
process, as torch's CUDA caching allocator keeps GPU memory: chunks up to ``MMAP_THRESHOLD`` come from the
heaps, and a heap keeps up to ``TRIM_THRESHOLD`` free at its top. When the last one closes, glibc's default
values come back and ``malloc_trim`` returns the free memory to the system (``bench_server_memory.py``: +75 MB
over 200 session cycles of ``rlnb serve``, against +99 MB when only trimming). The cost: while engines run, the
process's resident memory stays near its peak.

Only with glibc (Linux); nothing elsewhere. ``RLNB_MALLOC=default`` in the environment leaves malloc as it is
(``keep``, the default, is the only other value). So does a process whose environment sets either threshold
(``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``, or ``glibc.malloc.*`` in ``GLIBC_TUNABLES``): those are
the user's values, which rlnb can neither read back nor restore.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import platform
import threading

log = logging.getLogger("rlnb")

MMAP_THRESHOLD = 32 << 20
"""Chunks of up to 32 MiB come from the heaps (glibc's largest value on every version)."""
TRIM_THRESHOLD = 512 << 20
"""A heap keeps up to 512 MiB of free memory at its top before giving any back."""
ENV = "RLNB_MALLOC"
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
_NAMES = ("mmap_threshold", "trim_threshold")

DEFAULT_THRESHOLD = 128 << 10
"""glibc's initial value of both thresholds, put back when the last engine closes (fixed from then on: glibc
no longer raises them by itself)."""

_LOCK = threading.Lock()
_users = 0


def acquire() -> str:
    """An engine starts on the CPU: keep freed memory (the first one sets the thresholds). What malloc does
    now: ``"keep freed"``, ``"default"`` (``RLNB_MALLOC=default``, or glibc refused), ``"tuned by the environment"``
    or ``"not glibc"``."""
    global _users
    with _LOCK:
        state = _state()
        if state == "keep freed":
            if _users == 0 and not _set(MMAP_THRESHOLD, TRIM_THRESHOLD):
                log.warning("rlnb: glibc refused the malloc thresholds; freed memory goes back to the system")
                return "default"
            _users += 1
        return state


def release() -> None:
    """An engine that ``acquire`` counted closed; after the last one, glibc's defaults and a trim."""
    global _users
    with _LOCK:
        if _users == 0:
            return
        _users -= 1
        if _users == 0:
            _set(DEFAULT_THRESHOLD, DEFAULT_THRESHOLD)
            _libc().malloc_trim(0)


def _state() -> str:
    value = os.environ.get(ENV, "keep")
    if value not in ("keep", "default"):
        raise ValueError(f"{ENV} must be 'keep' (the default: freed memory stays while engines run) or 'default' "
                         f"(glibc's own behaviour), got {value!r}")  # fmt: skip
    if value == "default":
        return "default"
    if not _is_glibc():
        return "not glibc"
    return "tuned by the environment" if _tuned() else "keep freed"


def _tuned() -> bool:
    """Whether the environment sets either threshold (glibc reads it once, when the process starts)."""
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    return any(f"MALLOC_{name.upper()}_" in os.environ or f"glibc.malloc.{name}=" in tunables for name in _NAMES)


@functools.cache
def _is_glibc() -> bool:
    return platform.libc_ver()[0] == "glibc"  # reads the interpreter's binary: once


def _set(mmap: int, trim: int) -> bool:
    mallopt = _libc().mallopt
    return bool(mallopt(_M_MMAP_THRESHOLD, mmap) and mallopt(_M_TRIM_THRESHOLD, trim))


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None)

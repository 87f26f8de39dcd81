"""Freed memory stays in the process: glibc's malloc tuned for training steps on the CPU.

A training step frees its activations and gradients, and the next step allocates them again. glibc's malloc
gives freed memory back to the system (it trims the top of a heap, and unmaps chunks of over 128 KiB that it
mapped on their own), so every step touches fresh pages and the kernel faults each one in, zeroed. A session's
worker thread took ~930 page faults per `small` step on this project's machine, and the session ran 1.21x a
bare loop against 1.07x with the settings below (``bench/bench_optim.py --overhead --model small``). So when
the first local session or batched ensemble starts on the CPU, rlnb sets two of glibc's ``mallopt``
thresholds for the process, as torch's CUDA caching allocator keeps GPU memory: chunks up to
``MMAP_THRESHOLD`` come from the heaps, and a heap keeps up to ``TRIM_THRESHOLD`` of free memory at its top.
The cost: the process's resident memory stays near its peak instead of shrinking after each step.

Only with glibc (Linux); nothing elsewhere. ``RLNB_MALLOC=default`` in the environment leaves malloc as it is.
"""

from __future__ import annotations

import ctypes
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

_LOCK = threading.Lock()
_state: str | None = None


def keep_freed_memory() -> str:
    """Set the thresholds once per process; what malloc does now: ``"keep freed"``, ``"default"`` (``RLNB_MALLOC
    =default``) or ``"not glibc"``."""
    global _state
    with _LOCK:
        if _state is None:
            _state = _apply()
        return _state


def _apply() -> str:
    if os.environ.get(ENV, "").lower() == "default":
        return "default"
    if platform.libc_ver()[0] != "glibc":
        return "not glibc"
    mallopt = ctypes.CDLL(None).mallopt
    if not (mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)):
        log.warning("rlnb: glibc refused the malloc thresholds; freed memory goes back to the system")
        return "default"
    log.info("rlnb: malloc keeps freed memory (chunks up to %d MiB, %d MiB free per heap)",
             MMAP_THRESHOLD >> 20, TRIM_THRESHOLD >> 20)  # fmt: skip
    return "keep freed"

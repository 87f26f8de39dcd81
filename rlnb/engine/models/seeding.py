"""Weights drawn from torch's global RNG, seeded: one thread at a time.

torch has one global generator per process. Two models initialised at once on two threads (``rlnb serve`` builds
each session's model on a thread of its own; a sweep's trials open their sessions on threads) interleaved their
draws, and the same seed gave other weights: ``fork_rng`` restores the generator afterwards, but it does not keep
another thread from re-seeding it meanwhile. Every seeded init holds ``LOCK``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence

import torch

LOCK = threading.RLock()
"""Held while a seeded init draws from the global RNG."""


@contextlib.contextmanager
def seeded(seed: int, devices: Sequence[torch.device] = ()) -> Iterator[None]:
    """The global RNG seeded with ``seed`` for this block alone (its state, and ``devices``' CUDA states, restored
    after it), and no other seeded init on another thread until the block ends."""
    with LOCK, torch.random.fork_rng(devices=list(devices)):
        torch.manual_seed(seed)
        yield

"""Seeded inits draw from torch's one global generator: two at once on two threads (``rlnb serve`` builds each
session's model on its own thread) interleaved, and a seed gave other weights."""

import threading

import torch

from rlnb.engine.models import seeding
from rlnb.engine.models.tiny import build_model


def _draws(seed: int, n: int) -> torch.Tensor:
    return torch.rand(n, generator=torch.Generator().manual_seed(seed))


def test_a_seeded_init_draws_its_seeds_numbers_while_another_thread_seeds_its_own():
    """Thread A draws, lets B seed, and draws again: without the lock B's ``manual_seed(1)`` lands between A's
    draws, and A's second half came from seed 1. B waits now (A's wait for it runs out)."""
    a_started, b_seeded, a_drew = threading.Event(), threading.Event(), threading.Event()
    got: dict[int, torch.Tensor] = {}

    def a() -> None:
        with seeding.seeded(0):
            first = torch.rand(2)
            a_started.set()
            b_seeded.wait(0.5)  # without the lock B is inside its block by now
            got[0] = torch.cat([first, torch.rand(2)])
        a_drew.set()

    def b() -> None:
        a_started.wait(30)
        with seeding.seeded(1):
            b_seeded.set()
            a_drew.wait(0.5)
            got[1] = torch.rand(4)

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert torch.equal(got[0], _draws(0, 4)) and torch.equal(got[1], _draws(1, 4))


def test_models_built_at_once_on_threads_are_those_built_alone():
    alone = {seed: build_model("tiny", seed).state_dict() for seed in range(4)}
    built: dict[int, dict[str, torch.Tensor]] = {}
    threads = [threading.Thread(target=lambda s=s: built.__setitem__(s, build_model("tiny", s).state_dict()))
               for s in range(4)]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(torch.equal(built[s][k], alone[s][k]) for s in alone for k in alone[s])

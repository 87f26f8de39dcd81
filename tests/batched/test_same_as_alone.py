"""The central claim of batched trials, in the fast tier: an ensemble of K members gives each member what K separate
runs give (``tests/batched/test_batched.py`` checks it at length, slow tier). Two members that differ in seed and
learning rate, K = 1, and two that share a seed (its uniforms drawn once for both) train 2 light steps (~2 s in all)
and are compared with the same trial alone on a local session: rewards exactly (identical sampled tokens), losses to
1e-8 absolute, weights to 2% of one Adam step (0.02 x the learning rate, each entry). The vmapped forward rounds
differently from a session's, and Adam's update of a near-zero gradient magnifies that: Adam moves an entry by up to
about the learning rate a step whatever its gradient's size, so the step is the scale, not the tensor's largest entry
(on an AMD EPYC, a bias whose largest entry was 0.006 differed by 1.7e-3 of it; measured at most 0.0054 x the
learning rate there, 2 steps). A wrong learning rate or a missed step is off by a whole step."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

import rlnb
from rlnb.batched import SEED_STRIDE, Member, run_batched
from rlnb.tasks import digits_task, rl_step

STEPS, GROUP = 2, 4


def alone(member: Member) -> tuple[list[float], list[float], pd.DataFrame, dict[str, torch.Tensor]]:
    """The trial as a sweep runs it on threads: a local session driven by ``rl_step`` with the member's step seeds."""
    s = rlnb.connect("local", optimizer="adam", model="tiny", seed=member.seed, device="cpu", record=False, threads=1)
    try:
        reports = [
            rl_step(s, digits_task(), member.params, seed=member.seed * SEED_STRIDE + i, group_size=GROUP)
            for i in range(STEPS)
        ]
        s.wait()
        weights = {n: p.detach().clone() for n, p in s.backend.trainer.named_parameters()}
        return [r.reward for r in reports], [r.loss for r in reports], s.history.completions, weights
    finally:
        s.close()


@pytest.mark.parametrize(
    "members",
    [
        [Member(rlnb.AdamParams(learning_rate=3e-3), seed=0), Member(rlnb.AdamParams(learning_rate=1e-2), seed=5)],
        [Member(rlnb.AdamParams(learning_rate=3e-3), seed=2)],
        [  # a seed shared by two members is drawn once for both (``sampler.members_uniforms``)
            Member(rlnb.AdamParams(learning_rate=3e-3), seed=1),
            Member(rlnb.AdamParams(learning_rate=1e-2), seed=1),
        ],
    ],
    ids=["two", "one", "shared-seed"],
)
def test_each_member_equals_its_trial_run_alone(members):
    results = run_batched("tiny", "adam", members, steps=STEPS, group_size=GROUP, device="cpu", threads=1,
                          keep_weights=True)  # fmt: skip
    assert len(results) == len(members)
    for member, got in zip(members, results, strict=True):
        rewards, losses, completions, weights = alone(member)
        assert (got.status, got.reason, got.steps_done) == ("COMPLETED", None, STEPS)
        assert got.rewards == rewards  # the same tokens sampled and scored
        pd.testing.assert_frame_equal(got.history.completions, completions)
        assert got.losses == pytest.approx(losses, abs=1e-8)
        assert got.weights is not None and got.weights.keys() == weights.keys()
        step = member.params.learning_rate
        for name, want in weights.items():  # measured: up to 0.0054 x the learning rate
            assert float((got.weights[name] - want).abs().max()) <= 0.02 * step, name

"""Batched trials: every member equals the same trial run alone on a local session (sampled tokens, losses,
grad norms, learning rates, final weights, records), a failing member stops alone, the runs read as any run,
and the stacked pieces (optimizer, attention, rollout batch, sampling noise) match their one-session twins."""

from __future__ import annotations

import dataclasses
import math
import re
import threading
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

import rlnb
from rlnb import samples
from rlnb.batched import SEED_STRIDE, Member, run_batched, why_not_batched
from rlnb.batched.ensemble import Ensemble
from rlnb.batched.optim import StackedOptimizer, plan
from rlnb.batched.reasons import failure_reason
from rlnb.batched.rollouts import policy_batch
from rlnb.batched.stacked import StackedModel, batched_attention
from rlnb.engine.models.factory import build_adapter
from rlnb.engine.models.tiny import build_model
from rlnb.engine.optim.failures import NonFiniteGradient
from rlnb.engine.optim.split import split_params
from rlnb.engine.optim.trainer import TrainerOptimizer
from rlnb.engine.sampling import DIVERGED, Drawn, Settings, draw, generate, uniforms
from rlnb.errors import describe
from rlnb.history import History
from rlnb.history.store import lock_run
from rlnb.params.schedule import Schedule
from rlnb.tasks import RL_METRICS, Task, digits_task, rl_step
from rlnb.viz import plots
from tests.support.tasks import UnprintableError

pytestmark = pytest.mark.slow  # trains ensembles of models for many RL steps

STEPS = 10
CPU = torch.device("cpu")
COSINE = Schedule("cosine", warmup_steps=2, total_steps=STEPS)
ADAM = [
    Member(rlnb.AdamParams(learning_rate=3e-3, grad_clip_norm=0.01), seed=0),
    Member(lambda i: rlnb.AdamParams(learning_rate=8e-3, grad_clip_norm=0.01).scaled(COSINE.multiplier(i)), seed=1),
    Member(
        rlnb.AdamParams(learning_rate=4e-3, beta1=0.8, beta2=0.99, eps=1e-6, weight_decay=0.0, grad_clip_norm=0), seed=0
    ),  # clipping off; member 0's seed
]
MUON = [
    Member(
        rlnb.MuonParams(
            learning_rate=0.05,
            momentum=0.9,
            newton_schulz_steps=3,
            weight_decay=0.01,
            grad_clip_norm=0.01,
            adam={"learning_rate": 1e-3, "beta1": 0.8},
        ),
        seed=1,
    ),
    Member(
        lambda i: rlnb.MuonParams(learning_rate=0.03, grad_clip_norm=0.01, adam={"learning_rate": 2e-3}).scaled(
            COSINE.multiplier(i)
        ),
        seed=2,
    ),
]
# Identical tokens need no near tie: the vmapped forward rounds differently from a session's (~1e-6 in
# the logits), and inverse-CDF sampling over 256 tokens flips a token whose uniform lands that close to a
# CDF boundary (about one token in several thousand; a 10-step member draws 3840). These members draw
# none; if a change of the RL step brings one, check that the first differing token is such a tie
# before picking other learning rates (lr 1e-2 / 5e-3 here flip at steps 7 and 8 with TRL's advantages).
CODE = "TRAINING_OPERATION_ERROR_CODE_"
QUICK = {"group_size": 4}
"""Lighter RL steps for the tests whose point is not the default step's numbers."""


@dataclass
class Alone:
    status: str
    reason: str | None
    rewards: list[float]
    tokens: list[list[list[int]]]
    history: History
    weights: dict[str, torch.Tensor]


def ns_float32(kind: str) -> dict[str, Any]:
    """Newton-Schulz in float32 for a Muon run (an Adam session or ensemble refuses ``ns_dtype``)."""
    return {"ns_dtype": "float32"} if kind == "muon" else {}


def alone(kind: str, member: Member, steps: int = STEPS, **rl: Any) -> Alone:
    """The trial run as ``rlnb.sweep`` runs it today: a local session and ``rl_step`` per step."""
    s = rlnb.connect(
        "local", optimizer=kind, model="tiny", seed=member.seed, device="cpu", record=False, **ns_float32(kind)
    )
    sampled: list[Any] = []
    real = s.sample
    s.sample = lambda *a, **k: sampled.append(real(*a, **k)) or sampled[-1]  # type: ignore[method-assign]
    status, reason, rewards = "COMPLETED", None, []
    try:
        for i in range(steps):
            params = member.params(i) if callable(member.params) else member.params
            rewards.append(rl_step(s, digits_task(), params, seed=member.seed * SEED_STRIDE + i, **rl).reward)
    except rlnb.OperationFailed as exc:
        status, reason = "FAILED", failure_reason(exc.code, exc.message)  # as rlnb.sweep's trial writes it
    except ValueError as exc:  # rlnb.tasks.score refuses non-finite advantages
        status, reason = "FAILED", f"{type(exc).__name__}: {exc}"
    s.wait()
    done = [op for op in sampled if op.status == "TRAINING_OPERATION_STATUS_COMPLETED"]
    tokens = [[q.tokens for r in op.result().results for q in r.sequences] for op in done]
    weights = {n: p.detach().clone() for n, p in s.backend.trainer.named_parameters()}
    s.close()
    return Alone(status, reason, rewards, tokens, s.history, weights)


@pytest.fixture
def sampled_tokens(monkeypatch) -> dict[tuple[int, int], list[list[int]]]:
    """Every member's sampled tokens per step, as the ensemble drew them: ``{(member, step): [[token, ...]]}``."""
    seen: dict[tuple[int, int], list[list[int]]] = {}
    real = Ensemble._sample

    def spy(self: Ensemble, i: int) -> Any:
        rollouts, drawn = real(self, i)
        toks, lens = drawn.tokens.tolist(), drawn.lengths.tolist()
        B = len(self.sampler.prompts) * self.sampler.group_size
        for k, m in enumerate(self.live):
            seen[(m, i)] = [toks[r][: lens[r]] for r in range(k * B, (k + 1) * B)]
        return rollouts, drawn

    monkeypatch.setattr(Ensemble, "_sample", spy)
    return seen


def assert_weights_close(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    """Float tolerance for weights after training steps: the same trial alone differs by up to ~4e-4 (largest
    element, relative to the tensor's largest) between 1 and 2 torch threads after 10 Adam steps."""
    assert got.keys() == want.keys()
    for name, w in want.items():
        diff = (got[name] - w).abs()
        assert float(diff.max()) <= 5e-3 * float(w.abs().max()), name
        assert float((got[name] - w).norm()) <= 2e-3 * float(w.norm()), name


def assert_same_records(got: History, want: History) -> None:
    a, b = want.df, got.df
    for col in ("kind", "status", "error_code", "error_message", "step", "weights_version"):
        assert list(b[col].astype(object).fillna(-1)) == list(a[col].astype(object).fillna(-1)), col
    opt_a, opt_b = a[a.kind == "optim-step"], b[b.kind == "optim-step"]
    assert [sorted(m) for m in opt_b.metrics] == [sorted(m) for m in opt_a.metrics]
    for got_m, want_m in zip(opt_b.metrics, opt_a.metrics, strict=True):  # Muon's grad_norm/adam, adam/learning_rate..
        for key, value in want_m.items():  # ...the engine's values, 0 only where the engine's are (no gradient)
            np.testing.assert_allclose(got_m[key], value, rtol=1e-4, err_msg=key)
    assert list(opt_b.params) == list(opt_a.params)  # the optimizer params as sent, schedule included


@pytest.mark.parametrize(("kind", "members"), [("adam", ADAM), ("muon", MUON)], ids=["adam", "muon"])
def test_every_member_equals_its_trial_run_alone(kind, members, sampled_tokens, tmp_path):
    results = run_batched(
        "tiny", kind, members, steps=STEPS, device="cpu", keep_weights=True, runs_dir=tmp_path, **ns_float32(kind)
    )
    clipped = 0
    for m, (member, got) in enumerate(zip(members, results, strict=True)):
        ref = alone(kind, member)
        assert (got.status, got.reason, got.steps_done) == (ref.status, ref.reason, STEPS) == ("COMPLETED", None, 10)
        assert [sampled_tokens[(m, i)] for i in range(STEPS)] == ref.tokens  # identical tokens, every step
        assert got.rewards == ref.rewards
        a, b = ref.history.steps, got.history.steps
        assert list(b.step) == list(a.step) == list(range(1, STEPS + 1))
        np.testing.assert_allclose(b.loss, a.loss, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(b.grad_norm, a.grad_norm, rtol=1e-4)
        for col in ("learning_rate", "grad_clip_norm", "grad_norm_muon", "grad_norm_adam"):
            np.testing.assert_allclose(b[col], a[col], rtol=1e-4, err_msg=col)
        assert list(b.reward) == ref.rewards  # logged per step, as rl_step logs it
        logged = [c for c in RL_METRICS if c != "kl"]  # no reference log-probs: no KL
        assert set(logged) <= set(a.columns) and set(b.columns) == set(a.columns)
        for col in logged:  # the same function on the same completions; entropy and clips from the same loss
            np.testing.assert_allclose(b[col], a[col], rtol=1e-5, atol=1e-6, err_msg=col)
        pd.testing.assert_frame_equal(got.history.completions, ref.history.completions)
        assert len(got.history.completions) == STEPS * 6 * 8
        coefs_a = [x["clip_coef"] for x in ref.history.df.query("kind == 'optim-step'").metrics]
        coefs_b = [x["clip_coef"] for x in got.history.df.query("kind == 'optim-step'").metrics]
        np.testing.assert_allclose(coefs_b, coefs_a, rtol=1e-4)
        clipped += sum(c < 1 for c in coefs_b)
        assert_same_records(got.history, ref.history)
        assert_weights_close(got.weights, ref.weights)
        want = ref.history.config
        for key in (
            "backend",
            "model",
            "model_kind",
            "optimizer",
            "muon_scaling",
            "ns_dtype",
            "param_split",
            "seed",
            "device",
            "dtype",
            "lora",
            "resume_from",
            "tokenizer",
            "trust_remote_code",
            "eos_token_id",
            "num_generator_replicas",
        ):
            assert got.history.config[key] == want[key], key
    assert clipped > 5  # clipping was active


def test_a_member_whose_gradient_turns_non_finite_stops_alone(sampled_tokens, monkeypatch):
    """Member 1's gradient turns NaN at step 3, in the ensemble and in its trial alone (poisoned the same way)."""
    real = Ensemble._forward_backward

    def poisoned(self: Ensemble, *args: Any) -> Any:
        out = real(self, *args)
        if 1 in self.live and len(self.rewards[1]) == 3:
            self.model.grad[self.live.index(1), 0] = math.nan  # the first column: wte.weight[0, 0]
        return out

    monkeypatch.setattr(Ensemble, "_forward_backward", poisoned)
    results = run_batched(
        "tiny", "muon", MUON + [MUON[0]], steps=5, device="cpu", ns_dtype="float32", keep_weights=True, **QUICK
    )
    refs = [alone("muon", m, steps=5, **QUICK) for m in (MUON[0], MUON[1])]
    s = rlnb.connect(
        "local", optimizer="muon", model="tiny", seed=MUON[1].seed, device="cpu", ns_dtype="float32", record=False
    )
    step, calls = s.backend.optim.step, []

    def poison_then_step(hp: Any, *, checked: bool = False) -> Any:
        calls.append(1)
        if len(calls) == 4:
            s.backend.trainer.wte.weight.grad[0, 0] = math.nan
        return step(hp, checked=checked)

    s.backend.optim.step = poison_then_step  # type: ignore[method-assign]
    with pytest.raises(rlnb.OperationFailed) as failure:
        for i in range(5):
            rl_step(s, digits_task(), MUON[1].params(i), seed=MUON[1].seed * SEED_STRIDE + i, **QUICK)
    s.wait()
    bad = results[1]
    assert bad.status == "FAILED" and bad.steps_done == 3
    assert bad.reason == failure_reason(failure.value.code, failure.value.message)
    assert bad.reason == (
        "TRAINING_OPERATION_ERROR_CODE_NON_FINITE_LOSS: gradient norm is nan; non-finite gradients "
        "in: wte.weight; parameters and optimizer state unchanged, the accumulated gradients dropped "
        "(run a forward-backward to train on)"
    )
    assert_same_records(bad.history, s.history)  # optim-step FAILED, weights-sync publishes the unchanged step
    pd.testing.assert_frame_equal(bad.history.completions, s.history.completions)
    assert sorted(set(s.history.completions.step)) == [1, 2, 3, 4]  # the failed step's completions are kept
    assert list(s.history.steps.reward.dropna().index) == [0, 1, 2]  # its metrics are not logged
    assert_weights_close(bad.weights, {n: p.detach() for n, p in s.backend.trainer.named_parameters()})
    s.close()
    for m, ref in ((0, refs[0]), (2, refs[0])):  # the others go on, as if alone
        assert results[m].status == "COMPLETED" and results[m].rewards == ref.rewards
        assert [sampled_tokens[(m, i)] for i in range(5)] == ref.tokens
        assert_weights_close(results[m].weights, ref.weights)


def test_a_member_whose_gradient_norm_overflows_float32_is_clipped_as_alone(monkeypatch):
    """Member 1's gradients all turn 1e20 (finite) at step 3: its trial failed NON_FINITE_LOSS (the float32 norm was
    inf) where its session alone takes the norm again in float64 and clips; both now train on alike."""
    real = Ensemble._forward_backward

    def huge(self: Ensemble, *args: Any) -> Any:
        out = real(self, *args)
        if 1 in self.live and len(self.rewards[1]) == 3:
            self.model.grad[self.live.index(1)] = 1e20
        return out

    monkeypatch.setattr(Ensemble, "_forward_backward", huge)
    results = run_batched("tiny", "muon", MUON, steps=5, device="cpu", ns_dtype="float32", keep_weights=True, **QUICK)
    s = rlnb.connect(
        "local", optimizer="muon", model="tiny", seed=MUON[1].seed, device="cpu", ns_dtype="float32", record=False
    )
    step, calls = s.backend.optim.step, []

    def huge_then_step(hp: Any, *, checked: bool = False) -> Any:
        calls.append(1)
        if len(calls) == 4:
            for p in s.backend.trainer.parameters():
                p.grad.fill_(1e20)
        return step(hp, checked=checked)

    s.backend.optim.step = huge_then_step  # type: ignore[method-assign]
    for i in range(5):
        rl_step(s, digits_task(), MUON[1].params(i), seed=MUON[1].seed * SEED_STRIDE + i, **QUICK)
    s.wait()
    assert results[1].status == "COMPLETED" and results[1].steps_done == 5
    assert_same_records(results[1].history, s.history)
    assert 1.8e19 < results[1].history.steps.grad_norm.iloc[3] < math.inf
    assert_weights_close(results[1].weights, {n: p.detach() for n, p in s.backend.trainer.named_parameters()})
    s.close()


def test_a_member_whose_gradient_norm_overflows_float32_with_no_clip_fails_as_alone(monkeypatch):
    """grad_clip_norm 0: nothing clips the finite 1e20 gradients, whose norm overflows float32 at step 2, so the step
    fails NON_FINITE_LOSS saying so ("grad_clip_norm is 0: nothing clips them"), as a session's does."""
    member = Member(rlnb.AdamParams(learning_rate=1e-3, grad_clip_norm=0.0), seed=1)
    fb, step, calls = Ensemble._forward_backward, TrainerOptimizer.step, []

    def huge(self: Ensemble, *args: Any) -> Any:
        out = fb(self, *args)
        if len(self.rewards[0]) == 1:
            self.model.grad[0] = 1e20
        return out

    def huge_then_step(self: TrainerOptimizer, hp: Any, *, checked: bool = False) -> Any:
        calls.append(1)
        if len(calls) == 2:
            for _, p in self._named:
                p.grad.fill_(1e20)
        return step(self, hp, checked=checked)

    monkeypatch.setattr(Ensemble, "_forward_backward", huge)
    monkeypatch.setattr(TrainerOptimizer, "step", huge_then_step)
    got = run_batched("tiny", "adam", [member], steps=3, device="cpu", **QUICK)[0]
    ref = alone("adam", member, steps=3, **QUICK)
    assert (got.status, got.reason) == (ref.status, ref.reason) and ref.reason.startswith(f"{CODE}NON_FINITE_LOSS: ")
    assert "grad_clip_norm is 0: nothing clips them" in ref.reason
    assert_same_records(got.history, ref.history)


def test_a_member_whose_samples_go_non_finite_stops_alone():
    members = [ADAM[0], Member(rlnb.AdamParams(learning_rate=1e30, weight_decay=0.0), seed=1)]  # blows up at once
    results = run_batched("tiny", "adam", members, steps=5, device="cpu", **QUICK)
    ref = alone("adam", members[1], steps=5, **QUICK)  # its sample fails NON_FINITE_LOSS (JSON has no NaN)
    bad = results[1]
    assert bad.status == ref.status == "FAILED" and bad.steps_done == len(ref.rewards) == 1
    assert bad.reason == ref.reason == f"TRAINING_OPERATION_ERROR_CODE_NON_FINITE_LOSS: {DIVERGED}"
    assert list(bad.history.df.kind) == list(ref.history.df.kind)  # ... the last is the sample, failed in both
    last = [h.df.iloc[-1] for h in (bad.history, ref.history)]
    failed = ("sample", "TRAINING_OPERATION_STATUS_FAILED", DIVERGED)
    assert [(r.kind, r.status, r.error_message) for r in last] == [failed] * 2
    assert results[0].status == "COMPLETED" and results[0].rewards == alone("adam", members[0], 5, **QUICK).rewards


def recorded(history: History) -> tuple[pd.DataFrame, pd.DataFrame, list[int]]:
    """What a run records, less its times and ids: its records, its steps table and its completions' steps."""
    records = history.df[["kind", "status", "error_code", "error_message", "step", "weights_version", "params"]]
    steps = history.steps[["step", "loss", "grad_norm", "learning_rate", "weights_version", "reward"]]
    return records.astype(object).fillna(-1), steps, list(history.completions.step)


@pytest.mark.parametrize("failure", ["INVALID_INPUT", "NON_FINITE_LOSS"])
def test_a_members_failed_optim_step_is_recorded_as_its_session_alone_records_it(failure, monkeypatch):
    """Step 3's params: ones the weights cannot take (eps 0 in float32: refused before the step is sampled, as
    ``rl_step`` refuses them alone, ``ValueError``, nothing of that step recorded), or a NaN gradient (the optim-step
    FAILED NON_FINITE_LOSS, the gradients dropped, the step's completions kept): solo and batched tables equal."""
    eps = 1e-50 if failure == "INVALID_INPUT" else 1e-8
    member = Member(lambda i: rlnb.AdamParams(learning_rate=3e-3, eps=eps if i == 2 else 1e-8), seed=1)
    if failure == "NON_FINITE_LOSS":  # the first weight's gradient turns NaN at step 3, in both paths
        fb, step, calls = Ensemble._forward_backward, TrainerOptimizer.step, []

        def poisoned(self: Ensemble, *args: Any) -> Any:
            out = fb(self, *args)
            if len(self.rewards[0]) == 2:
                self.model.grad[0, 0] = math.nan
            return out

        def poison_then_step(self: TrainerOptimizer, hp: Any, *, checked: bool = False) -> Any:
            calls.append(1)
            if len(calls) == 3:
                self._named[0][1].grad[0, 0] = math.nan
            return step(self, hp, checked=checked)

        monkeypatch.setattr(Ensemble, "_forward_backward", poisoned)
        monkeypatch.setattr(TrainerOptimizer, "step", poison_then_step)
    got = run_batched("tiny", "adam", [member], steps=5, device="cpu", **QUICK)[0]
    ref = alone("adam", member, steps=5, **QUICK)
    refused = failure == "INVALID_INPUT"
    assert (got.status, got.reason) == (ref.status, ref.reason)
    assert ref.reason.startswith("ValueError: adam_params.eps 1e-50" if refused else f"{CODE}{failure}: "), ref.reason
    records, steps, completions = recorded(got.history)
    want_records, want_steps, want_completions = recorded(ref.history)
    pd.testing.assert_frame_equal(records, want_records)
    pd.testing.assert_frame_equal(steps, want_steps, rtol=1e-4, atol=1e-6)
    assert completions == want_completions and completions[-1] == (2 if refused else 3)  # a failed step's: kept
    assert list(steps.step) == [1, 2]


def test_a_reward_that_raises_ends_its_member_and_keeps_the_steps_completions_unscored():
    digits, calls = digits_task(), []

    def reward(prompt: str, completion: str) -> float:  # fails from the second member's first step on
        calls.append(completion)
        if len(calls) > len(digits.prompts) * 4:
            raise KeyError(completion)
        return digits.reward(prompt, completion)

    task = Task("flaky", digits.prompts, reward, max_tokens=digits.max_tokens, group_size=4)
    results = run_batched("tiny", "adam", ADAM[:2], steps=3, device="cpu", task=task)
    assert [r.status for r in results] == ["FAILED", "FAILED"] and [r.steps_done for r in results] == [1, 0]
    assert all(r.reason is not None and r.reason.startswith("KeyError: ") for r in results)
    first, second = (r.history.completions for r in results)
    rows = len(digits.prompts) * 4
    assert list(first.step) == [1] * rows + [2] * rows and list(second.step) == [1] * rows
    assert first.reward[:rows].notna().all() and first.reward[rows:].isna().all()  # step 1 scored, step 2 not
    assert second.reward.isna().all() and second.advantage.isna().all()
    assert second.completion.iloc[0] == calls[rows]  # the completion its reward raised on
    assert list(results[1].history.df.kind) == ["sample"]


@pytest.mark.parametrize("kind", ["adam", "muon"])
def test_a_failing_forward_backward_is_recorded_as_a_session_records_it(kind, monkeypatch):
    """Adam and Muon: the optim-step and weights-sync behind it fail unrun with its code and say so, as the engine's
    worker fails the rest of an ``rl_step`` (``rlnb._one_step``); no step is counted."""
    from rlnb.engine import losses

    def refuse(*args, **kwargs):  # the engine's loss check refusing the step's samples, in both paths
        raise losses.InvalidLossInput("sample 0: refused by this test")

    monkeypatch.setattr(losses, "validate", refuse)
    members = [Member(rlnb.AdamParams(), seed=0), Member(rlnb.AdamParams(learning_rate=1e-3), seed=3)]
    if kind == "muon":
        members = [Member(rlnb.MuonParams(adam={"learning_rate": 2e-3}), seed=0),
                   Member(rlnb.MuonParams(learning_rate=0.01, grad_clip_norm=0.5), seed=3)]  # fmt: skip
    results = run_batched("tiny", kind, members, steps=3, device="cpu", keep_weights=True, **QUICK, **ns_float32(kind))
    for member, got in zip(members, results, strict=True):
        ref = alone(kind, member, steps=3, **QUICK)
        assert got.status == ref.status == "FAILED" and got.reason == ref.reason
        assert got.reason == "TRAINING_OPERATION_ERROR_CODE_INVALID_INPUT: sample 0: refused by this test"
        assert_same_records(got.history, ref.history)  # their messages too: "not run: this step's forward-..."
        pd.testing.assert_frame_equal(got.history.completions, ref.history.completions)
        assert set(got.history.completions.step) == {1} and "reward" not in got.history.steps
        fresh = dict(build_model("tiny", member.seed).named_parameters())
        assert all(torch.equal(got.weights[n], p) for n, p in fresh.items())
    with pytest.raises(ValueError, match="clip_low_threshold"):  # out of the API's bounds: refused up front
        run_batched("tiny", "adam", members, steps=1, device="cpu", loss_params={"clip_low_threshold": 2.0})
    with pytest.raises(ValueError, match="loss_params beta = 0.1 needs each sample's reference_logprobs"):
        run_batched("tiny", "adam", members, steps=1, device="cpu", loss_params={"beta": 0.1})  # as rl_step


def test_params_the_weights_refuse_end_a_member_before_its_failing_forward_backward_as_alone(monkeypatch):
    """Params the weights refuse and a forward-backward that would fail, at one step: both paths refuse the params
    before the step is sampled (``Session.check_params``, ``step_params``), so the forward-backward never runs."""
    from rlnb.engine import losses

    def refuse(*args, **kwargs):
        raise losses.InvalidLossInput("sample 0: refused by this test")

    monkeypatch.setattr(losses, "validate", refuse)
    member = Member(rlnb.AdamParams(learning_rate=3e-3, eps=1e-50), seed=1)  # eps 0 in float32: refused
    got = run_batched("tiny", "adam", [member], steps=2, device="cpu", **QUICK)[0]
    ref = alone("adam", member, steps=2, **QUICK)
    assert (got.status, got.reason) == (ref.status, ref.reason)
    assert ref.reason.startswith("ValueError: adam_params.eps 1e-50 is 0 in float32"), ref.reason
    assert_same_records(got.history, ref.history)
    assert got.history.df.empty and got.steps_done == 0


def test_params_that_fail_at_a_step_end_that_member_only():
    def breaks(i: int) -> rlnb.AdamParams:
        return rlnb.AdamParams(learning_rate=1e-3 if i < 2 else -1.0)  # raises InvalidParams at step 2

    results = run_batched("tiny", "adam", [Member(breaks), ADAM[0]], steps=4, device="cpu", **QUICK)
    assert results[0].status == "FAILED" and results[0].steps_done == 2
    assert results[0].reason.startswith("InvalidParams: AdamParams.learning_rate = -1.0 is invalid")
    assert results[1].status == "COMPLETED" and results[1].steps_done == 4


def test_a_schedule_of_the_other_optimizer_is_refused_before_anything_runs(tmp_path):
    """A function of the step returning MuonParams to an Adam ensemble (a schedule written for the other optimizer):
    its member was FAILED "TypeError: this session's optimizer is adam: pass AdamParams, not MuonParams" at step 0,
    after the model was built and its run folder made, naming no member nor its params function."""
    with pytest.raises(ValueError, match=r"members\[1\].params\(0\) returned MuonParams: optimizer='adam' takes "
                       r"AdamParams at every step \(a schedule for the other optimizer\?\)"):  # fmt: skip
        run_batched("tiny", "adam", [ADAM[0], Member(lambda i: rlnb.MuonParams(), run_id="m")], steps=1,
                    device="cpu", runs_dir=tmp_path, **QUICK)  # fmt: skip
    assert not list(tmp_path.iterdir())

    def switches(i: int):  # the other kind from step 1 on: that member fails there, named
        return rlnb.AdamParams() if i < 1 else rlnb.MuonParams()

    wrong = run_batched("tiny", "adam", [Member(switches)], steps=2, device="cpu", **QUICK)[0]
    assert wrong.status == "FAILED" and wrong.steps_done == 1
    assert wrong.reason == "TypeError: params(1) returned MuonParams: optimizer='adam' takes AdamParams, not MuonParams"


def test_a_params_function_that_raises_any_error_ends_that_member_only():
    """Only ValueError / TypeError were the member's: a RuntimeError (a bug in the user's schedule) failed
    every member of the ensemble with it."""

    def bug(i: int) -> rlnb.AdamParams:
        if i == 1:
            raise RuntimeError("my schedule broke")
        return rlnb.AdamParams(learning_rate=1e-3)

    results = run_batched("tiny", "adam", [Member(bug), ADAM[0]], steps=3, device="cpu", **QUICK)
    assert results[0].status == "FAILED" and results[0].reason == "RuntimeError: my schedule broke"
    assert results[0].steps_done == 1
    assert results[1].status == "COMPLETED" and results[1].steps_done == 3 and results[1].reason is None


@pytest.mark.parametrize("at", [0, 1])
@pytest.mark.parametrize("exc", [KeyboardInterrupt(), SystemExit(3), UnprintableError()])
def test_a_params_function_raising_anything_off_the_main_thread_ends_that_member_only(at, exc):
    """As a reward's (a sweep runs its ensembles on a thread, where no Ctrl-C reaches): a ``KeyboardInterrupt`` at
    step 1 stopped every member and set ``stop``, at step 0 it (and ``SystemExit``) escaped ``run_batched`` from
    its up-front call of ``params(0)``, failing every member of the group; an exception whose ``str()`` raises
    failed every member with that ``RuntimeError``."""

    def params(i: int) -> rlnb.AdamParams:
        if i == at:
            raise exc
        return rlnb.AdamParams(learning_rate=1e-3)

    stop, got = threading.Event(), {}

    def run() -> None:
        try:
            got["results"] = run_batched("tiny", "adam", [Member(params), ADAM[0]], steps=2, stop=stop, device="cpu",
                                         **QUICK)  # fmt: skip
        except BaseException as error:  # noqa: BLE001 - said by the assertion below
            got["error"] = error

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=600)
    assert not thread.is_alive() and "error" not in got, got.get("error")
    failed, other = got["results"]
    assert (failed.status, failed.reason, failed.steps_done) == ("FAILED", describe(exc), at)
    assert (other.status, other.steps_done) == ("COMPLETED", 2) and not stop.is_set()


def test_member_runs_read_as_any_run(tmp_path):
    members = [
        Member(rlnb.AdamParams(learning_rate=lr), seed=s, run_id=f"trial-{i}", annotations={"label": f"lr={lr}"})
        for i, (lr, s) in enumerate([(1e-3, 0), (3e-3, 1)])
    ]
    results = run_batched("tiny", "adam", members, steps=3, device="cpu", runs_dir=tmp_path, **QUICK)
    loaded = [History.load(tmp_path / f"trial-{i}") for i in range(2)]
    for i, (got, back) in enumerate(zip(results, loaded, strict=True)):
        assert got.history.path == tmp_path / f"trial-{i}"
        assert back.df[["kind", "status", "step"]].equals(got.history.df[["kind", "status", "step"]])
        assert list(back.steps.reward) == got.rewards
        assert back.config["batched"]["members"] == 2 and back.config["label"].startswith("lr=")
    table = rlnb.compare(loaded)
    assert list(table.run) == ["lr=0.001"] * 3 + ["lr=0.003"] * 3 and list(table.seed) == [0] * 3 + [1] * 3
    assert set(rlnb.runs(tmp_path).run_id) == {"trial-0", "trial-1"}
    ax = plots.compare(table, y="reward")
    assert len(ax.get_lines()) >= 2


def test_stop_ends_every_member_before_its_next_step():
    stop = threading.Event()
    done: list[int] = []

    def on_step(m: int, report: Any) -> None:
        if report.step == 2:
            stop.set()

    results = run_batched(
        "tiny",
        "adam",
        ADAM[:2],
        steps=5,
        device="cpu",
        stop=stop,
        on_step=on_step,
        on_done=lambda m, r: done.append(m),
        **QUICK,
    )
    assert [r.status for r in results] == ["STOPPED"] * 2 and sorted(done) == [0, 1]
    assert {r.reason for r in results} == {"stopped after 2 of 5 steps"}
    for r in results:
        assert set(r.history.df.status) == {"TRAINING_OPERATION_STATUS_COMPLETED"}  # nothing left pending


def test_a_pruned_member_stops_and_the_others_go_on():
    def on_step(m: int, report: Any) -> str | None:
        return "pruned: reward below the median" if m == 1 and report.step == 2 else None

    results = run_batched("tiny", "adam", ADAM[:3], steps=4, device="cpu", on_step=on_step, **QUICK)
    assert [r.status for r in results] == ["COMPLETED", "PRUNED", "COMPLETED"]
    assert results[1].reason == "pruned: reward below the median" and results[1].steps_done == 2
    assert [r.steps_done for r in results] == [4, 2, 4] and len(results[0].losses) == 4
    assert results[0].rewards == alone("adam", ADAM[0], steps=4, **QUICK).rewards  # unaffected by the prune
    late = lambda m, r: "late" if r.step == 2 else None  # noqa: E731
    last = run_batched("tiny", "adam", ADAM[:1], steps=2, device="cpu", on_step=late, **QUICK)
    assert last[0].status == "COMPLETED"  # an answer after the last step prunes nothing


def test_a_callback_error_is_the_callers_and_the_runs_stay_readable(tmp_path):
    def on_step(m: int, report: Any) -> None:
        raise KeyError("my bug")

    with pytest.raises(KeyError, match="my bug"):
        run_batched(
            "tiny",
            "adam",
            [Member(rlnb.AdamParams(), run_id="r")],
            steps=3,
            device="cpu",
            on_step=on_step,
            runs_dir=tmp_path,
            **QUICK,
        )
    back = History.load(tmp_path / "r")
    assert set(back.df.status) <= {"TRAINING_OPERATION_STATUS_COMPLETED", "TRAINING_OPERATION_STATUS_FAILED"}


def test_which_trials_can_be_batched_and_bad_input():
    assert why_not_batched("local", {"model": "small", "device": "cpu", "ns_dtype": "float32"}) is None
    assert "not in this process" in why_not_batched("http://127.0.0.1:8000", {})
    assert "not a built-in model" in why_not_batched("local", {"model": "Qwen/Qwen3-0.6B"})
    assert "lora" in why_not_batched("local", {"lora": True})
    one = [Member(rlnb.AdamParams())]
    for kwargs, match in [
        ({"model": "gpt2"}, "built-in model"),
        ({"optimizer": "sgd"}, "optimizer"),
        ({"members": []}, "members is empty"),
        ({"members": [Member(rlnb.AdamParams(), run_id="a"), Member(rlnb.AdamParams(), run_id="a")]}, "run_id"),
        ({"members": [Member(rlnb.MuonParams())]}, r"members\[0\].params must be AdamParams"),
        ({"steps": -1}, "steps"),
        ({"group_size": 0}, "group_size"),
        ({"loss": "nope"}, "loss"),
        ({"loss": "dro"}, "beta"),  # refused before anything runs, as Session.forward_backward refuses it
        ({"ns_dtype": "float8"}, "ns_dtype"),
        ({"muon_scaling": "big"}, "muon_scaling"),
        ({"temperature": math.nan}, "temperature"),
        ({"group_size": 2.5}, r"group_size must be None or an integer in \[2, \d+\] \(.*\), got 2.5"),
        ({"threads": 0}, "threads must be None"),
    ]:
        args = {"model": "tiny", "optimizer": "adam", "members": one, "steps": 1, "device": "cpu", **kwargs}
        with pytest.raises(ValueError, match=match):
            run_batched(args.pop("model"), args.pop("optimizer"), args.pop("members"), **args)
    for members, match in [  # a generator was read by the run-id check: IndexError: list index out of range
        ((Member(rlnb.AdamParams(), seed=s) for s in range(2)), None),
        (one[0], "members must be a list of Member objects, got Member"),
        ({"a": one[0]}, "members must be a list of Member objects, got dict"),  # was "members[0] ... got str"
        ([rlnb.AdamParams()], r"members\[0\] must be a Member\(params, seed\), got AdamParams"),
        ([Member(rlnb.AdamParams(), annotations=None)], r"members\[0\].annotations must be a dict"),  # type: ignore[arg-type]
    ]:
        if match is None:
            assert [r.status for r in run_batched("tiny", "adam", members, steps=0, device="cpu")] == ["COMPLETED"] * 2
        else:
            with pytest.raises(TypeError, match=match):
                run_batched("tiny", "adam", members, steps=1, device="cpu")
    with pytest.raises(TypeError, match=r"run_batched\(\) .* got unexpected keyword argument\(s\): temprature"):
        run_batched("tiny", "adam", one, steps=1, temprature=0.5)  # a misspelt option is not ignored
    with pytest.raises(
        TypeError,
        match=r"options: group_size, temperature, loss, loss_params, device, ns_dtype, "
        r"muon_scaling, threads; LoRA, resume_from .* run alone\) got unexpected .*: lora",
    ):
        run_batched("tiny", "adam", one, steps=1, lora=True)  # named no option it takes


# -- the stacked pieces against their one-session twins ------------------------------------------------


@pytest.mark.parametrize("kind", ["adam", "muon"])
def test_stacked_optimizer_equals_one_trainer_optimizer_per_member(kind):
    K = 4
    adapters = [build_adapter("tiny", seed=s, device=CPU) for s in range(K)]
    adam, groups = plan(adapters[0].module, kind, adapters[0].embedding_params())
    model = StackedModel([a.module for a in adapters], adam + [n for g in groups for n in g])
    stacked = StackedOptimizer(model, kind, adam, groups, ns_dtype=torch.float32)
    ones = [
        TrainerOptimizer(
            a.module,
            kind,
            split_params(a.module, a.embedding_params()) if kind == "muon" else None,
            ns_dtype=torch.float32,
        )
        for a in adapters
    ]
    clip = [0, 0.5, 1.0, 100.0]
    if kind == "adam":
        hps = [
            rlnb.AdamParams(
                learning_rate=10.0 ** -(k + 1),
                beta1=0.8 + 0.03 * k,
                beta2=0.9 + 0.02 * k,
                eps=10.0 ** -(6 + k),
                weight_decay=0.1 * k,
                grad_clip_norm=clip[k],
            ).resolved()
            for k in range(K)
        ]
    else:
        hps = [
            rlnb.MuonParams(
                learning_rate=0.01 * (k + 1),
                momentum=0.8 + 0.05 * k,
                weight_decay=0.05 * k,
                newton_schulz_steps=[5, 5, 3, 5][k],
                grad_clip_norm=clip[k],
                adam={"learning_rate": 1e-3 * (k + 1), "beta1": 0.85},
            ).resolved()
            for k in range(K)
        ]
    g = torch.Generator().manual_seed(0)
    for _ in range(4):
        grads = {n: torch.randn(K, *p.shape, generator=g) for n, p in adapters[0].module.named_parameters()}
        for k, a in enumerate(adapters):
            for n, p in a.module.named_parameters():
                p.grad = grads[n][k].clone()
        for n, (lo, hi, _) in model.columns.items():
            model.grad[:, lo:hi] = grads[n].reshape(K, -1)
        want = [o.step(hp) for o, hp in zip(ones, hps, strict=True)]
        got = stacked.step(hps, stacked.norms())
        for w, s in zip(want, got, strict=True):
            assert s.grad_norm == pytest.approx(w.grad_norm, rel=1e-6)
            assert s.clip_coef == pytest.approx(w.clip_coef, rel=1e-6) and s.clipped == w.clipped
            if kind == "muon":
                assert s.grad_norm_muon == pytest.approx(w.grad_norm_muon, rel=1e-6)
                assert s.grad_norm_adam == pytest.approx(w.grad_norm_adam, rel=1e-6)
    for k, a in enumerate(adapters):
        state = model.state(k)
        for n, p in a.module.named_parameters():
            torch.testing.assert_close(state[n], p.detach(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["adam", "muon"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_stacked_gradient_norm_past_65504_is_the_true_norm_and_the_single_runs(kind, dtype):
    """Every gradient ~300 and finite, a member's norm ~115900: float16's per-member norm was taken in float16, so it
    was inf (a false non-finite, every gradient dropped) where a session's is taken in float32 (``norm_dtype``)."""
    K = 2
    adapters = [build_adapter("tiny", seed=s, device=CPU) for s in range(K)]
    for a in adapters:
        a.module.to(dtype)
    adam, groups = plan(adapters[0].module, kind, adapters[0].embedding_params())
    model = StackedModel([a.module for a in adapters], adam + [n for g in groups for n in g])
    stacked = StackedOptimizer(model, kind, adam, groups, ns_dtype=torch.float32)
    split = lambda a: split_params(a.module, a.embedding_params()) if kind == "muon" else None  # noqa: E731
    ones = [TrainerOptimizer(a.module, kind, split(a), ns_dtype=torch.float32) for a in adapters]
    g = torch.Generator().manual_seed(0)
    named = adapters[0].module.named_parameters()
    grads = {n: (torch.randn(K, *p.shape, generator=g) * 300).to(dtype) for n, p in named}
    for k, a in enumerate(adapters):
        for n, p in a.module.named_parameters():
            p.grad = grads[n][k].clone()
    for n, (lo, hi, _) in model.columns.items():
        model.grad[:, lo:hi] = grads[n].reshape(K, -1)
    exact = [torch.cat([grads[n][k].double().reshape(-1) for n in grads]).norm().item() for k in range(K)]
    norms = stacked.norms()
    rel = 1e-6 if dtype == torch.float16 else 2**-8  # bfloat16's norm is its own, as get_total_norm takes it
    assert norms.total.tolist() == pytest.approx(exact, rel=rel) and min(exact) > 65504
    hp = (rlnb.AdamParams(eps=1e-4) if kind == "adam" else rlnb.MuonParams(adam={"eps": 1e-4})).resolved()
    want = [o.step(hp) for o in ones]
    for w, s in zip(want, stacked.step([hp] * K, norms), strict=True):
        assert s.grad_norm == pytest.approx(w.grad_norm, rel=1e-6) and s.clipped and w.clipped
        assert s.clip_coef == pytest.approx(w.clip_coef, rel=1e-6)
    for k, a in enumerate(adapters):  # clipped alike, and every weight finite
        state = model.state(k)
        for n, p in a.module.named_parameters():
            lo, hi, _ = model.columns[n]
            torch.testing.assert_close(model.grad[k, lo:hi], p.grad.reshape(-1), rtol=2**-10, atol=0)
            assert state[n].isfinite().all()


@pytest.mark.parametrize("kind", ["adam", "muon"])
def test_a_stacked_gradient_norm_past_float32s_range_is_taken_again_wide_as_a_session_takes_it(kind):
    """Member 0's gradients all 1e20 (finite): its float32 norm overflowed to inf and the trial failed NON_FINITE_LOSS
    where a session takes the norm again in float64 and clips (``wide_norm``); with no clip both still fail."""
    K = 2
    adapters = [build_adapter("tiny", seed=s, device=CPU) for s in range(K)]
    adam, groups = plan(adapters[0].module, kind, adapters[0].embedding_params())
    model = StackedModel([a.module for a in adapters], adam + [n for g in groups for n in g])
    stacked = StackedOptimizer(model, kind, adam, groups, ns_dtype=torch.float32)
    split = lambda a: split_params(a.module, a.embedding_params()) if kind == "muon" else None  # noqa: E731
    ones = [TrainerOptimizer(a.module, kind, split(a), ns_dtype=torch.float32) for a in adapters]
    g = torch.Generator().manual_seed(0)
    for n, (lo, hi, shape) in model.columns.items():
        model.grad[0, lo:hi] = 1e20
        model.grad[1, lo:hi] = torch.randn(hi - lo, generator=g)
        for k, a in enumerate(adapters):
            a.module.get_parameter(n).grad = model.grad[k, lo:hi].view(shape).clone()
    hp = (rlnb.AdamParams() if kind == "adam" else rlnb.MuonParams()).resolved()
    norms = stacked.norms()
    assert math.isinf(norms.total[0]) and math.isfinite(norms.total[1])
    assert stacked.non_finite(0, norms, 0.0) == ([], math.inf)  # no clip: it fails, as a session's step
    with pytest.raises(NonFiniteGradient, match="grad_clip_norm is 0: nothing clips them"):
        ones[0].step(dataclasses.replace(hp, grad_clip_norm=0.0))
    bad, norm = stacked.non_finite(0, norms, hp.grad_clip_norm)
    want = [o.step(hp) for o in ones]
    assert bad == [] and norm == want[0].grad_norm and 1.8e19 < norm < math.inf
    for k, (s, w) in enumerate(zip(stacked.step([hp] * K, norms), want, strict=True)):
        assert (s.grad_norm, s.grad_norm_muon, s.grad_norm_adam) == (w.grad_norm, w.grad_norm_muon, w.grad_norm_adam)
        assert s.clip_coef == w.clip_coef and s.clipped and w.clipped
        state = model.state(k)
        for n, p in adapters[k].module.named_parameters():
            torch.testing.assert_close(state[n], p.detach(), rtol=1e-5, atol=1e-6)


def test_a_stacked_clip_coefficient_is_the_one_applied_and_the_single_runs():
    """A member's clip factor is the one its gradients were multiplied by, a session's (``clip_coefficient``):
    grad_clip_norm 1e-300 clips them to 0 (it was reported as 1e-300 / g); 1e-38 over a norm of ~4e5 is a float32
    denormal; 1e5 on float16 weights was inf in their dtype, so it clipped nothing where a session clips."""
    clips = [1e-300, 1e-38, 0.5, 1e5]
    K = len(clips)
    adapters = [build_adapter("tiny", seed=s, device=CPU) for s in range(K)]
    for a in adapters:
        a.module.half()
    adam, _ = plan(adapters[0].module, "adam", adapters[0].embedding_params())
    model = StackedModel([a.module for a in adapters], adam)
    stacked = StackedOptimizer(model, "adam", adam)
    ones = [TrainerOptimizer(a.module, "adam") for a in adapters]
    g = torch.Generator().manual_seed(0)
    for n, (lo, hi, shape) in model.columns.items():
        model.grad[:, lo:hi] = (torch.randn(K, hi - lo, generator=g) * 1000).half()
        for k, a in enumerate(adapters):
            a.module.get_parameter(n).grad = model.grad[k, lo:hi].view(shape).clone()
    before = model.grad.clone()
    hps = [rlnb.AdamParams(eps=1e-4, grad_clip_norm=c).resolved() for c in clips]
    got = stacked.step(hps, stacked.norms())
    want = [o.step(hp) for o, hp in zip(ones, hps, strict=True)]
    for k, (s, w) in enumerate(zip(got, want, strict=True)):
        assert s.clipped and w.clipped and s.clip_coef == pytest.approx(w.clip_coef, rel=1e-6, abs=0)
        assert torch.equal(model.grad[k], before[k] * s.clip_coef)
    assert got[0].clip_coef == 0.0 and not model.grad[0].any() and 0 < got[1].clip_coef < 1e-43


def test_dropping_members_keeps_the_others_state():
    adapters = [build_adapter("tiny", seed=s, device=CPU) for s in range(3)]
    adam, groups = plan(adapters[0].module, "muon", adapters[0].embedding_params())
    model = StackedModel([a.module for a in adapters], adam + [n for g in groups for n in g])
    optim = StackedOptimizer(model, "muon", adam, groups, ns_dtype=torch.float32)
    model.grad.normal_()
    optim.step([rlnb.MuonParams().resolved()] * 3, optim.norms())
    model.grad.normal_()  # a step's gradients, and member 1 leaves before the update
    before = [model.state(k) for k in range(3)], optim.exp_avg.clone(), [b.clone() for b in optim.momentum]
    grads = model.grad.clone()
    model.keep([0, 2])
    optim.keep([0, 2])
    assert torch.equal(model.grad, grads[[0, 2]])
    assert model.members == 2 and all(
        torch.equal(model.state(i)["wte.weight"], before[0][k]["wte.weight"]) for i, k in enumerate([0, 2])
    )
    assert torch.equal(optim.exp_avg, before[1][[0, 2]])
    for buf, old, (*_, n, r, c) in zip(optim.momentum, before[2], optim.groups, strict=True):
        assert torch.equal(buf, old.view(3, n, r, c)[[0, 2]].reshape(-1, r, c))


def test_stacked_logprobs_and_gradients_equal_each_model_alone():
    adapters = [build_adapter("tiny", seed=s, device=CPU) for s in range(3)]
    model = StackedModel([a.module for a in adapters], [n for n, _ in adapters[0].module.named_parameters()])
    g = torch.Generator().manual_seed(1)
    ids, tgt = torch.randint(0, 256, (2, 3, 4, 9), generator=g)
    weight = torch.randn(3, 4, 9, generator=g)
    lp, entropy = model.logprobs(ids, tgt)
    model.backward((lp * weight).sum())
    for k, a in enumerate(adapters):
        logp = torch.log_softmax(a.module(ids[k]), -1)
        own = logp.gather(-1, tgt[k][..., None])[..., 0]
        torch.testing.assert_close(lp[k], own, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(entropy[k], -(logp.exp() * logp).sum(-1).detach(), rtol=1e-5, atol=1e-5)
        (own * weight[k]).sum().backward()
        for n, p in a.module.named_parameters():
            lo, hi, _ = model.columns[n]
            torch.testing.assert_close(model.grad[k, lo:hi].view(p.shape), p.grad, rtol=1e-4, atol=1e-6)


def test_batched_attention_equals_scaled_dot_product_attention():
    g = torch.Generator().manual_seed(2)
    q, k, v = torch.randn(3, 2, 4, 5, 8, generator=g)
    torch.testing.assert_close(
        batched_attention(q, k, v, is_causal=True),
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True),
    )
    mask = torch.rand(2, 1, 5, 5, generator=g) > 0.3
    mask[..., 0] = True
    torch.testing.assert_close(
        batched_attention(q, k, v, attn_mask=mask),
        torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask),
    )
    kk, vv = torch.randn(2, 2, 4, 7, 8, generator=g)  # more keys than queries
    torch.testing.assert_close(
        batched_attention(q, kk, vv, is_causal=True),
        torch.nn.functional.scaled_dot_product_attention(q, kk, vv, is_causal=True),
    )


def test_side_by_side_noise_samples_each_block_with_its_own_seed():
    a = build_adapter("tiny", seed=0, device=CPU)
    prompts, n, settings = [list(b"n="), list(b"code ")], 3, Settings(max_tokens=6)
    noise = torch.cat([uniforms(s, len(prompts), n, 6, CPU) for s in (11, 12)], dim=1)
    both = draw(a.decoder(a.module, 2 * len(prompts) * n, 11), prompts * 2, n, settings, noise, a.codec, CPU)
    for block, seed in enumerate((11, 12)):
        alone_ = generate(a.decoder(a.module, len(prompts) * n, 11), prompts, n, settings, seed, a.codec, CPU)
        rows = range(block * len(prompts) * n, (block + 1) * len(prompts) * n)
        assert [both.tokens[r].tolist() for r in rows] == [q.tokens for group in alone_ for q in group]
    with pytest.raises(ValueError, match="noise has shape"):
        draw(a.decoder(a.module, 6, 11), prompts, n, settings, noise, a.codec, CPU)


def test_policy_batch_holds_what_samples_policy_builds():
    prompts = [list(b"n="), list(b"code ")]
    tokens = torch.tensor([[49, 50, 51, 0], [52, 53, 54, 55], [56, 0, 0, 0]])
    logprobs = torch.tensor([[-1.0, -2.0, -3.0, 0.0], [-0.5, -0.25, -0.125, -4.0], [-7.0, 0.0, 0.0, 0.0]])
    drawn = Drawn(tokens, logprobs, torch.tensor([3, 4, 1]), torch.tensor([True, False, True]))
    which, adv = [0, 1, 1], [0.5, -1.5, 2.0]
    batch = policy_batch(prompts, which, drawn, adv)
    for r in range(3):
        n = int(drawn.lengths[r])
        want = samples.policy(prompts[which[r]], tokens[r, :n].tolist(), logprobs[r, :n].tolist(), adv[r])
        size = len(want.model_input.tokens)
        assert batch.ids[r, :size].tolist() == want.model_input.tokens and not batch.ids[r, size:].any()
        got = batch.inputs(r, r + 1)[0]
        for key, td in want.loss_fn_inputs.items():
            assert got[key].tolist() == pytest.approx(td.data), key


@pytest.mark.parametrize(
    ("prompt", "match"),
    [
        ("", r"task 'bad': prompts\[1\] encodes to no tokens"),
        ([300], r"task 'bad': prompts\[1\]: token 300 is outside the vocabulary \[0, 256\)"),
        ("a" * 300, r"task 'bad': prompts\[1\]: 300 tokens \+ max_tokens 4 exceed the model's context of 256$"),
    ],
)
def test_a_task_prompt_the_model_cannot_read_is_refused_before_anything_runs(prompt, match, tmp_path):
    """As ``Session.sample`` refuses it (``rl_step`` alone): it failed every member's first sample
    ``INTERNAL_ERROR`` after their run folders were made."""
    task = Task("bad", ["n=", prompt], lambda p, c: 0.5, max_tokens=4, group_size=2)
    with pytest.raises(ValueError, match=match):
        run_batched(
            "tiny", "adam", [Member(rlnb.AdamParams(), run_id="r")], steps=1, task=task, device="cpu", runs_dir=tmp_path
        )
    assert not (tmp_path / "r").exists()


def test_a_run_id_already_in_runs_dir_is_continued_with_the_warning_a_session_gives(tmp_path):
    members = [Member(rlnb.AdamParams(), run_id="again")]
    run_batched("tiny", "adam", members, steps=2, device="cpu", runs_dir=tmp_path, **QUICK)
    with pytest.warns(
        rlnb.history.RunContinuedWarning,
        match="run again continues an earlier session that reached step 2, and this one starts at step 0",
    ):
        second = run_batched("tiny", "adam", members, steps=2, device="cpu", runs_dir=tmp_path, **QUICK)[0]
    assert second.status == "COMPLETED" and list(History.load(tmp_path / "again").steps.step) == [1, 2, 1, 2]


def test_a_run_folder_that_cannot_be_opened_is_refused_before_any_is_made(tmp_path):
    """As ``connect`` checks it: a locked run, or a file in its place, was found after every model was built and
    the folders of the members before it were made (left behind as runs of no step)."""
    held = rlnb.connect("local", model="tiny", device="cpu", runs_dir=tmp_path, run_id="b")
    (tmp_path / "c").write_text("not a run")
    for other, error, match in [("b", rlnb.RunLocked, "pick another run_id"), ("c", ValueError, "is a file")]:
        members = [Member(rlnb.AdamParams(), run_id="a"), Member(rlnb.AdamParams(), run_id=other)]
        with pytest.raises(error, match=match):
            run_batched("tiny", "adam", members, steps=1, device="cpu", runs_dir=tmp_path, **QUICK)
        assert not (tmp_path / "a").exists()
    held.close()


def test_a_run_that_cannot_be_continued_lets_go_of_those_opened_before_it(tmp_path, monkeypatch):
    """With warnings as errors, member b's RunContinuedWarning raises: run a, opened before it, was left locked until
    the garbage collector freed its History."""
    run_batched(
        "tiny", "adam", [Member(rlnb.AdamParams(), run_id="b")], steps=1, device="cpu", runs_dir=tmp_path, **QUICK
    )
    closed: list[Any] = []
    real = History.close
    monkeypatch.setattr(History, "close", lambda self: closed.append(self.config["run_id"]) or real(self))
    members = [Member(rlnb.AdamParams(), run_id="a"), Member(rlnb.AdamParams(), run_id="b")]
    with warnings.catch_warnings():
        warnings.simplefilter("error", rlnb.history.RunContinuedWarning)
        with pytest.raises(rlnb.history.RunContinuedWarning, match="run b continues"):
            run_batched("tiny", "adam", members, steps=1, device="cpu", runs_dir=tmp_path, **QUICK)
    assert sorted(closed) == ["a", "b"]  # at once, not when the garbage collector gets to it
    for run_id in "ab":  # neither is locked
        lock_run(tmp_path / run_id).close()


def test_callbacks_stop_task_and_keep_weights_of_the_wrong_type_are_refused_before_anything_runs(tmp_path):
    one = [Member(rlnb.AdamParams(), run_id="r")]
    for kwargs, match in [
        ({"task": "digits"}, "task must be None .* or a rlnb.tasks.Task, got 'digits'"),
        ({"stop": True}, r"stop must be None or a threading.Event \(set it to stop the run\), got True"),
        ({"on_step": 5}, "on_step must be None or a function"),
        ({"on_done": "print"}, "on_done must be None or a function"),
        ({"on_step": lambda: None}, r"on_step must be None or a function \(member index, report\)"),
        ({"on_done": lambda i: None}, r"on_done must be None or a function \(member index, result\)"),
        ({"keep_weights": "no"}, "keep_weights must be True or False, got 'no'"),
    ]:
        with pytest.raises(ValueError if "keep_weights" in kwargs else TypeError, match=match):
            run_batched("tiny", "adam", one, steps=1, device="cpu", runs_dir=tmp_path, **kwargs)
    assert not (tmp_path / "r").exists()


def test_ctrl_c_in_on_step_leaves_every_members_trained_step_recorded(tmp_path):
    """Ctrl-C while ``on_step`` runs for member 0 (a live plot): members 1 and 2 had trained that step too, yet their
    optim-step and weights-sync were recorded FAILED "stopped", the step's metrics and completions dropped, and
    ``steps_done`` one short of the weights they returned."""

    def on_step(m: int, report: Any) -> None:
        if m == 0 and report.step == 2:
            raise KeyboardInterrupt

    members = [Member(rlnb.AdamParams(), seed=s, run_id=f"m{s}") for s in range(3)]
    results = run_batched(
        "tiny", "adam", members, steps=4, device="cpu", runs_dir=tmp_path, on_step=on_step, keep_weights=True, **QUICK
    )
    ref = alone("adam", members[1], steps=2, **QUICK)
    for m, got in enumerate(results):
        assert (got.status, got.reason, got.steps_done) == ("STOPPED", "stopped after 2 of 4 steps", 2), m
        back = History.load(tmp_path / f"m{m}")
        assert set(back.df.status) == {"TRAINING_OPERATION_STATUS_COMPLETED"}
        assert list(back.steps.step) == [1, 2] and sorted(set(back.completions.step)) == [1, 2]
    assert results[1].rewards == ref.rewards
    assert_weights_close(results[1].weights, ref.weights)


def test_annotations_cannot_relabel_the_runs_own_fields(tmp_path):
    """``annotations={"run_id": "x"}`` wrote run_id "x" into run folder "r"'s config (``created_at``: its sessions'
    order); ``History.annotate`` refuses those, as a sweep's solo trial annotates its run."""
    for fields, match in [
        ({"run_id": "x"}, "run_id is the run's own field"),
        ({"created_at": 0, "label": "a"}, "created_at is the run's own field"),
        ({5: "x"}, "key 5 is not a str"),
    ]:
        with pytest.raises(ValueError, match=rf"members\[0\].annotations: {match}; pick another name"):
            run_batched(
                "tiny",
                "adam",
                [Member(rlnb.AdamParams(), run_id="r", annotations=fields)],
                steps=1,
                device="cpu",
                runs_dir=tmp_path,
            )
    assert not (tmp_path / "r").exists()


def test_engine_options_are_checked_as_connect_checks_them():
    """``ns_dtype=torch.float32``, which ``connect`` takes, was refused (a sweep with it: every batched trial FAILED
    with that error); ``ns_dtype=["float32"]`` was ``unhashable type: 'list'`` and ``device=None`` torch's own
    ``TypeError``, naming neither option."""
    got = run_batched("tiny", "muon", [Member(rlnb.MuonParams())], steps=0, device="cpu", ns_dtype=torch.float32)[0]
    assert got.status == "COMPLETED" and got.history.config["ns_dtype"] == "float32"
    for kwargs, match in [
        (
            {"ns_dtype": ["float32"]},
            r"ns_dtype must be one of \['bfloat16', 'float16', 'float32'\] "
            r"or None \(chosen from the hardware\), got \['float32'\]",
        ),
        ({"device": None}, r"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got None"),
    ]:
        with pytest.raises(ValueError, match=match):
            run_batched("tiny", "muon", [Member(rlnb.MuonParams())], steps=1, **{"device": "cpu", **kwargs})
        with pytest.raises(ValueError, match=match):
            rlnb.connect("local", optimizer="muon", model="tiny", record=False, **{"device": "cpu", **kwargs})


@pytest.mark.parametrize("options", [{"muon_scaling": "match_adam"}, {"ns_dtype": "float32"}])
def test_muon_options_on_an_adam_ensemble_are_refused_as_an_adam_session_refuses_them(tmp_path, options):
    """``run_batched(..., "adam", muon_scaling="match_adam")`` (or ``ns_dtype=``) trained Adam members that used
    neither, in silence, where an Adam session refuses them: the same refusal, before a model or folder is made."""
    ((name, value),) = options.items()
    said = "^" + re.escape(f"{name}={value!r}") + r": muon_scaling, ns_dtype and muon_split are for Muon sessions "
    said += r"\(optimizer='muon'\) only"
    with pytest.raises(ValueError, match=said + "; this session's optimizer is adam$"):
        run_batched("tiny", "adam", [Member(rlnb.AdamParams())], steps=1, device="cpu", runs_dir=tmp_path, **options)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match=said):
        rlnb.connect("local", optimizer="adam", model="tiny", device="cpu", record=False, **options)
    got = run_batched("tiny", "muon", [Member(rlnb.MuonParams())], steps=0, device="cpu", **options)[0]
    assert got.status == "COMPLETED" and got.history.config[name] == value


def test_a_loss_that_reads_no_advantages_is_refused_before_anything_is_sampled(tmp_path):
    """``loss="cross_entropy"`` (supervised: it reads weights): every member's first forward-backward failed
    ``INVALID_INPUT`` after its run folder was made and its samples drawn, with another message than the same trial
    alone (``rl_step``), whose first step failed too."""
    match = r"loss 'cross_entropy' is not a policy loss \(it reads target_tokens, weights, .*\): rl_step trains with"
    with pytest.raises(ValueError, match=match):
        run_batched(
            "tiny",
            "adam",
            [Member(rlnb.AdamParams(), run_id="r")],
            steps=1,
            device="cpu",
            runs_dir=tmp_path,
            loss="cross_entropy",
        )
    assert not (tmp_path / "r").exists()
    s = rlnb.connect("local", model="tiny", device="cpu", record=False)
    with pytest.raises(ValueError, match=match):
        rl_step(s, digits_task(), rlnb.AdamParams(), loss="cross_entropy")
    assert len(s.history) == 0  # nothing was sampled
    s.close()


def test_more_recording_members_than_the_process_may_open_files_for_are_refused(tmp_path, monkeypatch):
    """60 members recording under ``runs_dir`` with ``ulimit -n`` 200: each holds ~4 files open for the run, and
    past ~50 members every History hit "Too many open files" and went on in memory (a warning each, the run
    folders cut short). Refused up front naming the limit; a sweep's batched groups stay within it."""
    from rlnb.batched import run as run_module
    from rlnb.sweep.batched_executor import BatchedExecutor

    monkeypatch.setattr(run_module, "open_files_limit", lambda wanted=0: 200)
    members = [Member(rlnb.AdamParams(), seed=s, run_id=f"m{s}") for s in range(60)]
    with pytest.raises(ValueError, match=r"members: 60 recording members hold ~4 files open each, and this process "
                       r"may open 200 \(ulimit -n\): at most 34 members here; pass fewer, raise the limit, or "
                       r"runs_dir=None \(in memory\)"):  # fmt: skip
        run_batched("tiny", "adam", members, steps=1, device="cpu", runs_dir=tmp_path, **QUICK)
    assert not list(tmp_path.iterdir())
    assert BatchedExecutor(tmp_path, threading.Event(), max_members=100)._max == 34
    assert BatchedExecutor(tmp_path, threading.Event(), max_members=8)._max == 8


def test_the_open_files_limit_is_read_once_per_check(monkeypatch):
    """``check_open_files`` read ``getrlimit`` three times (to raise the soft limit, through ``open_files_limit``,
    again for its message): what it raised and what it said could differ. One read, raised in place."""
    resource = pytest.importorskip("resource")
    from rlnb.batched import run as run_module

    reads: list[int] = []
    real = resource.getrlimit
    monkeypatch.setattr(resource, "getrlimit", lambda which: reads.append(which) or real(which))
    run_module.check_open_files(1)
    assert reads == [resource.RLIMIT_NOFILE]
    reads.clear()
    run_module.most_members(1)
    assert reads == [resource.RLIMIT_NOFILE]


def test_a_soft_open_files_limit_under_the_hard_one_is_raised_for_the_members_asked(monkeypatch):
    """macOS's soft ``ulimit -n`` is 256 with a hard limit far above: 60 recording members were refused where the
    process could raise its own soft limit (as Ray and Jupyter do). It is raised first; refused only past the hard."""
    resource = pytest.importorskip("resource")
    from rlnb.batched import run as run_module

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 400:
        pytest.skip(f"the hard limit here ({hard}) leaves no room to raise")
    resource.setrlimit(resource.RLIMIT_NOFILE, (200, hard))
    try:
        run_module.check_open_files(60)  # 60 x 4 + 64 = 304 files: the soft limit is raised to them
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= 304
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.parametrize("kind", ["adam", "muon"])
def test_a_stacked_optimizer_refuses_weights_in_neither_group(kind):
    """Weights left out of both groups (a Muon optimizer given no AdamW group, so nothing for the norms, biases and
    embeddings) had gradients counted in the norms and were never updated, silently; a session's optimizer steps every
    trainable weight (``split_params`` gives each one a group)."""
    a = build_adapter("tiny", seed=0, device=CPU)
    adam, groups = plan(a.module, kind, a.embedding_params())
    muon = [n for g in groups for n in g]
    model = StackedModel([a.module], muon + adam)  # the AdamW group's columns after the Muon ones
    with pytest.raises(ValueError, match=r"^every weight must be in the AdamW group or a Muon group; in neither: "
                                         r"wte\.weight, wpe\.weight, blocks\.0\.ln_1\.weight, "):  # fmt: skip
        StackedOptimizer(model, kind, [] if kind == "muon" else adam[:0], groups)
    model = StackedModel([a.module], adam + muon)
    last = r"lm_head\.weight" if kind == "adam" else r"blocks\.0\.mlp\.c_proj\.weight, blocks\.1\.mlp\.c_proj\.weight"
    with pytest.raises(ValueError, match=f"in neither: {last}$"):  # the last weight of AdamW's, the last Muon group
        StackedOptimizer(model, kind, adam[:-1] if kind == "adam" else adam, groups[:-1])
    vector = [n for n in adam if n != "ln_f.bias"]
    model = StackedModel([a.module], [*vector, "ln_f.bias", *muon])
    with pytest.raises(ValueError, match=r"^Muon group \['ln_f\.bias'\] must hold matrices of one shape$"):
        StackedOptimizer(model, "muon", vector, [["ln_f.bias"], *groups])

"""An optim-step that raises part way (out of memory): all or nothing, or a failure that says what it left half done."""

from __future__ import annotations

import re

import pytest
import torch

import rlnb
from rlnb import samples, wire
from rlnb.engine.optim import adamw, trainer
from rlnb.tasks import Task, rl_step
from rlnb.wire import OperationErrorCode as Code

SEQ = [samples.cross_entropy(list(b"hello world, a step that runs out of memory"))]
UNCHANGED = "parameters and optimizer state unchanged, the accumulated gradients dropped"


def oom(*args, **kwargs):
    raise torch.OutOfMemoryError("CUDA out of memory (simulated)")


def snapshot(s: rlnb.Session) -> dict[str, torch.Tensor]:
    """Every weight, AdamW moment and step count, and Muon momentum of the session, copied."""
    optim = s.backend.optim
    out = {f"w/{n}": p.detach().clone() for n, p in optim._named}
    if optim._adamw is not None:
        for i, state in enumerate(optim._adamw.state.values()):
            out |= {f"adam/{i}/{k}": v.clone() for k, v in state.items()}
    return out | {f"muon/{n}": b.clone() for n, b in optim.momentum.items()}


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow  # two tiny sessions, a few steps each
@pytest.mark.parametrize("kind", ["adam", "muon"])
def test_a_step_that_runs_out_of_memory_before_it_changes_anything_changes_nothing_and_says_so(kind, monkeypatch):
    """Muon's maths (its Newton-Schulz stacks: the step's allocations) run before AdamW moves its group: a Muon step
    that runs out of memory leaves the AdamW group as it was too. Adam: the gradient norm's allocation."""
    hp = rlnb.MuonParams(learning_rate=0.02) if kind == "muon" else rlnb.AdamParams(learning_rate=1e-2)
    with rlnb.connect("local", model="tiny", optimizer=kind, seed=0, record=False) as s:
        s.forward_backward(SEQ).result(timeout=60)
        s.optim_step(hp).result(timeout=60)  # state to keep: moments, counts, momentum
        s.forward_backward(SEQ).result(timeout=60)
        before = snapshot(s)
        target = (trainer, "muon_update") if kind == "muon" else (trainer, "total_norm")
        with monkeypatch.context() as patch:
            patch.setattr(*target, oom)
            with pytest.raises(rlnb.OperationFailed) as caught:
                s.optim_step(hp).result(timeout=60)
        assert caught.value.code == Code.RESOURCE_EXHAUSTED
        assert "out of memory" in str(caught.value) and UNCHANGED in str(caught.value)
        assert same(snapshot(s), before)
        assert all(p.grad is None for _, p in s.backend.optim._named)
        s.forward_backward(SEQ).result(timeout=60)  # the session goes on, at the same step
        assert s.optim_step(hp).result(timeout=60).step == 2


@pytest.mark.slow  # a tiny session
def test_a_step_that_fails_once_it_has_changed_weights_says_they_are_half_stepped(monkeypatch):
    """AdamW's own step allocates (its second moment's square root) after it has moved the weights: a failure there
    cannot be undone without a copy of the weights, so it says what it left and how to get a whole state back."""
    with rlnb.connect("local", model="tiny", optimizer="muon", seed=0, record=False) as s:
        s.forward_backward(SEQ).result(timeout=60)
        before = snapshot(s)
        with monkeypatch.context() as patch, pytest.raises(rlnb.OperationFailed) as caught:
            patch.setattr(adamw.torch, "_foreach_sqrt", oom)
            s.optim_step(rlnb.MuonParams(learning_rate=0.02)).result(timeout=60)
        assert caught.value.code == Code.RESOURCE_EXHAUSTED
        message = str(caught.value)
        assert "half-stepped" in message and "restore" in message and "checkpoint" in message
        after = snapshot(s)
        muon = {n for n, _ in s.backend.optim.split.muon}
        assert all(torch.equal(after[f"w/{n}"], before[f"w/{n}"]) for n in muon)  # Muon's weights: not yet moved
        assert all(p.grad is None for _, p in s.backend.optim._named)


@pytest.mark.slow  # a tiny session, and the one resumed from its checkpoint
def test_a_half_stepped_session_refuses_to_publish_save_or_step_its_weights_and_samples_the_last_synced(
    monkeypatch, tmp_path
):
    """After a half step the error said to restore, but weights-sync published the half-stepped weights under the
    next version and a training checkpoint saved them with the optimizer state, labelled as the last good step: the
    newest checkpoint was the damaged one. Those, an inference checkpoint and further optim-steps are refused; a
    sample runs on the last synced weights, and the last good checkpoint resumes."""
    hp = rlnb.AdamParams(learning_rate=1e-2)
    with rlnb.connect("local", model="tiny", seed=0, record=False, checkpoint_dir=tmp_path) as s:
        s.forward_backward(SEQ)
        s.optim_step(hp)
        s.weights_sync()
        good = s.save_training_checkpoint().result(timeout=60).checkpoint
        synced = s.sample([[104, 105]], max_tokens=8, seed=1).result(timeout=60).results[0].sequences[0]
        s.forward_backward(SEQ).result(timeout=60)
        with monkeypatch.context() as patch, pytest.raises(rlnb.OperationFailed, match="half-stepped.*refuses optim"):
            patch.setattr(adamw.torch, "_foreach_sqrt", oom)
            s.optim_step(hp).result(timeout=60)
        refused = (
            s.weights_sync,
            s.save_training_checkpoint,
            s.save_inference_checkpoint,
            lambda: s.optim_step(hp),
        )
        for op in refused:
            with pytest.raises(rlnb.OperationFailed) as caught:
                op().result(timeout=60)
            assert caught.value.code == Code.INVALID_INPUT
            said = str(caught.value)  # both ways back: resume_from a remote session refused (TypeError)
            assert re.search(r"half-stepped.*restore.*last training checkpoint", said)
            assert (
                "(rlnb.connect(..., resume_from=<its path>) in-process, or resume_from_checkpoint_id=<its id>" in said
            )
        assert s.forward_backward(SEQ).result(timeout=60).loss > 0  # still reads the model (a forward-only check too)
        again = s.sample([[104, 105]], max_tokens=8, seed=1).result(timeout=60).results[0].sequences[0]
        assert again.tokens == synced.tokens and again.logprobs == synced.logprobs
        info = s.info()
        assert [c.id for c in info.training_checkpoints] == [good.id] and not info.inference_checkpoints
        assert info.policy_state.applied_weights_version == 1 and info.step == 1
        path = s.backend.checkpoint_path(good.id)
    with rlnb.connect("local", model="tiny", seed=0, record=False, resume_from=path) as r:
        r.forward_backward(SEQ)
        assert r.optim_step(hp).result(timeout=60).step == 2
        assert r.weights_sync().result(timeout=60).weights_version == 2


@pytest.mark.slow  # a tiny session
def test_a_half_stepped_session_with_no_checkpoint_says_so_and_rl_step_refuses_before_sampling(monkeypatch):
    """It said "restore from its last training checkpoint" where none was saved (and saves are refused), and each
    rl_step sampled a batch and ran its forward-backward before the optim-step was refused."""
    task = Task("sums", [[104, 105]], lambda p, c: float(len(c)), group_size=2, max_tokens=3)
    with rlnb.connect("local", model="tiny", seed=0, record=False) as s:
        assert s.backend.half_stepped_refusal() is None
        s.forward_backward(SEQ).result(timeout=60)
        with monkeypatch.context() as patch, pytest.raises(rlnb.OperationFailed):
            patch.setattr(adamw.torch, "_foreach_sqrt", oom)
            s.optim_step(rlnb.AdamParams(learning_rate=1e-2)).result(timeout=60)
        with pytest.raises(rlnb.OperationFailed) as caught:
            s.weights_sync().result(timeout=60)
        assert "restore from its last training checkpoint (none saved: open a new session)" in str(caught.value)
        records = len(s.history.records)
        with pytest.raises(rlnb.OperationFailed, match=r"half-stepped.*\(none saved: open a new session\)") as step:
            rl_step(s, task, rlnb.AdamParams(learning_rate=1e-2), seed=1)
        assert step.value.code == Code.INVALID_INPUT and step.value.kind == wire.OperationKind.OPTIM_STEP
        assert len(s.history.records) == records  # nothing sampled nor sent

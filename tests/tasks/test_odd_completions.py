"""``rl_step`` over what a remote sampler may answer and the in-process one never does: a completion of no tokens (a
stop string matched at once and left out), sequences without their optional log-probs."""

from __future__ import annotations

import math

import pytest

import rlnb
from rlnb import samples
from rlnb.engine.backend import LocalBackend
from rlnb.history import History
from rlnb.tasks import Task, rl_step
from tests.support.odd_samples import Recording, emptied, without_logprobs


def _task() -> Task:
    return Task("odd", ["a=", "b="], lambda p, c: float(len(c)), group_size=2, max_tokens=3)


def test_an_empty_completion_is_scored_kept_and_trains_nothing_counted_as_a_sample(tmp_path):
    """It failed the step with ``prompt_tokens and completion_tokens must both be non-empty`` (naming no completion),
    and the step's completions were lost."""
    backend = Recording(LocalBackend("adam", "tiny", device="cpu", seed=0), emptied((0, 1)))
    s = rlnb.Session(backend, runs_dir=tmp_path, run_id="r")
    with s:
        report = rl_step(s, _task(), rlnb.AdamParams(learning_rate=1e-3), seed=0)
        fb_loss = s.history.df.query("kind == 'forward-backward'").loss.iloc[0]
    table = History.load(tmp_path / "r").completions
    assert report.step == 1 and list(table.length) == [3, 0, 3, 3]
    assert table.completion.iloc[1] == "" and table.reward.iloc[1] == 0.0 and table.advantage.iloc[1] < 0
    (body,) = backend.bodies
    assert len(body.samples) == 4  # the empty one counts: GRPO's FIXED_HORIZON divides by the number of samples
    assert not any(body.samples[1].loss_fn_inputs["mask"].data)
    with rlnb.Session(LocalBackend("adam", "tiny", device="cpu", seed=0), record=False) as fresh:  # the same weights
        whole = fresh.forward_backward(body.samples, "grpo", forward_only=True).result(60)
        others = [x for i, x in enumerate(body.samples) if i != 1]
        three = fresh.forward_backward(others, "grpo", forward_only=True).result(60)
    assert whole.loss == pytest.approx(fb_loss, rel=1e-6) and whole.metrics["loss/tokens"] == 9
    assert whole.loss == pytest.approx(three.loss * 3 / 4, rel=1e-5)  # it adds 0 to the sum, 1 to the count


def test_sequences_without_log_probs_are_named_and_the_steps_completions_kept(tmp_path):
    """It failed with ``sampler_logprobs has 0 entries for 3 completion tokens`` (the API's ``logprobs`` is
    optional), and the step's completions were lost."""
    s = rlnb.Session(Recording(LocalBackend("adam", "tiny", device="cpu", seed=0), without_logprobs),
                     runs_dir=tmp_path, run_id="r")  # fmt: skip
    with s:
        with pytest.raises(ValueError, match=r"prompts\[0\], completion 0: .* no log-probs") as raised:
            rl_step(s, _task(), rlnb.AdamParams(learning_rate=1e-3), seed=0)
        assert "grpo" in str(raised.value) and list(s.history.df.kind) == ["sample"] and s.step == 0
    table = History.load(tmp_path / "r").completions
    assert len(table) == 4 and set(table.step) == {1} and not table.reward.isna().any()


def test_an_empty_completions_sample_alone_adds_nothing():
    """``samples.policy`` of an empty completion: no masked token, so no loss (it refused the completion)."""
    with rlnb.Session(LocalBackend("adam", "tiny", device="cpu", seed=0), record=False) as s:
        empty = samples.policy([97, 61], [], [], 1.0)
        out = s.forward_backward([empty], "grpo").result(60)
        assert out.loss == 0.0 and out.metrics["loss/tokens"] == 0 and not math.isnan(out.loss)


def test_a_batch_longer_than_the_trainers_context_keeps_the_steps_completions(tmp_path):
    """A remote trainer's ``max_seq_length`` below its sampler's context: the forward-backward is refused, naming the
    sample and the context, and the step's completions were lost with it."""
    backend = Recording(LocalBackend("adam", "tiny", device="cpu", seed=0), lambda out: None)
    backend.max_seq_length = 3  # type: ignore[attr-defined]
    with rlnb.Session(backend, runs_dir=tmp_path, run_id="r") as s:
        with pytest.raises(ValueError, match=r"samples\[0\] has 4 tokens, more than the model's context of 3"):
            rl_step(s, _task(), rlnb.AdamParams(learning_rate=1e-3), seed=0)
        assert list(s.history.df.kind) == ["sample"] and not backend.bodies
    table = History.load(tmp_path / "r").completions
    assert len(table) == 4 and set(table.step) == {1} and not table.reward.isna().any()

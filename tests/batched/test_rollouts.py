"""Each batched member's loss is checked as a session's forward-backward checks it (``handlers.finite_loss``), its
seed as a sweep checks one, and the caller's callbacks raise their own errors."""

import math
import sys
import threading

import pytest
import torch

from rlnb import wire
from rlnb.batched import sampler
from rlnb.batched.rollouts import DrawnLists, PolicyBatch, member_losses, sample_output
from rlnb.batched.sampler import members_uniforms
from rlnb.engine import sampling
from rlnb.engine.sampling import LENGTH, STOP, Drawn


def one_row_each(sampler_logprobs: list[float]) -> PolicyBatch:
    """One rollout per member: input ``[5, 6, 7]``, targets ``[6, 7, 8]``, the last two tokens trained."""
    rows = len(sampler_logprobs)
    return PolicyBatch(
        ids=torch.tensor([[5, 6, 7]] * rows),
        targets=torch.tensor([[6, 7, 8]] * rows),
        logprobs=torch.tensor([[0.0, q, q] for q in sampler_logprobs]),
        advantages=torch.ones(rows, 3),
        mask=torch.tensor([[0.0, 1.0, 1.0]] * rows),
        lengths=torch.tensor([3] * rows),
    )


def test_a_member_whose_ratio_overflows_fails_its_forward_backward_alone():
    """Member 1's sampler log-probs are far below the policy's: e^(lp - q) overflows. PPO's clip keeps its loss
    finite, but its gradient would be NaN: it fails NON_FINITE_LOSS naming the metric, as a session does
    (tests/engine/test_faults.py), and member 0 is untouched."""
    batch = one_row_each([-1.0, -100.0])
    lp = torch.full((2, 3), -1.0, requires_grad=True)
    (first, second), total = member_losses(lp, torch.zeros(2, 3), batch, 2, "LOSS_TYPE_PPO", None, horizon=16)
    assert first.error is None and first.result is not None and math.isfinite(first.result.loss)
    assert second.result is None and second.error is not None
    assert total is not None and float(total.detach()) == first.result.loss  # only member 0's loss is backpropagated
    total.backward()
    assert lp.grad is not None and bool(lp.grad[0].ne(0).any()) and bool(lp.grad[1].eq(0).all())
    code, message = second.error
    assert code == wire.OperationErrorCode.NON_FINITE_LOSS
    assert message.startswith("loss/ratio/mean is inf") and message.endswith("no gradients were accumulated")


def test_member_seeds_are_integers_in_the_step_seed_range_and_numpy_ones_train(tmp_path):
    """``Member(params, np.int64(3))`` ended FAILED INTERNAL_ERROR (OverflowError in ``% 2**63``), ``seed=1.5``
    FAILED after the model was built, ``seed=2**62`` COMPLETED on wrapped step seeds, ``None`` a bare TypeError."""
    import numpy as np

    import rlnb
    from rlnb.batched import Member, run_batched

    for seed in (1.5, 2**62, None, True):
        with pytest.raises(ValueError, match=rf"members\[1\].seed must be an integer in \[-\d+, \d+\], got {seed}"):
            run_batched("tiny", "adam", [Member(rlnb.AdamParams()), Member(rlnb.AdamParams(), seed)], steps=1)
    (result,) = run_batched("tiny", "adam", [Member(rlnb.AdamParams(), np.int64(3))], steps=1, group_size=2)
    assert result.status == "COMPLETED" and result.history.config["seed"] == 3


def test_an_on_step_answer_that_is_no_reason_is_the_callers_error_not_a_prune(tmp_path):
    """``on_step=lambda i, report: report.reward > 0.5`` pruned the member at its first step, its reason 'False'."""
    import rlnb
    from rlnb.batched import Member, run_batched
    from rlnb.history import History

    with pytest.raises(TypeError, match="on_step returned False for member 0: return None to go on, or a reason"):
        run_batched("tiny", "adam", [Member(rlnb.AdamParams(), run_id="m")], steps=3, group_size=2, runs_dir=tmp_path,
                    on_step=lambda i, report: report.reward > 0.5)  # fmt: skip
    assert len(History.load(tmp_path / "m").steps) == 1  # the run stays readable


def test_an_on_done_that_raises_while_a_ctrl_c_stops_the_run_raises_its_own_error(tmp_path):
    """Ctrl-C (a ``KeyboardInterrupt``, raised here from the reward, which runs on the run's thread) ends every member
    STOPPED and calls ``on_done``: an error of ``on_done`` there escaped as rlnb's internal ``_CallbackFailed``, not
    as the caller's own, and the member's run stays readable. The caller's ``stop`` is left as it was."""
    import rlnb
    from rlnb.batched import Member, run_batched
    from rlnb.history import History
    from rlnb.tasks import Task

    def reward(prompt: str, completion: str) -> float:
        raise KeyboardInterrupt

    def on_done(i: int, result: object) -> None:
        raise LookupError("my on_done bug")

    stop = threading.Event()
    with pytest.raises(LookupError, match="my on_done bug") as info:
        run_batched("tiny", "adam", [Member(rlnb.AdamParams(), run_id="m")], steps=2, runs_dir=tmp_path, stop=stop,
                    task=Task("t", ["n="], reward, group_size=2, max_tokens=2), on_done=on_done)  # fmt: skip
    assert type(info.value) is LookupError and not stop.is_set()  # the caller's Event: set, it stopped its next run
    assert set(History.load(tmp_path / "m").df.status) <= {"TRAINING_OPERATION_STATUS_COMPLETED",
                                                           "TRAINING_OPERATION_STATUS_FAILED"}  # fmt: skip


def test_an_ensemble_out_of_memory_fails_every_member_saying_to_run_fewer(monkeypatch):
    """400 ``tiny`` members under a 3 GB limit (``ulimit -v``) all FAILED ``RESOURCE_EXHAUSTED: out of memory: ...
    DefaultCPUAllocator: can't allocate memory``, after 26 s, naming neither the ensemble nor a way on. Here torch's
    CPU allocator's error is raised where the ensemble's forward allocates, as it did there."""
    import rlnb
    from rlnb.batched import Member, run_batched
    from rlnb.batched.stacked import StackedModel
    from rlnb.tasks import Task
    from tests.support.no_room import no_room

    monkeypatch.setattr(StackedModel, "logprobs", no_room)
    members = [Member(rlnb.AdamParams(), seed=s) for s in range(3)]
    results = run_batched("tiny", "adam", members, steps=1, task=Task("t", ["n="], lambda p, c: 0.0, group_size=2))
    for r in results:
        assert r.status == "FAILED" and r.reason is not None
        assert r.reason.startswith(f"{wire.OperationErrorCode.RESOURCE_EXHAUSTED}: out of memory: [enforce fail")
        assert r.reason.endswith("(an ensemble of 3 members trains them all at once: run fewer per call)")


def test_a_members_sample_record_is_the_validated_output_built_with_few_python_calls_a_row():
    """A member's sample record is built for each of its rows at every step, so its cost grows with the members:
    ``model_construct`` left to fill a default looks it up with ~5 Python calls a field (``routed_experts_key``,
    ``text``), 11 calls a row. Given every field and which of them a sample sets, it is one call a row, and the
    record is the same as the validated output (values, and the fields a dump with ``exclude_unset`` writes)."""
    gen = torch.Generator().manual_seed(0)
    prompts, n, steps = 3, 4, 5
    drawn = Drawn(torch.randint(0, 256, (2 * prompts * n, steps), generator=gen),
                  torch.randn(2 * prompts * n, steps, generator=gen), torch.randint(1, steps + 1, (2 * prompts * n,),
                  generator=gen), torch.rand(2 * prompts * n, generator=gen) < 0.5)  # fmt: skip
    lists = DrawnLists.of(drawn)
    rows = range(prompts * n, 2 * prompts * n)  # the second member's
    calls: list[str] = []

    def count(frame, event, arg):  # type: ignore[no-untyped-def]
        if event == "call":
            calls.append(frame.f_code.co_name)

    sys.setprofile(count)
    try:
        out = sample_output(lists, [5, 9, 2], n, rows, version=7)  # each prompt's tokens
    finally:
        sys.setprofile(None)
    assert len(calls) <= 2 * len(rows), f"{len(calls)} Python calls for {len(rows)} rows"
    expected = wire.SampleOutput(
        results=[
            wire.SampleResult(
                policy_segments=[wire.PolicyVersionSegment(start_token=0, version=7)],
                sequences=[
                    wire.SampledSequence(
                        tokens=lists.tokens[r][: lists.lengths[r]],
                        logprobs=lists.logprobs[r][: lists.lengths[r]],
                        stop_reason=STOP if lists.stopped[r] else LENGTH,
                        prompt_cache_hit_tokens=[5, 9, 2][p] if r % n else 0,  # the first sample's prefill reused
                    )
                    for r in rows[p * n : (p + 1) * n]
                ],
            )
            for p in range(prompts)
        ]
    )
    assert out == expected
    for got, want in zip(out.results, expected.results, strict=True):
        for a, b in zip(got.sequences, want.sequences, strict=True):
            assert a.model_fields_set == b.model_fields_set and a.__dict__ == b.__dict__
    assert out.model_dump(exclude_unset=True) == expected.model_dump(exclude_unset=True)
    assert out.model_dump_json() == expected.model_dump_json()


def test_members_uniforms_are_each_seeds_own_and_a_shared_seed_is_drawn_once(monkeypatch):
    """Member k's columns are what ``uniforms`` draws for its seed alone (a trial alone draws those), whichever
    members share it; a seed several members share is drawn once (was once a member: ~12 ops each), and the distinct
    seeds in one buffer (was a block each, then a ``cat``)."""
    cpu = torch.device("cpu")
    seeds = [7, 2**40 + 7, 7, -3, 2**40 + 7, 7]
    got = members_uniforms(seeds, 3, 2, 5, cpu)
    assert got.shape == (5, len(seeds) * 6)
    for k, s in enumerate(seeds):
        assert torch.equal(got[:, k * 6 : (k + 1) * 6], sampling.uniforms(s, 3, 2, 5, cpu)), (k, s)
    drawn: list[list[int]] = []
    real = sampler.seeds_uniforms
    monkeypatch.setattr(sampler, "seeds_uniforms", lambda s, *rest: drawn.append(list(s)) or real(s, *rest))
    members_uniforms(seeds, 3, 2, 5, cpu)
    assert drawn == [[7, 2**40 + 7, -3]]  # one buffer for every distinct seed

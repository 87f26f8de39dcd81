"""Scoring an RL step's completions: TRL's group advantages, the step's RL metrics under TRL's names, what a
reward reads (no EOS, no special tokens), and what ``rl_step`` logs and keeps in the run folder."""

from __future__ import annotations

import math
import re
import statistics

import numpy as np
import pandas as pd
import pytest
import torch

import rlnb
from rlnb import samples, wire
from rlnb.history import History
from rlnb.tasks import (
    RL_METRICS,
    Rollout,
    Task,
    digits_task,
    group_advantages,
    rl_step,
    score,
    step_metrics,
    unscored,
)

LENGTH, STOP = "STOP_REASON_LENGTH", "STOP_REASON_STOP"


def trl_advantages(rewards: list[float]) -> list[float]:
    """TRL 1.16 ``GRPOTrainer._generate_and_score_completions`` for one group (``scale_rewards="group"``):
    ``(r - mean) / (nanstd(r) + 1e-4)`` with ``nanstd`` Bessel-corrected, in torch."""
    r = torch.tensor(rewards, dtype=torch.float64)
    mean = r.mean()
    var = ((r - mean) ** 2).mean() * len(rewards) / (len(rewards) - 1)
    return ((r - mean) / (var.sqrt() + 1e-4)).tolist()


def test_group_advantages_are_trls_by_default():
    rewards = [0.0, 1.0, 1.0, 0.5, 0.25, 0.0, 1.0, 0.75]
    assert group_advantages(rewards) == pytest.approx(trl_advantages(rewards), abs=1e-12)
    population = group_advantages(rewards, "population_std")
    mean, pstd = statistics.fmean(rewards), statistics.pstdev(rewards)
    assert population == pytest.approx([(r - mean) / pstd for r in rewards])
    ratio = population[1] / group_advantages(rewards)[1]  # the 1.069x of issue 19 at a group of 8
    assert ratio == pytest.approx(math.sqrt(8 / 7) * (1 + 1e-4 / statistics.stdev(rewards)), rel=1e-9)
    assert group_advantages(rewards, "none") == pytest.approx([r - mean for r in rewards])
    with pytest.raises(ValueError, match="scale must be one of sample_std, population_std, none, got 'std'"):
        group_advantages(rewards, "std")  # type: ignore[arg-type]


@pytest.mark.parametrize("scale", ["sample_std", "population_std", "none"])
@pytest.mark.parametrize("rewards", [[0.1] * 8, [0.7], [], [1.0, 1.0]])
def test_a_group_whose_rewards_do_not_vary_gets_zero_advantages_not_nan(rewards, scale):
    out = group_advantages(rewards, scale)
    assert out == [0.0] * len(rewards) and all(a == 0.0 and not math.isnan(a) for a in out)


def test_a_group_of_two_different_rewards():
    std = math.sqrt(0.5) + 1e-4  # the sample std of (0, 1), plus TRL's epsilon
    assert group_advantages([0.0, 1.0]) == pytest.approx([-0.5 / std, 0.5 / std])


def seq(tokens: list[int], stop: str = LENGTH) -> wire.SampledSequence:
    return wire.SampledSequence(tokens=tokens, logprobs=[-1.0] * len(tokens), stop_reason=stop)


def result(*seqs: wire.SampledSequence) -> wire.SampleResult:
    segments = [wire.PolicyVersionSegment(start_token=0, version=0)]
    return wire.SampleResult(sequences=list(seqs), policy_segments=segments)


def test_score_gives_the_reward_the_completion_text_and_keeps_the_tokens():
    seen = []

    def reward(prompt: str, completion: str) -> float:
        seen.append((prompt, completion))
        return float(completion == "12")

    task = Task("t", ["a", "b"], reward)
    decode = rlnb.text.ByteCodec(eos_token_ids=[300]).decode
    sampled = unscored(
        ["a", "b"], [result(seq([49, 50, 300], STOP), seq([49, 50, 51])), result(seq([50]))], lambda t: decode(t, True)
    )
    assert not seen and [r.completion for g in sampled for r in g] == ["12", "123", "2"]
    assert all(math.isnan(r.reward) and math.isnan(r.advantage) for g in sampled for r in g)
    groups = score(task, sampled)
    assert seen == [("a", "12"), ("a", "123"), ("b", "2")]
    first = groups[0][0]
    assert first == Rollout(0, "a", "12", (49, 50, 300), False, 1.0, first.advantage)
    assert groups[0][1].truncated and groups[0][1].tokens == (49, 50, 51)
    assert [r.advantage for r in groups[0]] == pytest.approx(trl_advantages([1.0, 0.0]))
    assert groups[1][0].advantage == 0.0  # a group of one
    nan_task = Task("t", ["a"], lambda p, c: math.nan)
    with pytest.raises(ValueError, match=r"task 't': reward\('a', 'x'\) returned nan; it must be finite"):
        score(nan_task, unscored(["a"], [result(seq([1]), seq([2]))], lambda t: "x"))
    with pytest.raises(ZeroDivisionError) as raised:  # the task's own error, as it raised it, with where it came from
        score(Task("t", ["a"], lambda p, c: 1 / 0), unscored(["a"], [result(seq([1]))], lambda t: "x"))
    assert raised.value.__notes__ == ["raised by task 't': reward('a', 'x')"]


def rollouts(rewards: list[list[float]], tokens: list[list[tuple[int, ...]]], truncated: list[list[bool]]):
    return [
        [Rollout(g, "p", "c", t, tr, r, 0.0) for r, t, tr in zip(rs, ts, trs, strict=True)]
        for g, (rs, ts, trs) in enumerate(zip(rewards, tokens, truncated, strict=True))
    ]


def test_step_metrics_are_trls_definitions():
    groups = rollouts(
        [[1.0, 0.0, 1.0], [0.5, 0.5, 0.5]],
        [[(1, 2), (1, 2, 3, 4), (1, 2)], [(5,), (5,), (6, 7, 8)]],
        [[False, True, False], [False, False, True]],
    )
    loss_metrics = {
        "loss/entropy/mean": 2.5,
        "loss/kl_ref/mean": 0.01,
        "loss/clip/low_fraction": 0.125,
        "loss/clip/high_fraction": 0.25,
        "loss/tokens": 13.0,
    }
    got = step_metrics(groups, loss_metrics)
    rewards = [1.0, 0.0, 1.0, 0.5, 0.5, 0.5]
    assert got == pytest.approx(
        {
            "reward": statistics.fmean(rewards),
            "reward_std": statistics.stdev(rewards),  # the sample std over the step's rewards, as TRL's nanstd
            "frac_reward_zero_std": 0.5,  # the second group does not vary
            "completions/mean_length": 13 / 6,
            "completions/min_length": 1.0,
            "completions/max_length": 4.0,
            "completions/clipped_ratio": 2 / 6,
            "completions/distinct_mean": (2 + 2) / 2,
            "entropy": 2.5,
            "kl": 0.01,
            "clip_ratio/low_mean": 0.125,
            "clip_ratio/high_mean": 0.25,
            "clip_ratio/region_mean": 0.375,
        }
    )
    assert list(got) == list(RL_METRICS)
    bare = step_metrics(groups, {"loss/tokens": 13.0})  # a backend that reports none of them (Together)
    assert list(bare) == list(RL_METRICS[:8])
    assert math.isnan(step_metrics(rollouts([[1.0]], [[(1,)]], [[False]]), None)["reward_std"])
    with pytest.raises(ValueError, match="no completions"):
        step_metrics([], None)


def test_rl_step_logs_the_metrics_and_keeps_the_completions(tmp_path):
    with rlnb.connect("local", model="tiny", seed=0, device="cpu", runs_dir=tmp_path, run_id="r") as s:
        reports = [
            rl_step(s, digits_task(), rlnb.AdamParams(learning_rate=3e-3), group_size=4, seed=i) for i in range(3)
        ]
        fb = s.history.df.query("kind == 'forward-backward'").metrics.tolist()
    steps = s.history.steps
    logged = [m for m in RL_METRICS if m != "kl"]  # no reference log-probs, so no KL
    assert set(logged) <= set(steps.columns) and "kl" not in steps
    for report, (_, row), metrics in zip(reports, steps.iterrows(), fb, strict=True):
        assert report.metrics == {m: row[m] for m in logged} and report.reward == row.reward
        assert row.entropy == metrics["loss/entropy/mean"] and 0 < row.entropy <= math.log(256)
        assert row["clip_ratio/high_mean"] == metrics["loss/clip/high_fraction"]
        assert row["completions/max_length"] <= 8 and 1 <= row["completions/distinct_mean"] <= 4
    table = s.history.completions
    assert list(table.columns) == [
        "step",
        "group",
        "prompt",
        "completion",
        "reward",
        "advantage",
        "length",
        "truncated",
    ]
    assert len(table) == 3 * 6 * 4 and list(table.step.unique()) == [1, 2, 3]
    last = table[table.step == 3]
    assert list(last.reward) == reports[-1].rewards
    assert list(last.prompt.unique()) == digits_task().prompts
    for _, g in last.groupby("group"):
        assert list(g.advantage) == pytest.approx(group_advantages(list(g.reward)))
    assert s.history.latest_completions() == last.to_dict("records")
    path = tmp_path / "r"
    assert (path / "completions.jsonl").read_text().count("\n") == len(table)
    pd.testing.assert_frame_equal(History.load(path).completions, table)
    pd.testing.assert_frame_equal(rlnb.history.completions(path), table)
    with pytest.warns(rlnb.history.RunContinuedWarning, match="starts at step 0"):
        again = rlnb.connect("local", model="tiny", seed=0, device="cpu", runs_dir=tmp_path, run_id="r")
    with again:
        rl_step(again, digits_task(), rlnb.AdamParams(learning_rate=3e-3), group_size=4, seed=9)
    kept = again.history.completions  # a continued run keeps the earlier ones (a fresh session counts from 1)
    assert len(kept) == len(table) + 24 and list(kept.step) == list(table.step) + [1] * 24


def test_a_reward_that_raises_keeps_the_steps_completions_unscored(tmp_path):
    calls = []

    def reward(prompt: str, completion: str) -> float:
        calls.append(completion)
        if len(calls) > 5:
            raise KeyError(completion)
        return 1.0

    task = Task("flaky", ["a=", "b="], reward, group_size=3, max_tokens=4)
    with rlnb.connect("local", model="tiny", seed=0, device="cpu", runs_dir=tmp_path, run_id="r") as s:
        with pytest.raises(KeyError) as raised:  # a bare KeyError named no task, prompt or completion
            rl_step(s, task, rlnb.AdamParams(learning_rate=3e-3), seed=0)
        assert raised.value.__notes__ == [f"raised by task 'flaky': reward('b=', {calls[5]!r})"]
        kinds = list(s.history.df.kind)
    assert kinds == ["sample"] and s.step == 0  # nothing was trained on
    table = s.history.completions
    assert len(table) == 6 and list(table.prompt) == ["a="] * 3 + ["b="] * 3 and set(table.step) == {1}
    assert list(table.completion) == calls[:6] and table.reward.isna().all() and table.advantage.isna().all()
    assert (table.length >= 1).all()
    pd.testing.assert_frame_equal(History.load(tmp_path / "r").completions, table)


class _CtrlC:
    """The optim-step as ``rl_step`` sees it when Ctrl-C lands while it waits (``finished``: just after it ended)."""

    def __init__(self, op, finished: bool):
        self.op, self.finished = op, finished

    @property
    def status(self):
        return self.op.status

    def result(self, timeout=None):
        if self.finished:
            self.op.result()
        if not hasattr(self, "interrupted"):  # once: what rl_step asks after the Ctrl-C is answered
            self.interrupted = True
            raise KeyboardInterrupt
        return self.op.result(timeout)


@pytest.mark.parametrize("finished", [False, True])
def test_ctrl_c_while_rl_step_waits_for_its_optim_step_keeps_the_completions(tmp_path, monkeypatch, finished):
    """The interrupted step goes on training, but its completions and rewards were lost (nothing logged)."""
    with rlnb.connect("local", model="tiny", seed=0, device="cpu", runs_dir=tmp_path, run_id="r") as s:
        rl_step(s, digits_task(), rlnb.AdamParams(learning_rate=3e-3), group_size=2, seed=0)
        real = s.optim_step
        monkeypatch.setattr(s, "optim_step", lambda params: _CtrlC(real(params), finished))
        with pytest.raises(KeyboardInterrupt):
            rl_step(s, digits_task(), rlnb.AdamParams(learning_rate=3e-3), group_size=2, seed=1)
        s.wait(timeout=60)
        assert s.step == 2  # the step trained
    table = History.load(tmp_path / "r").completions
    assert list(table.step.value_counts().sort_index().items()) == [(1, 12), (2, 12)]
    assert table.reward.notna().all()


def test_an_sft_run_writes_no_completions_file(tmp_path):
    with rlnb.connect("local", model="tiny", device="cpu", runs_dir=tmp_path, run_id="sft") as s:
        s.forward_backward([samples.cross_entropy(list(b"hello"))])
        s.optim_step().result()
    assert not (tmp_path / "sft" / "completions.jsonl").exists()
    assert s.history.completions.empty and list(s.history.completions.columns)[:2] == ["step", "group"]


def test_a_completions_table_with_damaged_lines_loads_the_rest(tmp_path):
    with rlnb.connect("local", model="tiny", seed=0, device="cpu", runs_dir=tmp_path, run_id="r") as s:
        rl_step(s, digits_task(), rlnb.AdamParams(learning_rate=3e-3), group_size=2, seed=0)
    file = tmp_path / "r" / "completions.jsonl"
    lines = file.read_text().splitlines()
    lines[1] = lines[1].replace('"reward":', '"reward":"high","x":')
    file.write_text("\n".join([*lines, '{"step": 1, "prom']) + "\n")
    with pytest.warns(RuntimeWarning) as caught:
        table = History.load(tmp_path / "r").completions
    assert len(table) == len(lines) - 1
    messages = " | ".join(str(w.message) for w in caught)
    assert "reward = 'high'" in messages and "corrupt or half-written" in messages


@pytest.mark.slow
def test_rewards_read_the_completion_without_eos_and_the_loss_keeps_it(hf_dirs):
    """A Hugging Face model taught to answer "7</s>": the reward reads "7", the policy sample ends in EOS."""
    s = rlnb.connect("local", model=hf_dirs["gpt2"], seed=0, device="cpu", record=False)
    eos = s.tokenizer.eos_token_id
    teach = [samples.from_text(s, "n=", "7", eos=True)]
    for _ in range(40):
        s.forward_backward(teach)
        s.optim_step(rlnb.AdamParams(learning_rate=1e-2))
    s.weights_sync().result()
    out = s.sample("n=", max_tokens=6, temperature=0).result().results[0].sequences[0]
    assert out.tokens[-1] == eos and out.stop_reason == STOP and out.text == "7"  # .text leaves the EOS out
    assert s.decode(out.tokens).endswith("</s>")  # the tokens keep it
    seen, sent = [], []
    task = Task("seven", ["n="], lambda p, c: seen.append(c) or float(c == "7"), max_tokens=6)
    real = s._forward_backward_built  # how rl_step sends each piece's body
    s._forward_backward_built = lambda body: sent.append(body.samples) or real(body)  # type: ignore[method-assign]
    report = rl_step(s, task, rlnb.AdamParams(learning_rate=1e-3), group_size=2, temperature=wire.MIN_TEMPERATURE)
    s.close()
    assert seen == ["7", "7"] and report.rewards == [1.0, 1.0]
    targets = [x.loss_fn_inputs["target_tokens"].data for x in sent[0]]
    assert all(t[-1] == eos for t in targets)  # EOS is trained on
    assert list(s.history.completions.completion) == ["7", "7"]


@pytest.mark.slow  # RL steps until the completions file fails (~2 s)
def test_completions_that_cannot_be_written_warn_once_and_stay_in_memory(tmp_path):
    from rlnb.history.store import RunStoreWarning

    (tmp_path / "r" / "completions.jsonl").mkdir(parents=True)  # opening it for append fails (an OSError)
    warns = pytest.warns(RunStoreWarning, match="completions.jsonl")
    with warns as caught, rlnb.connect("local", model="tiny", seed=0, device="cpu", runs_dir=tmp_path, run_id="r") as s:
        for i in range(2):
            rl_step(s, digits_task(), rlnb.AdamParams(learning_rate=3e-3), group_size=2, seed=i)
    assert len([w for w in caught if w.category is RunStoreWarning]) == 1
    assert len(s.history.completions) == 2 * 6 * 2 and len(s.history.steps) == 2  # the run went on, in memory


@pytest.mark.slow
def test_a_reward_reads_the_prompt_without_the_tokenizers_bos(hf_dirs, tmp_path):
    """A Llama-style tokenizer adds ``<s>`` to every prompt: the reward still reads the task's own prompt text
    (a str prompt), or the prompt's tokens decoded without special tokens (a token-list prompt)."""
    import shutil

    from tokenizers import processors
    from transformers import AutoTokenizer

    folder = tmp_path / "llama-bos"
    shutil.copytree(hf_dirs["llama"], folder)
    tok = AutoTokenizer.from_pretrained(folder)
    tok._tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tok.bos_token_id)]
    )
    tok.save_pretrained(folder)
    seen: list[str] = []
    with rlnb.connect("local", model=str(folder), seed=0, device="cpu", record=False) as s:
        ids = s.encode("cadb>")
        assert ids[0] == tok.bos_token_id  # the session's prompts carry the BOS
        task = Task("spy", ["cadb>", ids], lambda p, c: seen.append(p) or 0.0, max_tokens=1, group_size=2)
        rl_step(s, task, rlnb.AdamParams(), seed=1)
        assert set(seen) == {"cadb>"}
        assert set(s.history.completions.prompt) == {"cadb>"}


@pytest.mark.parametrize("answer", [None, "0.5", [1.0]])
def test_a_reward_that_does_not_return_a_number_is_named(answer):
    task = Task("t", ["n="], lambda p, c: answer, max_tokens=2, group_size=2)
    words = rf"task 't': reward\('n=', .*\) returned {re.escape(repr(answer))}; it must return a number"
    s = rlnb.connect("local", model="tiny", seed=0, device="cpu", record=False)
    with s, pytest.raises(TypeError, match=words):
        rl_step(s, task, rlnb.AdamParams(), seed=0)


@pytest.mark.parametrize(
    ("answer", "taken"),
    [
        (True, 1.0),
        (np.bool_(True), 1.0),
        (np.float32(0.5), 0.5),
        (torch.tensor(0.25), 0.25),
        (torch.tensor([0.75]), 0.75),
        (np.int64(1), 1.0),
    ],
)
def test_a_reward_of_numpy_or_torch_numbers_and_bools_is_taken_as_a_float(answer, taken):
    """A reward model's ``torch.tensor(0.25)`` and ``np.bool_`` were refused as "not a number" where a bool and
    ``np.float32`` were taken (and ``history.log`` takes both)."""
    groups = score(Task("t", ["a"], lambda p, c: answer), unscored(["a"], [result(seq([1]))], lambda t: "x"))
    assert groups[0][0].reward == taken and type(groups[0][0].reward) is float


@pytest.mark.parametrize(
    ("answer", "error", "words"),
    [
        (math.inf, ValueError, "returned inf; it must be finite"),
        (np.float64("nan"), ValueError, "returned nan;"),
        (10**400, TypeError, r"returned 1000.*000; it must return a number a float holds"),
        (1 + 2j, TypeError, r"returned \(1\+2j\); it must return a number"),
        (torch.tensor([0.5, 0.25]), TypeError, "returned tensor.*; it must return a number"),
    ],
    ids=["inf", "nan", "10**400", "complex", "two-element tensor"],
)
def test_a_reward_that_is_not_finite_or_no_float_names_the_task_and_texts(answer, error, words):
    """NaN and inf were "the advantages are not finite: the task's rewards were [inf]", naming no task, prompt or
    completion; 10**400 was float()'s bare ``OverflowError``."""
    with pytest.raises(error, match=rf"task 't': reward\('a', 'x'\) {words}"):
        score(Task("t", ["a"], lambda p, c: answer), unscored(["a"], [result(seq([1]))], lambda t: "x"))


@pytest.mark.parametrize(
    ("loss_params", "words"),
    [
        ({"beta": 0.04}, r"loss_params beta = 0.04 needs each sample's reference_logprobs, which rl_step does not"),
        ({"betta": 0.1}, r"grpo params have no field 'betta'"),
    ],
)
def test_rl_step_refuses_a_loss_it_cannot_train_before_sampling(loss_params, words):
    """A KL penalty needs reference log-probs rl_step does not have: every step failed its forward-backward
    while the optim-step behind it still counted a step."""
    with rlnb.connect("local", model="tiny", seed=0, device="cpu", record=False) as s:
        with pytest.raises(ValueError, match=words):
            rl_step(s, digits_task(), rlnb.AdamParams(), loss_params=loss_params)
        assert len(s.history) == 0 and s.step == 0


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"advantage_scale": "std"}, "advantage_scale must be one of sample_std, population_std, none, got 'std'"),
        ({"group_size": 0}, r"group_size must be an integer in \[2, 256\] \(.*\), got 0"),
        ({"group_size": 2.5}, r"group_size must be an integer in \[2, 256\] \(.*\), got 2.5"),
        ({"group_size": 1000}, r"group_size must be an integer in \[2, 256\] \(.*\), got 1000"),  # num_samples' cap
        ({"temperature": -1.0}, r"temperature must be a finite number >= 1e-05 \(.*\), got -1.0"),
        ({"seed": 1.5}, r"seed must be None or an integer in \[-9223372036854775808, 9223372036854775807\], got 1.5"),
    ],
)
def test_rl_step_refuses_bad_step_options_before_sampling(kwargs, words):
    """``advantage_scale="std"`` sampled the step, recorded its completions with NaN rewards, then raised "scale
    must be ..."; a bad group_size, temperature or seed was pydantic's ValidationError (num_samples, SamplingParams)."""
    with rlnb.connect("local", model="tiny", seed=0, device="cpu", record=False) as s:
        with pytest.raises(ValueError, match=words):
            rl_step(s, digits_task(), rlnb.AdamParams(), **kwargs)
        assert len(s.history) == 0 and len(s.history.completions) == 0 and s.step == 0

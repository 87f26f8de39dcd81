"""Rewards and task options a person writes that cannot train: a Ctrl-C inside a slow reward, a reward written as
``async def``, as a generator or in TRL's batch form, a held-out prompt its ``answer`` cannot answer, a group of one
completion or greedy sampling (whose advantages are always 0), and what a step of equal rewards does."""

from __future__ import annotations

import functools
import math
import re

import pytest

import rlnb
from rlnb.batched import Member, run_batched
from rlnb.batched.options import StepOptions
from rlnb.history import History
from rlnb.sweep.options import TrialOptions
from rlnb.tasks import Task, VerifiedTask, digits_task, exact_match, rl_step
from rlnb.tasks.task import session_prompt_ids
from rlnb.widgets import RunPanel


def test_ctrl_c_inside_a_slow_reward_keeps_the_steps_completions_unscored(tmp_path):
    """A reward that calls a slow judge is where a Ctrl-C lands: the step's sampled completions were lost (only an
    ``Exception`` kept them), so the completion the reward was stuck on was nowhere to be seen."""
    seen: list[str] = []

    def slow(prompt: str, completion: str) -> float:
        seen.append(completion)
        if len(seen) == 3:
            raise KeyboardInterrupt  # what Ctrl-C raises in the main thread, wherever the reward waits
        return 0.5

    with rlnb.connect("local", model="tiny", seed=0, device="cpu", runs_dir=tmp_path, run_id="r") as s:
        with pytest.raises(KeyboardInterrupt):
            rl_step(s, Task("slow", ["a=", "b="], slow, group_size=2, max_tokens=3), rlnb.AdamParams(), seed=0)
        assert s.step == 0 and list(s.history.df.kind) == ["sample"]  # nothing was trained on
    table = History.load(tmp_path / "r").completions
    assert list(table.prompt) == ["a=", "a=", "b=", "b="] and set(table.step) == {1}
    assert list(table.completion[:3]) == seen and table.reward.isna().all() and table.advantage.isna().all()


async def _judge(prompt: str, completion: str) -> float:
    return 1.0


def _yields(prompt: str, completion: str):
    yield 1.0


async def _agen(prompt: str, completion: str):
    yield 1.0


class _AsyncJudge:
    async def __call__(self, prompt: str, completion: str) -> float:
        return 1.0


@pytest.mark.parametrize(
    ("reward", "words"),
    [
        (_judge, "an async function"),
        (functools.partial(_judge), "an async function"),
        (_AsyncJudge(), "an async function"),
        (_yields, "a generator function"),
        (_agen, "a generator function"),
    ],
)
def test_a_reward_that_returns_no_number_when_called_is_refused_when_the_task_is_made(reward, words):
    """``async def reward`` (an LLM judge's client is async) returned a coroutine: every step sampled its completions,
    then failed "returned <coroutine object ...>", with "coroutine was never awaited" warnings; in a sweep, every
    trial so. A generator function the same, "returned <generator object ...>"."""
    with pytest.raises(TypeError, match=f"Task.reward is {words}") as refused:
        Task("judged", ["n="], reward)
    assert "reward(prompt, completion) -> float" in str(refused.value)
    with pytest.raises(TypeError, match=f"Task.reward is {words}"):  # a sweep's reward: before its folder is made
        TrialOptions(task=reward)


def trl_length(prompts, completions, **kwargs):
    """TRL's reward function form: every prompt and completion of a batch at once, by keyword; a list back."""
    return [-abs(20 - len(c)) for c in completions]


def test_a_trl_reward_function_is_refused_with_the_wrapper_that_fits(tmp_path):
    """TRL calls ``reward(prompts=[...], completions=[...], **kwargs)`` and reads a list. Given to a ``Task`` it was
    taken, then each step sampled and called it on one prompt's and one completion's text, which it read as lists of
    characters: "returned [-19, -19]; it must return a number", at every step (every trial of a sweep)."""
    words = r"Task.reward takes prompts, completions: TRL's form .*: wrap it, lambda p, c: trl_length\(prompts=\[p\], "
    words += r"completions=\[c\]\)\[0\]$"
    with pytest.raises(TypeError, match=words):
        Task("trl", ["n="], trl_length)
    with pytest.raises(TypeError, match="TRL's form"):
        TrialOptions(task=lambda prompts, completions: [0.0] * len(completions))
    wrapped = Task("trl", ["n="], lambda p, c: trl_length(prompts=[p], completions=[c])[0], group_size=2)
    with rlnb.connect("local", model="tiny", seed=0, device="cpu", runs_dir=tmp_path, run_id="r") as s:
        report = rl_step(s, wrapped, rlnb.AdamParams(), seed=0)
    assert report.rewards == [-abs(20 - len(c)) for c in s.history.completions.completion]


def test_a_plain_function_and_a_callable_object_are_still_rewards():
    """Guard: the refusal above reads what calling returns, not how the reward is spelled."""

    class Judge:
        def __call__(self, prompt: str, completion: str) -> float:
            return 1.0

    for reward in (lambda p, c: 0.0, Judge(), functools.partial(lambda a, p, c: a, 1.0), math.hypot):
        Task("ok", ["n="], reward)


def test_a_group_of_one_completion_is_refused_it_trains_nothing(tmp_path):
    """An advantage is a reward minus its group's mean, so a group of one has advantage 0 whatever it scored: 40
    steps of ``group_size=1`` had loss 0 and gradient norm 0 at every step, the reward flat, nothing said."""
    words = r"group_size must be an integer >= 2 \(.*a group of one completion has advantage 0.*\), got 1"
    with pytest.raises(ValueError, match="Task." + words):
        Task("one", ["n="], lambda p, c: float(len(c)), group_size=1)
    with rlnb.connect("local", model="tiny", seed=0, device="cpu", runs_dir=tmp_path, run_id="r") as s:
        with pytest.raises(ValueError, match=r"group_size must be an integer in \[2, 256\] \(.*advantage 0"):
            rl_step(s, digits_task(), rlnb.AdamParams(), group_size=1, seed=0)
        assert s.history.df.empty  # refused before anything was sampled
    with pytest.raises(ValueError, match=r"group_size must be None or an integer in \[2, 256\] \(.*advantage 0"):
        StepOptions(group_size=1)
    with pytest.raises(ValueError, match=r"group_size must be None or an integer in \[2, 256\]"):
        run_batched("tiny", "adam", [Member(rlnb.AdamParams())], steps=1, group_size=1, device="cpu")
    rl_step_ok = Task("two", ["n="], lambda p, c: float(len(c)), group_size=2)  # guard: the smallest group trains
    assert rl_step_ok.group_size == 2


def _sum_of(prompt: str) -> str:
    return str(int(prompt[0]) + int(prompt[2]))


@pytest.mark.parametrize(
    ("answer", "error", "words"),
    [
        (_sum_of, ValueError, "invalid literal for int"),  # the user's parser on a prompt it cannot read
        (lambda p: int(p[0]) + int(p[2]), TypeError, r"answer\('1\+2='\) returned 3 \(int\)"),
        (lambda p: "" if p == "1+x=" else "3", ValueError, r"answer\('1\+x='\) returned ''"),
    ],
)
def test_a_verified_task_without_an_answer_for_a_prompt_is_refused_when_made(answer, error, words):
    """A held-out prompt the user's ``answer`` cannot read failed the first ``evaluate``, after its samples: in a
    RunPanel, ten steps in; and a raise from inside ``answer`` named no prompt. Every held-out prompt's answer is now
    computed when the task is made, the prompt named (a training prompt's is the reward's: "1+x" is not asked)."""
    with pytest.raises(error, match=words) as refused:
        VerifiedTask(
            "sums", ["2+2=", "0+1="], exact_match(answer), eval_prompts=["1+2=", "3+4=", "1+x="], answer=answer
        )
    if answer is _sum_of:
        assert refused.value.__notes__ == ["task 'sums': answer('1+x=') of eval_prompts[2] raised it"]


def test_greedy_sampling_in_an_rl_step_is_refused_it_trains_nothing(tmp_path):
    """At temperature 0 every completion of a group is the greedy one: equal rewards, advantages 0, loss 0 and gradient
    norm 0 at every step (a random reward gave identical completions advantages summing to 0: ~1e-8, rounding)."""
    words = r"temperature must be a finite number >= 1e-05 \(below it sampling is greedy: every completion of a group"
    with rlnb.connect("local", model="tiny", seed=0, device="cpu", runs_dir=tmp_path, run_id="r") as s:
        for greedy in (0, 1e-6, 9.9e-6):  # the sampler is greedy below wire.MIN_TEMPERATURE, not only at 0
            with pytest.raises(ValueError, match=words + rf".*got {greedy}"):
                rl_step(s, digits_task(), rlnb.AdamParams(), temperature=greedy, seed=0)
        assert s.history.df.empty  # refused before anything was sampled
    with pytest.raises(ValueError, match=words):
        StepOptions(temperature=0.0)
    assert StepOptions(temperature=1e-3).temperature == 1e-3  # guard: a cold temperature still samples


def _prompt_logprobs(s) -> list[float]:
    out = s.sample([list(b"pin: 4242")], max_tokens=1, prompt_logprobs=True).result().results[0]
    return [x for x in out.prompt_logprobs if x is not None]


@pytest.mark.slow
@pytest.mark.parametrize(("optimizer", "params"), [("adam", rlnb.AdamParams(learning_rate=2e-3)), ("muon", None)])
def test_a_step_of_equal_rewards_teaches_nothing_yet_the_optimizer_moves_on_its_momentum(optimizer, params):
    """Guard for docs/tasks.md: every group's rewards equal (a constant reward here) gives loss 0 and gradient norm 0,
    and the weights still move: the optimizer steps on the momentum of the steps before."""
    params = params or rlnb.MuonParams(learning_rate=0.02)
    constant = Task("constant", digits_task().prompts, lambda p, c: 1.0)
    with rlnb.connect("local", model="tiny", optimizer=optimizer, seed=0, device="cpu", record=False) as s:
        rl_step(s, digits_task(), params, seed=1)
        before = _prompt_logprobs(s)
        report = rl_step(s, constant, params, seed=2)
        assert report.loss == 0.0 and report.grad_norm == 0.0 and report.metrics["frac_reward_zero_std"] == 1.0
        assert _prompt_logprobs(s) != pytest.approx(before, abs=1e-4)


@pytest.mark.usefixtures("undrawn_live_view")  # reads no picture of the live view
def test_a_run_panel_refuses_a_held_out_prompt_the_model_cannot_hold_at_the_click():
    """A RunPanel evaluates a ``VerifiedTask`` every 10 steps: a held-out prompt longer than the model's context was
    found there, ten trained steps after the click ("prompt 0 has 301 tokens", which the training prompts are not)."""
    task = VerifiedTask("long", ["ab>"], exact_match(lambda p: p[0]), eval_prompts=["ba>", "b" * 300 + ">"],
                        answer=lambda p: p[0], max_tokens=1)  # fmt: skip
    words = r"task 'long': eval_prompts\[1\]: .*301"
    with rlnb.connect("local", model="tiny", seed=0, device="cpu", record=False) as s:
        with pytest.raises(ValueError, match=words):
            session_prompt_ids(task, s)
        panel = RunPanel(s, task=task, every=0.05)
        panel.run_button.click()
        assert panel.join(60.0) and not panel.running
        assert re.search(words, str(panel.error)) and s.step == 0  # nothing trained
        panel.close()

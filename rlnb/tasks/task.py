"""Teaching tasks: a few prompts plus a reward on the decoded completion.

A task works on text, so the same task runs on the byte-level built-in models and on any Hugging Face
model with its tokenizer (the session's codec turns text into tokens and back).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, overload

from rlnb import wire
from rlnb._input.checks import check_int, set_int, takes
from rlnb._input.shown import shown
from rlnb.history.runconfig import LOCAL
from rlnb.session import Prompt, Session
from rlnb.session.tokens import encode_prompt
from rlnb.text.codec import Codec, NoTokenizer, as_prompt, to_tokens
from rlnb.text.prompts import SHOWN, check_ids, no_room


def completion_text(completion: object, reward: str) -> str:
    """``completion`` if it is text, else a ``TypeError`` naming ``reward``: bytes (a completion not decoded) or
    ``None`` scored 0 silently (every reward of a loop that forgot to decode was 0), or failed inside the reward with
    "'<=' not supported between instances of 'str' and 'int'"."""
    if not isinstance(completion, str):
        raise TypeError(f"{reward} reads the completion's text (a str, as rl_step passes it: session.decode(tokens, "
                        f"skip_special=True)), got {type(completion).__name__} {shown(completion, SHOWN)}")  # fmt: skip
    return completion


_DIGITS = frozenset("0123456789")


def digit_fraction(text: str) -> float:
    """Fraction of the characters of ``text`` that are the ASCII digits 0-9 (0 for empty text). Other digits
    (full-width ``８``, Arabic-Indic ``٨``, ``²``) count as non-digits: ``str.isdigit`` would reward them."""
    if not isinstance(text, str):  # checked here: a call to ``completion_text`` would be a Python call a completion
        completion_text(text, "digit_fraction")
    return sum(map(_DIGITS.__contains__, text)) / max(len(text), 1)  # C calls only: ~9 Python calls a text before


@dataclass
class Task:
    """Prompts (text, token ids or chat messages) and a reward on the decoded completion: a finite number (the
    built-in tasks' lie in [0, 1])."""

    name: str
    prompts: list[Prompt]
    reward: Callable[[str, str], float]
    """``reward(prompt_text, completion_text) -> float``."""
    max_tokens: int = 8
    group_size: int = 8
    """Samples per prompt in one RL step (the GRPO group) unless the caller gives another."""

    def __post_init__(self) -> None:
        if isinstance(self.prompts, str | bytes) or not isinstance(self.prompts, Sequence) or not self.prompts:
            raise TypeError(
                f"Task.prompts must be a non-empty list of prompts, such as ['n='], got {shown(self.prompts, SHOWN)}"
            )
        for i, prompt in enumerate(self.prompts):  # a bad one failed each step (each sweep trial) after its start
            if isinstance(prompt, Iterator):  # every step reads the prompts: the second would find it empty
                raise TypeError(f"Task.prompts[{i}] is an iterator, read once: give its ids as a list")
            if not isinstance(prompt, bytes | bytearray):  # ids of a byte-level model: the session knows
                prompt = as_prompt(prompt, f"Task.prompts[{i}]")
            if not prompt and not isinstance(prompt, str):  # no ids: every step would fail, after the task is made
                raise ValueError(f"Task.prompts[{i}] is empty ({prompt!r}): a prompt needs at least one token")
        if not takes(self.reward, 2):  # each step sampled first, then failed
            raise TypeError(
                f"Task.reward must be a function reward(prompt, completion) -> float, got {shown(self.reward, SHOWN)}"
            )
        batch = _batch_names(self.reward)
        if batch:  # a TRL reward: each step sampled, then it read one prompt's text as a list of characters
            name = getattr(self.reward, "__name__", "")
            name = name if name.isidentifier() else "trl_reward"
            raise TypeError(
                f"Task.reward takes {', '.join(batch)}: TRL's form (a batch's prompts and completions at once, a "
                f"list back)? rlnb calls reward(prompt, completion) on one completion and reads one number: wrap "
                f"it, lambda p, c: {name}(prompts=[p], completions=[c])[0]"
            )
        deferred = _deferred(self.reward)
        if deferred:  # it returns a coroutine or a generator: every step would sample, then fail "returned <...>"
            raise TypeError(
                f"Task.reward is {deferred}: rlnb calls reward(prompt, completion) -> float and reads the number it "
                f"returns, which calling this does not give; use a plain def that returns the number, got "
                f"{shown(self.reward, SHOWN)}"
            )
        set_int(self, "max_tokens", 1, name="Task.max_tokens")
        self.group_size = check_group_size(self.group_size, name="Task.group_size")


GROUP_WHY = (
    "an advantage is a reward minus its group's mean, so a group of one completion has advantage 0 and trains nothing"
)
"""Why a GRPO group holds at least two completions, said by every check of ``group_size``."""


@overload
def check_group_size(
    value: Any, most: int | None = None, *, name: str = ..., optional: Literal[False] = False
) -> int: ...
@overload
def check_group_size(value: Any, most: int | None = None, *, name: str = ..., optional: bool) -> int | None: ...
def check_group_size(
    value: Any, most: int | None = None, *, name: str = "group_size", optional: bool = False
) -> int | None:
    """``value`` as an int of at least 2 (and at most ``most``), or a ``ValueError`` naming ``name``: a group of one
    trained nothing, at every step, silently (loss 0, gradient norm 0)."""
    return check_int(name, value, 2, most, optional=optional, why=GROUP_WHY)


def check_local_group_size(task: Task, target: str) -> None:
    """``ValueError`` naming ``group_size`` before anything is made when ``target`` is the in-process engine
    (``"local"``), which samples at most ``MAX_NUM_SAMPLES`` (256) completions per prompt, and the task's group
    is larger: each trial would fail at its first sample. (``rlnb serve`` has the same cap, Together's API
    publishes none: a remote URL is not checked here.)"""
    if target != LOCAL:
        return
    if task.group_size > wire.MAX_NUM_SAMPLES:
        raise ValueError(
            f"Task.group_size must be in [2, {wire.MAX_NUM_SAMPLES}] for target 'local' (the in-process engine samples "
            f"at most {wire.MAX_NUM_SAMPLES} completions per prompt), got {task.group_size} (task {task.name!r})"
        )


def task_prompt_ids(task: Task, codec: Codec, vocab: int | None, context: int | None) -> list[list[int]]:
    """The task's prompts as token ids of a model with ``codec``, ``vocab`` tokens and ``context`` positions, each
    checked as ``Session.sample`` checks a prompt (a lone surrogate, no tokens, an id past the vocabulary, no room for
    the task's ``max_tokens``: ``no_room``), naming the task: the one check run before anything runs by
    ``run_batched`` and ``sweep`` (a local built-in model), where such a prompt would fail every step of every trial,
    and by ``lr_find`` before it opens a new session. ``vocab`` / ``context`` None: not known, not checked."""
    return _checked_ids(task, functools.partial(to_tokens, codec), vocab, context)


def session_prompt_ids(task: Task, session: Session) -> list[list[int]]:
    """The task's prompts as ``session`` reads them (its codec; its vocabulary and context where it knows them),
    checked as ``task_prompt_ids`` checks them: ``lr_find``'s check before it copies the session, where such a prompt
    would fail the first step, the copy already made, and a RunPanel's at the click. Text for a session without a
    tokenizer is refused naming the prompt. A ``VerifiedTask``'s held-out prompts are checked too: a panel evaluates
    them every 10 steps, where one the model cannot hold would fail, ten trained steps after the click."""
    backend = session.backend
    vocab, context = getattr(backend, "vocab_size", None), getattr(backend, "context_length", None)

    def encode(prompt: Prompt, name: str) -> list[int]:
        return encode_prompt(session.codec, prompt, name, session.id)

    ids = _checked_ids(task, encode, vocab, context)
    held_out = getattr(task, "eval_prompts", [])  # a VerifiedTask's (verified.py imports this module)
    _checked_ids(task, encode, vocab, context, held_out, "eval_prompts")
    return ids


def _checked_ids(
    task: Task,
    encode: Callable[[Prompt, str], list[int]],
    vocab: int | None,
    context: int | None,
    prompts: Sequence[Prompt] | None = None,
    split: str = "prompts",
) -> list[list[int]]:
    out = []
    for i, prompt in enumerate(task.prompts if prompts is None else prompts):
        name = f"task {task.name!r}: {split}[{i}]"
        try:
            ids = encode(prompt, name)
        except NoTokenizer as exc:  # text for a model without a tokenizer: its refusal names the model, not the prompt
            raise NoTokenizer(f"{name}: {exc}") from None
        if not ids:
            raise ValueError(f"{name} encodes to no tokens: a prompt needs at least one")
        check_ids(ids, name, vocab)
        why = no_room(len(ids), task.max_tokens, context) if context is not None else None
        if why is not None:
            raise ValueError(f"{name}: {why}")
        out.append(ids)
    return out


def _deferred(fn: Callable[..., Any]) -> str:
    """What ``fn`` is when calling it gives no value but a coroutine or a generator (an ``async def``, one with
    ``yield``; a partial of one, an object whose ``__call__`` is one), else ``""``."""
    for f in (fn, type(fn).__call__):  # an object: its class's method
        if inspect.iscoroutinefunction(f):
            return "an async function (async def)"
        if inspect.isgeneratorfunction(f) or inspect.isasyncgenfunction(f):
            return "a generator function (it yields)"
    return ""


def _batch_names(fn: Callable[..., Any]) -> list[str]:
    """The parameters of ``fn`` that TRL's reward functions take (``prompts``, ``completions``: lists), if any."""
    try:
        names = inspect.signature(fn).parameters
    except ValueError:  # no signature to read (some builtins)
        return []
    return [name for name in names if name in ("prompts", "completions")]


def digits_task() -> Task:
    """Answer in digits: the reward is the fraction of the decoded completion's characters that are digits.

    A fresh byte-level model emits a digit about 4% of the time (10 of 256 bytes): the reward starts near 0.05
    (0.047, 0.035-0.079, at step 0 of seeds 0-9, ``bench_lessons_more.py --only step0``) and a working RL loop drives
    it towards 1 (0.80 after 40 steps).
    ``"88888888"`` scores 1.0: nothing is checked, the task shows only that the loop moves the policy.
    """
    prompts: list[Prompt] = ["n=", "x: ", "id ", "pin:", "code ", "num="]
    return Task("digits", prompts, lambda _prompt, completion: digit_fraction(completion))

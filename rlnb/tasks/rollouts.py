"""One RL step's sampled completions, scored: rewards, group advantages, the step's RL metrics and the rows
of its completions table. ``rl_step`` and batched trials both use these functions, so a trial gives the
same numbers alone or batched.

The metrics are TRL ``GRPOTrainer``'s, under its names (docs/losses.md says where a definition differs):
reward mean and sample std over the step, the fraction of groups whose rewards do not vary, completion
lengths in tokens and the fraction cut off at ``max_tokens``, and from the forward-backward's loss metrics
the policy's entropy, the KL to the reference and the clip fractions. ``completions/distinct_mean`` is
rlnb's own: the distinct completions per group, a mean over groups (a collapsed policy gives 1).
"""

from __future__ import annotations

import math
import numbers
import reprlib
import statistics
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from math import nan
from operator import attrgetter, eq, itemgetter
from typing import Any, Literal, get_args

from rlnb import wire
from rlnb.history.figures import RLMetric
from rlnb.tasks import exact
from rlnb.tasks.task import Task

AdvantageScale = Literal["sample_std", "population_std", "none"]
"""How ``group_advantages`` scales a group's centred rewards."""
_SCALES: tuple[str, ...] = get_args(AdvantageScale)
ADVANTAGE_EPS = 1e-4
"""TRL's epsilon in (r - mean) / (std + eps)."""
ZERO_STD = 1e-8
"""A group whose reward std is at most this does not vary (``torch.isclose(std, 0)``, as TRL)."""


def group_advantages(rewards: Sequence[float], scale: AdvantageScale = "sample_std") -> list[float]:
    """GRPO advantages of one group: each reward minus the group's mean, scaled.

    ``"sample_std"`` (TRL's definition): divided by the sample std (n - 1) + 1e-4. ``"population_std"``:
    divided by the population std, with no epsilon: scale-free, so rewards a float32 rounding apart get -1 and +1
    (``"sample_std"``: about ±3e-4). ``"none"``: not divided (TRL's
    ``scale_rewards="none"``, Dr. GRPO's choice). A group whose rewards are all equal (one reward
    included) gets advantages of exactly 0; a group with a non-finite reward gets NaN advantages. Rewards of any
    finite size work (near 1e308, their sum overflowed): they are scaled by a power of two first, which changes no
    bit of the result; with ``"none"``, an advantage no float holds is a ``ValueError`` naming the rewards. A reward
    that is no number a float holds (text, which ``float`` reads; ``10**400``) is a ``TypeError`` naming it.
    """
    if scale not in _SCALES:
        raise ValueError(f"scale must be one of {', '.join(_SCALES)}, got {scale!r}")
    # "10" would read as the rewards 1 and 0; a list (a step's, always) skips the ABC check, a Python call a group
    if type(rewards) is not list and (isinstance(rewards, str | bytes) or not isinstance(rewards, Iterable)):
        raise TypeError(f"rewards must be a list of numbers, got {reprlib.repr(rewards)}")
    values = list(rewards)
    if not set(map(type, values)) <= {float}:  # floats (a reward's, always) taken as they are: no call a reward
        values = [r if type(r) is float else _number(r, f"rewards[{i}] is") for i, r in enumerate(values)]
    if not all(map(math.isfinite, values)):  # no advantage can be made of them: NaN, for the caller to refuse
        return [math.nan] * len(values)
    if not values or min(values) == max(values):
        return [0.0] * len(values)
    e = exact.exponent(values)  # the sums of rewards near 1e308 overflow: work on them over 2**e, exactly as they are
    unit = list(map(math.ldexp, values, repeat(-e)))
    mean = statistics.fmean(unit)
    if scale == "sample_std":
        std = exact.stdev(unit) + math.ldexp(ADVANTAGE_EPS, -e)
    elif scale == "population_std":
        std = exact.pstdev(unit)
        if std <= math.ldexp(ZERO_STD, -e):
            return [0.0] * len(values)
    else:  # not divided: each reward's distance from the mean, which a float may not hold
        try:
            return [math.ldexp(u - mean, e) for u in unit]
        except OverflowError:
            raise ValueError(
                f"scale='none' leaves the advantages unscaled, and rewards {reprlib.repr(values)} lie further from "
                f"their group's mean than a float holds ({sys.float_info.max:.4g}): keep every |reward| below "
                f"{sys.float_info.max / 2:.4g}, or use scale='sample_std'"
            ) from None
    return [(u - mean) / std for u in unit]


@dataclass(frozen=True)
class Rollout:
    """One sampled completion and what it scored."""

    group: int
    """Which prompt it answers (its index in the task's prompts)."""
    prompt: str
    completion: str
    """Its text as the reward read it: without the EOS that ended it and without special tokens."""
    tokens: tuple[int, ...]
    """Its tokens as sampled (an ending EOS included: the loss trains on it)."""
    truncated: bool
    """It reached ``max_tokens`` before EOS or a stop string."""
    reward: float
    advantage: float


_REWARD, _TOKENS, _TRUNCATED = attrgetter("reward"), attrgetter("tokens"), attrgetter("truncated")
_SEQUENCES, _STOP_REASON = attrgetter("sequences"), attrgetter("stop_reason")
_FIELDS = attrgetter("group", "prompt", "completion", "tokens", "truncated")
"""A rollout's fields before its reward, in ``Rollout``'s order."""
_ROW_PROMPT, _ROW_COMPLETION = itemgetter(1), itemgetter(2)


def unscored(
    prompts: Sequence[str], results: Sequence[wire.SampleResult], decode: Callable[[Sequence[int]], str]
) -> list[list[Rollout]]:
    """Each prompt's completions (``results[i]`` answers ``prompts[i]``) as sampled, their text as a reward reads
    it (``decode``, which drops EOS and special tokens), not yet scored: rewards and advantages are NaN. A step
    whose reward raises keeps these rows."""
    return [
        [
            Rollout(i, prompt, decode(s.tokens), tuple(s.tokens), s.stop_reason == wire.STOP_REASON_LENGTH, nan, nan)
            for s in result.sequences
        ]
        for i, (prompt, result) in enumerate(zip(prompts, results, strict=True))
    ]


def score(task: Task, groups: Sequence[Sequence[Rollout]], scale: AdvantageScale = "sample_std") -> list[list[Rollout]]:
    """``groups`` (``unscored``) with the task's reward of each completion and their group advantages. Raises what
    the reward raises, and ``ValueError`` when a reward or the advantages are not finite (a policy sample refuses
    them)."""
    scored = []
    for group in groups:  # a loop, not a comprehension: no Python call of its own
        scored.append(_scored(task, list(map(_FIELDS, group)), scale))
    return scored


def score_texts(
    task: Task,
    prompts: Sequence[str],
    results: Sequence[wire.SampleResult],
    texts: Sequence[str],
    scale: AdvantageScale = "sample_std",
) -> list[list[Rollout]]:
    """``score(task, unscored(prompts, results, decode), scale)``, given ``texts``, each completion's ``decode`` in
    order (``rlnb.text.codec.decode_all``): the same rollouts, each built once rather than unscored first. Raises as
    ``score``; a caller that keeps a failed step's rows builds them with ``unscored``."""
    if len(texts) != (count := sum(map(len, map(_SEQUENCES, results)))):
        raise ValueError(f"{len(texts)} texts for {count} completions")
    scored, at = [], 0
    for i, (prompt, result) in enumerate(zip(prompts, results, strict=True)):
        sequences, at = result.sequences, at + len(result.sequences)
        truncated = map(eq, map(_STOP_REASON, sequences), repeat(wire.STOP_REASON_LENGTH))
        fields = zip(
            repeat(i), repeat(prompt), texts[at - len(sequences) : at], map(tuple, map(_TOKENS, sequences)), truncated
        )
        scored.append(_scored(task, list(fields), scale))
    return scored


def _scored(
    task: Task, group: list[tuple[int, str, str, tuple[int, ...], bool]], scale: AdvantageScale
) -> list[Rollout]:
    """One group's rollouts, each built once from its fields before the reward (``group``, ``prompt``,
    ``completion``, ``tokens``, ``truncated``): the task's rewards and their group advantages, or the ``ValueError``
    of advantages that are not finite. ``score`` and ``score_texts`` both end here, so they cannot differ."""
    rewards = _rewards(task, map(_ROW_PROMPT, group), map(_ROW_COMPLETION, group))
    advantages = group_advantages(rewards, scale)
    if not all(map(math.isfinite, advantages)):
        raise ValueError(f"the advantages are not finite: the task's rewards were {rewards}")
    # not dataclasses.replace: 3 Python calls a completion, its constructor 1
    return [Rollout(*f, w, a) for f, w, a in zip(group, rewards, advantages, strict=True)]


def prompt_texts(task: Task, tokens: Sequence[Sequence[int]], decode: Callable[[Sequence[int]], str]) -> list[str]:
    """What a reward reads as each of ``task``'s prompts: its own text, or its tokens (``tokens[i]``) decoded
    by ``decode``, which drops special tokens: a tokenizer's BOS is no part of the prompt a reward parses."""
    return [p if isinstance(p, str) else decode(ids) for p, ids in zip(task.prompts, tokens, strict=True)]


def _rewards(task: Task, prompts: Iterable[str], completions: Iterable[str]) -> list[float]:
    """``task.reward(prompt, completion)`` of each pair as a finite float: a real number, a bool (``completion ==
    answer``), or numpy's or torch's one (a reward model's score, a one-element tensor). Anything else — a string such
    as '0.5' (a reward that returns text is a bug), a complex, NaN, inf, an int past float — is an error naming the
    task and the texts (not, for NaN, "the advantages are not finite", naming neither; for 10**400, float()'s
    ``OverflowError``). What the reward raises is raised as it is, with a note naming them (a bare ``KeyError`` names
    nothing). One loop a group: the reward's own call is the only Python call a float reward costs."""
    reward, rewards = task.reward, []
    for prompt, completion in zip(prompts, completions, strict=False):  # prompts may be endless: repeat(prompt)
        try:
            value = reward(prompt, completion)
        except Exception as exc:  # its own type, for the caller's except clauses; the note says where it came from
            exc.add_note(f"raised by task {task.name!r}: reward({prompt!r}, {completion!r})")
            raise
        if type(value) is not float:
            value = _number(value, f"task {task.name!r}: reward({prompt!r}, {completion!r}) returned", "it must return")
        if not math.isfinite(value):  # no advantage can be made of it
            raise ValueError(
                f"task {task.name!r}: reward({prompt!r}, {completion!r}) returned {value}; it must be finite"
            )
        rewards.append(value)
    return rewards


def _number(value: Any, said: str, must: str = "a reward must be") -> float:
    """``value`` as a float: a real number, a bool, or numpy's or torch's one; else a ``TypeError`` saying ``said``
    and the value: a string such as '0.5' (``float`` reads it), a complex, an int past float (10**400: ``float``'s
    bare ``OverflowError``), a tensor of many elements. NaN and inf are floats: the caller decides on them."""
    try:
        if isinstance(value, str | bytes | complex) or getattr(getattr(value, "dtype", None), "kind", "") == "c":
            raise TypeError
        return float(value.item() if hasattr(value, "item") and not isinstance(value, numbers.Number) else value)
    except (TypeError, ValueError, OverflowError, RuntimeError):  # RuntimeError: a tensor of many elements
        raise TypeError(f"{said} {reprlib.repr(value)}; {must} a number a float holds") from None


def step_metrics(groups: Sequence[Sequence[Rollout]], loss_metrics: Mapping[str, float] | None) -> dict[str, float]:
    """The step's RL metrics (``RL_METRICS``) from its scored groups and its forward-backward's loss metrics."""
    rollouts = list(chain.from_iterable(groups))
    if not rollouts:
        raise ValueError("no completions to measure")
    rewards = list(map(_REWARD, rollouts))
    lengths = list(map(len, map(_TOKENS, rollouts)))
    # fmean of a list, not a generator; fields read by map and attrgetter: no Python call a completion, nor a group
    # but the zero-std flag's and the distinct count's
    out = {
        RLMetric.REWARD: exact.finite_mean(rewards),
        RLMetric.REWARD_STD: exact.finite_stdev(rewards) if len(rewards) > 1 else math.nan,
        RLMetric.ZERO_STD: statistics.fmean([_zero_std(list(map(_REWARD, g))) for g in groups]),
        RLMetric.MEAN_LENGTH: statistics.fmean(lengths),
        RLMetric.MIN_LENGTH: float(min(lengths)),
        RLMetric.MAX_LENGTH: float(max(lengths)),
        RLMetric.CLIPPED: statistics.fmean(list(map(_TRUNCATED, rollouts))),
        RLMetric.DISTINCT: statistics.fmean([len(set(map(_TOKENS, g))) for g in groups]),
    }
    lm = loss_metrics or {}
    for name, key in ((RLMetric.ENTROPY, wire.LossMetric.ENTROPY), (RLMetric.KL, wire.LossMetric.KL_REF)):
        if key in lm:
            out[name] = float(lm[key])
    if wire.LossMetric.CLIP_LOW in lm and wire.LossMetric.CLIP_HIGH in lm:
        low, high = float(lm[wire.LossMetric.CLIP_LOW]), float(lm[wire.LossMetric.CLIP_HIGH])
        out |= {RLMetric.CLIP_LOW: low, RLMetric.CLIP_HIGH: high, RLMetric.CLIP_REGION: low + high}
    return out


def _zero_std(rewards: list[float]) -> float:
    """1.0 where a group's rewards do not vary: one reward, all equal (their std is exactly 0, not computed), or a
    std of at most ``ZERO_STD``."""
    return float(len(rewards) < 2 or min(rewards) == max(rewards) or exact.finite_stdev(rewards) <= ZERO_STD)


def completion_rows(groups: Sequence[Sequence[Rollout]]) -> list[dict[str, Any]]:
    """The rows of the completions table (``History.log_completions``) for one step's groups."""
    return [
        {
            "group": r.group,
            "prompt": r.prompt,
            "completion": r.completion,
            "reward": r.reward,
            "advantage": r.advantage,
            "length": len(r.tokens),
            "truncated": r.truncated,
        }
        for g in groups
        for r in g
    ]

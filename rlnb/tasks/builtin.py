"""The built-in tasks (``TASKS``, by the name ``rlnb demo --task`` takes): ``first_letter`` and ``addition``, verifiable
tasks with a held-out split fixed by ``split_seed``, and the gameable ``digits`` (``rlnb.tasks.task``). Why their
answers are one token, and what each teaches, is ``rlnb.tasks.verified``'s docstring and docs/tasks.md."""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Callable
from itertools import product

from rlnb._input.checks import check_int, is_integer
from rlnb.tasks.task import Task, digits_task
from rlnb.tasks.verified import VerifiedTask, exact_match


def _first(prompt: str) -> str:
    if not prompt:  # an IndexError from inside the reward, naming nothing
        raise ValueError(
            "first_letter: the prompt '' has no first letter to answer (its prompts are a word and '>', "
            "such as 'cadb>')"
        )
    return prompt[0]


def first_letter_task(
    alphabet: str = "abcd", length: int = 4, n_train: int = 64, n_eval: int = 64, split_seed: int = 0
) -> VerifiedTask:
    """Copy the first letter: ``"cadb>"`` → ``"c"`` (one token, exact match).

    The words are strings over ``alphabet``, each letter first in an equal share of both splits; the
    held-out words never appear in training (fixed by ``split_seed``, not by the session's seed, so every
    run sees the same split). The model must attend from the last position back to the first and copy it,
    so held-out words test the mechanism, not memory. A four-letter alphabet makes the task learnable by
    RL from a random init: held-out accuracy 0.8 by step 20-40 (median 30; tiny, Adam 2e-3, seeds 0-9), 1.0 at 40 on
    seeds 0-9 (on 9 of seeds 10-19: seed 14 fell from 1.0 at step 30 to 0.75 at 40); a collapsed policy answering one
    letter everywhere scores 0.25. The letters
    are ASCII: a letter of two bytes is two tokens of the built-in models, an answer ``max_tokens=1`` never gives.
    """
    if not isinstance(alphabet, str):  # b"abcd" (ints) and [1, 2] failed with "'int' object has no attribute 'encode'"
        raise TypeError(
            f"alphabet must be a str of distinct one-byte letters, such as 'abcd', got "
            f"{type(alphabet).__name__} {alphabet!r}"
        )
    k = len(alphabet)
    if k < 2 or len(set(alphabet)) != k:
        raise ValueError(f"alphabet must have at least 2 distinct characters, got {alphabet!r}")
    wide = [c for c in alphabet if len(c.encode()) > 1]
    if wide:  # "αβγδ": a one-byte completion never equals a two-byte letter, so every reward and accuracy were 0
        raise ValueError(
            f"alphabet must be of one-byte (ASCII) characters, got {''.join(wide)!r}: the answer is one "
            f"token, and the built-in byte-level models would need {len(wide[0].encode())} for "
            f"{wide[0]!r}, so no completion could score"
        )
    length = check_int("length", length, 1, MAX_LENGTH, why="letters per word; the built-in models' context holds 254")
    n_train, n_eval = (
        check_int(
            name,
            v,
            1,
            MAX_PROMPTS,
            why="prompts per split; each step samples group_size completions of every training prompt",
        )
        for name, v in (("n_train", n_train), ("n_eval", n_eval))
    )
    if n_train % k or n_eval % k:
        raise ValueError(f"n_train ({n_train}) and n_eval ({n_eval}) must be positive multiples of {k}")
    rng = random.Random(_split_seed(split_seed))
    train: list[str] = []
    held_out: list[str] = []
    for c in alphabet:
        words = _words(c, alphabet, length, (n_train + n_eval) // k, rng)
        train += words[: n_train // k]
        held_out += words[n_train // k : (n_train + n_eval) // k]
    rng.shuffle(train)
    rng.shuffle(held_out)
    return VerifiedTask(
        "first_letter",
        [w + ">" for w in train],
        exact_match(_first),
        max_tokens=1,
        group_size=16,
        eval_prompts=[w + ">" for w in held_out],
        answer=_first,
        chance=1 / k,
    )


def _split_seed(seed: object) -> int:
    """The seed that fixes a task's split: ``None`` seeded it from the system's entropy, a new held-out set at every
    call (two tasks "the same" scored each other's training prompts), silently."""
    if not is_integer(seed):
        raise ValueError(f"split_seed must be an integer (it fixes the held-out split), got {seed!r}")
    return int(seed)  # type: ignore[call-overload]


MAX_LENGTH = 1024
"""The longest word ``first_letter_task`` makes: ``length=10**4`` would take minutes to draw its words and longer ones
hang, for prompts of ``length + 1`` tokens that the built-in models (a context of 256) never hold."""
MAX_PROMPTS = 2**14
"""The most prompts in one split of ``first_letter_task``: ``n_train=10**9`` drew words until memory ran out (and
each step samples ``group_size`` completions of every training prompt)."""

ENUMERATED = 2**16
"""Up to this many words per first letter, every one is listed and shuffled (the splits the lessons were measured
on); past it, words are drawn: listing 4**11 of them (``length=12``) would run for minutes and take gigabytes."""


def _words(first: str, alphabet: str, length: int, needed: int, rng: random.Random) -> list[str]:
    """``needed`` distinct words of ``length`` letters starting with ``first``, in ``rng``'s order."""
    count = len(alphabet) ** (length - 1)
    if needed > count:
        raise ValueError(f"length {length} gives only {count} words per first letter; n_train + n_eval needs {needed}")
    if count <= ENUMERATED:
        words = [first + "".join(w) for w in product(alphabet, repeat=length - 1)]
        rng.shuffle(words)
        return words[:needed]
    drawn: dict[int, None] = {}  # distinct, in the order drawn
    while len(drawn) < needed:
        drawn.setdefault(rng.randrange(count), None)
    return [first + _letters(i, alphabet, length - 1) for i in drawn]


def _letters(i: int, alphabet: str, n: int) -> str:
    """The ``n`` base-``len(alphabet)`` digits of ``i`` as letters, least significant first, in time linear in ``n``
    (``i // k**j % k`` for each ``j`` would take minutes at ``length=10**4``)."""
    out = []
    for _ in range(n):
        i, digit = divmod(i, len(alphabet))
        out.append(alphabet[digit])
    return "".join(out)


SUM_PROMPT = re.compile(r"([0-9])\+([0-9])=")
"""An addition prompt: two ASCII digits (int() also read " 3 + 4 ", "٣" and "-3", and a prompt of any other form
raised "not enough values to unpack" from inside the reward)."""


def _sum(prompt: str) -> str:
    match = SUM_PROMPT.fullmatch(prompt) if isinstance(prompt, str) else None
    if match is None:
        raise ValueError(
            f"addition: the prompt {prompt!r} is not 'a+b=' where a and b are single digits 0-9 (such as "
            "'3+4='): it has no sum to answer"
        )
    return str(int(match[1]) + int(match[2]))


def _traits(pair: tuple[int, int]) -> tuple[tuple[str, int], tuple[str, bool]]:
    """What the held-out split keeps in proportion: the sum (the answer), and whether a digit is 0 (``5+0=``, where
    copying the larger digit, without adding, is right)."""
    return ("sum", sum(pair)), ("zero", 0 in pair)


def _spread(pairs: list[tuple[int, int]], n: int, rng: random.Random) -> list[tuple[int, int]]:
    """``n`` of ``pairs``, each held out with its mirror (``3+4=`` with ``4+3=``), so that no held-out sum can be
    read off a training prompt the other way round (a lookup of the training sums scored 0.82-1.00 held out).
    Doubles (``4+4=``, no mirror) take their share of ``n``; each next pair is one whose traits are furthest below
    their share (random among equals), so every sum is held out in proportion to its share: a plain shuffle held
    out "5" for 4 of 11 sums (seed 0) where 1.2 is its share, and the held-out accuracy measured mostly one answer."""
    share = Counter(t for p in pairs for t in _traits(p))
    groups = [sorted({(a, b), (b, a)}) for a, b in pairs if a <= b]
    rng.shuffle(groups)
    n_doubles = sum(len(g) == 1 for g in groups)
    doubles = min(  # an odd n needs an odd count of doubles, and at most every mirror pair can go
        (d for d in range(n_doubles + 1) if d % 2 == n % 2 and 0 <= n - d <= 2 * (len(groups) - n_doubles)),
        key=lambda d: abs(d - n * n_doubles / len(pairs)),
    )
    left = {1: doubles, 2: n - doubles}  # pairs still to hold out, by the size of their group
    held: list[tuple[int, int]] = []
    while len(held) < n:
        have = Counter(t for p in held for t in _traits(p))
        g = max(
            (g for g in groups if left[len(g)] > 0),
            key=lambda g: sum(n * share[t] / len(pairs) - have[t] - len(g) / 2 for t in _traits(g[0])),
        )
        groups.remove(g)
        left[len(g)] -= len(g)
        held += g
    rng.shuffle(held)
    return held


def addition_task(n_eval: int = 11, split_seed: int = 0) -> VerifiedTask:
    """Single-digit addition with a one-digit answer: ``"3+4="`` → ``"7"`` (the 55 pairs with a + b ≤ 9).

    ``n_eval`` pairs are held out, each with its mirror and each sum in proportion to its share (``_spread``), so
    no held-out sum can be looked up from training; "answer the larger digit" (right where a digit is 0, no adding)
    scores 4 of the default 11 held out. In 40 steps the tiny model memorises some training sums (training-prompt
    accuracy 0.26, 0.18-0.39 on seeds 0-9) but does not learn to add from 44 examples (held-out accuracy 0.045,
    0-0.18, above chance, 0.18, on no seed; an AMD EPYC, docs/tasks.md): the lesson "reward is not generalisation"."""
    pairs = [(a, b) for a in range(10) for b in range(10) if a + b <= 9]
    if not is_integer(n_eval) or not 1 <= n_eval < len(pairs):  # 2.5: a slice's TypeError; True: 1
        raise ValueError(f"n_eval must be an integer in [1, {len(pairs) - 1}], got {n_eval!r}")
    held_out = _spread(pairs, n_eval, random.Random(_split_seed(split_seed)))
    train = [p for p in pairs if p not in held_out]
    answers = [str(a + b) for a, b in held_out]
    return VerifiedTask(
        "addition",
        [f"{a}+{b}=" for a, b in train],
        exact_match(_sum),
        max_tokens=1,
        group_size=16,
        eval_prompts=[f"{a}+{b}=" for a, b in held_out],
        answer=_sum,
        chance=max(answers.count(x) for x in set(answers)) / len(answers),
    )


TASKS: dict[str, Callable[[], Task]] = {
    "first_letter": first_letter_task,
    "addition": addition_task,
    "digits": digits_task,
}
"""The built-in tasks by name (``rlnb demo --task NAME``)."""

"""Verifiable teaching tasks: the reward needs the right answer, and accuracy is measured apart from it.

The ``digits`` task rewards the fraction of digit characters, so ``"88888888"`` scores 1.0: it shows that
the RL loop moves the policy, not that anything is learned. A ``VerifiedTask`` has (1) a reward that only
the correct answer earns (exact match, no partial credit), (2) a held-out eval split never trained on and
(3) ``evaluate``: pass@1 at temperature 0 on that split. The training reward and the eval accuracy are two
numbers, so learning and gaming can be told apart.

The answers are one token (``max_tokens=1``): the built-in models are byte-level and start near uniform over
256 bytes, so a random policy hits a one-byte answer with p ≈ 1/256, and every further answer byte divides
that by 256 again; RL from scratch would never see a reward for a two-byte answer. With one token the
completion *is* the answer: no stop string to learn and nothing to parse. No format credit either: with 0.1
for any letter, a prompt-independent letter earns 0.325 (0.25 × 1 + 0.75 × 0.1), more than chance, and the policy
learns that first (at step 20 of seeds 0-9 all answer at chance; docs/tasks.md has the figures,
``bench/bench_lessons_more.py --only partial`` makes them).
"""

from __future__ import annotations

import functools
import random
import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import product

from rlnb._checks import check_int, is_integer
from rlnb.session import Prompt, Session
from rlnb.tasks.task import Task, completion_text, digits_task

EVAL_EVERY = 10
"""Steps between two evaluations in the panel and in ``rlnb.tasks.lesson.train``."""


def expected(answer: Callable[[str], str], prompt: str) -> str:
    """``answer(prompt)``, which must be text: an int (``7`` for ``"3+4="``) never equals a completion, so every
    reward and the accuracy were 0, silently. Nor empty: a completion of EOS alone reads as ``""`` (the reward reads
    no EOS), so a policy that stops at once earned every such reward."""
    value = answer(prompt)
    if not isinstance(value, str):
        raise TypeError(f"answer({prompt!r}) returned {value!r} ({type(value).__name__}): it must return the answer's "
                        f"text, which the completion is compared to (such as str({value!r}))")  # fmt: skip
    if not value:
        raise ValueError(
            f"answer({prompt!r}) returned '': a completion of EOS alone reads as '' (the reward reads no "
            "EOS), so a policy that stops at once would earn it; give every prompt a non-empty answer"
        )
    return value


@dataclass
class VerifiedTask(Task):
    """A ``Task`` whose reward is exact match against ``answer(prompt)``, with a held-out eval split."""

    eval_prompts: list[str] = field(default_factory=list)
    """Prompts never trained on: what ``evaluate`` scores."""
    answer: Callable[[str], str] = field(kw_only=True)
    """The reference answer of a prompt, computed from its text: required, by keyword (a field without a default
    after ones with defaults)."""
    chance: float = 0.0
    """The eval accuracy of the best constant answer: what the best collapsed policy (one output for every
    prompt) scores, the floor a lesson compares against (one collapsed onto another answer scores less)."""
    _held_out: dict[str, str] = field(default_factory=dict, init=False, repr=False, compare=False)
    """Each held-out prompt's answer, asked once when the task is made (an ``answer`` may be expensive: a solver)."""
    _held_out_by: object = field(default=None, init=False, repr=False, compare=False)
    """The ``answer`` that ``_held_out`` holds the answers of: one set on the task later is asked afresh."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not callable(self.answer):  # evaluate scored "completion == str(prompt)"
            raise TypeError(f"VerifiedTask.answer must be a function answer(prompt) -> str, the text that evaluate "
                            f"compares a completion to, got {self.answer!r}")  # fmt: skip
        prompts = self.eval_prompts  # a string was evaluated one character a prompt
        if (
            isinstance(prompts, str | bytes)
            or not isinstance(prompts, Sequence)
            or not all(isinstance(p, str) for p in prompts)
        ):
            raise TypeError(f"VerifiedTask.eval_prompts must be a list of text prompts, such as ['cadb>'], "
                            f"got {prompts!r}")  # fmt: skip
        self.eval_prompts = list(prompts)
        trained = sorted(set(prompts) & {p for p in self.prompts if isinstance(p, str)})
        if trained:  # its accuracy would be called held-out while measuring what training rewarded
            raise ValueError(f"VerifiedTask.eval_prompts must be held out of the training prompts; both hold "
                             f"{trained[:5]}{' ...' if len(trained) > 5 else ''} ({len(trained)} in all)")  # fmt: skip
        self._held_out, self._held_out_by = {}, self.answer
        for i, prompt in enumerate(self.eval_prompts):  # else the first evaluate failed after its samples (a panel's
            try:  # at step 10), and a raise from inside the user's answer named no prompt
                self._held_out[prompt] = expected(self.answer, prompt)
            except Exception as exc:  # its own type; the training prompts' answers are the reward's (it names them)
                exc.add_note(f"task {self.name!r}: answer({prompt!r}) of eval_prompts[{i}] raised it")
                raise

    def _expected(self, prompt: str) -> str:
        """``expected(self.answer, prompt)``: a held-out prompt's as asked when the task was made."""
        if self.answer is self._held_out_by and prompt in self._held_out:
            return self._held_out[prompt]
        return expected(self.answer, prompt)

    def evaluate(self, session: Session, n: int | None = None, *, split: str = "eval") -> float:
        """Accuracy, pass@1 at temperature 0 (greedy), on the first ``n`` prompts of the held-out split
        (``split="train"``: the training prompts; ``n`` None: all, more than there are: a ``ValueError``). Reads the
        sampler's weights, i.e. the last weights-sync."""
        if split not in ("eval", "train"):
            raise ValueError(f"split must be 'eval' or 'train', got {split!r}")
        n = check_int("n", n, 1, optional=True)  # n=-1 evaluated all but the last prompt
        every: list[Prompt] = list(self.eval_prompts if split == "eval" else self.prompts)
        if not every:
            raise ValueError(f"task {self.name!r} has no {split} prompts to evaluate")
        if n is not None and n > len(every):  # n=1000 scored the 64 there are, as if it were 1000
            raise ValueError(f"n must be at most the {len(every)} {split} prompts of task {self.name!r} (or None: all "
                             f"of them), got {n}")  # fmt: skip
        prompts = every[:n]
        ids = [session.encode(p) for p in prompts]
        out = session.sample(ids, num_samples=1, max_tokens=self.max_tokens, temperature=0.0).result()

        def plain(tokens: Sequence[int]) -> str:  # as rl_step's reward reads them
            return session.decode(tokens, skip_special=True)

        texts = [plain(r.sequences[0].tokens) for r in out.results]
        # a training prompt of token ids (or chat messages) is its text as the reward reads it, not str() of a list
        asked = [p if isinstance(p, str) else plain(i) for p, i in zip(prompts, ids, strict=True)]
        return statistics.fmean(float(t == self._expected(p)) for t, p in zip(texts, asked, strict=True))


def exact_match(answer: Callable[[str], str]) -> Callable[[str, str], float]:
    """``reward(prompt, completion)``: 1.0 when the completion is exactly ``answer(prompt)``, else 0.0.
    No stripping, case folding or number parsing: ``" 7"``, ``"07"``, ``"+7"``, ``"7.0"``, full-width ``"７"``,
    ``"7 8"`` and ``"1 2 3 ... 9"`` all score 0, for a lenient match is a reward that can be gamed. A completion that is
    not text (bytes, ``None``) is a ``TypeError``, not a silent 0."""

    answer = functools.partial(expected, answer)  # checked, in a closed-over value

    def reward(prompt: str, completion: str) -> float:
        return float(completion_text(completion, "exact_match's reward") == answer(prompt))

    return reward


def _first(prompt: str) -> str:
    if not prompt:  # an IndexError from inside the reward, naming nothing
        raise ValueError("first_letter: the prompt '' has no first letter to answer (its prompts are a word and '>', "
                         "such as 'cadb>')")  # fmt: skip
    return prompt[0]


def first_letter_task(
    alphabet: str = "abcd", length: int = 4, n_train: int = 64, n_eval: int = 64, split_seed: int = 0
) -> VerifiedTask:
    """Copy the first letter: ``"cadb>"`` → ``"c"`` (one token, exact match).

    The words are strings over ``alphabet``, each letter first in an equal share of both splits; the
    held-out words never appear in training (fixed by ``split_seed``, not by the session's seed, so every
    run sees the same split). The model must attend from the last position back to the first and copy it,
    so held-out words test the mechanism, not memory. A four-letter alphabet makes the task learnable by
    RL from a random init: held-out accuracy 0.8 by step 20-40 (median 30; tiny, Adam 2e-3, seeds 0-9), 1.0 at 40; a
    collapsed policy answering one letter everywhere scores 0.25. The letters
    are ASCII: a letter of two bytes is two tokens of the built-in models, an answer ``max_tokens=1`` never gives.
    """
    if not isinstance(alphabet, str):  # b"abcd" (ints) and [1, 2] failed with "'int' object has no attribute 'encode'"
        raise TypeError(f"alphabet must be a str of distinct one-byte letters, such as 'abcd', got "
                        f"{type(alphabet).__name__} {alphabet!r}")  # fmt: skip
    k = len(alphabet)
    if k < 2 or len(set(alphabet)) != k:
        raise ValueError(f"alphabet must have at least 2 distinct characters, got {alphabet!r}")
    wide = [c for c in alphabet if len(c.encode()) > 1]
    if wide:  # "αβγδ": a one-byte completion never equals a two-byte letter, so every reward and accuracy were 0
        raise ValueError(f"alphabet must be of one-byte (ASCII) characters, got {''.join(wide)!r}: the answer is one "
                         f"token, and the built-in byte-level models would need {len(wide[0].encode())} for "
                         f"{wide[0]!r}, so no completion could score")  # fmt: skip
    length = check_int("length", length, 1, MAX_LENGTH, why="letters per word; the built-in models' context holds 254")
    n_train, n_eval = (check_int(name, v, 1, MAX_PROMPTS, why="prompts per split; each step samples group_size "
                                 "completions of every training prompt") for name, v in
                       (("n_train", n_train), ("n_eval", n_eval)))  # fmt: skip
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
        raise ValueError(f"addition: the prompt {prompt!r} is not 'a+b=' where a and b are single digits 0-9 (such as "
                         "'3+4='): it has no sum to answer")  # fmt: skip
    return str(int(match[1]) + int(match[2]))


def _spread(pairs: list[tuple[int, int]], n: int, rng: random.Random) -> list[tuple[int, int]]:
    """``n`` of ``pairs`` drawn systematically along their sums (random within a sum, a random start), so every sum is
    held out in proportion to its share, within one pair: a plain shuffle held out "5" for 4 of 11 sums (seed 0)
    where 1.2 is its share, and the held-out accuracy measured mostly one answer."""
    ordered = sorted(rng.sample(pairs, len(pairs)), key=sum)  # stable: a random order within each sum
    start = rng.random()
    picked = [ordered[int((i + start) * len(pairs) / n)] for i in range(n)]  # one per stride of len/n >= 1
    rng.shuffle(picked)
    return picked


def addition_task(n_eval: int = 11, split_seed: int = 0) -> VerifiedTask:
    """Single-digit addition with a one-digit answer: ``"3+4="`` → ``"7"`` (the 55 pairs with a + b ≤ 9).

    ``n_eval`` pairs are held out, each sum in proportion to its share (``_spread``). In 40 steps the tiny model
    memorises some training sums (training-prompt accuracy 0.24, 0.14-0.36 on seeds 0-9) but does not learn to add
    from 44 examples (held-out accuracy 0.12, 0-0.27, above chance, 0.18, on one seed of ten; docs/tasks.md): the
    lesson "reward is not generalisation"."""
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

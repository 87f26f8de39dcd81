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
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from rlnb._input.checks import check_int
from rlnb.session import Prompt, Session
from rlnb.tasks.task import Task, completion_text

CHANCE_MARGIN = 0.1
"""How far above ``VerifiedTask.chance`` a score still counts as a constant answer's (a collapsed lesson run's
held-out accuracy, a range test's reward)."""
EVAL_EVERY = 10
"""Steps between two evaluations in the panel and in ``rlnb.tasks.lesson.train``."""


def expected(answer: Callable[[str], str], prompt: str) -> str:
    """``answer(prompt)``, which must be text: an int (``7`` for ``"3+4="``) never equals a completion, so every
    reward and the accuracy were 0, silently. Nor empty: a completion of EOS alone reads as ``""`` (the reward reads
    no EOS), so a policy that stops at once earned every such reward."""
    value = answer(prompt)
    if not isinstance(value, str):
        raise TypeError(
            f"answer({prompt!r}) returned {value!r} ({type(value).__name__}): it must return the answer's "
            f"text, which the completion is compared to (such as str({value!r}))"
        )
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
            raise TypeError(
                f"VerifiedTask.answer must be a function answer(prompt) -> str, the text that evaluate "
                f"compares a completion to, got {self.answer!r}"
            )
        prompts = self.eval_prompts  # a string was evaluated one character a prompt
        if (
            isinstance(prompts, str | bytes)
            or not isinstance(prompts, Sequence)
            or not all(isinstance(p, str) for p in prompts)
        ):
            raise TypeError(
                f"VerifiedTask.eval_prompts must be a list of text prompts, such as ['cadb>'], got {prompts!r}"
            )
        self.eval_prompts = list(prompts)
        trained = sorted(set(prompts) & {p for p in self.prompts if isinstance(p, str)})
        if trained:  # its accuracy would be called held-out while measuring what training rewarded
            raise ValueError(
                f"VerifiedTask.eval_prompts must be held out of the training prompts; both hold "
                f"{trained[:5]}{' ...' if len(trained) > 5 else ''} ({len(trained)} in all)"
            )
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
            raise ValueError(
                f"n must be at most the {len(every)} {split} prompts of task {self.name!r} (or None: all "
                f"of them), got {n}"
            )
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

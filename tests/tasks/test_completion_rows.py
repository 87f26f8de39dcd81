"""A step's completions cost few Python calls each (issue 20 §3: every trial, alone or a batched member, pays them
for each completion of each step), and what they record is what the full check records: rlnb's own rows take
``completion_log``'s plain path, a row of any other kind every conversion and check."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from types import MappingProxyType
from typing import Any, get_args

import pandas as pd
import pytest

from rlnb import wire
from rlnb.history import History
from rlnb.history.completion_log import checked
from rlnb.tasks import Task, score, unscored
from rlnb.tasks.rollouts import Rollout, completion_rows, score_texts, step_metrics
from rlnb.text.codec import ByteCodec, decode_all

EOS = 300
STOP = next(r for r in get_args(wire.StopReason) if r != wire.STOP_REASON_LENGTH)
PROMPTS = ["2+2=", "café ✓ ", "3*3="]
TOKENS = [  # ASCII, UTF-8 (é), an invalid byte (U+FFFD), an EOS, nothing at all
    [[52, EOS], [52, 52, 52], [195, 169, 255], []],
    [[49, 50, 51, 52], [226, 156, 147, EOS], [48], [255, 254]],
    [[57, EOS], [57, 57], [57, 32, 57], [97, 98, 99, 100]],
]


def results() -> list[wire.SampleResult]:
    """A step's samples: three groups of four, ``TOKENS``."""
    segments = [wire.PolicyVersionSegment(start_token=0, version=0)]
    return [
        wire.SampleResult(
            policy_segments=segments,
            sequences=[
                wire.SampledSequence(
                    tokens=t, logprobs=[-1.0] * len(t), stop_reason=STOP if t[-1:] == [EOS] else wire.STOP_REASON_LENGTH
                )
                for t in group
            ],
        )  # fmt: skip
        for group in TOKENS
    ]


def digits(prompt: str, completion: str) -> float:
    return sum(ch.isdigit() for ch in completion) / max(len(completion), 1)


def batch() -> tuple[list[list[Any]], list[list[Any]]]:
    """The step as ``unscored`` and ``score`` make it: decoded with the byte codec (EOS left out), not yet scored
    (NaN rewards, as kept when a reward raises), then scored."""
    codec = ByteCodec(eos_token_ids=[EOS])
    raw = unscored(PROMPTS, results(), lambda t: codec.decode(t, True))
    return raw, score(Task("digits", PROMPTS, digits), raw)


def written(tmp_path: Any, name: str, rows_of_steps: list[list[Any]]) -> tuple[bytes, pd.DataFrame]:
    history = History.create({"optimizer": "adam"}, tmp_path, name)
    for step, rows in enumerate(rows_of_steps, start=1):
        history.log_completions(step, rows)
    table = history.completions
    history.close()
    return (tmp_path / name / "completions.jsonl").read_bytes(), table


def test_rlnbs_own_rows_write_the_same_lines_as_the_full_check(tmp_path):
    raw, scored = batch()
    own = [completion_rows(raw), completion_rows(scored)]
    assert any(math.isnan(r["reward"]) for r in own[0]) and any(not r["completion"].isascii() for r in own[1])
    plain, plain_table = written(tmp_path, "plain", own)
    # the same rows as read-only mappings: not a dict, so each takes the full check's every conversion
    full, full_table = written(tmp_path, "full", [[MappingProxyType(r) for r in rows] for rows in own])
    assert plain == full and plain.count(b"\n") == 24
    pd.testing.assert_frame_equal(plain_table, full_table)
    assert checked(2, own[1]) == checked(2, [MappingProxyType(r) for r in own[1]])


def python_calls(fn: Callable[[], object]) -> int:
    """Python function calls made while ``fn`` runs (C calls, such as ``str.encode``, not counted), but those in
    ``statistics`` and ``fractions``: the group's std in Fractions, a fixed cost a group, kept as it is (any other
    arithmetic moves every history's advantages)."""
    calls = 0

    def count(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        where = frame.f_code.co_filename
        calls += event == "call" and not where.endswith(("/statistics.py", "/fractions.py"))

    sys.setprofile(count)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


def test_a_steps_completions_are_decoded_scored_and_checked_with_few_python_calls_each():
    """Checking rlnb's own rows: no call a row (was 25). Decoding: 3 calls a completion (was 6). Scoring: 2 a
    completion, the reward's own call and the ``Rollout``, and 8 a group (was 6 and 28: ``dataclasses.replace``,
    generators; then 4 and 13: a call to check each reward, ``typing.get_args``; then 8: ``isinstance`` of an ABC;
    then 7; 8 with the one call a group to ``_scored``, the steps ``score`` and ``score_texts`` share)."""
    raw, scored = batch()
    rows = completion_rows(scored) * 4  # 48 rows: a step of 6 prompts, 8 completions each
    assert python_calls(lambda: checked(1, rows)) < 10
    codec = ByteCodec(eos_token_ids=[EOS])
    tokens = [t for group in TOKENS for t in group]
    assert python_calls(lambda: [codec.decode(t, True) for t in tokens]) <= 2 + 3 * len(tokens)
    task = Task("digits", PROMPTS, lambda p, c: 0.5 * len(c))
    assert python_calls(lambda: score(task, raw)) <= 2 + 2 * len(tokens) + 8 * len(TOKENS)


def test_a_steps_completions_are_decoded_at_once_and_each_rollout_built_once():
    """What a batched member and ``rl_step`` do now: ``decode_all`` (no call a completion, was 3 through ``decode``)
    and ``score_texts`` (each ``Rollout`` built once, scored; ``unscored`` then ``score`` built it twice): the
    reward's own call and the ``Rollout``'s a completion, and 8 a group, one of them the call to ``_scored``, which
    ``score`` shares (the old way: 6 a completion and 8 a group)."""
    codec, sampled = ByteCodec(eos_token_ids=[EOS]), results()
    task = Task("digits", PROMPTS, lambda p, c: 0.5 * len(c))
    tokens = [s.tokens for r in sampled for s in r.sequences]
    calls = python_calls(lambda: score_texts(task, PROMPTS, sampled, decode_all(codec, tokens, skip_special=True)))
    assert calls <= 8 + 2 * len(tokens) + 8 * len(TOKENS), calls


def test_score_texts_gives_what_unscored_then_score_give():
    """The same rollouts, and the same errors: a reward's own (with its note), a non-finite reward, and texts that
    are not one a completion."""
    codec, sampled = ByteCodec(eos_token_ids=[EOS]), results()
    texts = decode_all(codec, [s.tokens for r in sampled for s in r.sequences], skip_special=True)
    raw, scored = batch()
    task = Task("digits", PROMPTS, digits)
    assert score_texts(task, PROMPTS, sampled, texts) == scored
    assert score_texts(task, PROMPTS, sampled, texts, "none") == score(task, raw, "none")
    assert [r.completion for g in scored for r in g] == texts and scored[0][2].completion == "é\ufffd"

    def raises(prompt: str, completion: str) -> float:
        return {"4": 1.0}[completion]

    for reward in (raises, lambda p, c: math.nan if c == "4" else 0.0):
        bad = Task("bad", PROMPTS, reward)
        with pytest.raises((KeyError, ValueError)) as new:
            score_texts(bad, PROMPTS, sampled, texts)
        with pytest.raises((KeyError, ValueError)) as old:
            score(bad, raw)
        assert type(new.value) is type(old.value) and str(new.value) == str(old.value)
        assert getattr(new.value, "__notes__", None) == getattr(old.value, "__notes__", None)
    with pytest.raises(ValueError, match="11 texts for 12 completions"):
        score_texts(task, PROMPTS, sampled, texts[:-1])


def test_a_steps_metrics_cost_a_few_python_calls_a_group_and_none_a_completion():
    """``step_metrics`` of 6 groups of 8 (a demo step): 36 calls (56 with a call a group to list its rewards and one to
    count its distinct completions, 73 before ``exact``: ``statistics`` itself not counted). A group whose rewards
    are all equal does not compute their std."""
    groups = [
        [Rollout(i, "p", "c", (1, j % 3), j % 2 == 0, (i * j % 9) / 8, 0.0) for j in range(8)] for i in range(6)
    ]  # fmt: skip
    groups[0] = [Rollout(0, "p", "c", (1,), False, 0.5, 0.0)] * 8  # all equal: its flag without a std
    assert python_calls(lambda: step_metrics(groups, None)) <= 10 + 5 * len(groups)
    assert step_metrics(groups, None)["frac_reward_zero_std"] == 1 / 6


@pytest.mark.parametrize(
    "change, problem",
    [
        ({"completion": "a\ud800"}, r"completion holds a lone surrogate at position 1"),
        ({"prompt": "é\udcff"}, r"prompt holds a lone surrogate at position 1"),
        ({"length": -1}, r"length = -1 \(tokens: >= 0\)"),
        ({"group": 2**63}, r"group = 9223372036854775808"),
        ({"reward": "0.5"}, r"reward = '0.5'"),
        ({"truncated": 1}, r"truncated = 1"),
        ({"advantage": "0.5"}, r"advantage = '0.5'"),
        ({"length": True}, r"length = True"),
    ],
)
def test_a_plain_row_the_table_cannot_hold_is_refused_as_before(change, problem):
    """A plain dict row is checked without calls; one it cannot hold gets the full check's error, naming the row."""
    _, scored = batch()
    rows = completion_rows(scored)
    rows[5] = {**rows[5], **change}
    with pytest.raises(ValueError, match=rf"history\.log_completions: rows\[5\]: {problem}"):
        checked(1, rows)


def test_a_plain_row_of_other_values_the_table_holds_is_kept_as_before():
    """A None reward (NaN) and an int advantage go the full check's way, which keeps them; a row with a ``step`` of its
    own gets the step given."""
    _, scored = batch()
    rows = completion_rows(scored)
    rows[1] = {**rows[1], "reward": None, "advantage": 2}
    rows[2] = {"step": 7, **rows[2]}
    kept = checked(3, rows)
    assert math.isnan(kept[1]["reward"]) and kept[1]["advantage"] == 2 and type(kept[1]["advantage"]) is int
    assert [r["step"] for r in kept] == [3] * len(rows) and kept[0] == {"step": 3, **rows[0]}

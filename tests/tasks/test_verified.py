"""Verifiable tasks: splits, exact-match rewards, held-out evaluation, the corpus helpers and the demo's task list."""

import dataclasses
import random
import re

import numpy as np
import pytest

import rlnb
from rlnb.tasks import TASKS, VerifiedTask, addition_task, corpus, exact_match, first_letter_task
from rlnb.tasks.lesson import LessonRun, log_accuracy
from rlnb.testing import FakeBackend


def test_first_letter_splits_are_disjoint_balanced_and_fixed():
    task = first_letter_task()
    assert len(task.prompts) == len(task.eval_prompts) == 64 and not set(task.prompts) & set(task.eval_prompts)
    for split in (task.prompts, task.eval_prompts):
        assert all(len(p) == 5 and p.endswith(">") and set(p[:4]) <= set("abcd") for p in split)
        assert sorted(p[0] for p in split) == sorted("abcd" * 16)  # every answer equally often
    assert task.prompts == first_letter_task().prompts  # the split does not depend on the session's seed
    assert task.prompts != first_letter_task(split_seed=1).prompts
    assert task.chance == 0.25 and task.max_tokens == 1 and task.group_size == 16


def test_the_reward_is_exact_match_only():
    task = first_letter_task()
    assert task.reward("cabd>", "c") == 1.0
    for wrong in ("C", " c", "c ", "a", "", "cc"):
        assert task.reward("cabd>", wrong) == 0.0, wrong
    assert exact_match(lambda p: "7")("3+4=", "7") == 1.0
    add = addition_task()
    assert add.reward("3+4=", "7") == 1.0 and add.reward("3+4=", "8") == 0.0 and add.reward("3+4=", "88888888") == 0.0
    assert len(add.prompts) == 44 and len(add.eval_prompts) == 11 and not set(add.prompts) & set(add.eval_prompts)
    assert all(add.answer(p) == str(eval(p[:-1])) for p in add.prompts + add.eval_prompts)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"alphabet": "a"}, "alphabet must have at least 2 distinct"),
        ({"alphabet": "aab"}, "alphabet must have at least 2 distinct"),
        # built, then every reward and accuracy 0: a one-byte completion is never a two-byte letter
        ({"alphabet": "abγδ"}, r"alphabet must be of one-byte \(ASCII\) characters, got 'γδ': .* would need 2 for 'γ'"),
        ({"n_train": 63}, "positive multiples of 4"),
        ({"n_eval": 0}, r"n_eval must be an integer in \[1, 16384\] \(prompts per split; .*\), got 0"),
        ({"length": 2}, "length 2 gives only 4 words per first letter"),
        ({"length": 2.5}, r"length must be an integer in \[1, 1024\] .*, got 2.5"),  # product()'s TypeError
        ({"n_train": 64.0}, r"n_train must be an integer in \[1, 16384\] .*, got 64.0"),  # a float slice index
    ],
)
def test_first_letter_refuses_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        first_letter_task(**kwargs)


@pytest.mark.timeout(30)
def test_first_letter_of_long_words_draws_them_instead_of_listing_every_word():
    """``first_letter_task(length=12)`` listed all 4**11 words of each first letter (minutes, gigabytes; at
    ``length=40`` for ever) to keep 32 of them. Up to 2**16 words a letter they are still listed: the same splits."""
    task = first_letter_task(length=40)
    words = task.prompts + task.eval_prompts
    assert len(set(words)) == 128 and all(len(w) == 41 and set(w[:-1]) <= set("abcd") for w in words)
    assert (
        sorted(p[0] for p in task.eval_prompts) == sorted("abcd" * 16)
        and task.prompts == first_letter_task(length=40).prompts
    )
    assert first_letter_task().prompts[:3] == ["acca>", "bcdc>", "adda>"]  # the lessons' split, as measured


def test_addition_refuses_an_eval_split_out_of_range():
    with pytest.raises(ValueError, match=r"n_eval must be an integer in \[1, 54\], got 55"):
        addition_task(n_eval=55)
    for n in (2.5, True):  # a slice's TypeError; True held out one pair
        with pytest.raises(ValueError, match=f"n_eval must be an integer in .*got {n!r}"):
            addition_task(n_eval=n)


@pytest.mark.parametrize("make", [first_letter_task, addition_task])
def test_a_split_seed_that_is_no_integer_is_refused_not_a_new_split_each_call(make):
    """``split_seed=None`` seeded the split from the system's entropy: two calls held out different prompts (one
    task's held-out accuracy scored the other's training prompts), silently."""
    for seed in (None, 1.5, "0"):
        with pytest.raises(ValueError, match=f"split_seed must be an integer .*got {re.escape(repr(seed))}"):
            make(split_seed=seed)
    assert make(split_seed=np.int64(3)).eval_prompts == make(split_seed=3).eval_prompts


def test_an_n_past_the_prompts_there_are_is_refused_naming_both():
    """``evaluate(session, n=1000)`` scored the 64 held-out prompts there are, as if it had scored 1000."""
    task = first_letter_task()
    with rlnb.Session(FakeBackend(), record=False) as s:
        with pytest.raises(
            ValueError,
            match=r"n must be at most the 64 eval prompts of task 'first_letter' \(or None"
            r": all of them\), got 65",
        ):
            task.evaluate(s, 65)
        with pytest.raises(ValueError, match=r"at most the 64 train prompts .*got 1000$"):
            task.evaluate(s, 1000, split="train")
        assert 0.0 <= task.evaluate(s, 64) <= 1.0 and s.history.df.kind.tolist() == ["sample"]


def test_evaluate_scores_greedy_answers_on_the_held_out_split():
    task = first_letter_task()
    with rlnb.connect("local", seed=0, device="cpu", record=False) as s:
        greedy = s.sample([s.encode(p) for p in task.eval_prompts], max_tokens=1, temperature=0.0).result()
        said = {
            p: s.decode(r.sequences[0].tokens, skip_special=True)
            for p, r in zip(task.eval_prompts, greedy.results, strict=True)
        }
        oracle = dataclasses.replace(task, answer=said.__getitem__)
        assert oracle.evaluate(s) == 1.0  # the greedy answer is what evaluate reads
        half = set(random.Random(0).sample(task.eval_prompts, 32))
        mixed = dataclasses.replace(task, answer=lambda p: said[p] if p in half else said[p] + "x")
        assert mixed.evaluate(s) == 0.5
        assert mixed.evaluate(s, 10) == pytest.approx(sum(p in half for p in task.eval_prompts[:10]) / 10)
        assert task.evaluate(s) == sum(said[p] == p[0] for p in task.eval_prompts) / 64
        assert log_accuracy(s, task) == task.evaluate(s)
        assert s.history.logged["eval/accuracy"].iloc[-1] == task.evaluate(s)
        with pytest.raises(ValueError, match="split must be 'eval' or 'train'"):
            task.evaluate(s, split="test")
        with pytest.raises(ValueError, match="has no eval prompts"):
            dataclasses.replace(task, eval_prompts=[]).evaluate(s)
        for n in (-1, 0, 2.5):  # -1 evaluated all prompts but the last
            with pytest.raises(ValueError, match=rf"n must be None or an integer >= 1, got {n}"):
                task.evaluate(s, n)
        with pytest.raises(ValueError, match=r"eval_every must be an integer in \[1, 1000003\] .*, got 0"):
            rlnb.tasks.lesson.train(s, task, rlnb.AdamParams(), 3, eval_every=0)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"prompts": "n="}, r"Task.prompts must be a non-empty list of prompts, such as \['n='\], got 'n='"),
        ({"prompts": []}, "Task.prompts must be a non-empty list"),
        ({"max_tokens": 0}, "Task.max_tokens must be an integer >= 1, got 0"),
        ({"group_size": 2.5}, r"Task.group_size must be an integer >= 2 \(an advantage is .*\), got 2.5"),
    ],
)
def test_a_task_refuses_prompts_given_as_one_string_and_bad_sizes(kwargs, words):
    """``Task("t", "n=", reward)`` trained on the characters 'n' and '=' as two prompts."""
    with pytest.raises((TypeError, ValueError), match=words):
        rlnb.tasks.Task(**{"name": "t", "prompts": ["n="], "reward": lambda p, c: 0.0, **kwargs})


def test_a_verified_task_refuses_eval_prompts_as_one_string_or_shared_with_training():
    """``eval_prompts="cadb>"`` was evaluated one character a prompt; eval prompts that are also training prompts
    gave a "held-out" accuracy of what training rewarded."""
    task = first_letter_task()
    with pytest.raises(TypeError, match=r"eval_prompts must be a list of text prompts, such as \['cadb>'\], got 'ab>'"):
        dataclasses.replace(task, eval_prompts="ab>")
    with pytest.raises(ValueError, match=r"must be held out of the training prompts; both hold \[.*\] \(2 in"):
        dataclasses.replace(task, eval_prompts=[*task.eval_prompts, *task.prompts[:2]])
    assert dataclasses.replace(task, eval_prompts=tuple(task.eval_prompts)).eval_prompts == task.eval_prompts


def test_an_answer_that_is_no_text_is_refused_not_scored_zero_for_ever():
    """``answer=lambda p: int(p[0]) + int(p[2])`` (the sum as an int) never equals a completion's text: every reward
    and the held-out accuracy were 0, silently; a ``VerifiedTask`` without ``answer`` compared each completion to its
    prompt (the default was ``str``)."""

    def total(p):
        return int(p[0]) + int(p[2])

    with pytest.raises(TypeError, match=r"answer\('3\+4='\) returned 7 \(int\): it must return the answer's text"):
        exact_match(total)("3+4=", "7")
    with pytest.raises(TypeError, match=r"answer\('\d\+\d='\) returned \d+ \(int\)"):  # its held-out answers, when made
        dataclasses.replace(addition_task(), reward=exact_match(total), answer=total)
    as_int = addition_task()
    as_int.answer = total  # set after it was made: evaluate still refuses it
    with pytest.raises(TypeError, match=r"VerifiedTask.answer must be a function answer\(prompt\) -> str"):
        VerifiedTask("t", ["ab>"], exact_match(lambda p: p[0]), eval_prompts=["ba>"], answer="a")
    assert exact_match(lambda p: p[0])("ab>", "a") == 1.0
    with (
        rlnb.connect("local", model="tiny", seed=0, device="cpu", record=False) as s,
        pytest.raises(TypeError, match=r"answer\('\d\+\d='\) returned \d+ \(int\)"),
    ):
        as_int.evaluate(s, 2)


def test_an_empty_answer_is_refused_not_earned_by_stopping_at_once():
    """A completion of EOS alone reads as '' (the reward reads no EOS): an ``answer`` that returned '' for a prompt gave
    that completion the full reward, a policy that learns to stop at once, and counted it correct in ``evaluate``."""
    blank = VerifiedTask(
        "blank",
        ["ab>", "x>"],
        exact_match(lambda p: p[:-2]),
        eval_prompts=["ba>"],
        answer=lambda p: p[:-2],
        max_tokens=1,
    )  # "x>" has no answer before its ">"
    assert blank.reward("ab>", "a") == 1.0
    with pytest.raises(ValueError, match=r"answer\('x>'\) returned '': a completion of EOS alone reads as ''"):
        blank.reward("x>", "")
    with (
        rlnb.connect("local", model="tiny", seed=0, device="cpu", record=False, eos_token_id=0) as s,
        pytest.raises(ValueError, match=r"answer\('x>'\) returned ''"),
    ):
        blank.evaluate(s, split="train")


def test_a_verified_tasks_answer_is_a_required_field():
    """``answer`` had a default whose body raised, which ``__post_init__`` made unreachable by refusing it: the rule
    "answer is required" was said by a sentinel and dead code. The dataclass says it: a field with no default."""
    assert {f.name: f for f in dataclasses.fields(VerifiedTask)}["answer"].default is dataclasses.MISSING
    with pytest.raises(TypeError, match=r"missing 1 required keyword-only argument: 'answer'"):
        VerifiedTask("t", ["ab>"], exact_match(lambda p: p[0]), eval_prompts=["ba>"])  # type: ignore[call-arg]
    task = VerifiedTask("t", ["ab>"], exact_match(lambda p: p[0]), eval_prompts=["ba>"], answer=lambda p: p[0])
    assert task.answer("ba>") == "b" and task.chance == 0.0


def test_a_lesson_refuses_a_task_without_a_held_out_split_and_a_bad_seed_before_anything_is_logged():
    """``train(s, digits_task(), ...)`` was a bare ``AttributeError: 'Task' object has no attribute 'evaluate'``;
    ``seed=2**62`` (or 1.5) logged an accuracy, then failed naming ``seed * SEED_STRIDE``, a number never given."""
    with rlnb.connect("local", model="tiny", seed=0, device="cpu", record=False) as s:
        with pytest.raises(TypeError, match=r"must be a VerifiedTask, such as first_letter_task\(\), got Task 'digits"):
            rlnb.tasks.lesson.train(s, rlnb.tasks.digits_task(), rlnb.AdamParams(), 2)
        for seed in (2**62, 1.5):
            with pytest.raises(ValueError, match=rf"seed must be an integer in \[-\d+, \d+\], got {seed}"):
                rlnb.tasks.lesson.train(s, first_letter_task(), rlnb.AdamParams(), 2, seed=seed)
        # a group the engine cannot sample, and bad params: the step-0 accuracy was logged, then rl_step refused
        with pytest.raises(ValueError, match=r"group_size must be an integer in \[2, 256\] \(.*\), got 300"):
            rlnb.tasks.lesson.train(s, dataclasses.replace(first_letter_task(), group_size=300), rlnb.AdamParams(), 2)
        with pytest.raises(TypeError, match="MuonParams"):  # Muon's on an Adam session
            rlnb.tasks.lesson.train(s, first_letter_task(), rlnb.MuonParams(), 2)
        assert len(s.history.logged) == 0 and len(s.history) == 0


def test_evaluate_on_training_prompts_of_token_ids_reads_their_text():
    """``split="train"`` scored ``str(prompt)``: a training prompt of token ids was sampled as the text
    "[99, 97, 100, 98, 62]" and its answer computed from that text: the accuracy of other prompts, silently."""
    task = first_letter_task(n_train=8, n_eval=4)
    as_ids = dataclasses.replace(task, prompts=[list(p.encode()) for p in task.prompts])
    seen: list[str] = []
    spy = dataclasses.replace(as_ids, answer=lambda p: seen.append(p) or p[0])
    assert seen == task.eval_prompts  # each held-out answer, asked when the task was made
    seen.clear()
    with rlnb.connect("local", model="tiny", seed=0, device="cpu", record=False) as s:
        assert spy.evaluate(s, split="train") == task.evaluate(s, split="train")
        assert seen == task.prompts


@pytest.mark.parametrize(
    ("prompts", "words"),
    [
        (["n=", 5], r"Task.prompts\[1\] must be a string, a list of token ids, or a list of chat messages, got an int"),
        ([[104, "x"]], r"Task.prompts\[0\] must be a string, .*it holds 'x'"),
        ([{"role": "user", "content": "3+4="}], r"Task.prompts\[0\] is one chat message"),
        (["n=", iter([104, 105])], r"Task.prompts\[1\] is an iterator, read once: give its ids as a list"),
    ],
)
def test_a_task_refuses_a_prompt_no_session_can_encode(prompts, words):
    """``Task("t", ["n=", 5], reward)`` was built; each step (each trial of a sweep, in its folder) then failed."""
    with pytest.raises(TypeError, match=words):
        rlnb.tasks.Task("t", prompts, lambda p, c: 0.0)
    assert rlnb.tasks.Task("t", [b"hi", (104, 105), [{"role": "user", "content": "hi"}]], lambda p, c: 0.0)


@pytest.mark.parametrize(
    ("prompts", "shown"),
    [(["n=", []], r"\[1\] is empty \(\[\]\)"), ([b""], r"\[0\] is empty \(b''\)")],
)
def test_a_task_refuses_an_empty_prompt_before_any_step(prompts, shown):
    """A prompt of no ids (``[]``, ``b""``): the task was built, then every step (every trial of a sweep, in its
    folder) failed with "prompts[1] encodes to no tokens". Text is left to the session's tokenizer: ``""`` is one
    token (BOS) on many, and no tokens on the byte-level models, which refuse it before anything runs."""
    with pytest.raises(ValueError, match=rf"Task.prompts{shown}: a prompt needs at least one token"):
        rlnb.tasks.Task("t", prompts, lambda p, c: 0.0)
    assert rlnb.tasks.Task("t", [" ", "\x00", ""], lambda p, c: 0.0)  # blank, but a token each (or BOS)


def test_a_lesson_run_reads_its_last_numbers():
    run = LessonRun({0: 0.0, 10: 0.5, 20: 0.75}, [0.1, 0.2, 0.3, 0.4, 0.5, 0.6], 3.0)
    assert run.final_accuracy == 0.75 and run.final_reward == pytest.approx(0.4)
    assert LessonRun().final_reward != LessonRun().final_reward  # NaN before any step


def test_corpus_windows_cover_the_text_and_weigh_tokens_equally():
    rng = random.Random(0)
    windows = corpus.batch(corpus.TRAIN_TEXT, 4, 16, rng)
    assert [len(w) for w in windows] == [17] * 4 and all(bytes(w).decode() in corpus.TRAIN_TEXT for w in windows)
    assert corpus.TRAIN_TEXT + corpus.HELDOUT_TEXT == corpus.CORPUS and corpus.CORPUS.isascii()
    tiles = corpus.tiles("abcdefghij", 4)
    assert [bytes(t).decode() for t in tiles] == ["abcde", "cdefg", "efghi", "fghij"]  # the last ends at the end
    samples = corpus.cross_entropy(windows)
    weights = [w for s in samples for w in s.loss_fn_inputs["weights"].data]
    assert sum(weights) == pytest.approx(1.0)
    with pytest.raises(ValueError, match=r"window must be an integer in \[1, 2\], got 3"):
        corpus.batch("abc", 1, 3, rng)  # no shorter than the text


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda rng: corpus.batch(corpus.TRAIN_TEXT, 4, 0, rng), r"window must be an integer in \[1, \d+\], got 0"),
        (lambda rng: corpus.batch(corpus.TRAIN_TEXT, 4, -3, rng), r"window must be an integer in \[1, \d+\], got -3"),
        (lambda rng: corpus.batch(corpus.TRAIN_TEXT, 4, 2.5, rng), r"window must be an integer in \[1, \d+\], got 2.5"),
        (lambda rng: corpus.batch(corpus.TRAIN_TEXT, 0, 16, rng), r"n must be an integer >= 1, got 0"),
        (lambda rng: corpus.batch(corpus.TRAIN_TEXT, 2.5, 16, rng), r"n must be an integer >= 1, got 2.5"),
        (lambda rng: corpus.tiles("abcdefghij", 0), r"window must be an integer in \[1, 9\], got 0"),
        (lambda rng: corpus.tiles("abcdefghij", 4.0), r"window must be an integer in \[1, 9\], got 4.0"),
        (lambda rng: corpus.tiles("a", 1), r"text must be at least 2 bytes long .* got 1"),
    ],
)
def test_corpus_windows_refuse_a_bad_window_or_count_naming_it_and_its_range(call, words):
    """``window=0`` failed in ``cross_entropy`` ("windows ... too short"), ``2.5`` and ``n=2.5`` in ``range()``, and
    ``n=0`` gave no window at all: none named the argument or what it may be."""
    with pytest.raises(ValueError, match=words):
        call(random.Random(0))


def test_the_task_list_names_what_the_demo_offers():
    assert sorted(TASKS) == ["addition", "digits", "first_letter"]
    assert all(TASKS[name]().name == name for name in TASKS)
    assert isinstance(TASKS["first_letter"](), VerifiedTask) and not isinstance(TASKS["digits"](), VerifiedTask)


def test_each_held_out_answer_is_asked_once_however_often_the_task_is_evaluated():
    """``answer`` was called on each held-out prompt when the task was made (its check) and again by every
    ``evaluate``: an expensive ``answer`` (a solver, a model) paid each time. A new ``answer`` set on the task is
    asked afresh, and a training prompt's answer (never kept) at each ``split="train"``."""
    task = first_letter_task(n_train=8, n_eval=4)
    asked: list[str] = []
    counted = dataclasses.replace(task, answer=lambda p: asked.append(p) or p[0])
    assert asked == task.eval_prompts
    with rlnb.Session(FakeBackend(), record=False) as s:
        scores = [counted.evaluate(s) for _ in range(3)] + [counted.evaluate(s, 2)]
        assert asked == task.eval_prompts and all(0.0 <= x <= 1.0 for x in scores)
        counted.evaluate(s, split="train")
        assert asked == task.eval_prompts + task.prompts
        del asked[:]
        counted.answer = lambda p: asked.append(p) or "zz"  # two letters: no one-token completion is it
        assert counted.evaluate(s) == 0.0 and asked == task.eval_prompts

"""The built-in rewards against a reward hacker: completions a policy could learn that get reward without doing the
task (echoing the prompt, many answers at once, another format, look-alike digits, junk around the answer), input
that is no completion's text, and the tasks' options."""

import pytest

from rlnb.tasks import TASKS, digit_fraction, digits_task, exact_match, first_letter_task
from rlnb.tasks.builtin import MAX_LENGTH, MAX_PROMPTS

ADDITION_GAMES = [
    "3+4=",
    "3+4=7",
    "34",
    "0123456789",
    "0 1 2 3 4 5 6 7 8 9",
    " ".join(str(i) for i in range(1, 100)),
    "７",
    "٧",
    "۷",
    "07",
    "+7",
    "7.0",
    "7e0",
    "7" * 1000,
    "",
    "junk 7",
    "7 8",
    "78",
    "7\n",
    " 7",
    "seven",
    "\ufffd7",
]
FIRST_LETTER_GAMES = [
    "cabd>",
    "cabd",
    "abcd",
    "a b c d",
    "C",
    "ｃ",
    "с",
    "cc",
    "c" * 1000,
    "",
    ">c",
    "c>",
    "\x00c",
    "c\x00",
]  # "с" is Cyrillic


@pytest.mark.parametrize("completion", ADDITION_GAMES)
def test_addition_rewards_the_sum_alone_not_a_look_alike_or_a_guess_list(completion):
    """A teacher's call: "7" is the answer to "3+4="; an answer among many, in another format or hidden in junk is
    not, so it earns nothing (a lenient parse would pay a policy that lists every digit)."""
    task, again = TASKS["addition"](), TASKS["addition"]()
    assert task.reward("3+4=", "7") == 1.0
    assert task.reward("3+4=", completion) == 0.0 == again.reward("3+4=", completion)


@pytest.mark.parametrize("completion", FIRST_LETTER_GAMES)
def test_first_letter_rewards_the_letter_alone(completion):
    task, again = TASKS["first_letter"](), TASKS["first_letter"]()
    assert task.reward("cabd>", "c") == 1.0
    assert task.reward("cabd>", completion) == 0.0 == again.reward("cabd>", completion)


@pytest.mark.parametrize(
    ("completion", "reward"),
    [
        ("88888888", 1.0),  # gameable by design (docs/tasks.md): the loop moves the policy, nothing is checked
        ("８８８８", 0.0),  # full-width digits
        ("٨٨٨٨", 0.0),  # Arabic-Indic
        ("²³", 0.0),  # str.isdigit() says True
        ("5.0", 2 / 3),
        ("+5", 0.5),
        ("5e0", 2 / 3),
        ("", 0.0),
        ("\ufffd8", 0.5),  # an invalid byte decodes to U+FFFD: one character, no digit
        ("\udc808", 0.5),  # a lone surrogate is a character like any other
    ],
)
def test_digits_counts_the_ascii_digits_only(completion, reward):
    assert digits_task().reward("n=", completion) == pytest.approx(reward)
    assert digit_fraction(completion) == pytest.approx(reward)


@pytest.mark.parametrize("completion", [None, b"7", bytearray(b"7"), 7, ["7"]])
@pytest.mark.parametrize("name", ["addition", "digits"])
def test_a_reward_refuses_a_completion_that_is_no_text(name, completion):
    """``exact_match``'s reward scored ``b"7"`` and ``None`` 0, silently (a loop that forgot to decode trained on
    rewards of 0); ``digit_fraction(b"88")`` failed with "'<=' not supported between instances of 'str' and 'int'"."""
    with pytest.raises(TypeError, match=rf"reads the completion's text \(a str, .*\), got {type(completion).__name__}"):
        TASKS[name]().reward("3+4=", completion)


def test_a_surrogate_in_a_completion_scores_instead_of_failing():
    assert exact_match(lambda p: p[0])("c>", "\udc80") == 0.0
    assert exact_match(lambda p: p[0])("\udc80>", "\udc80") == 1.0
    assert first_letter_task().reward("cabd>", "c\udc80") == 0.0


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        (
            {"alphabet": b"abcd"},
            TypeError,
            r"alphabet must be a str of distinct one-byte letters, such as 'abcd', "
            r"got bytes b'abcd'",
        ),
        ({"alphabet": [1, 2]}, TypeError, r"alphabet must be a str .*got list \[1, 2\]"),
        ({"alphabet": None}, TypeError, r"alphabet must be a str .*got NoneType None"),
        (
            {"length": MAX_LENGTH + 1},
            ValueError,
            rf"length must be an integer in \[1, {MAX_LENGTH}\] \(letters per "
            r"word; the built-in models' context holds 254\), got 1025",
        ),
        ({"length": 10**9}, ValueError, rf"length must be an integer in \[1, {MAX_LENGTH}\]"),
        (
            {"n_train": MAX_PROMPTS + 4, "length": 40},
            ValueError,
            rf"n_train must be an integer in \[1, {MAX_PROMPTS}\] "
            r"\(prompts per split; .*\), got 16388",
        ),
        ({"n_eval": 10**9, "length": 40}, ValueError, rf"n_eval must be an integer in \[1, {MAX_PROMPTS}\]"),
    ],
)
def test_first_letter_refuses_an_option_out_of_range_naming_it(kwargs, error, words):
    """``alphabet=b"abcd"`` failed with "'int' object has no attribute 'encode'"; ``length=10**4`` drew its words for
    minutes, ``length=10**9`` or ``n_train=10**9`` until memory ran out."""
    with pytest.raises(error, match=words):
        first_letter_task(**kwargs)


@pytest.mark.timeout(60)
def test_long_words_are_drawn_as_before_and_the_longest_in_seconds():
    """The words of a long alphabet string are the base-k digits of a drawn number: now in linear time, the same
    words (the splits of ``length`` 10 and up did not change)."""
    assert first_letter_task(length=40).prompts[:2] == [
        "dccabdccbbadabdcbaabddcbdcdccbcaaabcccbc>",
        "caddcbdaadabdabbacbdcccccdbbcbbaabccadac>",
    ]
    assert first_letter_task(length=12).prompts[:2] == ["bcacdabdbacb>", "bbabadbbbbcd>"]
    longest = first_letter_task(length=MAX_LENGTH)
    assert {len(p) for p in longest.prompts + longest.eval_prompts} == {MAX_LENGTH + 1}
    assert len(set(longest.prompts + longest.eval_prompts)) == 128

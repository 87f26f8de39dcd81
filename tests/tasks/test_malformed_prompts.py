"""A built-in reward given a prompt not of its task's form says so, naming the prompt, instead of failing in its parser
("not enough values to unpack") or scoring a look-alike it misread."""

import re

import pytest

from rlnb.tasks import Rollout, Task, addition_task, first_letter_task, score

ADDITION = r"addition: the prompt {} is not 'a\+b=' where a and b are single digits 0-9 \(such as '3\+4='\)"


@pytest.mark.parametrize(
    "prompt",
    [
        "hello",
        "",
        "3+x=",
        "3+4=5+1=",  # ValueErrors from unpacking and int(), naming nothing
        "3+4",
        " 3 + 4 =",
        "-3+4=",
        "10+20=",
        "٣+٤=",  # int() read them: scored as if well formed
    ],
)
def test_addition_names_a_malformed_prompt_in_its_reward_and_its_answer(prompt):
    task = addition_task()
    message = ADDITION.format(re.escape(repr(prompt)))
    with pytest.raises(ValueError, match=message):
        task.reward(prompt, "7")
    with pytest.raises(ValueError, match=message):
        task.answer(prompt)
    assert task.reward("3+4=", "7") == 1.0 and task.reward("9+0=", "9") == 1.0 and task.reward("5+7=", "12") == 1.0


def test_first_letter_names_an_empty_prompt():
    """``prompt[0]`` raised a bare IndexError ("string index out of range") from inside the reward."""
    task = first_letter_task()
    for call in (lambda: task.reward("", "a"), lambda: task.answer("")):
        with pytest.raises(ValueError, match=r"first_letter: the prompt '' has no first letter to answer"):
            call()
    assert task.reward("cadb>", "c") == 1.0


def test_a_task_of_your_own_on_the_addition_reward_names_the_prompt_when_scored():
    """The addition reward on prompts of another form (a space after '='): scoring them raises its ValueError, with the
    note naming the task, the prompt and the completion."""
    mine = Task("mine", ["3+4= "], addition_task().reward)
    rollout = Rollout(0, "3+4= ", "7", (55,), False, 0.0, 0.0)
    with pytest.raises(ValueError, match=ADDITION.format(re.escape("'3+4= '"))) as caught:
        score(mine, [[rollout]])
    assert caught.value.__notes__ == ["raised by task 'mine': reward('3+4= ', '7')"]

"""A task's prompt that needs a tokenizer the model lacks is refused naming the prompt, however the model lacks it
(a local Hugging Face model loaded without one, a remote session given no ``tokenizer=``) and whatever the prompt
(text or chat messages): the refusal is known by its type, ``NoTokenizer``, not by comparing its words."""

import pytest

import rlnb
from rlnb.tasks import Task
from rlnb.tasks.task import session_prompt_ids, task_prompt_ids
from rlnb.testing import FakeBackend
from rlnb.text.codec import ByteCodec, NoTokenizer, NoTokenizerCodec

MODEL = r"model 'org/m' has no tokenizer: pass tokenizer= to rlnb\.connect to use text, or pass token ids$"
PROMPTS = [[1, 2], "n=", [{"role": "user", "content": "hi"}]]  # prompts[1] is the first that needs a tokenizer


def task() -> Task:
    return Task("t", PROMPTS, lambda _prompt, _completion: 0.0)


def test_a_session_whose_model_has_no_tokenizer_names_the_prompt():
    """A local model without a tokenizer (a ``NoTokenizerCodec``, not None): the error named no prompt."""
    s = rlnb.Session(FakeBackend(), record=False, codec=NoTokenizerCodec("org/m"))
    with s, pytest.raises(NoTokenizer, match=rf"^task 't': prompts\[1\]: {MODEL}"):
        session_prompt_ids(task(), s)


@pytest.mark.parametrize("prompt", ["n=", [{"role": "user", "content": "hi"}]])
def test_a_codec_without_a_tokenizer_names_the_prompt(prompt):
    with pytest.raises(NoTokenizer, match=rf"^task 't': prompts\[1\]: {MODEL}"):
        task_prompt_ids(Task("t", [[1], prompt], lambda _p, _c: 0.0), NoTokenizerCodec("org/m"), None, None)


def test_a_session_with_no_codec_names_the_prompt():
    with rlnb.Session(FakeBackend(), record=False) as s:
        s.codec = None  # a remote session given no tokenizer=
        with pytest.raises(NoTokenizer, match=rf"^task 't': prompts\[1\]: session {s.id} has no tokenizer: pass "):
            session_prompt_ids(task(), s)


def test_the_error_of_another_prompt_is_not_taken_for_no_tokenizer():
    """A ``ValueError`` of other words passes unchanged: only the refusal for want of a tokenizer is named again."""
    with pytest.raises(ValueError, match=r"^task 't': prompts\[0\] encodes to no tokens"):
        task_prompt_ids(Task("t", [""], lambda _p, _c: 0.0), ByteCodec(), None, None)

"""Token ids handed to ``Session.sample`` and ``Session.decode`` are read without a Python step per id when they
are plain ints (a list, a tuple, an array's or a tensor's ``tolist()``), and every other form keeps its refusal."""

import numpy as np
import pytest
import torch

import rlnb
from rlnb import samples
from rlnb.testing import FakeBackend
from tests.support.calls import python_calls


@pytest.fixture
def s():
    with rlnb.Session(FakeBackend(vocab_size=None, context_length=None), record=False) as session:  # ids unbounded
        yield session


@pytest.mark.parametrize("form", [list, tuple, np.array, torch.tensor, lambda ids: [ids, ids]])
def test_sampling_and_decoding_token_ids_makes_no_python_call_per_id(s, form):
    """``prompt_list``, ``as_prompt`` and ``token_ids`` tested each id with an ABC ``isinstance`` and converted it
    with ``int()``: the calls made on the calling thread for 4,000 ids must be those made for 40."""
    short, long = [form([i % 250 + 1 for i in range(n)]) for n in (40, 4000)]
    ops = []

    def submit(ids):
        return lambda: ops.append(s.sample(ids, max_tokens=1))

    def settle():  # each count starts with nothing pending: no report of an earlier one comes on this thread
        ops.pop().result()

    s.sample(short, max_tokens=1).result()  # the first run fills caches (abc's subclass checks) the others find
    assert python_calls(submit(long), settle) == python_calls(submit(short), settle)
    if not isinstance(long[0], list):  # one prompt: one list of ids to decode
        s.decode(short)
        assert python_calls(lambda: s.decode(long)) == python_calls(lambda: s.decode(short))


@pytest.mark.parametrize(("ids", "error", "message"), [
    ([True, 1], TypeError, "prompts\\[0\\] must be a string, a list of token ids, or a list of chat messages"),
    ([-1, 2], ValueError, "prompts\\[0\\]: token -1 is outside the token ids \\(0 to 2\\*\\*63 - 1\\)"),
    (np.array([1, -2]), ValueError, "prompts\\[0\\]: token -2 is outside the token ids"),
    ([1, -(2**63) - 1], ValueError, "prompts\\[0\\]: token -9223372036854775809 is outside"),
    ([[1, 2], [3, True]], TypeError, "prompts\\[1\\] must be .* it holds True"),
])  # fmt: skip
def test_sample_refuses_what_is_no_token_id_as_before(s, ids, error, message):
    with pytest.raises(error, match=message):
        s.sample(ids, max_tokens=1)


@pytest.mark.parametrize(("ids", "error", "message"), [
    ([1, True], TypeError, "tokens must be integer token ids, got True"),
    ([1, 1.5], TypeError, "tokens must be integer token ids, got 1.5"),
    ([1, "2"], TypeError, "tokens must be integer token ids, got '2'"),
    ([1, None], TypeError, "tokens must be integer token ids, got None"),
    (np.array([1, -2]), ValueError, "tokens: token -2 is outside the token ids"),
])  # fmt: skip
def test_decode_refuses_what_is_no_token_id_naming_it(s, ids, error, message):
    with pytest.raises(error, match=message):
        s.decode(ids)


@pytest.mark.parametrize(("ids", "shown"), [([1, True], "a bool True"), ([1, 1.5], "a float 1.5"),
                                           ([1, "2"], "a str '2'"), ([1, None], "a NoneType None")])  # fmt: skip
def test_a_bad_id_in_one_prompt_of_ids_is_named_not_called_a_bad_prompt(s, ids, shown):
    """``s.sample([1, True])`` said "prompts[0] must be a string, a list of token ids, or a list of chat messages, got
    an int": the list was read as a list of prompts and the bool never named."""
    with pytest.raises(TypeError, match=f"^prompts is one list of token ids, but its item 1 is {shown}: token ids are"):
        s.sample(ids, max_tokens=1)


def test_ids_in_an_iterable_that_is_no_sequence_are_one_prompt(s):
    """A dict's values (no sequence, no iterator) of ids were a bare ``StopIteration`` from the search for a bad id."""
    ids = {1: 5, 2: 6}.values()
    got = s.sample(ids, max_tokens=1).result()
    assert len(got.results) == 1 and got.results[0].sequences


def test_an_id_past_int64_is_named_before_anything_is_sent(s):
    """Past the wire's int64 the prompt was a raw pydantic ``ValidationError`` for ``EncodedText``, and ``decode``
    gave a replacement character: both now name the token where the session knows no vocabulary (this FakeBackend's:
    ``vocab_size=None``)."""
    with pytest.raises(ValueError, match=r"^prompts\[0\]: token 9223372036854775808 is outside the token ids \(0 to"):
        s.sample([1, 2**63], max_tokens=1)
    with pytest.raises(ValueError, match=r"^tokens: token 9223372036854775808 is outside the token ids \(0 to"):
        s.decode([1, 2**63])
    s.sample([1, 2**63 - 1], max_tokens=1).result()


def test_whole_floats_and_numpy_ints_are_still_ids(s):
    assert s.decode([1, 2.0]) == s.decode([np.int64(1), 2]) == s.decode((1, 2)) == "\x01\x02"
    assert s.sample([np.int64(3), 4], max_tokens=1).result().results[0].sequences[0].tokens


def test_a_none_among_the_ids_of_a_training_sample_is_named():
    """The search for a bad id used None as its not-found value: a None id fell through to a bare ``int()`` error."""
    with pytest.raises(TypeError, match="tokens must be integer token ids, got None"):
        samples.cross_entropy([1, None, 3])

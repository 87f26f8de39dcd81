"""A sample answer's tokens are read without a Python step per token (the service sends them as decimal strings,
rlnb's engines as ints), and keep every refusal of the item-by-item validation for the rest."""

import json

import numpy as np
import pytest

from rlnb import wire
from tests.support.calls import python_calls


def answer(tokens):
    """A sample answer's JSON, one sequence of ``tokens`` with a log-prob each, as a server sends it."""
    sequence = {"tokens": tokens, "logprobs": [-0.5] * len(tokens), "stop_reason": "STOP_REASON_STOP"}
    result = {"policy_segments": [{"start_token": 0, "version": 0}], "sequences": [sequence]}
    return json.dumps({"results": [result]})


@pytest.mark.parametrize("spelling", [str, int], ids=["decimal strings", "integers"])
def test_reading_a_sample_answer_makes_no_python_call_per_token(spelling):
    """``SampledSequence.tokens`` ran ``Int64``'s Python validator once per token of every answer read."""
    short, long = [answer([spelling(t) for t in range(1, n + 1)]) for n in (40, 4000)]

    def read(text):
        return lambda: wire.SampleOutput.model_validate_json(text, context=wire.FROM_SERVER)

    read(short)()
    assert python_calls(read(long)) == python_calls(read(short))
    tokens = read(long)().results[0].sequences[0].tokens
    assert tokens == list(range(1, 4001)) and {type(t) for t in tokens} == {int}


@pytest.mark.parametrize(("tokens", "message"), [
    ([1, True], "expected an integer, got a bool"),
    (["1", str(2**63)], "less than or equal to 9223372036854775807"),
    ([1, -(2**63) - 1], "greater than or equal to -9223372036854775808"),
    (["1", "1.5"], "expected an int64"),
    (["1", "x"], "expected an int64"),
    (["1", ""], "expected an int64"),
    ([1, 1.5], "expected an integer, got 1.5"),
])  # fmt: skip
def test_sampled_tokens_that_are_no_int64_are_still_refused(tokens, message):
    with pytest.raises(ValueError, match=message):
        wire.SampledSequence(tokens=tokens, stop_reason="STOP_REASON_STOP")


def test_sampled_tokens_in_other_forms_become_plain_ints():
    for tokens in (["5", 6], [np.int64(5), 6], [" 5 ", "6"], [5.0, 6], ["-5", "6"]):
        got = wire.SampledSequence(tokens=tokens, stop_reason="STOP_REASON_STOP").tokens
        assert got == [int(float(str(tokens[0]).strip())), 6] and {type(t) for t in got} == {int}, tokens


def output(tokens, logprobs):
    """A sample answer with ``tokens`` and ``logprobs`` in a sequence, and ``logprobs`` as its prompt's too."""
    seq = wire.SampledSequence(tokens=tokens, stop_reason="STOP_REASON_STOP", logprobs=logprobs)
    return wire.SampleOutput(results=[wire.SampleResult(policy_segments=[], sequences=[seq], prompt_logprobs=logprobs)])


def test_writing_a_sample_request_and_answer_as_json_makes_no_python_call_per_token():
    """``Int64``'s and ``LogProb``'s JSON serialisers ran once per token: in a client's request body
    (``to_json_dict``) and in every answer and journal line a server writes."""

    def write(n):
        out, body = (
            output(list(range(n)), [-0.5] * n),
            wire.SampleBody(model_inputs=[wire.ModelInput.from_tokens([1] * n)]),
        )
        return lambda: (out.model_dump(mode="json"), out.model_dump_json(), body.to_json_dict())

    write(40)()
    assert python_calls(write(4000)) == python_calls(write(40))


def test_sample_json_is_written_as_before():
    """Ints as decimal strings out of a server and as integers in a request; a non-finite log-prob as its string."""
    out = output([1, 2**63 - 1, -(2**63)], [-0.5, float("-inf"), float("nan")])
    seq = out.model_dump(mode="json")["results"][0]["sequences"][0]
    assert seq["tokens"] == ["1", str(2**63 - 1), str(-(2**63))] and seq["logprobs"] == [-0.5, "-Infinity", "NaN"]
    assert json.loads(out.model_dump_json())["results"][0]["prompt_logprobs"] == [-0.5, "-Infinity", "NaN"]
    big = output([5, 6], [-1e308, -1e308]).model_dump(mode="json")["results"][0]  # their sum is -inf: item by item
    assert big["prompt_logprobs"] == [-1e308, -1e308] and big["sequences"][0]["tokens"] == ["5", "6"]
    body = wire.SampleBody(model_inputs=[wire.ModelInput.from_tokens([3, 2**63 - 1])])
    assert body.to_json_dict()["model_inputs"][0]["chunks"][0]["encoded_text"]["tokens"] == [3, 2**63 - 1]


@pytest.mark.parametrize("spelled", ["1_000", "+5", "\u0663", "\u06f1\u06f2", "\u20035", "5\x1c", "\uff15"])
@pytest.mark.parametrize("others", [["1"], [1]], ids=["among-strings", "among-ints"])
def test_a_token_spelled_other_than_ascii_decimal_digits_is_refused(spelled, others):
    """``int()`` read "1_000" as 1000, "+5" as 5, Arabic-Indic and full-width digits, and a string with Unicode
    spaces around: token ids no schema's ``-?\\d+`` spells, taken by the client and by ``rlnb serve`` alike."""
    for tokens in ([*others, spelled], [spelled]):
        with pytest.raises(ValueError, match=r"expected an int64 \(integer or decimal string\), got "):
            wire.SampledSequence(tokens=tokens, stop_reason="STOP_REASON_STOP")
        with pytest.raises(ValueError, match=r"expected an int64"):
            wire.EncodedText(tokens=tokens)
    assert wire.EncodedText(tokens=[*others, " 7\t", "-0"]).tokens == [1, 7, 0]


@pytest.mark.parametrize("flag", [np.True_, np.False_, np.array(True)], ids=["np.True_", "np.False_", "0-d array"])
def test_a_numpy_bool_among_the_tokens_is_refused_as_a_bool_is(flag):
    """``np.True_`` is no int (``numbers.Integral``) and ``True`` was refused, yet it was read as token 1."""
    for tokens in ([5, flag], [flag]):
        with pytest.raises(ValueError, match="expected an integer, got a bool"):
            wire.EncodedText(tokens=tokens)
    assert wire.EncodedText(tokens=[np.int64(5), np.array(6)]).tokens == [5, 6]

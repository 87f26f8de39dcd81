"""``rlnb.samples``: the helpers that build wire samples refuse what the wire cannot carry, naming the argument."""

import math

import numpy as np
import pytest
import torch

import rlnb
from rlnb import samples
from rlnb.testing import FakeBackend


@pytest.mark.parametrize(("build", "name", "value"), [
    (lambda: samples.cross_entropy([1, 2, 3], [1.0, math.nan, 1.0]), "weights", "nan"),
    (lambda: samples.policy([1, 2], [3, 4], [math.nan, -1.0], 1.0), "sampler_logprobs", "nan"),
    (lambda: samples.policy([1, 2], [3, 4], [-1.0, -1.0], math.inf), "advantage", "inf"),
    (lambda: samples.policy([1, 2], [3, 4], [-1.0, -1.0], [1.0, -math.inf]), "advantage", "-inf"),
    (lambda: samples.policy([1, 2], [3, 4], [-1.0, -1.0], 1.0, [-1.0, math.inf]), "reference_logprobs", "inf"),
])  # fmt: skip
def test_non_finite_values_are_refused_naming_the_argument(build, name, value):
    with pytest.raises(ValueError, match=f"^{name} must be finite numbers, got {value}$"):
        build()


def test_finite_values_pass_through():
    s = samples.policy([1, 2], [3, 4], [-1.5, -0.5], [2.0, -1.0], [-1.0, -2.0])
    x = s.loss_fn_inputs
    assert x["logprobs"].data == [0.0, -1.5, -0.5] and x["advantages"].data == [0.0, 2.0, -1.0]
    assert x["reference_logprobs"].data == [0.0, -1.0, -2.0] and x["mask"].data == [0, 1, 1]


def test_token_ids_and_advantages_in_the_forms_a_notebook_has():
    """Arrays, tensors and numpy scalars are taken; text, fractional ids and bools are refused naming the
    argument (``int(1.7)`` quietly trained on token 1)."""
    import numpy as np
    import torch

    ref = samples.policy([1, 2], [3, 4], [-1.0, -2.0], 0.5)
    for advantage in (np.float32(0.5), np.float64(0.5), torch.tensor(0.5), [0.5, 0.5], np.array([0.5, 0.5])):
        got = samples.policy(np.array([1, 2]), torch.tensor([3, 4]), [-1.0, -2.0], advantage)
        assert got == ref
    assert samples.cross_entropy(b"hello") == samples.cross_entropy(list(b"hello"))
    with pytest.raises(TypeError, match="tokens must be token ids, not text: use samples.from_text"):
        samples.cross_entropy("hello")
    with pytest.raises(TypeError, match="tokens must be integer token ids, got 1.7"):
        samples.cross_entropy([1.7, 2.2, 3.9])
    with pytest.raises(TypeError, match="prompt_tokens must be integer token ids, got True"):
        samples.policy([True, 2], [3], [-1.0], 0.5)
    with pytest.raises(TypeError, match="advantage must be a number or one number per completion token, got '0.5'"):
        samples.policy([1, 2], [3], [-1.0], "0.5")


def test_loose_inputs_are_refused_naming_the_argument():
    """adv5a: ``advantage=True`` was 1.0, a positive sampler log-prob (a probability passed by mistake) was taken,
    a negative token id was sent and refused by the engine, and a generator of weights failed on ``len``."""
    with pytest.raises(TypeError, match="advantage must be a number"):
        samples.policy([1, 2], [3], [-0.5], advantage=True)
    with pytest.raises(TypeError, match="advantage must be numbers, got True"):
        samples.policy([1, 2], [3, 4], [-0.5, -0.1], advantage=[1.0, True])
    with pytest.raises(ValueError, match=r"sampler_logprobs are log-probabilities \(<= 0\), got 0.7 at index 1"):
        samples.policy([1, 2], [3, 4], [-0.5, 0.7], advantage=1.0)
    samples.policy([1, 2], [3, 4], [-0.5, 3e-7], advantage=1.0)  # a certain token's log-softmax, rounded up
    with pytest.raises(ValueError, match="tokens must be token ids >= 0, got -2 at index 1"):
        samples.cross_entropy([1, -2, 3])
    with pytest.raises(ValueError, match="completion_tokens must be token ids >= 0"):
        samples.policy([1, 2], [-3], [-0.5], advantage=1.0)
    with pytest.raises(TypeError, match="weights must be numbers, got 'a'"):
        samples.cross_entropy([1, 2, 3], ["a", 1, 1])
    sample = samples.cross_entropy([1, 2, 3], (w for w in (0.0, 1.0, 0.5)))
    assert sample.loss_fn_inputs["weights"].data == [1.0, 0.5]
    sample = samples.policy([1, 2], [3, 4], np.array([-0.5, -0.25]), advantage=np.array([1.0, 2.0]))
    assert sample.loss_fn_inputs["advantages"].data == [0.0, 1.0, 2.0]


def test_reference_log_probs_that_are_probabilities_are_refused():
    """Reference log-probs are log-probabilities as the sampler's are: probabilities passed by mistake (0.9) were taken
    and the KL penalty trained on them silently, where a positive sampler log-prob was refused."""
    with pytest.raises(ValueError, match=r"reference_logprobs are log-probabilities \(<= 0\), got 0.9 at index 1"):
        samples.policy([1, 2], [3, 4], [-0.5, -0.1], 1.0, reference_logprobs=[-0.2, 0.9])
    with pytest.raises(ValueError, match="reference_logprobs has 1 entries for 2 completion tokens"):
        samples.policy([1, 2], [3, 4], [-0.5, -0.1], 1.0, reference_logprobs=[-0.2])
    got = samples.policy([1, 2], [3, 4], [-0.5, -0.1], 1.0, reference_logprobs=[-0.2, 3e-7])  # rounded up
    assert got.loss_fn_inputs["reference_logprobs"].data == [0.0, -0.2, 3e-7]


@pytest.mark.parametrize(("build", "name"), [
    (lambda: samples.cross_entropy([1, 2, 3], [0.0, 1e39, 1.0]), "weights"),
    (lambda: samples.policy([1, 2], [3, 4], [-1e39, -1.0], 1.0), "sampler_logprobs"),
    (lambda: samples.policy([1, 2], [3, 4], [-1.0, -1.0], -1e39), "advantage"),
    (lambda: samples.policy([1, 2], [3, 4], [-1.0, -1.0], 1.0, [-1.0, -1e39]), "reference_logprobs"),
])  # fmt: skip
def test_values_past_float32_are_refused_naming_the_argument(build, name):
    """The engine reads loss inputs as float32, where 1e39 is inf: the sample was built and sent, and the
    forward-backward failed as "non-finite values". Refused when the sample is built, naming the argument."""
    with pytest.raises(ValueError, match=f"^{name} must be numbers a float32 holds .*, got -?1e\\+39$"):
        build()
    samples.cross_entropy([1, 2, 3], [0.0, 3.4e38, 1.0])  # float32's largest is taken


def test_integers_no_float_holds_are_refused_naming_the_argument():
    """``10**400`` as a weight or an advantage was Python's bare "OverflowError: int too large to convert to float"."""
    with pytest.raises(ValueError, match="^weights must be numbers a float32 holds .*integer past any float"):
        samples.cross_entropy([1, 2], [1, 10**400])
    with pytest.raises(ValueError, match="^advantage must be numbers a float32 holds .*integer past any float"):
        samples.policy([1], [2], [-0.1], 10**400)


def test_token_ids_past_int64_are_refused_naming_the_argument():
    """An id past int64 was a raw pydantic error on ``EncodedText`` (in the input), or sent as a float (a target)."""
    at = r"^tokens must be token ids < 2\*\*63 \(the wire's int64\), got 1180591620717411303424 at index 0"
    with pytest.raises(ValueError, match=at):
        samples.cross_entropy([2**70, 1])
    with pytest.raises(ValueError, match="^tokens must be token ids < 2"):
        samples.cross_entropy([1, 2**63])
    with pytest.raises(ValueError, match="^completion_tokens must be token ids < 2"):
        samples.policy([1], [2**64], [-0.5], 1.0)


def test_from_text_names_the_prompt_whose_ids_are_out_of_range():
    """``from_text(None, [-1, 2], "x")`` said "tokens must be token ids >= 0": no argument of from_text is tokens."""
    with pytest.raises(ValueError, match="^prompt must be token ids >= 0, got -1 at index 0$"):
        samples.from_text(None, [-1, 2], "x")
    with pytest.raises(ValueError, match="^prompt must be token ids < 2"):
        samples.from_text(None, [2**64], "x")
    assert samples.from_text(None, [104, 105], "!") == samples.from_text(None, "hi", "!")


@pytest.mark.parametrize("tokenizer", [5, "gpt2", b"x"])
def test_a_tokenizer_that_is_no_tokenizer_is_refused_naming_it(tokenizer):
    """``from_text(5, ...)`` said "expected a tokenizer, a Session or a Codec, got int", naming no argument; a hub id
    (what ``connect(tokenizer=...)`` takes) got no word on how to load it."""
    with pytest.raises(TypeError, match=r"^tokenizer must be a Session, a Hugging Face tokenizer .* or None \(bytes\)"):
        samples.from_text(tokenizer, "a", "b")
    with pytest.raises(TypeError, match="AutoTokenizer.from_pretrained"):
        samples.from_chat("gpt2", [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])


def test_whole_floats_are_token_ids_in_samples_and_decode_but_not_in_prompts():
    """What docs/concepts.md says (it said floats such as 5.0 are refused wherever an integer is asked for, while
    samples took them on purpose): a whole float is an id in a sample and in ``decode``, not in a prompt."""
    assert samples.cross_entropy([1, 2.0, np.float64(3.0)]) == samples.cross_entropy([1, 2, 3])
    assert samples.cross_entropy(torch.tensor([1.0, 2.0])) == samples.cross_entropy([1, 2])
    with pytest.raises(TypeError, match=r"must be integer token ids, got 1\.5"):
        samples.cross_entropy([1, 1.5])
    with rlnb.Session(FakeBackend(), record=False) as s:
        assert s.decode([104.0, 105]) == "hi"
        with pytest.raises(TypeError, match=r"prompts\[0\] must be a string, a list of token ids, .* it holds 1\.0"):
            s.sample([[1.0]], max_tokens=1)


def test_the_plain_list_fast_paths_keep_every_refusal_and_conversion():
    """Plain lists of ints or floats skip the item-by-item checks; a bool, an id out of range, an int no float holds,
    a NaN among log-probs and numpy or torch values still meet the same rules and messages."""
    with pytest.raises(TypeError, match="tokens must be integer token ids, got True"):
        samples.cross_entropy([1, True, 3])
    with pytest.raises(
        ValueError, match=r"tokens must be token ids < 2\*\*63 \(the wire's int64\), got 9223372036854775808 at index 1"
    ):
        samples.cross_entropy([1, 2**63, 3])
    with pytest.raises(ValueError, match="tokens must be token ids >= 0, got -1 at index 2"):
        samples.cross_entropy((1, 2, -1))
    with pytest.raises(TypeError, match="weights must be numbers, got True"):
        samples.cross_entropy([1, 2, 3], [1.0, True, 1.0])
    with pytest.raises(ValueError, match="weights must be numbers a float32 holds .* an integer past any float"):
        samples.cross_entropy([1, 2, 3], [1, 10**400, 1])
    with pytest.raises(ValueError, match="weights must be numbers a float32 holds .* got 1e\\+308"):
        samples.cross_entropy([1, 2, 3], [1.0, 1e308, 1e308])  # each past float32; their sum past any float
    with pytest.raises(ValueError, match="sampler_logprobs are log-probabilities .* got 0.5 at index 1"):
        samples.policy([1, 2], [3, 4], [math.nan, 0.5], 1.0)  # a NaN first makes max() NaN: the search still runs
    with pytest.raises(ValueError, match="sampler_logprobs must be finite numbers, got nan"):
        samples.policy([1, 2], [3, 4], [math.nan, -0.5], 1.0)
    plain = samples.cross_entropy([1, 2, 3], [0, 1, 1])
    forms = [(np.array([1, 2, 3]), np.array([0.0, 1.0, 1.0], dtype=np.float32)), ((1, 2, 3), (0.0, 1, 1.0))]
    for tokens, weights in [*forms, (torch.tensor([1, 2, 3]), torch.tensor([0.0, 1.0, 1.0]))]:
        got = samples.cross_entropy(tokens, weights)
        assert got == plain
        assert {type(t) for t in got.model_input.tokens} == {int}
        assert {type(w) for w in got.loss_fn_inputs["weights"].data} == {float}
    given = [1, 2, 3]
    got = samples.cross_entropy(given)
    given[0] = 99  # the sample holds its own lists
    assert got.model_input.tokens == [1, 2]

"""Prompts, stop strings, chat messages and token ids as a notebook hands them over: each odd form is read as
what it is, or refused naming the argument before anything is sent — never sampled as something else."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rlnb
from rlnb import samples
from rlnb.text.codec import ByteCodec, TokenizerCodec, to_tokens
from tests.support.chars import Chars


@pytest.fixture(scope="module")
def s():
    with rlnb.connect("local", model="tiny", seed=0, device="cpu", record=False) as session:
        yield session


def test_a_single_message_or_a_set_of_prompts_is_refused_not_sampled_as_its_items(s):
    """A message dict was sampled as two prompts, "role" and "content"; a set's prompts came back in no order."""
    before = len(s.history)
    with pytest.raises(TypeError, match=r"prompts is one chat message.*\[message\]"):
        s.sample({"role": "user", "content": "hi"}, max_tokens=2)
    with pytest.raises(TypeError, match="prompts must be .* got a set"):
        s.sample({"ab", "cd"}, max_tokens=2)
    with pytest.raises(TypeError, match="got a dict_keys: it has no order"):
        s.sample({"a": "ab"}.keys(), max_tokens=2)
    assert len(s.sample({"a": "ab", "b": "cd"}.values(), max_tokens=2).result().results) == 2  # in order: taken
    before += 1
    with pytest.raises(TypeError, match="stop must be a string or a list of strings, got a dict"):
        s.sample("ab", max_tokens=2, stop={"a": 1})
    assert len(s.history) == before


def test_token_ids_in_the_forms_a_notebook_has(s):
    """numpy ints in a list and a generator of ids are token ids (the generator used to encode to [])."""
    ids = [np.int64(65), np.int64(66)]
    assert s.encode(ids) == [65, 66]
    assert s.encode(t for t in [65, 66]) == [65, 66]
    one = s.sample([65, 66], max_tokens=3, seed=1).result().results
    assert s.sample(ids, max_tokens=3, seed=1).result().results[0].sequences[0].tokens == one[0].sequences[0].tokens
    gen = s.sample([(t for t in [65, 66])], max_tokens=3, seed=1).result().results
    assert gen[0].sequences[0].tokens == one[0].sequences[0].tokens


@pytest.mark.parametrize(
    ("prompts", "where"),
    [
        ([], "prompts is empty"), ("", r"prompts\[0\]"), (["a", ""], r"prompts\[1\]"), ([[]], r"prompts\[0\]"),
        ([[1, 2], [3, 256]], r"prompts\[1\]: token 256 is outside the vocabulary \[0, 256\)"),
        (np.array([-1, 2]), r"prompts\[0\]: token -1 is outside the vocabulary"),
    ],
)  # fmt: skip
def test_an_empty_prompt_is_refused_before_it_is_sent(s, prompts, where):
    """It was sent, and the operation failed INVALID_INPUT; so was a token outside the vocabulary."""
    before = len(s.history)
    with pytest.raises(ValueError, match=where):
        s.sample(prompts, max_tokens=2)
    assert len(s.history) == before


@pytest.mark.parametrize(
    ("prompts", "shown"),
    [
        (np.array([1.5, 2.0]), r"prompts\[0\] must be .*got a float"),
        ([True, False], r"prompts\[0\] must be .*got a bool"),
        (65, "prompts must be .* got an int"),
        (None, "prompts must be .* got a NoneType"),
        (torch.tensor(5), "prompts must be .* got an int"),
        ([["1", "2"]], r"prompts\[0\] must be"),
    ],
)
def test_what_is_no_prompt_is_named_not_a_bare_type_error(s, prompts, shown):
    """``'float' object is not iterable`` and the like."""
    with pytest.raises(TypeError, match=shown):
        s.sample(prompts, max_tokens=2)


def test_a_stop_string_holding_u_fffd_is_refused(s):
    """adv5a: decoded text shows U+FFFD for bytes that are no character yet, so such a stop string never matched."""
    with pytest.raises(ValueError, match=r"stop\[1\] holds U\+FFFD"):
        s.sample("ab", max_tokens=2, stop=["x", "a\ufffd"])


@pytest.mark.parametrize(("stop", "shown"), [(5, "got an int"), (b"x", "got a bytes"), ([5], r"stop\[0\] .* got 5")])
def test_stop_that_is_no_string_is_named(s, stop, shown):
    """``stop=5`` was ``'int' object is not iterable``; ``stop=b"x"`` a pydantic error about the int 120."""
    with pytest.raises(TypeError, match=shown):
        s.sample("ab", max_tokens=2, stop=stop)


def test_decode_refuses_what_is_no_token_id_and_shows_no_byte_as_a_replacement(s):
    """``decode([65, 300, -1])`` was ``'A'`` (ids past the bytes dropped), ``decode([65.7])`` ``'A'``."""
    with pytest.raises(ValueError, match=r"token 300 is outside the vocabulary \[0, 256\)"):
        s.decode([65, 300])
    with pytest.raises(ValueError, match=r"token -1 is outside the vocabulary \[0, 256\)"):
        s.decode([-1])
    for bad in ([65.7], "abc", [True], None):
        with pytest.raises(TypeError, match="tokens must be"):
            s.decode(bad)
    assert s.decode(np.array([65, 66])) == "AB"
    assert ByteCodec().decode([65, 300, 66]) == "A\ufffdB"  # a custom model's ids past 255: shown, not dropped


def test_an_id_the_tokenizer_has_no_token_for_shows_as_a_replacement_not_nothing():
    """A model's rows past its tokenizer (a padded vocabulary: Qwen3 has 151936 rows for 151669 tokens) decoded to
    nothing, so ``.text`` and what a reward read left the sampled token out."""
    codec = TokenizerCodec(Chars())
    assert codec.decode([65, 300, 301, 66]) == "A\ufffd\ufffdB"
    assert codec.decode([256, 65, 257], skip_special=True) == "A"
    assert codec.decode([]) == "" and codec.decode([65, 66]) == "AB"


@pytest.mark.parametrize(
    ("message", "shown"),
    [
        ({"role": "user"}, r"messages\[0\]\['content'\] must be a string"),
        ({"content": "hi"}, r"messages\[0\]\['role'\] must be a non-empty string"),
        ({"role": "user", "content": 5}, r"\['content'\] must be a string .* got 5"),
        ({"role": "user", "content": None}, r"\['content'\] must be a string .* got None"),
        ({"role": 1, "content": "hi"}, r"\['role'\] .* got 1"),
    ],
)
def test_a_chat_message_without_a_role_or_text_content_is_refused(message, shown):
    """The template rendered the missing content as nothing, or 5 as "5": a prompt the user did not write."""
    codec = TokenizerCodec(Chars())
    with pytest.raises(ValueError, match=shown):
        codec.chat([message])
    with pytest.raises(ValueError, match=shown):
        samples.from_chat(codec, [message, {"role": "assistant", "content": "x"}])


def test_a_chat_templates_own_refusal_names_the_prompt():
    """A template's ``raise_exception("System role not supported")`` came out as jinja's bare TemplateError,
    saying not which prompt of the batch."""

    class Strict(Chars):
        def apply_chat_template(self, messages, **kw):
            if messages[0]["role"] == "system":
                raise RuntimeError("System role not supported")  # as jinja2.TemplateError, an Exception
            return super().apply_chat_template(messages, **kw)

    codec = TokenizerCodec(Strict())
    chats = ["hi", [{"role": "system", "content": "x"}]]
    with pytest.raises(ValueError, match=r"prompts\[1\]: the chat template refused .*System role not supported"):
        [to_tokens(codec, p, f"prompts[{i}]") for i, p in enumerate(chats)]
    system = [{"role": "system", "content": "x"}, {"role": "assistant", "content": "y"}]
    with pytest.raises(ValueError, match="the chat template refused these messages: System role not supported"):
        samples.from_chat(codec, system)


def test_a_tokenizer_without_a_chat_template_names_the_prompt_and_the_tokenizer():
    """A tokenizer with no chat template said only "TokenizersBackend has no chat template", not which prompt of the
    batch held messages."""

    class Plain(Chars):
        chat_template = None

    codec = TokenizerCodec(Plain())
    chats = ["hi", [{"role": "user", "content": "x"}]]
    assert to_tokens(codec, chats[0], "prompts[0]")
    with pytest.raises(ValueError, match=r"^prompts\[1\]: the tokenizer \(Plain\) has no chat template: pass text"):
        to_tokens(codec, chats[1], "prompts[1]")


def test_chat_messages_the_templates_take_pass():
    codec = TokenizerCodec(Chars())
    parts = {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    calls = {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": {}}}]}
    assert codec.chat([parts, calls, {"role": "tool", "content": "4"}])


def test_from_text_and_from_chat_name_what_they_refuse():
    """``from_text(tok, "a", None)`` was ``'NoneType' object has no attribute 'encode'``; ``from_chat(tok, "hi")``
    ``'str' object has no attribute 'get'``; a generator of messages ``has no len()``."""
    codec = TokenizerCodec(Chars())
    with pytest.raises(TypeError, match="completion must be a string, got None"):
        samples.from_text(codec, "a", None)
    with pytest.raises(TypeError, match="completion must be a string, got"):
        samples.from_text(None, "a", [5, 6])
    with pytest.raises(TypeError, match="prompt is bytes, which are token ids only for a byte-level model"):
        samples.from_text(codec, b"n=", "b")  # were the tokenizer's ids 110, 61
    assert samples.from_text(None, b"n=", "b") == samples.from_text(None, "n=", "b")  # the byte codec: the bytes
    with pytest.raises(TypeError, match="messages must be a list of chat messages"):
        samples.from_chat(codec, "hello there")
    msgs = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    listed = samples.from_chat(codec, msgs)
    assert samples.from_chat(codec, (m for m in msgs)) == listed


@pytest.mark.parametrize(
    ("prompt", "completion", "named"),
    [("a", "", "completion encodes"), ("", "b", "prompt encodes"), ("", "", "prompt and completion encode")],
)
def test_from_text_names_which_part_encodes_to_no_tokens(prompt, completion, named):
    """It said "prompt and completion must both encode to at least one token" whichever of them was empty."""
    with pytest.raises(ValueError, match=rf"^{named} to no tokens: from_text needs"):
        samples.from_text(None, prompt, completion)


def test_a_session_without_a_tokenizer_is_named_when_a_sample_needs_text():
    """A remote session without ``tokenizer=`` was taken for a tokenizer: ``Session.encode() got an unexpected
    keyword argument 'add_special_tokens'``, and from_chat said "Session has no chat template". Bytes are token
    ids for the byte-level models only (``test_hf`` has the tokenizer's case)."""
    import httpx

    from tests.support.fake_api import BASE, KEY, FakeAPI

    with rlnb.connect(
        BASE, api_key=KEY, transport=httpx.MockTransport(FakeAPI()), ready_timeout=5, record=False, poll_min=0.002
    ) as remote:
        assert remote.codec is None
        with pytest.raises(TypeError, match=r"prompts\[0\] is bytes, which are token ids only for a byte-level model"):
            remote.sample(b"hi", max_tokens=2)  # were the ids 104, 105 of the remote model's vocabulary
        chat = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
        for build in (lambda: samples.from_text(remote, "a", "b"), lambda: samples.from_chat(remote, chat)):
            with pytest.raises(ValueError, match=f"session {remote.id} has no tokenizer: pass tokenizer="):
                build()


def test_sampling_settings_as_numpy_or_torch_scalars(s):
    """``max_tokens=np.int64(3)`` (a sweep over ``np.arange``) was "Input should be a valid integer", while ``seed``
    took it; ``prompt_logprobs=np.True_`` "a valid boolean"."""
    plain = s.sample("ab", num_samples=2, max_tokens=3, top_k=5, seed=4, topk_prompt_logprobs=2, prompt_logprobs=True)
    scalars = s.sample(
        "ab", num_samples=np.int64(2), max_tokens=np.int32(3), top_k=torch.tensor(5), seed=np.uint8(4),
        topk_prompt_logprobs=np.int64(2), prompt_logprobs=np.True_, temperature=np.float32(1), top_p=torch.tensor(1.0),
    )  # fmt: skip
    assert scalars.result().results == plain.result().results
    with pytest.raises(ValueError, match="max_tokens"):
        s.sample("ab", max_tokens=np.float64(3.0))  # a float is no count, from numpy or not


def test_text_with_a_lone_surrogate_is_named(s):
    """A prompt was a raw ``UnicodeEncodeError`` (a Hugging Face tokenizer: "TextEncodeInput must be Union[...]"),
    and a stop string was sent and silently never matched (decoded text holds no lone surrogate)."""
    before = len(s.history)
    with pytest.raises(ValueError, match=r"prompts\[1\] holds a lone surrogate, '\\ud800' at position 1"):
        s.sample(["ok", "a\ud800"], max_tokens=2)
    with pytest.raises(ValueError, match=r"stop\[0\] holds a lone surrogate"):
        s.sample("ab", max_tokens=2, stop="\udcff")
    with pytest.raises(ValueError, match="completion holds a lone surrogate"):
        samples.from_text(TokenizerCodec(Chars()), "a", "b\ud800")
    assert len(s.history) == before


def test_stop_strings_are_matched_in_the_completion_only(s):
    """A stop string in the prompt does not end the completion at once."""
    out = s.sample(["aaa", "zz"], num_samples=8, max_tokens=6, stop=["a"], seed=3).result().results
    for seq in (q for r in out for q in r.sequences):
        text = bytes(seq.tokens).decode("latin-1")
        if seq.stop_reason == "STOP_REASON_STOP":
            assert text.index("a") == len(text) - 1  # at the first "a" it drew
        else:
            assert "a" not in text and len(seq.tokens) == 6


def test_an_empty_stop_string_is_refused_by_the_client_and_the_engine(s):
    """``stop=[""]`` was silently ignored here (the API gives it no meaning; a server that matches it ends every
    sequence at once): the same request ran differently on two backends."""
    from rlnb import wire
    from rlnb.engine.sample_inputs import sample_request
    from rlnb.errors import OperationError

    before = len(s.history)
    with pytest.raises(ValueError, match=r"stop\[1\] is an empty string.*pass stop=None"):
        s.sample("ab", max_tokens=2, stop=["x", ""])
    with pytest.raises(ValueError, match=r"stop is an empty string"):
        s.sample("ab", max_tokens=2, stop="")
    assert len(s.history) == before
    empty = wire.SamplingParams(stop=[""])
    body = wire.SampleBody(model_inputs=[wire.ModelInput.from_tokens([1])], sampling_params=empty)
    with pytest.raises(OperationError, match=r"sampling_params.stop\[0\] is an empty string") as refused:
        sample_request(s.backend.engine.adapter, body)
    assert refused.value.code == wire.OperationErrorCode.INVALID_INPUT


@pytest.mark.parametrize("tokenizer", [5, object(), b"/tmp"])
def test_a_tokenizer_that_is_none_is_refused_at_connect(tokenizer):
    """It was taken for a tokenizer, and the first text failed: ``'int' object has no attribute 'encode'``."""
    import httpx

    from tests.support.fake_api import BASE, KEY, FakeAPI

    with pytest.raises(TypeError, match="tokenizer must be a Hugging Face tokenizer .*, its folder or a hub id"):
        rlnb.connect("local", model="tiny", device="cpu", record=False, tokenizer=tokenizer)
    fake = FakeAPI()
    with pytest.raises(TypeError, match="tokenizer must be a Hugging Face tokenizer"):
        rlnb.connect(BASE, api_key=KEY, transport=httpx.MockTransport(fake), record=False, tokenizer=tokenizer)
    assert not fake.resources  # refused before anything was started


def test_a_flag_that_is_no_bool_is_refused(s):
    """``skip_special="no"`` left the EOS out and ``from_text(..., eos="no")`` trained on one: a non-empty
    string is truthy."""
    with pytest.raises(ValueError, match="skip_special must be True or False, got 'no'"):
        s.decode([65, 66], skip_special="no")
    with pytest.raises(ValueError, match="eos must be True or False, got 'no'"):
        samples.from_text(TokenizerCodec(Chars()), "a", "b", eos="no")


def test_a_flag_from_numpy_or_torch_is_the_bool_it_holds_and_numbers_still_refuse_bools(s):
    """``skip_special=np.True_`` (a flag read off an array) was "must be True or False, got np.True_"; what is kept
    or sent is the Python bool (pydantic's strict bools and JSON refuse numpy's)."""
    from rlnb.engine.models.compiled import check_compile
    from rlnb.remote.start import SessionOptions
    from rlnb.sweep.space import Float, dimension

    codec = TokenizerCodec(Chars())
    for yes, no in ((np.True_, np.False_), (torch.tensor(True), torch.tensor(False)), (np.array(True), np.bool_(0))):
        assert s.decode([65, 10], skip_special=yes) == s.decode([65, 10], skip_special=True)
        assert samples.from_text(codec, "a", "b", eos=yes) == samples.from_text(codec, "a", "b", eos=True)
        assert check_compile(no) is False
        options = SessionOptions(resume_from_checkpoint_id="ckpt-1", load_optimizer=yes)
        assert type(options.load_optimizer) is bool and options.load_optimizer
        assert type(dimension("lr", Float(1e-4, 1e-2, log=yes)).log) is bool
    for flag in (torch.tensor(1), np.array([True]), np.int64(1), 1):  # a number, or an array of flags, is no flag
        with pytest.raises(ValueError, match="skip_special must be True or False"):
            s.decode([65], skip_special=flag)
    with pytest.raises(ValueError, match="max_tokens"):
        s.sample("ab", max_tokens=np.True_)  # a count still refuses a bool


@pytest.mark.parametrize("eos", [np.int64(10), [np.int64(10), 11], np.array([10, 11]), torch.tensor(10)])
def test_eos_token_ids_from_numpy_or_torch(eos):
    """``eos_token_id=np.int64(10)`` was "must be ... an integer ..., got np.int64(10)"; an array's truth value
    was ambiguous."""
    with rlnb.connect("local", model="tiny", device="cpu", record=False, eos_token_id=eos) as session:
        assert session.codec.eos_token_ids[0] == 10 and all(type(i) is int for i in session.codec.eos_token_ids)
        assert session.decode([65, 10], skip_special=True) == "A"


def test_stop_strings_past_rlnb_serves_limits_are_refused_in_process_naming_the_bound(s):
    """``rlnb serve`` refuses more than 16 stop strings or one past 256 characters; the in-process engine took 100,000
    (or one of 10 MB) and searched every row's new text for each of them at every token, slowing to a crawl without
    a word. Now the same bounds (one constant, also the server's defaults) are refused before anything is sent."""
    from rlnb import wire
    from rlnb.server.settings import ServerSettings

    before = len(s.history)
    with pytest.raises(ValueError, match=r"^stop has 100000 strings; this in-process session takes at most 16$"):
        s.sample("ab", max_tokens=2, stop=[f"x{i}" for i in range(100_000)])
    with pytest.raises(ValueError, match=r"^stop\[1\] has 10000000 characters; .* at most 256 per stop string$"):
        s.sample("ab", max_tokens=2, stop=["x", "y" * 10_000_000])
    assert len(s.history) == before
    most = ["x" * wire.MAX_STOP_CHARS] * wire.MAX_STOP_STRINGS  # at the bounds: taken
    assert len(s.sample("ab", max_tokens=2, stop=most).result().results[0].sequences) == 1
    limits = ServerSettings(device="cpu")
    assert (limits.max_stop_strings, limits.max_stop_chars) == (wire.MAX_STOP_STRINGS, wire.MAX_STOP_CHARS)


SEQUENCES = [  # ASCII, UTF-8, an invalid byte, an ending EOS (257), one mid-way, nothing, an EOS alone
    [72, 105],
    [99, 97, 102, 195, 169],
    [255, 65],
    [65, 66, 257],
    [65, 257, 66],
    [],
    [257],
    [226, 156],  # a character cut short
]


class Batched(Chars):
    """``Chars`` with a ``batch_decode`` that says how often it ran: ``decode_all`` decodes a step's completions
    with it, in one call."""

    def __init__(self) -> None:
        self.batches: list[int] = []

    def batch_decode(self, sequences: list[list[int]], skip_special_tokens: bool = False) -> list[str]:
        self.batches.append(len(sequences))
        return [self.decode(s, skip_special_tokens) for s in sequences]


@pytest.mark.parametrize("skip", [True, False])
def test_decode_all_gives_each_sequences_decode(skip):
    """A step's completions decoded at once (no Python call a completion) read as ``decode`` reads each: the byte
    codec's (ids past a byte or below 0, numpy's ints, floats and bools go through ``decode``) and a
    tokenizer's (its ``batch_decode`` when it has one and every id is known, else ``decode``'s replacement)."""
    from rlnb.text.codec import decode_all

    byte = ByteCodec(eos_token_ids=[257])
    for seqs in (SEQUENCES[:3] + [[65, 66, 0]], [[65, 300, 66], [65]], [np.array([65, 66]), (67,)], [[]]):
        assert decode_all(byte, seqs, skip) == [byte.decode(s, skip) for s in seqs], seqs
    assert decode_all(byte, [], skip) == []
    assert decode_all(byte, [[65, 257]], skip) == (["A"] if skip else ["A\ufffd"])
    odd = [[65.5, 66], [True, 66]]  # what no check refused reads as decode reads it
    assert decode_all(byte, odd, skip) == [byte.decode(s, skip) for s in odd]
    plain, batched = TokenizerCodec(Chars()), TokenizerCodec(Batched())
    for seqs in (SEQUENCES, [[65, 300, 66], [65]], [[]]):
        want = [plain.decode(s, skip) for s in seqs]
        assert decode_all(plain, seqs, skip) == want and decode_all(batched, seqs, skip) == want, seqs
    assert batched.tokenizer.batches == [len(SEQUENCES), 1]  # the unknown id 300 went through decode
    assert decode_all(byte, SEQUENCES, skip) == [byte.decode(s, skip) for s in SEQUENCES]
    newline = ByteCodec(eos_token_ids=[10])  # an EOS that is a byte: left out, or kept, as decode does
    lines = [[65, 10], [10, 66], [10], [66, 10, 10]]
    want = ["A", "\nB", "", "B\n"] if skip else ["A\n", "\nB", "\n", "B\n\n"]
    assert decode_all(newline, lines, skip) == [newline.decode(s, skip) for s in lines] == want


@pytest.mark.usefixtures("transformers")  # Hugging Face: slow, skipped without transformers
def test_decode_all_gives_each_sequences_decode_with_a_hugging_face_tokenizer(tmp_path):
    """With a byte-level BPE tokenizer (special tokens, EOS, a padded vocabulary's spare ids): the same texts."""
    from transformers import AutoTokenizer

    from rlnb.text.codec import decode_all
    from tests.support import hf_models

    hf_models.build_tokenizer(tmp_path)
    codec = TokenizerCodec(AutoTokenizer.from_pretrained(tmp_path))
    texts = ["the model answers 42!", "café ✓ n=7", "", "a notebook drives"]
    seqs = [codec.encode(t) + list(codec.eos_token_ids) for t in texts] + [[1, 5, 0, 2, 7], [2], []]
    for skip in (True, False):
        want = [codec.decode(s, skip) for s in seqs]
        assert decode_all(codec, seqs, skip) == want
        assert decode_all(codec, [*seqs, [65, hf_models.VOCAB - 1]], skip)[:-1] == want  # an id past the tokens
    assert decode_all(codec, seqs, True)[:2] == texts[:2]

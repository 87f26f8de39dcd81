"""Chat messages and templates as a hostile user writes them, through a real Hugging Face tokenizer: each renders as
transformers renders it (the same tokens), or is a one-line ``ValueError`` naming the prompt and what was wrong, never
an exception from inside rlnb."""

from __future__ import annotations

import re

import pytest

from rlnb.text.codec import TokenizerCodec, to_tokens
from tests.support import hf_models

pytestmark = pytest.mark.usefixtures("transformers")  # Hugging Face: slow, skipped without transformers
PER_MESSAGE = "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s>{% endfor %}"


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("tok")
    hf_models.build_tokenizer(folder)
    return AutoTokenizer.from_pretrained(folder)


def transformers_ids(tokenizer, messages, generation=True):
    out = tokenizer.apply_chat_template(messages, add_generation_prompt=generation, tokenize=True)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


def nested(depth, leaf="hi", wrap=lambda inner: [inner]):
    value = leaf
    for _ in range(depth):
        value = wrap(value)
    return value


def itself():
    loop = []
    loop.append(loop)
    return loop


@pytest.mark.parametrize(
    "field, value",
    [("content", nested(5000)), ("content", [{"type": "text", "text": nested(5000, wrap=lambda i: {"x": i})}]),
     ("tool_calls", nested(5000, wrap=lambda i: {"a": i})), ("content", itself())],
    ids=["content-lists", "content-part-dicts", "tool_calls-dicts", "list-holding-itself"],
)  # fmt: skip
def test_a_message_nested_thousands_deep_is_refused_naming_the_message_and_field(tokenizer, field, value):
    """Content 5,000 lists deep was a ``RecursionError`` from inside the check (its ``json.dumps``), or from
    transformers' own reading of the messages."""
    tokenizer.chat_template = PER_MESSAGE
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi", field: value}]
    with pytest.raises(ValueError, match=rf"^prompts\[0\]\[1\]\['{field}'\] is nested more than 100 levels deep"):
        to_tokens(TokenizerCodec(tokenizer), messages, "prompts[0]")
    shallow = [messages[0], {"role": "user", "content": "hi", "meta": nested(99, wrap=lambda i: {"k": i})}]
    assert TokenizerCodec(tokenizer).chat(shallow) == transformers_ids(tokenizer, shallow)


class Hostile:
    """A value whose ``__str__`` and ``__repr__`` raise."""

    def __str__(self):
        raise RuntimeError("no text for you")

    __repr__ = __str__


@pytest.mark.parametrize("template", [PER_MESSAGE, "{% for m in messages %}{{ m.name }}: {{ m.content }}{% endfor %}"])
def test_a_value_whose_str_raises_renders_as_transformers_does(tokenizer, template):
    """transformers turns a value that is not plain data into a placeholder (``<Hostile>``) before the template sees
    it; the check called its ``__str__`` first, and its ``RuntimeError`` came out of ``chat``."""
    tokenizer.chat_template = template
    messages = [{"role": "user", "content": "hi", "name": Hostile()}]
    assert TokenizerCodec(tokenizer).chat(messages) == transformers_ids(tokenizer, messages)
    with pytest.raises(
        ValueError, match=r"^messages\[0\]\['content'\] must be a string .* got <Hostile whose repr\(\) failed>"
    ):
        TokenizerCodec(tokenizer).chat([{"role": "user", "content": Hostile()}])


TOOL_CALL = {"type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2}}}
GUARDED = (
    "{% if bos_token is defined %}{{ bos_token }}{% endif %}{% for m in messages %}<s>{{ m.role }}: "
    "{% if m.content is string %}{{ m.content }}{% else %}{% for p in m.content %}{% if p.type == 'text' %}{{ p.text }}"
    "{% else %}<{{ p.type }}>{% endif %}{% endfor %}{% endif %}{% if m.reasoning_content %}[{{ m.reasoning_content }}]"
    "{% endif %}{% for t in m.tool_calls %}{% generation %}{{ t.function.name }}({{ t.function.arguments | tojson }})"
    "{% endgeneration %}{% endfor %}</s>{% endfor %}{% if add_generation_prompt %}<s>assistant:{% endif %}"
)


@pytest.mark.parametrize(
    "messages",
    [[{"role": "system", "content": "be brief"}],
     [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "4"}],
     [{"role": "user", "content": "1+2?"}, {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
      {"role": "tool", "content": "3"}],
     [{"role": "user", "content": [{"type": "image", "image": Hostile()}, {"type": "text", "text": "what is it?"}]}],
     [{"role": "assistant", "content": "4", "reasoning": "2+2", "name": None}]],
    ids=["system-only", "assistant-last", "tool-call", "image-part", "reasoning-alias"],
)  # fmt: skip
@pytest.mark.parametrize("bos", [True, False], ids=["bos", "no-bos"])
def test_a_conversation_renders_once_to_transformers_own_tokens(tokenizer, messages, bos):
    """rlnb renders each new chat prompt once and tokenizes that text: its tokens are ``apply_chat_template``'s for
    what transformers does to the messages first (a field that is None left out, an image as ``<Hostile>``,
    ``reasoning`` read as ``reasoning_content``), a tokenizer without a BOS (``bos_token is defined`` false), a
    system message on its own and a generation prompt after an assistant turn."""
    tokenizer.chat_template = GUARDED
    kept = tokenizer.bos_token
    tokenizer.bos_token = kept if bos else None
    try:
        for generation in (True, False):
            assert TokenizerCodec(tokenizer).chat(messages, generation) == transformers_ids(tokenizer, messages,
                                                                                           generation)  # fmt: skip
    finally:
        tokenizer.bos_token = kept


@pytest.mark.parametrize(
    "template, messages, said",
    [(PER_MESSAGE.replace("{{ m['content'] }}", "{{ m.content }}{% for t in m.tool_calls %}{{ t.id }}{% endfor %}"),
      [{"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]}], r"prints a value .*attribute 'id'\)"),
     (PER_MESSAGE.replace("{{ m['content'] }}", "{{ m.content }}"),
      [{"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]}],
      r"attribute 'content'\), which transformers would print as nothing \(transformers leaves out a field that"),
     ("{% for m in messages %}{{ m.content.strip() }}{% endfor %}",
      [{"role": "user", "content": None, "tool_calls": [TOOL_CALL]}],
      r"uses a value .*attribute 'content' \(transformers leaves out a field that is None\)$"),
     ("{% for m in messages %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endfor %}",
      [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "what?"}]}], r"attribute 'text'\)"),
     ("{% if messages[0].role == 'system' %}{{ raise_exception('System role not\n  supported') }}{% endif %}",
      [{"role": "system", "content": "x"}], r"the chat template refused these messages: System role not supported$"),
     ("{% if messages[-1].role == 'assistant' and add_generation_prompt %}{{ raise_exception('ends in an answer') }}"
      "{% endif %}", [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "4"}], "an answer$"),
     ("{% for m in messages %}{{ m.name[0] }}{% endfor %}", [{"role": "user", "content": "x"}],
      r"the chat template uses a value these messages do not give: 'dict object' has no attribute 'name'$"),
     ("{% for m in messages %}{{ m.content + 1 }}{% endfor %}", [{"role": "user", "content": "x"}],
      r"could not render these messages: TypeError: can only concatenate str"),
     ("{% for m in messages %}{% set y %}{{ m.name }}{% endset %}{{ m.content }}{% endfor %}",
      [{"role": "user", "content": "x"}], r"prints a value .*attribute 'name'\)")],
    ids=["tool-call-field", "content-none", "content-none-used", "image-part-text", "raise_exception", "assistant-last",
         "undefined-index", "type-error", "set-block"],
)  # fmt: skip
def test_a_conversation_the_template_cannot_render_as_written_is_one_line_naming_why(tokenizer, template, messages,
                                                                                     said):  # fmt: skip
    """Tool calls, content parts, a template's ``raise_exception`` and errors of its own: a ``ValueError`` on one
    line naming the prompt and what was wrong (a template's multi-line message was two lines; a ``TypeError`` of the
    template said no more than Python's words). A missing value printed inside ``{% set %}`` is refused even where
    that text is never printed (the check names each ``{{ ... }}`` that prints one)."""
    tokenizer.chat_template = template
    with pytest.raises(ValueError, match=r"^prompts\[2\]: ") as info:
        to_tokens(TokenizerCodec(tokenizer), messages, "prompts[2]")
    assert "\n" not in str(info.value)
    assert re.search(said, str(info.value)), str(info.value)


def test_str_format_on_a_marked_text_stays_in_jinjas_sandbox(tokenizer):
    """A ``{{ ... }}`` evaluated again for the check (a ``cycler`` takes the other branch the second time) called
    ``.format`` on the marked text outside jinja's sandbox: ``'{0.__globals__[__name__]}'`` read a function's module
    globals, which transformers refuses (``SecurityError``), and a macro kept what it read for the error to print."""
    tokenizer.chat_template = (
        "{% set ns = namespace(v='') %}{% set c = cycler(False, True) %}"
        "{% macro keep(x) %}{% set ns.v = x %}{% endmacro %}"
        "{% for m in messages %}"
        "{{ keep((m.name ~ '{0.__globals__[__name__]}').format(raise_exception)) if c.next() else (m.name ~ '') }}"
        "{{ m[ns.v] }}{{ m.content }}{% endfor %}"
    )
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(ValueError, match="prints a value these messages do not give") as refused:
        TokenizerCodec(tokenizer).chat(messages)
    assert "has no attribute ''" in str(refused.value) and "chat_template_utils" not in str(refused.value)

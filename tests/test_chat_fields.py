"""A real Hugging Face tokenizer's chat template printing a field the messages do not give: an error naming the
field and the tokenizer, where transformers prints nothing (a prompt no one wrote)."""

from __future__ import annotations

import pytest

from rlnb import samples
from rlnb.text.codec import TokenizerCodec, to_tokens
from tests.support import hf_models

pytestmark = pytest.mark.usefixtures("transformers")  # Hugging Face: slow, skipped without transformers
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("tok")
    hf_models.build_tokenizer(folder)
    return AutoTokenizer.from_pretrained(folder)


@pytest.mark.parametrize(
    "printed, field",
    [("m['name']", "'name'"), ("m.name", "'name'"), ("m.name ~ ':'", "'name'"), ("m.name | upper", "'name'"),
     ("date_string", "'date_string' is undefined"), ("(m.nick ~ '')[:0] ~ m.name", "attribute 'name'")],
)  # fmt: skip
def test_a_template_printing_a_field_the_messages_lack_names_it_and_the_tokenizer(tokenizer, printed, field):
    """``{{ m['name'] }}`` with no ``name`` in the messages rendered as nothing: ``"<s>: hi</s>"``, a prompt
    no one wrote, sampled and trained on without a word."""
    tokenizer.chat_template = "{% for m in messages %}<s>{{ " + printed + " }}: {{ m['content'] }}</s>{% endfor %}"
    codec = TokenizerCodec(tokenizer)
    with pytest.raises(ValueError, match=rf"^prompts\[1\]: the chat template of '{tokenizer.name_or_path}' prints "
                                         rf".*{field}") as info:  # fmt: skip
        to_tokens(codec, HI, "prompts[1]")
    assert "is defined" in str(info.value)
    with pytest.raises(ValueError, match=field):
        samples.from_chat(codec, [*HI, {"role": "assistant", "content": "4"}])


@pytest.mark.parametrize(
    "guarded",
    ["{% if m.name %}{{ m.name }}{% endif %}", "{% if m.name is defined %}{{ m['name'] }}{% endif %}",
     "{{ m.name | default('') }}", "{{ m.name or '' }}", "{{ bos_token }}",
     "{% for t in m.tool_calls %}{{ t }}{% endfor %}", "{% if tools %}{{ tools }}{% endif %}",
     '{% if (m.name|string) != "" %}named: {% endif %}', '{% if ("a" ~ m.name) == "a" %}anonymous: {% endif %}',
     "{% set n = m.name|lower %}", '{% if m.name|string == "" %}{% else %}{{ m.name }}{% endif %}',
     "{% if m.name|string %}{{ m.name }}{% endif %}", "{% if (m.name|string|length) > 0 %}({{ m.name }}){% endif %}"],
)  # fmt: skip
def test_a_template_that_tests_a_missing_field_before_printing_it_renders_as_transformers_does(tokenizer, guarded):
    """Real templates test optional fields (``tool_calls``, ``name``, ``tools``) before they print them: a missing
    one is still false, empty and not defined, and the tokens are transformers' own. Its text (``|string``, ``~``,
    ``|lower``) kept or compared but not printed was refused: any string conversion failed; and where its text was
    compared, the check's marker (not empty) took a branch that prints it, one transformers never takes."""
    tokenizer.chat_template = "{% for m in messages %}" + guarded + "{{ m['content'] }}{% endfor %}"
    expected = tokenizer.apply_chat_template(HI, add_generation_prompt=True, tokenize=True)
    expected = expected["input_ids"] if isinstance(expected, dict) or hasattr(expected, "keys") else expected
    assert TokenizerCodec(tokenizer).chat(HI) == list(expected)


def test_a_special_token_the_tokenizer_lacks_prints_as_nothing_as_in_transformers(tokenizer):
    """``{{ bos_token }}`` in the template of a tokenizer without one (Qwen's have no BOS) is the tokenizer's design,
    not a field the messages forgot: refusing it would refuse the model."""
    bos = tokenizer.bos_token
    tokenizer.bos_token = None
    try:
        tokenizer.chat_template = "{% for m in messages %}{{ bos_token }}{{ m['content'] }}{% endfor %}"
        expected = tokenizer.apply_chat_template(HI, add_generation_prompt=True, tokenize=True)
        expected = expected["input_ids"] if isinstance(expected, dict) or hasattr(expected, "keys") else expected
        assert TokenizerCodec(tokenizer).chat(HI) == list(expected)
    finally:
        tokenizer.bos_token = bos


def test_a_transformers_without_the_private_compiler_warns_once_that_templates_go_unchecked(tokenizer, monkeypatch):
    """The check builds on transformers' private ``_compile_jinja_template``: gone in another version, the check was
    skipped without a word."""
    import sys
    import types

    from rlnb.text import chat_fields

    name = "transformers.utils.chat_template_utils"  # a version without it: transformers' own renders still work
    monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    caches = [f for f in vars(chat_fields).values() if hasattr(f, "cache_clear")]  # templates, warned once
    for cache in caches:
        cache.cache_clear()
    chat_fields._checked.clear()  # checks kept: this one is to run
    tokenizer.chat_template = "{% for m in messages %}{{ m.name }}{{ m['content'] }}{% endfor %}"
    try:
        with pytest.warns(UserWarning, match="lacks a private helper of apply_chat_template") as warned:
            TokenizerCodec(tokenizer).chat(HI)
            TokenizerCodec(tokenizer).chat(HI)  # unchecked, as transformers renders it
        assert len([w for w in warned if "private helper" in str(w.message)]) == 1
    finally:
        for cache in caches:
            cache.cache_clear()


def test_a_jinja2_whose_code_generator_hooks_were_renamed_warns_once_that_templates_go_unchecked(
    tokenizer, monkeypatch
):
    """The check overrides two private hooks of jinja2's code generator: renamed, the overrides were never called
    and a missing value was silently left unnamed."""
    import sys
    import types

    import jinja2.compiler

    from rlnb.text import chat_fields

    renamed = types.ModuleType("jinja2.compiler")  # a jinja2 whose generator has other names for them
    renamed.__dict__.update({k: v for k, v in vars(jinja2.compiler).items() if not k.startswith("__")})
    renamed.CodeGenerator = type("CodeGenerator", (), {})
    monkeypatch.setitem(sys.modules, "jinja2.compiler", renamed)
    caches = [f for f in vars(chat_fields).values() if hasattr(f, "cache_clear")]
    for cache in caches:
        cache.cache_clear()
    chat_fields._checked.clear()
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    try:
        with pytest.warns(UserWarning, match="jinja2 a code generator hook .*_output_child_pre"):
            TokenizerCodec(tokenizer).chat(HI)
    finally:
        for cache in caches:
            cache.cache_clear()


@pytest.mark.parametrize(
    "template",
    ['{% if m.name|string == "" %}anonymous {% endif %}{{ m.name }}',
     '{% if m.name|string %}{{ m.name ~ ":" }}{% else %}{{ m.name }}{% endif %}'],
)  # fmt: skip
def test_a_missing_field_compared_and_then_printed_as_it_is_is_still_named(tokenizer, template):
    """Where a missing value's text is compared, the check's marker takes another path than transformers' empty
    text: transformers' own path is what is checked, and a value it prints as it is there is named."""
    tokenizer.chat_template = "{% for m in messages %}" + template + "{{ m['content'] }}{% endfor %}"
    with pytest.raises(ValueError, match="'name'"):
        TokenizerCodec(tokenizer).chat(HI)


@pytest.mark.parametrize(
    "template",
    ['{% if m.name|string == "" %}{{ m.name ~ ":" }}{% endif %}',
     '{% if not m.name|string %}{{ m.name ~ "" }}{% endif %}',
     '{% if m.name|string|length == 0 %}{{ m.name | trim | upper }}: {% endif %}',
     '{% if (m.name ~ "") == "" %}{{ m.name | replace("a", "b") ~ ":" }}{% endif %}',
     '{% macro who(n) %}{{ n ~ ":" }}{% endmacro %}{% if m.name|string == "" %}{{ who(m.name) }}{% endif %}',
     '{% set n = m.name|string %}{% if n == "" %}{{ [m.name, ":"] | join }}{% endif %}'],
)  # fmt: skip
def test_a_missing_field_printed_as_text_on_a_branch_only_transformers_takes_is_named(tokenizer, template):
    """Where the check's marker (not empty) took another branch than transformers' empty text, only a missing value
    printed as it is (``{{ m.name }}``) was named there: one printed as part of other text (``~ ":"``, ``|trim``,
    a macro's output) rendered as ``": hi"``, a prompt no one wrote."""
    tokenizer.chat_template = "{% for m in messages %}" + template + "{{ m['content'] }}{% endfor %}"
    with pytest.raises(ValueError, match=r"prints a value these messages do not give \('dict object' has no "
                                         r"attribute 'name'\)"):  # fmt: skip
        TokenizerCodec(tokenizer).chat(HI)
    named = [{"role": "user", "content": "hi", "name": ""}]  # given, if empty: transformers' tokens
    assert TokenizerCodec(tokenizer).chat(named) == apply(tokenizer, named, True)


@pytest.mark.parametrize("content", [chr(0xF0000), chr(0xF0000) + chr(0xF0001) + "hi", chr(0x10FFFD) + chr(0xE000)])
def test_private_use_characters_in_a_message_are_not_taken_for_a_missing_field(tokenizer, content):
    """The check marks a missing value's text with a private-use character: the same character in a message (plane
    15's first, as the marker was) read as that value printed, and a template that only kept the text was refused."""
    tokenizer.chat_template = "{% for m in messages %}{% set n = m.name|string %}{{ m['content'] }}{% endfor %}"
    messages = [{"role": "user", "content": content}]
    expected = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    expected = expected["input_ids"] if isinstance(expected, dict) or hasattr(expected, "keys") else expected
    assert TokenizerCodec(tokenizer).chat(messages) == list(expected)
    tokenizer.chat_template = "{% for m in messages %}{{ m.name }}{{ m['content'] }}{% endfor %}"
    with pytest.raises(ValueError, match="'name'"):  # and a missing value printed beside them is still named
        TokenizerCodec(tokenizer).chat(messages)


@pytest.fixture
def renders(monkeypatch):
    """Each jinja render, counted (the check's and transformers' alike)."""
    import jinja2

    counted = []
    render = jinja2.Template.render
    monkeypatch.setattr(jinja2.Template, "render", lambda self, *a, **k: counted.append(1) or render(self, *a, **k))
    return counted


def test_a_chat_prompt_seen_before_renders_once_transformers_render(tokenizer, renders):
    """Each chat prompt rendered twice (the check, then transformers' own render), every time it was sampled: a new
    prompt renders once, its text the tokens' (transformers' own tokens), and one seen before (RL samples the same
    prompts each step) not at all, with the same tokens and the same refusal."""
    tokenizer.chat_template = hf_models.CHAT_TEMPLATE
    codec = TokenizerCodec(tokenizer)
    chat = [*HI, {"role": "assistant", "content": "4"}, {"role": "user", "content": "again"}]
    expected = [apply(tokenizer, chat, generation) for generation in (True, False)]
    renders.clear()
    first = codec.chat(chat)
    assert (first, len(renders)) == (expected[0], 1)
    assert codec.chat(chat) == first
    assert TokenizerCodec(tokenizer).chat([dict(m) for m in chat]) == first
    assert len(renders) == 1
    assert codec.chat(chat, add_generation_prompt=False) == expected[1]  # another prompt: rendered
    assert codec.chat([*chat[:2], {"role": "user", "content": "once more"}]) != first
    assert len(renders) == 3
    tokenizer.chat_template = "{% for m in messages %}{{ m.name }}{{ m['content'] }}{% endfor %}"
    for _ in range(2):  # a refusal is the same the second time, and the template changed is rendered again
        with pytest.raises(ValueError, match="'name'"):
            codec.chat(chat)
    assert len(renders) == 4


def test_the_prompts_kept_are_the_last_used(tokenizer, renders, monkeypatch):
    """The renders kept are an LRU of ``CHECKED`` prompts: one used again is kept over one used once before it, and
    a prompt changed in its special tokens is another prompt."""
    from rlnb.text import chat_fields

    monkeypatch.setattr(chat_fields, "CHECKED", 2)
    tokenizer.chat_template = "{% for m in messages %}{{ bos_token }}{{ m['content'] }}{% endfor %}"
    codec = TokenizerCodec(tokenizer)
    a, b, c = ([{"role": "user", "content": word}] for word in ("alpha", "beta", "gamma"))
    for prompt in (a, b, a, c):  # a used again: b is the oldest when c comes
        codec.chat(prompt)
    assert len(renders) == 3
    codec.chat(a)
    assert len(renders) == 3
    codec.chat(b)
    assert len(renders) == 4
    bos = tokenizer.bos_token
    tokenizer.bos_token = None  # the same messages, other special tokens: rendered again, as transformers would
    try:
        assert codec.chat(b) == apply(tokenizer, b, True)
    finally:
        tokenizer.bos_token = bos
    assert len(renders) == 6  # rlnb's render and the expected one's


def test_a_prompt_differing_only_in_a_floats_sign_of_zero_is_rendered_again(tokenizer):
    """The renders were kept by the messages' values, and -0.0 == 0.0: a prompt whose only difference was a field's
    -0.0 got the render of the one with 0.0 (its text "0.0", where transformers prints "-0.0")."""
    tokenizer.chat_template = "{% for m in messages %}<s>{{ m['content'] }} {{ m['x'] }}</s>{% endfor %}"
    codec = TokenizerCodec(tokenizer)
    for x in (0.0, -0.0, float("nan"), float("nan")):
        messages = [{"role": "user", "content": "hi", "x": x}]
        assert codec.chat(messages) == apply(tokenizer, messages, True), x


def apply(tokenizer, messages, generation):
    out = tokenizer.apply_chat_template(messages, add_generation_prompt=generation, tokenize=True)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


@pytest.mark.parametrize("extra", [{(1, 2): "x"}, {"n": 10**5000}], ids=["tuple-key", "5000-digit-int"])
def test_messages_with_a_value_json_cannot_write_render_as_transformers_does(tokenizer, extra):
    """The check chose its markers from the messages' JSON: a key that is a tuple or an int past ``str``'s 4,300
    digits, which the template never prints and transformers renders, raised json's TypeError / ValueError."""
    tokenizer.chat_template = "{% for m in messages %}<s>{{ m['content'] }}</s>{% endfor %}"
    messages = [{"role": "user", "content": "hi", **extra}]
    expected = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    expected = expected["input_ids"] if hasattr(expected, "keys") else expected
    assert TokenizerCodec(tokenizer).chat(messages) == list(expected)


def test_transformers_helpers_are_looked_up_once_not_at_each_render(tokenizer, monkeypatch):
    """Each chat render (each prompt of each RL step, a prompt seen before too) looked up transformers' and jinja2's
    modules again: found once, they are kept, and a module gone from ``sys.modules`` later changes nothing."""
    import sys
    import types

    from rlnb.text import chat_fields

    tokenizer.chat_template = "{% for m in messages %}{{ m.name }}{{ m['content'] }}{% endfor %}"
    with pytest.raises(ValueError, match="'name'"):
        TokenizerCodec(tokenizer).chat(HI)  # the helpers found
    name = "transformers.utils.chat_template_utils"
    monkeypatch.setitem(sys.modules, name, types.ModuleType(name))  # looked up again: "lacks a private helper"
    chat_fields._checked.clear()  # rendered again
    with pytest.raises(ValueError, match="'name'"):
        TokenizerCodec(tokenizer).chat(HI)


@pytest.mark.parametrize(
    "template",
    ["{% set ns = namespace(n=0) %}{% macro tag(x) %}{% set ns.n = ns.n + 1 %}{% if x|string %}y{% endif %}"
     "{% endmacro %}{% for m in messages %}{{ tag(m.name) }}{{ ns.n }}{{ m['content'] }}{% endfor %}",
     '{% set c = cycler("a", "b") %}{% for m in messages %}{{ c.next() ~ (m.name|string|length) }}'
     "{{ m['content'] }}{% endfor %}"],
    ids=["namespace-in-a-macro", "cycler"],
)  # fmt: skip
def test_a_missing_value_turned_into_text_by_a_stateful_expression_gives_transformers_tokens(tokenizer, template):
    """A ``{{ ... }}`` that turns a missing value into text is evaluated again by the check (its marker in place of
    the empty text): a macro's ``{% set ns.n %}`` or a ``cycler`` ran twice, and the tokens were of a prompt
    transformers never renders (``2hi``, where it renders ``1hi``)."""
    tokenizer.chat_template = template
    chat = [*HI, {"role": "assistant", "content": "4"}, {"role": "user", "content": "again"}]
    assert TokenizerCodec(tokenizer).chat(chat) == apply(tokenizer, chat, True)


@pytest.mark.parametrize(
    "template",
    ['{{ (m.name ~ ":") if not m.name|string else "x" }}', '{{ m.name ~ ":" if (m.name|string) == "" else "" }}',
     '{{ (m.name|trim ~ ":") if (m.name|string|length) == 0 else "x" }}',
     '{{ (m.name ~ ":") if "" in [m.name|string] else "x" }}',
     '{{ (m.name ~ ":") if ("a" ~ m.name) == "a" else "x" }}', '{{ (m.name ~ ":") if ("a" + m.name|string) == "a" }}',
     '{{ (m.name ~ ":") if (m.name ~ "b")|length == 1 else "x" }}'],
)  # fmt: skip
def test_a_missing_value_printed_on_a_branch_taken_inside_one_expression_is_named(tokenizer, template):
    """The check's second evaluation of a ``{{ ... }}`` gave the missing value's text as a marker, which is not
    empty: inside one expression, a test of that text (``not m.name|string``) took the other branch, and ``":hi"``,
    the value printed as nothing, went unrefused. The marker now tests as the empty text it stands for,
    and so does text joined to it by ``~`` or ``+`` (``"a" ~ m.name`` was "a" and a marker, unequal to ``"a"``)."""
    tokenizer.chat_template = "{% for m in messages %}" + template + "{{ m['content'] }}{% endfor %}"
    with pytest.raises(ValueError, match=r"prints a value these messages do not give \('dict object' has no "):
        TokenizerCodec(tokenizer).chat(HI)
    tokenizer.chat_template = (
        '{% for m in messages %}{{ ("named: " if m.name|string else "") }}{{ m.content }}{% endfor %}'
    )
    assert TokenizerCodec(tokenizer).chat(HI) == apply(tokenizer, HI, True)  # tested, not printed: as transformers
    tokenizer.chat_template = (
        '{% for m in messages %}{{ m.name ~ ":" if ("a" ~ m.name) != "a" }}{{ m.content }}{% endfor %}'
    )
    assert TokenizerCodec(tokenizer).chat(HI) == apply(tokenizer, HI, True)  # joined text tested: not printed either


def test_an_inline_if_whose_test_fails_and_has_no_else_prints_nothing_as_in_transformers(tokenizer):
    """``{{ "sys: " if m.role == "system" }}`` for a user message prints nothing by design (jinja's implicit else):
    it was refused as "a value these messages do not give", though the messages lack nothing."""
    chat = [*HI, {"role": "assistant", "content": "4"}]
    tokenizer.chat_template = '{% for m in messages %}{{ "sys: " if m.role == "system" }}{{ m.content }}{% endfor %}'
    assert TokenizerCodec(tokenizer).chat(chat) == apply(tokenizer, chat, True)
    tokenizer.chat_template = '{% for m in messages %}{{ m.name if m.role == "user" }}{{ m.content }}{% endfor %}'
    with pytest.raises(ValueError, match=r"prints a value these messages do not give \('dict object' has no "):
        TokenizerCodec(tokenizer).chat(chat)  # the branch taken prints a missing value: still named

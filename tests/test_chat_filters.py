"""A missing value's text through a filter or a string method inside one ``{{ ... }}`` (``|upper``, ``.strip()``):
the check's marker must test as the empty text transformers gives there too, so the branch it checks is
transformers' own."""

from __future__ import annotations

import pytest

from rlnb.text.codec import TokenizerCodec
from tests.support import hf_models

pytestmark = pytest.mark.usefixtures("transformers")  # Hugging Face: slow, skipped without transformers
HI = [{"role": "user", "content": "hi"}]
NAMED = r"prints a value these messages do not give \('dict object' has no attribute 'name'\)"


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("tok")
    hf_models.build_tokenizer(folder)
    return AutoTokenizer.from_pretrained(folder)


def apply(tokenizer, messages):
    out = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


@pytest.mark.parametrize(
    "test",
    ["not m.name|upper", "not (m.name ~ '').strip()", "(m.name|string).upper() == ''", "(m.name|trim) == ''",
     "(m.name|lower|length) == 0", "not (m.name|string)[0:]", "not m.name|replace('a', 'b')",
     "not (m.name|string).split()", "(m.name ~ 'abc')[:3] == 'abc'", "not m.name|capitalize",
     "(m.name ~ 'x').find('x') == 0", "not (m.name|string)|list", "not m.name|title",
     "not [m.name|string]|join", "('a' ~ m.name).startswith('a')", "(m.name ~ 'ab')|center(2) == 'ab'",
     "not ''.join([m.name|string])", "''.join([m.name|string, 'a']) == 'a'", "not '{}'.format(m.name)",
     "'-'.join(['a', m.name|string]) == 'a-'", "(m.name ~ ':')|center(3) == ' : '", "(m.name ~ 'abc')[:3] == 'abc'"],
)  # fmt: skip
def test_a_missing_value_tested_through_a_filter_or_method_takes_transformers_branch(tokenizer, test):
    """``{{ (m.name ~ ":") if not m.name|upper }}`` prints ``":"`` in transformers, the value printed as nothing; the
    check's marker came out of ``|upper`` (``.strip()``, a slice) as plain text, not empty, took the other branch and
    let ``":hi"`` through unnamed."""
    tokenizer.chat_template = "{% for m in messages %}{{ (m.name ~ ':') if " + test + " }}{{ m.content }}{% endfor %}"
    assert tokenizer.apply_chat_template(HI, add_generation_prompt=False, tokenize=False) == ":hi"
    with pytest.raises(ValueError, match=NAMED):
        TokenizerCodec(tokenizer).chat(HI)


@pytest.mark.parametrize(
    "printed",
    ["m.name|upper", "(m.name ~ ':').strip()", "(m.name|string).title() ~ ':'", "(m.name ~ ': ')|trim",
     "(m.name ~ ':')[0:]", "'%s:'|format(m.name)", "(m.name ~ ':')|center(3)", "(m.name ~ 'abc')[:3]",
     "'%-3s:'|format(m.name)", "'{:>3}:'.format(m.name|string)", "''.join([m.name|string, ':'])",
     "(m.name|string).rjust(2) ~ ':'", "(m.name ~ ':')|truncate(1, True, '', 0)", "(m.name ~ 'ab')|wordwrap(1)",
     "(m.name ~ ':')|indent(2, true)"],
)  # fmt: skip
def test_a_missing_value_printed_through_a_filter_or_method_is_named(tokenizer, printed):
    """Printed, not tested: the marker reaches the text, and the value is named; one a width or slice shifts
    (``|center(3)``, ``[:3]``, ``|wordwrap``, ``rjust``) was not, nor one that ``.format`` or ``%`` padded."""
    tokenizer.chat_template = "{% for m in messages %}{{ " + printed + " }}{{ m.content }}{% endfor %}"
    with pytest.raises(ValueError, match=NAMED):
        TokenizerCodec(tokenizer).chat(HI)


@pytest.mark.parametrize(
    "test",
    ["m.name|upper", "(m.name ~ 'ab')|upper != 'AB'", "(m.name ~ 'abc')[:1] != 'a'", "(m.name|string).split()"],
)
def test_a_filter_or_method_whose_result_tests_false_in_transformers_prints_as_there(tokenizer, test):
    """Where transformers' own text takes the branch that prints nothing, so does the check, and the tokens are
    transformers' (the marker is not taken for text: ``(m.name ~ 'abc')[:1]`` is ``'a'``, not the marker)."""
    tokenizer.chat_template = "{% for m in messages %}{{ (m.name ~ ':') if " + test + " }}{{ m.content }}{% endfor %}"
    assert tokenizer.apply_chat_template(HI, add_generation_prompt=False, tokenize=False) == "hi"
    assert TokenizerCodec(tokenizer).chat(HI) == apply(tokenizer, HI)

"""A chat template that prints a field the messages do not give: transformers prints it as nothing (a prompt no one
wrote, sampled and trained on without a word). ``rendered`` renders the messages once, as transformers does, and
names such a field, for ``TokenizerCodec.chat`` to refuse; its text is the prompt's.
"""

from __future__ import annotations

import functools
import importlib
import sys
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from rlnb.text.chat_marks import CURRENT, Marks, marked_template

CHECKED = 256
"""Renders kept, per template, special tokens, messages and generation prompt: RL samples the same prompts each
step, and a prompt seen before is not rendered again."""
_checked: OrderedDict[Any, Rendered] = OrderedDict()
_checked_lock = threading.Lock()


class Rendered(NamedTuple):
    """A chat prompt rendered as transformers renders it: its text, and the first value the template printed that
    the messages do not give (jinja's words), or None. ``text`` is None where a ``{{ ... }}`` was evaluated again
    (``Marks.printed``): what a stateful one did (a macro's ``{% set ns.n %}``, a ``cycler``) it did twice, and only
    transformers' own render is its text."""

    text: str | None
    missing: str | None


def rendered(tokenizer: Any, messages: Sequence[dict[str, Any]], add_generation_prompt: bool) -> Rendered | None:
    """``messages`` rendered by ``tokenizer``'s chat template as ``apply_chat_template`` renders them, with the value
    it prints that they do not give; None for a tokenizer not of transformers, or a transformers without the private
    helpers this builds on (warned once). What the render raises, transformers' render raises too. Kept for the last
    ``CHECKED`` prompts (a template reading the clock, ``strftime_now``, never)."""
    try:
        source = tokenizer.get_chat_template()
        specials = dict(tokenizer.special_tokens_map)
    except Exception:  # noqa: BLE001 - a tokenizer not of transformers: its own apply_chat_template runs next and
        return None  # raises what it raises
    helpers = _helpers()
    if not isinstance(source, str) or helpers is None or not messages:
        return None
    compile_, normalize, plain, alias = helpers
    chat = alias(plain(normalize(list(messages))))  # what transformers' template sees: None dropped, objects as text
    specials = plain(specials)
    key = None if "strftime_now" in source else (source, _frozen(specials), _frozen(chat), add_generation_prompt)
    with _checked_lock:
        if key is not None and key in _checked:
            _checked.move_to_end(key)
            return _checked[key]
    found = _render(marked_template(source, compile_), chat, specials, add_generation_prompt, source)
    if key is not None:
        with _checked_lock:
            _checked[key] = found
            while len(_checked) > CHECKED:
                _checked.popitem(last=False)
    return found


def renders_as_transformers(tokenizer: Any) -> bool:
    """Whether ``tokenizer``'s ``apply_chat_template`` is transformers' own, whose render ``rendered`` is (not a
    subclass's, whose tokens only it knows)."""
    from transformers import PreTrainedTokenizerBase

    return getattr(type(tokenizer), "apply_chat_template", None) is PreTrainedTokenizerBase.apply_chat_template


def nones(messages: Sequence[Mapping[str, Any]]) -> str:
    """Why a field the messages hold may be missing to the template: transformers leaves out one that is None."""
    dropped = any(v is None for m in messages for v in m.values())  # not `None in`: an array's == is no bool
    return " (transformers leaves out a field that is None)" if dropped else ""


def refusal(exc: Exception, messages: Sequence[Mapping[str, Any]]) -> str:
    """What a template's render raised, on one line: its ``raise_exception``'s words, a value it uses that the
    messages do not give (``m.name[0]``), or any other error with its type; and ``nones``."""
    jinja2 = sys.modules.get("jinja2")  # not imported: not a template's error
    if jinja2 is not None and isinstance(exc, jinja2.UndefinedError):
        said = f"the chat template uses a value these messages do not give: {exc}"
    elif jinja2 is not None and isinstance(exc, jinja2.TemplateError):
        said = f"the chat template refused these messages: {exc}"
    else:
        said = f"the chat template could not render these messages: {type(exc).__name__}: {exc}"
    return " ".join(said.split()) + nones(messages)


def _render(template: Any, chat: list[Any], specials: dict[str, Any], generation: bool, source: str) -> Rendered:
    """``template``'s text for ``chat``, and the first missing value printed."""
    marks = Marks("".join(_texts([chat, specials])) + source)
    token = CURRENT.set(marks)
    try:
        text = template.render(messages=chat, tools=None, documents=None, add_generation_prompt=generation, **specials)
    finally:
        CURRENT.reset(token)
    return Rendered(None if marks.again else str(text), marks.found[0] if marks.found else None)


def _texts(value: Any) -> Iterator[str]:
    """Each string and key in ``value`` (transformers' plain data: strings, numbers, lists, tuples and dicts), read
    without recursion."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)


def _frozen(value: Any) -> Any:
    """``value`` (plain data) as a key that tells apart all a template can (a tuple from a list, 1 from 1.0 and
    True, -0.0 from 0.0: equal floats, printed apart, so one's render would be the other's prompt)."""
    kind = type(value)
    if isinstance(value, float):
        return kind.__name__, float.hex(value)  # the float's every bit: -0.0 is "-0x0.0p+0", and every NaN one key
    if kind in (list, tuple):
        return kind.__name__, tuple(_frozen(v) for v in value)
    if kind is dict:
        return "dict", tuple((_frozen(k), _frozen(v)) for k, v in value.items())
    return kind.__name__, value


@functools.cache
def _helpers() -> tuple[Callable[..., Any], ...] | None:
    """transformers' private steps of ``apply_chat_template`` (compile; drop None fields; plain data; reasoning
    aliases), or None (warned once) if this transformers lacks one, or this jinja2 the code generator hooks
    ``marked_template`` overrides (renamed, they would never be called: missing values silently unnamed). Found
    once: every chat render asks."""
    try:
        utils = importlib.import_module("transformers.utils.chat_template_utils")
        generator = importlib.import_module("jinja2.compiler").CodeGenerator
        generator._output_child_pre, generator._output_child_post, generator.visit_Concat  # noqa: B018 - AttributeError if renamed

        return (utils._compile_jinja_template, utils._normalize_chat_messages, utils._plain_template_data,
                utils._alias_reasoning_fields)  # fmt: skip
    except (ImportError, AttributeError) as exc:
        _warn_unchecked(repr(exc))
        return None


@functools.cache
def _warn_unchecked(reason: str) -> None:
    warnings.warn(
        "rlnb cannot check chat templates for fields the messages do not give (printed as nothing): transformers."
        f"utils.chat_template_utils lacks a private helper of apply_chat_template it builds on, or jinja2 a code "
        f"generator hook ({reason})",
        UserWarning,
        stacklevel=4,
    )

"""A chat template that prints a field the messages do not give: transformers prints it as nothing (a prompt no one
wrote, sampled and trained on without a word). ``rendered`` renders the messages once, as transformers does, and
names such a field, for ``TokenizerCodec.chat`` to refuse; its text is the prompt's.
"""

from __future__ import annotations

import contextvars
import functools
import importlib
import sys
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
"""A tokenizer's own tokens a template may print: one it lacks (Qwen's BOS) is the tokenizer's design, not a field
the messages forgot, and prints as nothing, as in transformers."""
PRIVATE_USE = range(0xF0000, 0x110000)
"""Planes 15 and 16: where a ``{{ ... }}`` turned a missing value into text, it is evaluated again with that text one
of these (one per value) that no message, special token or the template holds; the value is named only if the
character then reaches what it prints. ``{% if m.name|string %}`` and ``|length`` print no text of it."""
CHECKED = 256
"""Renders kept, per template, special tokens, messages and generation prompt: RL samples the same prompts each
step, and a prompt seen before is not rendered again."""
_marks: contextvars.ContextVar[_Marks] = contextvars.ContextVar("rlnb_chat_fields_marks")
_checked: OrderedDict[Any, Rendered] = OrderedDict()
_checked_lock = threading.Lock()


class Rendered(NamedTuple):
    """A chat prompt rendered as transformers renders it: its text, and the first value the template printed that
    the messages do not give (jinja's words), or None. ``text`` is None where a ``{{ ... }}`` was evaluated again
    (``_Marks.printed``): what a stateful one did (a macro's ``{% set ns.n %}``, a ``cycler``) it did twice, and only
    transformers' own render is its text."""

    text: str | None
    missing: str | None


class _Marks:
    """One render's findings: missing values turned into text (``stringified``), and those printed (``found``);
    ``marking`` while a ``{{ ... }}`` that stringified one is evaluated again, its text a private-use character that
    ``taken`` does not hold; ``again`` once one was."""

    def __init__(self, taken: str) -> None:
        self.marking = False
        self.again = False
        self.stringified = 0
        self.found: list[str] = []
        self.names: dict[str, str] = {}  # the value's message (jinja's words) -> its marker
        held = set(taken)
        self._free = (c for c in map(chr, PRIVATE_USE) if c not in held)

    def mark(self, name: str) -> str:
        import jinja2

        if name not in self.names:
            free = next(self._free, None)
            if free is None:  # over 130,000 distinct private-use characters in the messages
                raise jinja2.UndefinedError(f"{name}, with no private-use character left to mark it")
            self.names[name] = free
        return self.names[name]

    def printed(self, evaluate: Callable[[], Any]) -> Any:
        """A ``{{ ... }}``'s value, as transformers evaluates it; a missing value it prints, as it is or as part of
        its text, noted in ``found``."""
        import jinja2

        if self.marking:  # a macro's output inside a ``{{ ... }}`` evaluated again
            return evaluate()
        before = self.stringified
        value = evaluate()
        if isinstance(value, jinja2.Undefined):
            if not _exempt(value):
                self.found.append(value._undefined_message)
            return value
        if self.stringified == before:
            return value
        self.marking = self.again = True
        try:
            again = str(evaluate())
        except Exception:  # noqa: BLE001 - another branch inside the expression: what it prints is unknown, not named
            return value
        finally:
            self.marking = False
        marked = [name for name, mark in self.names.items() if mark in again]
        if marked and "".join(c for c in again if c not in self.names.values()) == str(value):
            self.found.append(marked[0])  # the same text but for the markers: they are where the value printed
        return value


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
    found = _render(_marked_template(source, compile_), chat, specials, add_generation_prompt, source)
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
    marks = _Marks("".join(_texts([chat, specials])) + source)
    token = _marks.set(marks)
    try:
        text = template.render(messages=chat, tools=None, documents=None, add_generation_prompt=generation, **specials)
    finally:
        _marks.reset(token)
    return Rendered(None if marks.again else str(text), marks.found[0] if marks.found else None)


def _exempt(value: Any) -> bool:
    """A special token the tokenizer lacks (``{{ bos_token }}``): prints as nothing, by the tokenizer's design."""
    import jinja2.utils

    return value._undefined_obj is jinja2.utils.missing and value._undefined_name in SPECIAL_TOKENS


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
    True, -0.0 from 0.0: equal floats, printed apart, so one's render was the other's prompt)."""
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
    aliases), or None (warned once) if this transformers lacks one, or this jinja2 the two code generator hooks
    ``_marked_template`` overrides (renamed, they would never be called: missing values silently unnamed). Found
    once: every chat render asks."""
    try:
        utils = importlib.import_module("transformers.utils.chat_template_utils")
        generator = importlib.import_module("jinja2.compiler").CodeGenerator
        generator._output_child_pre, generator._output_child_post  # noqa: B018 - AttributeError if renamed

        return (utils._compile_jinja_template, utils._normalize_chat_messages, utils._plain_template_data,
                utils._alias_reasoning_fields)  # fmt: skip
    except (ImportError, AttributeError) as exc:
        _warn_unchecked(repr(exc))
        return None


@functools.lru_cache(maxsize=16)
def _marked_template(source: str, compile_: Callable[[str], Any]) -> Any:
    """``source`` compiled in transformers' environment, each ``{{ ... }}`` evaluated through the render's
    ``_Marks.printed``, and a missing value's text counted (empty, as in transformers; while marking, its marker)."""
    import jinja2

    class MarkedUndefined(jinja2.Undefined):
        """Missing (false, empty, not defined) as jinja's default is; its text counted, and while marking, its
        marker."""

        __slots__ = ()

        def __str__(self) -> str:
            marks = _marks.get(None)
            if marks is None or _exempt(self):
                return ""
            marks.stringified += 1
            return _Blank(marks.mark(self._undefined_message)) if marks.marking else ""

        __html__ = __str__

    env = compile_(source).environment.overlay(undefined=MarkedUndefined)

    class Printed(env.code_generator_class):  # type: ignore[name-defined]
        """Wraps each ``{{ ... }}``'s expression in ``environment.rlnb_printed(lambda: ...)``."""

        def _output_child_pre(self, node: Any, frame: Any, finalize: Any) -> None:
            super()._output_child_pre(node, frame, finalize)
            self.write("environment.rlnb_printed(lambda: ")

        def _output_child_post(self, node: Any, frame: Any, finalize: Any) -> None:
            self.write(")")
            super()._output_child_post(node, frame, finalize)

    env.code_generator_class = Printed
    env.rlnb_printed = _printed
    return env.from_string(source)


class _Blank(str):
    """A missing value's marker while its ``{{ ... }}`` is evaluated again: text built from it holds its character,
    but it tests as the empty text transformers gives it (equal to ``""``, false, length 0, holding nothing), so the
    expression takes transformers' branch (``{{ (m.name ~ ":") if not m.name|string }}`` printed ``":"``, unnamed)."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:  # str's own: NotImplemented for what is not text, as for ""
        return str.__eq__("", other)

    def __ne__(self, other: object) -> bool:
        return str.__ne__("", other)

    def __lt__(self, other: str) -> bool:
        return str.__lt__("", other)

    def __le__(self, other: str) -> bool:
        return str.__le__("", other)

    def __gt__(self, other: str) -> bool:
        return str.__gt__("", other)

    def __ge__(self, other: str) -> bool:
        return str.__ge__("", other)

    def __hash__(self) -> int:
        return hash("")

    def __len__(self) -> int:
        return 0

    def __contains__(self, part: str) -> bool:  # type: ignore[override]  # as str's: only text is in text
        return part in ""


def _printed(evaluate: Callable[[], Any]) -> Any:
    marks = _marks.get(None)
    return evaluate() if marks is None else marks.printed(evaluate)


@functools.cache
def _warn_unchecked(reason: str) -> None:
    warnings.warn(
        "rlnb cannot check chat templates for fields the messages do not give (printed as nothing): transformers."
        f"utils.chat_template_utils lacks a private helper of apply_chat_template it builds on, or jinja2 a code "
        f"generator hook ({reason})",
        UserWarning,
        stacklevel=4,
    )

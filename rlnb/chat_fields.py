"""A chat template that prints a field the messages do not give: transformers prints it as nothing (a prompt no one
wrote, sampled and trained on without a word); ``missing_printed`` names it, for ``TokenizerCodec.chat`` to refuse.
"""

from __future__ import annotations

import contextvars
import functools
import json
import threading
import warnings
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
"""A tokenizer's own tokens a template may print: one it lacks (Qwen's BOS) is the tokenizer's design, not a field
the messages forgot, and prints as nothing, as in transformers."""
PRIVATE_USE = range(0xF0000, 0x110000)
"""Planes 15 and 16: a missing value turned into text is one of these (one per value) that no message, special token
or the template holds, so only one that reaches the rendered prompt is refused; ``|string``, ``~`` or ``|lower`` kept
for a test are not."""
CHECKED = 256
"""Checks kept, per template, messages and generation prompt: RL samples the same prompts each step, and each check
is a render of its own."""
_marks: contextvars.ContextVar[_Marks] = contextvars.ContextVar("rlnb_chat_fields_marks")
_checked: OrderedDict[Any, str | None] = OrderedDict()
_checked_lock = threading.Lock()


class _Marks:
    """One render's markers: a private-use character for each missing value turned into text (``marking``), none
    that ``taken`` holds; and what each ``{{ ... }}`` printed, its markers left out, or the missing value it printed
    as it is."""

    def __init__(self, taken: str, marking: bool) -> None:
        self.marking = marking
        self.names: dict[str, str] = {}  # the value's message (jinja's words) -> its marker
        self.printed: list[tuple[str, str]] = []  # ("text", what it printed) or ("missing", the value's message)
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

    def unmarked(self, text: str) -> str:
        return "".join(c for c in text if c not in self.names.values())


def missing_printed(tokenizer: Any, messages: Sequence[dict[str, Any]], add_generation_prompt: bool) -> str | None:
    """What the chat template prints that ``messages`` do not give (jinja's words), or None: transformers prints it
    as nothing. Remembered per template, messages and generation prompt (the same prompt is checked once)."""
    try:
        source = tokenizer.get_chat_template()
        specials = {**dict.fromkeys(SPECIAL_TOKENS, ""), **tokenizer.special_tokens_map}
    except Exception:  # noqa: BLE001 - a tokenizer not of transformers: its own apply_chat_template runs next and
        return None  # raises what it raises
    if not isinstance(source, str):
        return None
    try:  # a template that reads the clock (strftime_now) may print another thing tomorrow: not kept
        key = (
            None if "strftime_now" in source else (source, _frozen(specials), _frozen(messages), add_generation_prompt)
        )
    except TypeError:  # a value in the messages that is not plain data: checked each time
        key = None
    with _checked_lock:
        if key is not None and key in _checked:
            _checked.move_to_end(key)
            return _checked[key]
    found = _check(source, specials, messages, add_generation_prompt)
    if key is not None:
        with _checked_lock:
            _checked[key] = found
            while len(_checked) > CHECKED:
                _checked.popitem(last=False)
    return found


def _check(source: str, specials: dict[str, Any], messages: Sequence[dict[str, Any]], generation: bool) -> str | None:
    """A render in transformers' environment where a missing value is still false, empty and not defined, and its
    text a marker. A marker in the prompt is refused if that render took transformers' path (its text without the
    markers, and each ``{{ ... }}``'s, is transformers'); where a missing value's text was compared and took
    another, transformers' own render is refused only where it prints a missing value as it is. Any other failure
    is left to transformers' render, which says why."""
    import jinja2

    try:
        held = json.dumps([messages, specials], ensure_ascii=False, default=str)
    except (TypeError, ValueError):  # a tuple as a key, an int of 5,000 digits: what jinja renders as it is
        held = "".join(_texts([messages, specials], set()))
    taken = held + source
    marks, plain = _Marks(taken, marking=True), _Marks(taken, marking=False)
    try:
        template = _strict_template(source)
        if template is None:
            return None
        text = _render(template, marks, specials, messages, generation)
        printed = [name for name, mark in marks.names.items() if mark in text]
        if not printed:
            return None
        if (marks.unmarked(text), marks.printed) == (_render(template, plain, specials, messages, generation),
                                                     plain.printed):  # fmt: skip
            return printed[0]  # transformers' path: the markers are where transformers prints nothing
        return next((name for kind, name in plain.printed if kind == "missing"), None)
    except jinja2.UndefinedError as exc:  # used as more than text: ``m.name[0]``, ``m.name.first``
        return str(exc)
    except Exception:  # noqa: BLE001 - a template that does not compile, raise_exception(...): apply_chat_template
        return None  # runs next and raises what it raises


def _render(template: Any, marks: _Marks, specials: dict[str, Any], messages: Any, generation: bool) -> str:
    """``template``'s text with ``marks`` in force."""
    token = _marks.set(marks)
    try:
        return str(template.render(messages=messages, tools=None, documents=None, add_generation_prompt=generation,
                                   **specials))  # fmt: skip
    finally:
        _marks.reset(token)


def _texts(value: Any, seen: set[int]) -> Iterator[str]:
    """The text of each string, key and object in ``value`` (what its JSON holds, where it has none), once each."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, int | float) or id(value) in seen:  # digits: no marker's character
        return
    elif isinstance(value, Mapping | list | tuple):
        seen.add(id(value))
        for item in value.items() if isinstance(value, Mapping) else value:
            yield from _texts(item, seen)
    else:
        try:
            text = str(value)
        except Exception:  # noqa: BLE001 - jinja cannot print it either: the render says why
            return
        yield text


def _frozen(value: Any) -> Any:
    """``value`` as a key that tells apart all a template can (a tuple from a list, 1 from 1.0 and True), or a
    ``TypeError`` for what is not plain data."""
    kind = type(value)
    if kind in (str, int, float, bool, type(None)):
        return kind.__name__, value
    if kind in (list, tuple):
        return kind.__name__, tuple(_frozen(v) for v in value)
    if kind is dict:
        return "dict", tuple((_frozen(k), _frozen(v)) for k, v in value.items())
    raise TypeError(kind.__name__)


@functools.lru_cache(maxsize=16)
def _strict_template(source: str) -> Any:
    """``source`` compiled in transformers' environment with undefined values marked as text and what each
    ``{{ ... }}`` prints noted, as the render's ``_Marks`` asks; None (warned once) if this transformers has no
    ``_compile_jinja_template`` to build that environment from."""
    import jinja2

    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template
    except (ImportError, AttributeError) as exc:
        _warn_unchecked(repr(exc))
        return None

    class MarkedUndefined(jinja2.Undefined):
        """Missing (false, empty, not defined) as jinja's default is; as text, its marker."""

        __slots__ = ()

        def __str__(self) -> str:
            marks = _marks.get(None)
            if marks is None or not marks.marking:  # a render outside ``missing_printed``: as jinja's default
                return ""
            return marks.mark(self._undefined_message)

        __html__ = __str__

    def noted(value: Any) -> Any:
        """``{{ value }}``: what it prints, noted (a missing value by its message)."""
        marks = _marks.get(None)
        if marks is not None:
            missing = isinstance(value, jinja2.Undefined)
            marks.printed.append(
                ("missing", value._undefined_message) if missing else ("text", marks.unmarked(str(value)))
            )
        return value

    env = _compile_jinja_template(source).environment
    return env.overlay(undefined=MarkedUndefined, finalize=noted).from_string(source)


@functools.cache
def _warn_unchecked(reason: str) -> None:
    warnings.warn(
        "rlnb cannot check chat templates for fields the messages do not give (printed as nothing): "
        f"transformers.utils.chat_template_utils._compile_jinja_template is not importable ({reason})",
        UserWarning,
        stacklevel=4,
    )

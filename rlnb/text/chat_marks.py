"""How a chat template's render notes a value the messages do not give that it prints: the template compiled so that
each ``{{ ... }}`` goes through ``Marks.printed`` (``marked_template``), and a missing value's text, when such a
``{{ ... }}`` is evaluated again, a private-use character that tests as the empty text transformers prints
(``_Marked``). ``rlnb.text.chat_fields`` renders with it.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable
from typing import Any

SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
"""A tokenizer's own tokens a template may print: one it lacks (Qwen's BOS) is the tokenizer's design, not a field
the messages forgot, and prints as nothing, as in transformers."""
PRIVATE_USE = range(0xF0000, 0x110000)
"""Planes 15 and 16: where a ``{{ ... }}`` turned a missing value into text, it is evaluated again with that text one
of these (one per value) that no message, special token or the template holds; the value is named only if the
character then reaches what it prints. ``{% if m.name|string %}`` and ``|length`` print no text of it."""
CURRENT: contextvars.ContextVar[Marks] = contextvars.ContextVar("rlnb_chat_marks")
"""The findings of the render under way in this context."""


class Marks:
    """One render's findings: missing values turned into text (``stringified``), and those printed (``found``);
    ``marking`` while a ``{{ ... }}`` that stringified one is evaluated again, its text a private-use character that
    ``taken`` does not hold; ``again`` once one was."""

    def __init__(self, taken: str) -> None:
        self.marking = False
        self.raw = False  # inside ``_faithful``'s call on the marked text: str's own methods, markers kept
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
        if type(value) is jinja2.Undefined:  # jinja's own: an inline if's implicit else (``{{ "x" if m.tools }}``),
            return value  # printed as nothing by design, as in transformers: not refused as a value not given
        if isinstance(value, jinja2.Undefined):
            if not exempt(value):
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


def exempt(value: Any) -> bool:
    """A special token the tokenizer lacks (``{{ bos_token }}``): prints as nothing, by the tokenizer's design."""
    import jinja2.utils

    return value._undefined_obj is jinja2.utils.missing and value._undefined_name in SPECIAL_TOKENS


@functools.lru_cache(maxsize=16)
def marked_template(source: str, compile_: Callable[[str], Any]) -> Any:
    """``source`` compiled in transformers' environment, each ``{{ ... }}`` evaluated through the render's
    ``Marks.printed``, and a missing value's text counted (empty, as in transformers; while marking, its marker)."""
    import jinja2

    class MarkedUndefined(jinja2.Undefined):
        """Missing (false, empty, not defined) as jinja's default is; its text counted, and while marking, its
        marker."""

        __slots__ = ()

        def __str__(self) -> str:
            marks = CURRENT.get(None)
            if marks is None or exempt(self):
                return ""
            marks.stringified += 1
            return _Marked(marks.mark(self._undefined_message)) if marks.marking else ""

        __html__ = __str__

    env = compile_(source).environment.overlay(undefined=MarkedUndefined)

    class Printed(env.code_generator_class):  # type: ignore[name-defined]
        """Wraps each ``{{ ... }}``'s expression in ``environment.rlnb_printed(lambda: ...)``, and each ``~`` in
        ``environment.rlnb_joined(...)``."""

        def _output_child_pre(self, node: Any, frame: Any, finalize: Any) -> None:
            super()._output_child_pre(node, frame, finalize)
            self.write("environment.rlnb_printed(lambda: ")

        def _output_child_post(self, node: Any, frame: Any, finalize: Any) -> None:
            self.write(")")
            super()._output_child_post(node, frame, finalize)

        def visit_Concat(self, node: Any, frame: Any) -> None:
            self.write("environment.rlnb_joined(")
            super().visit_Concat(node, frame)
            self.write(")")

    env.code_generator_class = Printed
    env.filters = {name: _faithful(f) for name, f in env.filters.items()}  # the overlay's own: a marker through each
    env.getattr = functools.partial(_method, env.getattr)
    env.rlnb_printed = _printed
    env.rlnb_joined = _joined
    return env.from_string(source)


class _Marked(str):
    """Text holding a missing value's marker while its ``{{ ... }}`` is evaluated again (the marker alone, or text
    joined to it by ``~`` or ``+``): it holds the marker's character, but it tests as the text transformers gives,
    where the value is empty (equal, ordered, sized, hashed and searched as it is without its markers), so the
    expression takes transformers' branch: ``{{ (m.name ~ ":") if not m.name|string }}`` printed ``":"``, unnamed, and
    so did ``{{ (m.name ~ ":") if ("a" ~ m.name) == "a" }}`` while ``~`` gave plain text. A string method
    (``.strip()``, a slice) or a filter (``|upper``, ``|title``, ``[m.name]|join``) gives what it gives on
    transformers' text, kept marked where a marker reaches the result (``_faithful``)."""

    __slots__ = ()

    def plain(self) -> str:
        """The text transformers gives: without the markers."""
        marks = CURRENT.get(None)
        markers = set(marks.names.values()) if marks is not None else set()
        return "".join(c for c in str.__str__(self) if c not in markers)

    def __eq__(self, other: object) -> bool:  # str's own: NotImplemented for what is not text, as for ""
        return str.__eq__(self.plain(), other)

    def __ne__(self, other: object) -> bool:
        return str.__ne__(self.plain(), other)

    def __lt__(self, other: str) -> bool:
        return str.__lt__(self.plain(), other)

    def __le__(self, other: str) -> bool:
        return str.__le__(self.plain(), other)

    def __gt__(self, other: str) -> bool:
        return str.__gt__(self.plain(), other)

    def __ge__(self, other: str) -> bool:
        return str.__ge__(self.plain(), other)

    def __hash__(self) -> int:
        return hash(self.plain())

    def __len__(self) -> int:
        return len(self.plain())

    def __contains__(self, part: str) -> bool:  # type: ignore[override]  # as str's: only text is in text
        return part in self.plain()

    def __add__(self, other: str) -> str:
        joined = str.__add__(self, other)
        return joined if joined is NotImplemented else _Marked(joined)

    def __radd__(self, other: str) -> str:
        return _Marked(other + str.__str__(self)) if isinstance(other, str) else NotImplemented


def _faithful(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` (a ``str`` method, a filter) as it answers transformers' text: called on its arguments without
    their markers (a ``_Marked``, or one in a list: ``[m.name]|join``), and that result kept ``_Marked`` where the
    result on the marked ones holds a marker: as that same text but for its markers, else with the markers before
    it (a width or slice shifted by them: ``|center(3)``, unnamed while only the first was marked).
    ``(m.name ~ "abc")[:3]`` is ``"abc"``, marked, not a marker and ``"ab"``; ``.split()`` is ``[]``; ``|upper``,
    ``|title`` are empty."""

    def call(*args: Any, **kwargs: Any) -> Any:
        marks = CURRENT.get(None)
        if marks is None or not marks.marking or marks.raw:
            return function(*args, **kwargs)
        marks.marking = False  # a missing value's text inside it (``m.name|title``) empty, as transformers has it
        try:
            given = function(*map(_plain, args), **{k: _plain(v) for k, v in kwargs.items()})
        finally:
            marks.marking = True
        if type(given) is not str:  # a list, a count, a test: transformers' own
            return given
        marks.raw = True  # ``|wordwrap``'s own ``.splitlines()`` on it kept the markers
        try:
            marked = function(*args, **kwargs)
        finally:
            marks.raw = False
        text = str.__str__(marked) if isinstance(marked, str) else given
        if text == given or _Marked(text) == given:
            return _Marked(text) if text != given else given
        markers = "".join(c for c in text if c in marks.names.values())  # shifted by its width: ``|center(3)``
        return _Marked(markers + given) if markers else given

    call.__dict__.update(getattr(function, "__dict__", {}))  # a filter's jinja_pass_arg
    return call


def _plain(value: Any) -> Any:
    """``value`` as transformers has it: a ``_Marked`` (or each in a list or tuple) without its markers."""
    if isinstance(value, _Marked):
        return value.plain()
    return type(value)(map(_plain, value)) if type(value) in (list, tuple) else value


def _format(text: str, *args: Any, **kwargs: Any) -> str:
    """``str.format`` as jinja's sandbox runs it (``SandboxedFormatter``): ``'{0.__globals__}'.format(f)`` a
    ``SecurityError``, as in transformers, a marked text's too (its own ``format`` would run unsandboxed)."""
    return type(text)(_formatter().vformat(text, args, kwargs))


def _format_map(text: str, mapping: Any) -> str:
    return type(text)(_formatter().vformat(text, (), mapping))


@functools.cache
def _formatter() -> Any:
    from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedFormatter

    return SandboxedFormatter(ImmutableSandboxedEnvironment())  # transformers' kind of sandbox


METHODS = frozenset(n for n in vars(str) if not n.startswith("_") and n != "maketrans")
"""``str``'s public methods a ``_Marked`` answers as transformers' text does (``_faithful``; ``maketrans`` reads no
text), and plain text's too while a ``{{ ... }}`` is evaluated again (``_method``: ``"".join([m.name])``)."""
_SANDBOXED = {"format": _format, "format_map": _format_map}
for _name in (
    *METHODS,
    "__getitem__",
    "__iter__",
    "__mod__",
    "__mul__",
    "__rmul__",
):  # and indexing, iteration, % and *
    setattr(_Marked, _name, _faithful(_SANDBOXED.get(_name) or getattr(str, _name)))


def _method(sandboxed: Callable[[Any, str], Any], obj: Any, attribute: str) -> Any:
    """The template's ``obj.attribute``, as the sandbox gives it; plain text's method while a ``{{ ... }}`` is
    evaluated again, ``_Marked``'s (``_faithful``, a marker in its arguments: ``"".join([m.name])`` tests empty)."""
    value = sandboxed(obj, attribute)
    marks = CURRENT.get(None)
    if marks is None or not marks.marking or type(obj) is not str or attribute not in METHODS:
        return value
    return functools.partial(getattr(_Marked, attribute), obj)


def _joined(text: Any) -> Any:
    """A ``~``'s text, kept ``_Marked`` where it holds a marker (as plain text it would test as not empty)."""
    marks = CURRENT.get(None)
    if marks is None or not marks.marking or type(text) is not str or not any(m in text for m in marks.names.values()):
        return text
    return _Marked(text)


def _printed(evaluate: Callable[[], Any]) -> Any:
    marks = CURRENT.get(None)
    return evaluate() if marks is None else marks.printed(evaluate)

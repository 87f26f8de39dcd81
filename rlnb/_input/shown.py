"""``shown``: a value as an error message repeats it, by one rule everywhere (the wire's and the server's messages,
the command line's, the chat checks'); ``printable``: text with its unprintable characters escaped. A module of its
own, below ``wire``, with nothing but the standard library: the command line reads its arguments without pydantic
(``rlnb --help``'s time), and ``wire`` is the bottom of the package's layers."""

from __future__ import annotations

import builtins
import reprlib
from typing import Any

__all__ = ["printable", "shown"]


def shown(text: object, limit: int = 40) -> str:
    """``text`` quoted for an error message, cut to ``limit`` characters: a 5,000-digit int64 string would come back
    whole in the 400's message (as would a megabyte), and so would an 8 KB id in a 404's. Any other value is shown as
    its repr, cut alike (a list of 10,000 learning rates would make a 70 KB ``InvalidParams``). The one rule every
    message cuts by (``wire.shown``, the CLI's options, the chat checks), saying how long the text was. A value whose
    ``repr()`` raises is shown a few levels deep (a list 5,000 deep as ``[[[[[...]]]]]``), each value in it whose
    repr raises by its type: what it raises would replace the error that shows it."""
    if isinstance(text, str):
        if len(text) <= limit:
            return str.__repr__(text)
        return f"{str.__repr__(text[:limit])}... ({len(text)} characters)"
    try:
        said = repr(text)
    except Exception:  # noqa: BLE001 - a value's own repr that raises, or nesting past Python's recursion limit
        said = _NESTED.repr(text)
        return said if len(said) <= limit else f"{said[:limit]}..."  # not its whole repr: no length to say
    return said if len(said) <= limit else f"{said[:limit]}... ({len(said)} characters)"


def printable(text: object, keep: str = "") -> str:
    """``text`` as a string with each character that is not printable (nor in ``keep``) as its escape (``\\n``,
    ``\\x1b``, ``\\u202e``), unquoted and uncut: a run or a metric named ``"a\\x00b\\n"`` drawn raw would be a box and
    a line break in a legend, and an id a hostile server sent with ANSI escapes, printed raw, would clear or retitle
    the terminal that shows it. ``keep="\\n\\t"`` keeps a message's lines (a server's plain-text error page)."""
    return "".join(c if c.isprintable() or c in keep else repr(c)[1:-1] for c in str(text))


class _Nested(reprlib.Repr):
    """reprlib's repr, a few levels deep; a value whose repr raises (``10**5000``, past ``str``'s 4,300 digits,
    among them) shown by its type."""

    def repr1(self, x: Any, level: int) -> str:
        try:
            return super().repr1(x, level)
        except Exception:  # noqa: BLE001 - what it raised is not the error being said
            return f"<{type(x).__name__} whose repr() failed>"

    def repr_instance(self, x: Any, level: int) -> str:
        said = builtins.repr(x)  # reprlib's own shows a raising one as ``<T instance at 0x...>``
        return said if len(said) <= self.maxother else f"{said[: self.maxother]}..."


_NESTED = _Nested()  # attributes, not arguments: Python 3.11's takes none
_NESTED.maxlevel, _NESTED.maxstring, _NESTED.maxother, _NESTED.maxlist, _NESTED.maxdict = 4, 300, 300, 20, 20

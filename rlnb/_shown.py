"""``shown``: a value as an error message repeats it, by one rule everywhere (the wire's and the server's messages,
the command line's). A module of its own, below ``wire``, with nothing but the standard library: the command line
reads its arguments without pydantic (``rlnb --help``'s time), and ``wire`` is the bottom of the package's layers."""

from __future__ import annotations

__all__ = ["shown"]


def shown(text: object, limit: int = 40) -> str:
    """``text`` quoted for an error message, cut to ``limit`` characters: a 5,000-digit int64 string came back
    whole in the 400's message (as would a megabyte), and so did an 8 KB id in a 404's. Any other value is shown as
    its repr, cut alike (a list of 10,000 learning rates made a 70 KB ``InvalidParams``). The one rule every message
    cuts by (``wire.shown``, the CLI's options): the CLI cut to 37 characters and "..." without saying how long. A
    value whose ``repr()`` raises is shown by its type: what it raised replaced the error that showed it."""
    if not isinstance(text, str):
        try:
            said = repr(text)
        except Exception:  # noqa: BLE001 - a value's own repr that raises: the error that shows it is still said
            return f"<{type(text).__name__} whose repr() failed>"
        return said if len(said) <= limit else f"{said[:limit]}... ({len(said)} characters)"
    return str.__repr__(text) if len(text) <= limit else f"{str.__repr__(text[:limit])}... ({len(text)} characters)"

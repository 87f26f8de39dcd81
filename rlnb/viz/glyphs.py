"""Which font draws each character of a text: its own fonts, else the first installed font that has the character
(matplotlib >= 3.6 draws each glyph with the first font of a family list that has it), else the character's escape.

DejaVu Sans, matplotlib's default, has no CJK and no emoji: a run named ``"学习率 🚀"`` would be drawn as empty boxes,
with a ``Glyph ... missing from font(s)`` warning at each draw. Where a font with the characters is installed
(``fonts-noto-cjk``, ``fonts-symbola``, ...) they are drawn; where none is, each is written as its escape
(``\\u5b66``), which can be read and searched for.
"""

from __future__ import annotations

import functools

from matplotlib import font_manager
from matplotlib.font_manager import FontProperties
from matplotlib.text import Text

_UNUSABLE = ("Last Resort", "Color Emoji")
"""Fonts never taken as a fallback: Last Resort draws a box for every character (a box is what this avoids), and a
colour emoji font's bitmaps are not drawn by matplotlib's Agg."""


def drawable(text: Text, written: str | None = None) -> None:
    """``text`` drawn with a font for each of its characters: the first installed font that has one its own fonts
    lack is added after them, and a character that no font has is written as its escape. ``written``: new words for
    it (a wrap's, a cut's), else its own. Each is set only where it changes: a set marks the figure stale."""
    written = text.get_text() if written is None else written
    families = tuple(text.get_fontproperties().get_family())
    shown, drawn_with = as_drawn(written, families)
    if drawn_with != families:
        text.set_fontfamily(list(drawn_with))
    if shown != text.get_text():
        text.set_text(shown)


def as_drawn(written: str, families: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """``written`` as ``drawable`` draws it in ``families``: its text (escapes for the characters no font has) and the
    families it is drawn with, so it can be measured as drawn before it is (``rlnb.viz.texts.drawn_width``)."""
    if written.isascii():
        return written, families
    have = _coverage(families)
    lacking = {c for c in written if c.isprintable() and not c.isspace() and ord(c) not in have}
    if not lacking:
        return written, families
    added = [f for f in dict.fromkeys(_fallback(c) for c in sorted(lacking)) if f is not None and f not in families]
    shown = "".join(_escape(c) if c in lacking and _fallback(c) is None else c for c in written)
    return shown, (*families, *added)


def _escape(char: str) -> str:
    return char.encode("unicode_escape").decode("ascii")


@functools.lru_cache(maxsize=64)
def _coverage(families: tuple[str, ...]) -> frozenset[int]:
    """The characters the fonts that matplotlib draws ``families`` with have, together: the installed font of each
    family (one not installed is passed over), or the default font (DejaVu Sans) where none is."""
    fonts = [path for path in map(_installed, families) if path is not None]
    if not fonts:
        default = font_manager.fontManager.defaultFamily["ttf"]
        fonts = [font_manager.findfont(FontProperties(family=default))]
    return frozenset().union(*(_charmap(str(path)) for path in fonts))


def _installed(family: str) -> str | None:
    """The file of the font matplotlib draws ``family`` with, or ``None`` where it has none (and falls back)."""
    try:
        return str(font_manager.findfont(FontProperties(family=family), fallback_to_default=False))
    except ValueError:
        return None


@functools.cache
def _charmap(path: str) -> frozenset[int]:
    """The characters of the font file at ``path``; none for a file FreeType cannot read (a broken font installed
    on the system must not stop a plot: it is simply never the fallback)."""
    try:
        return frozenset(font_manager.get_font(path).get_charmap())
    except (OSError, RuntimeError, ValueError):
        return frozenset()


@functools.lru_cache(maxsize=4096)
def _fallback(char: str) -> str | None:
    """The family of the first installed font that has ``char`` (regular ones first), or ``None``."""
    entries = sorted(font_manager.fontManager.ttflist, key=lambda e: (e.style != "normal", e.weight != 400, e.name))
    for entry in entries:
        if not any(word in entry.name for word in _UNUSABLE) and ord(char) in _charmap(entry.fname):
            return str(entry.name)
    return None

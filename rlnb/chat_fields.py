"""A chat template that prints a field the messages do not give: transformers prints it as nothing (a prompt no one
wrote, sampled and trained on without a word); ``missing_printed`` names it, for ``TokenizerCodec.chat`` to refuse.
"""

from __future__ import annotations

import contextvars
import functools
import warnings
from collections.abc import Sequence
from typing import Any

SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
"""A tokenizer's own tokens a template may print: one it lacks (Qwen's BOS) is the tokenizer's design, not a field
the messages forgot, and prints as nothing, as in transformers."""
MARKER_BASE = 0xF0000
"""Plane 15's private-use characters: a missing value turned into text is one of these (one per value), so only
one that reaches the rendered prompt is refused; ``|string``, ``~`` or ``|lower`` kept for a test are not."""
_stringified: contextvars.ContextVar[list[str]] = contextvars.ContextVar("rlnb_chat_fields_stringified")


def missing_printed(tokenizer: Any, messages: Sequence[dict[str, Any]], add_generation_prompt: bool) -> str | None:
    """What the chat template prints that ``messages`` do not give (jinja's words), or None: transformers prints it
    as nothing. A render in transformers' environment where a missing value is still false, empty and not defined,
    and its text a marker that is refused only if it reaches the output; any other failure is left to transformers'
    render, which says why."""
    import jinja2

    try:
        template = _strict_template(tokenizer.get_chat_template())
    except Exception:  # noqa: BLE001 - a tokenizer not of transformers, a template that does not compile: its own
        return None  # apply_chat_template runs next and raises what it raises
    if template is None:
        return None
    token = _stringified.set([])
    try:
        text = template.render(
            messages=messages, tools=None, documents=None, add_generation_prompt=add_generation_prompt,
            **{**dict.fromkeys(SPECIAL_TOKENS, ""), **tokenizer.special_tokens_map},
        )  # fmt: skip
        printed = [m for i, m in enumerate(_stringified.get()) if chr(MARKER_BASE + i) in text]
    except jinja2.UndefinedError as exc:  # used as more than text: ``m.name[0]``, ``m.name.first``
        return str(exc)
    except Exception:  # noqa: BLE001 - raise_exception(...), a tokenizer not of transformers: apply_chat_template
        return None  # runs next and raises what it raises
    finally:
        _stringified.reset(token)
    return printed[0] if printed else None


@functools.lru_cache(maxsize=16)
def _strict_template(source: str) -> Any:
    """``source`` compiled in transformers' environment with marked undefined values, or None (warned once) if this
    transformers has no ``_compile_jinja_template`` to build that environment from."""
    import jinja2

    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template
    except (ImportError, AttributeError) as exc:
        _warn_unchecked(repr(exc))
        return None

    class MarkedUndefined(jinja2.Undefined):
        """Missing (false, empty, not defined) as jinja's default is; as text, a marker recorded with its name."""

        __slots__ = ()

        def __str__(self) -> str:
            seen = _stringified.get(None)
            if seen is None:  # a render outside ``missing_printed``: as jinja's default
                return ""
            if self._undefined_message not in seen:
                seen.append(self._undefined_message)
            return chr(MARKER_BASE + seen.index(self._undefined_message))

        __html__ = __str__

    return _compile_jinja_template(source).environment.overlay(undefined=MarkedUndefined).from_string(source)


@functools.cache
def _warn_unchecked(reason: str) -> None:
    warnings.warn(
        "rlnb cannot check chat templates for fields the messages do not give (printed as nothing): "
        f"transformers.utils.chat_template_utils._compile_jinja_template is not importable ({reason})",
        UserWarning,
        stacklevel=4,
    )

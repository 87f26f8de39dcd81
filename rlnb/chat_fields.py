"""A chat template that prints a field the messages do not give: transformers prints it as nothing (a prompt no one
wrote, sampled and trained on without a word); ``missing_printed`` names it, for ``TokenizerCodec.chat`` to refuse.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
"""A tokenizer's own tokens a template may print: one it lacks (Qwen's BOS) is the tokenizer's design, not a field
the messages forgot, and prints as nothing, as in transformers."""


def missing_printed(tokenizer: Any, messages: Sequence[dict[str, Any]], add_generation_prompt: bool) -> str | None:
    """What the chat template prints that ``messages`` do not give (jinja's words), or None: transformers prints it
    as nothing. A render in transformers' environment whose undefined values fail only printed (``{% if m.name %}``,
    ``is defined``, ``| default`` still work); any other failure is left to transformers' render, which says why."""
    import jinja2

    try:
        _strict_template(tokenizer.get_chat_template()).render(
            messages=messages, tools=None, documents=None, add_generation_prompt=add_generation_prompt,
            **{**dict.fromkeys(SPECIAL_TOKENS, ""), **tokenizer.special_tokens_map},
        )  # fmt: skip
    except jinja2.UndefinedError as exc:
        return str(exc)
    except Exception:  # noqa: BLE001 - raise_exception(...), a tokenizer not of transformers: apply_chat_template
        return None  # runs next and raises what it raises
    return None


@functools.lru_cache(maxsize=16)
def _strict_template(source: str) -> Any:
    import jinja2
    from transformers.utils.chat_template_utils import _compile_jinja_template

    class PrintedUndefined(jinja2.Undefined):
        """Missing (false, empty, not defined) as jinja's default is, but an ``UndefinedError`` once printed."""

        __slots__ = ()
        __str__ = jinja2.Undefined._fail_with_undefined_error

    return _compile_jinja_template(source).environment.overlay(undefined=PrintedUndefined).from_string(source)

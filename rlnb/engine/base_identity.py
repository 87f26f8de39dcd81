"""What a checkpoint keeps of its base model besides the weights' digest: the config and the tokenizer.

The weights' digest (``model_setup.fingerprint``) reads ``state_dict()`` only, and a model is more than that: the
rotary tables and norms' epsilons are built from ``config.json``, and the tokenizer turns the same text into other
tokens when its files change. A resume onto a folder whose config or tokenizer changed since the save would run
another model, in silence; ``differences`` names what changed so that it is refused.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from torch import nn

IGNORED = frozenset(
    {"_name_or_path", "transformers_version", "dtype", "torch_dtype", "tie_word_embeddings"}
    | {"use_cache", "output_hidden_states", "output_attentions", "return_dict", "architectures"}
)
"""Config fields not compared: where or how a model was loaded (``dtype`` has its own checks); whether its head is
tied, which a resume changes itself (``tied_head.untie_head``; a ``model=`` module keeps it) and the weights and the
optimizer state say; and what a forward returns beside the logits, not the logits themselves (a key-value cache, the
hidden states, the attentions, a ``ModelOutput`` or a tuple: ``use_cache=False`` is usual under gradient
checkpointing) or which class names the weights suit (``architectures``, metadata)."""

SHOWN = 4
"""Changed config fields a refusal shows with their values (it names the rest)."""


def config_fields(module: nn.Module) -> dict[str, str] | None:
    """A Hugging Face model's config as its fields that differ from the class's defaults, each as canonical JSON text
    (a JSON and torch-safe form whatever the value: nested configs, infinities); None for a model without one."""
    config = getattr(module, "config", None)
    to_diff_dict = getattr(config, "to_diff_dict", None)
    if not callable(to_diff_dict):
        return None
    return {name: _text(value) for name, value in to_diff_dict().items() if name not in IGNORED}


def _text(value: Any) -> str:
    return json.dumps(_without_loading(value), sort_keys=True, default=repr)


def _without_loading(value: Any) -> Any:
    """``value`` less the ``IGNORED`` fields of the configs nested in it (a multimodal model's ``text_config``)."""
    if isinstance(value, dict):
        return {k: _without_loading(v) for k, v in value.items() if k not in IGNORED}
    return value


def tokenizer_digest(codec: Any) -> str | None:
    """A digest of what turns text into a Hugging Face tokenizer's tokens: its whole fast tokenizer (vocabulary,
    merges, normalizer, added tokens) or a slow one's vocabulary, its special tokens and its chat template. None for
    a codec that wraps no such tokenizer (bytes, none)."""
    tokenizer = getattr(codec, "tokenizer", None)
    if tokenizer is None or not hasattr(tokenizer, "get_vocab"):
        return None
    backend = getattr(tokenizer, "backend_tokenizer", None)
    text = backend.to_str() if backend is not None else json.dumps(sorted(tokenizer.get_vocab().items()))
    special = json.dumps(getattr(tokenizer, "special_tokens_map", {}), sort_keys=True, default=repr)
    template = json.dumps(getattr(tokenizer, "chat_template", None), sort_keys=True, default=repr)
    return hashlib.sha256("\n".join((text, special, template)).encode()).hexdigest()[:32]


def differences(state: dict[str, Any], config: dict[str, str] | None, tokenizer: str | None, model: str) -> str:
    """What differs between a checkpoint's base (``state``'s ``base_config`` and ``base_tokenizer``) and this
    session's ``model``, as a refusal's words; "" when nothing does, or when the checkpoint (an older rlnb's) or the
    session's model keeps no such record."""
    saved = _compared(state.get("base_config"))
    if saved is not None and config is not None and saved != config:
        changed = sorted(n for n in saved.keys() | config.keys() if saved.get(n) != config.get(n))
        shown = [f"{n}: {_said(saved.get(n))} at save, {_said(config.get(n))} now" for n in changed[:SHOWN]]
        more = f"; also {', '.join(changed[SHOWN:])}" if changed[SHOWN:] else ""
        return (
            f"checkpoint's base model had another config than this session's model {model!r} has ({'; '.join(shown)}"
            f"{more}): the same weights would compute other logits; put the folder's config.json back as it was at "
            "the save, or resume with the model folder the checkpoint was made from"
        )
    if state.get("base_tokenizer") not in (None, tokenizer) and tokenizer is not None:
        return (
            f"checkpoint's base model had another tokenizer than this session's model {model!r} has (its vocabulary, "
            "merges, special tokens or chat template differ): the same text would train as other tokens; put the "
            "tokenizer files back as they were at the save, or pass the checkpoint's tokenizer as tokenizer="
        )
    return ""


def _compared(saved: Any) -> dict[str, str] | None:
    """A checkpoint's ``base_config`` less the fields ``IGNORED`` holds now (a checkpoint whose record kept
    ``use_cache`` is compared on the same fields as this session's config); None for one without such a record."""
    if not isinstance(saved, dict):
        return None
    return {name: _text(json.loads(text)) for name, text in saved.items() if name not in IGNORED}


def _said(text: str | None) -> str:
    if text is None:
        return "unset"
    return text if len(text) <= 60 else text[:57] + "..."

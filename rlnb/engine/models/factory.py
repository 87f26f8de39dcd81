"""Which kind of model a session was given, and the adapter it gets for it: a built-in size, a Hugging Face
directory, hub id or loaded model, or a plain module; with the codec its text goes through."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from rlnb.engine.dtypes import check_weight_dtype
from rlnb.engine.models import dropout, hf
from rlnb.engine.models.adapter import BuiltinAdapter, ModelAdapter
from rlnb.engine.models.hf import ModelLoadError
from rlnb.engine.models.hf_adapter import HFAdapter
from rlnb.engine.models.tiny import SIZES, TinyTransformer, build_model
from rlnb.text.codec import ByteCodec, Codec, NoTokenizerCodec, TokenizerCodec


def build_adapter(
    model: str | nn.Module,
    *,
    tokenizer: Any = None,
    seed: int = 0,
    dtype: str = "auto",
    device: torch.device,
    eos_token_id: int | Sequence[int] | None = None,
    trust_remote_code: bool = False,
) -> ModelAdapter:
    """The adapter for ``model``: ``"tiny"`` / ``"small"``, a Hugging Face directory or hub id, a loaded
    transformers model (with an optional tokenizer), or any ``nn.Module`` mapping ids to logits.
    ``trust_remote_code`` lets a Hugging Face folder run its own code (see ``hf.check_code``)."""
    check_weight_dtype(dtype)
    extra_eos = [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id or [])
    generation_eos: list[Any] = []  # a Hugging Face model's own, from its generation config
    cls: type[ModelAdapter]
    if not isinstance(model, str | nn.Module) or isinstance(model, str) and not model.strip():
        raise ValueError(  # "" would load the working folder, refused as "a directory but holds no config.json"
            f"model must be 'tiny', 'small', a Hugging Face directory or hub id, or an nn.Module; got {model!r}"
        )
    if isinstance(model, str) and model in SIZES:
        module: nn.Module = build_model(model, seed)
        name, cls = f"rlnb/{model}", BuiltinAdapter
    elif isinstance(model, str):
        module, loaded_tok = hf.load(model, dtype, trust_remote_code)
        tokenizer = tokenizer if tokenizer is not None else loaded_tok
        name, cls = model, HFAdapter
    else:
        module = model
        if hf.is_hf_model(model):
            name, cls = str(getattr(model.config, "name_or_path", "") or type(model).__name__), HFAdapter
        else:
            name = f"custom/{type(model).__name__}"
            cls = BuiltinAdapter if isinstance(model, TinyTransformer) else ModelAdapter
    if cls is HFAdapter:
        hf.check_vocab(module.get_input_embeddings().weight.shape[0], tokenizer, name)  # type: ignore[operator]
        dropout.disable_dropout(module)
        ids = getattr(getattr(module, "generation_config", None), "eos_token_id", None)
        generation_eos = [ids] if isinstance(ids, int) else list(ids or [])
        extra_eos += generation_eos
    if dtype != "auto":
        module = module.to(hf.DTYPES[dtype])
    codec: Codec
    if tokenizer is not None:
        codec = TokenizerCodec(tokenizer, extra_eos)
    elif cls is HFAdapter:  # its vocabulary is not bytes: token ids only, text is an error naming the model
        codec = NoTokenizerCodec(name, extra_eos)
    else:
        codec = ByteCodec(extra_eos)
    adapter = cls(module.to(device).train(), name, codec, device)
    if cls is not HFAdapter:  # its vocabulary is known once probed: a larger tokenizer's text fails prompt by prompt
        hf.check_vocab(adapter.vocab_size, tokenizer, name)
    if isinstance(adapter, HFAdapter):
        check_generation_eos(generation_eos, adapter.vocab_size, name, isinstance(model, str))
        adapter.trust_remote_code = trust_remote_code
        probe = torch.arange(1, 9, device=device)[None] % adapter.vocab_size  # what dropout's names could not find
        dropout.check_deterministic(adapter.module, adapter.forward, probe[:, : adapter.context_length or 8], name)
    return adapter


def check_generation_eos(ids: list[Any], vocab: int, name: str, from_folder: bool) -> None:
    """A ``ModelLoadError`` naming an end-of-sequence id of the model's generation config that is no token of its
    vocabulary: samples would never end on it (``eos_token_id=`` given by hand is refused the same way)."""
    bad = [i for i in ids if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < vocab]
    if bad:
        where = "generation_config.json" if from_folder else "generation config (model.generation_config)"
        raise ModelLoadError(
            f"model {name!r}: its {where} ends samples on token id {bad[0]!r}, which is not a token of its vocabulary "
            f"of {vocab} tokens (ids 0 to {vocab - 1}): samples would never end on it. Correct its eos_token_id"
        )


def roles(model: nn.Module) -> list[nn.Parameter]:
    """The parameters whose role is embedding or output head, for any kind of model, found as a session
    of it would find them (the module is not moved and its mode is not changed)."""
    first = next(model.parameters(), None)
    device = first.device if first is not None else torch.device("cpu")
    cls = HFAdapter if hf.is_hf_model(model) else BuiltinAdapter if isinstance(model, TinyTransformer) else ModelAdapter
    return cls(model, "", ByteCodec(), device).embedding_params()

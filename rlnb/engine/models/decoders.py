"""Incremental decoding, one ``Decoder`` per kind of model: next-token logits for a batch after its prompts
(``prefill``), then after each new token (``step``). The sampler (``rlnb.engine.sampling``) only sees this
interface; ``ModelAdapter.decoder`` picks the implementation.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import Tensor, nn

from rlnb.engine.models.tiny import KVCache


class Decoder(Protocol):
    """Incremental decoding of a batch: next-token logits ``[B, V]`` after the prompts, then after each token."""

    def prefill(self, ids: Tensor, mask: Tensor) -> Tensor: ...

    def step(self, tokens: Tensor) -> Tensor: ...


def positions(mask: Tensor) -> Tensor:
    """Position of each slot among its row's real tokens (left padding gets 0)."""
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


class RecomputeDecoder:
    """No cache: the whole sequence again for every token (plain modules, and the cache's reference)."""

    def __init__(self, forward: Any) -> None:
        self.forward = forward

    def prefill(self, ids: Tensor, mask: Tensor) -> Tensor:
        self.ids, self.mask = ids, mask
        return self.forward(ids, mask)[:, -1]

    def step(self, tokens: Tensor) -> Tensor:
        self.ids = torch.cat([self.ids, tokens[:, None]], dim=1)
        self.mask = torch.cat([self.mask, self.mask.new_ones(len(tokens), 1)], dim=1)
        return self.forward(self.ids, self.mask)[:, -1]


class BuiltinDecoder:
    def __init__(self, model: nn.Module, cache: KVCache) -> None:
        self.model, self.cache = model, cache

    def prefill(self, ids: Tensor, mask: Tensor) -> Tensor:
        self.mask = mask
        return self.model(ids, mask, self.cache)[:, -1]

    def step(self, tokens: Tensor) -> Tensor:
        self.mask = torch.cat([self.mask, self.mask.new_ones(len(tokens), 1)], dim=1)
        return self.model(tokens[:, None], self.mask, self.cache)[:, -1]


class HFDecoder:
    """transformers 5.x incremental decoding: the model's ``DynamicCache`` passed as ``cache=``, explicit
    position ids (learned-position models such as GPT-2 need them with left padding)."""

    def __init__(self, model: nn.Module) -> None:
        from transformers import DynamicCache

        self.model, self.cache = model, DynamicCache()

    def prefill(self, ids: Tensor, mask: Tensor) -> Tensor:
        self.mask, self.last = mask, positions(mask)[:, -1:]
        out = self.model(
            input_ids=ids, attention_mask=mask, position_ids=positions(mask), cache=self.cache, use_cache=True,
            logits_to_keep=1,
        )
        return out.logits[:, -1]

    def step(self, tokens: Tensor) -> Tensor:
        self.mask = torch.cat([self.mask, self.mask.new_ones(len(tokens), 1)], dim=1)
        self.last = self.last + 1
        out = self.model(
            input_ids=tokens[:, None], attention_mask=self.mask, position_ids=self.last, cache=self.cache,
            use_cache=True,
        )
        return out.logits[:, -1]

"""Incremental decoding, one ``Decoder`` per kind of model: next-token logits for a batch after its prompts
(``prefill``), then after each new token (``step``). The sampler (``rlnb.engine.sampling``) only sees this
interface; ``ModelAdapter.decoder`` picks the implementation.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from rlnb.engine.models.compiled import window
from rlnb.engine.models.tiny import KVCache, TinyTransformer


class Decoder(Protocol):
    """Incremental decoding of a batch: next-token logits ``[B, V]`` after the prompts, then after each token.
    ``prefill`` takes each prompt once, ``[P, T]``, and decodes ``n`` rows of it, ``B = P * n`` (row ``i * n + j``:
    sample j of prompt i): a prompt's samples share its keys and values, so it is run once, not ``n`` times."""

    def prefill(self, ids: Tensor, mask: Tensor, n: int = 1) -> Tensor: ...

    def step(self, tokens: Tensor) -> Tensor: ...


def repeat_rows(x: Tensor, n: int) -> Tensor:
    """Each row of ``x`` ``n`` times in a row (``x`` itself for 1: ``repeat_interleave`` copies even then)."""
    return x if n == 1 else x.repeat_interleave(n, 0)


def positions(mask: Tensor) -> Tensor:
    """Position of each slot among its row's real tokens (left padding gets 0)."""
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


class RecomputeDecoder:
    """No cache: the whole sequence again for every token (plain modules, and the cache's reference)."""

    def __init__(self, forward: Any) -> None:
        self.forward = forward

    def prefill(self, ids: Tensor, mask: Tensor, n: int = 1) -> Tensor:
        self.ids, self.mask = repeat_rows(ids, n), repeat_rows(mask, n)
        return repeat_rows(self.forward(ids, mask)[:, -1], n)

    def step(self, tokens: Tensor) -> Tensor:
        self.ids = torch.cat([self.ids, tokens[:, None]], dim=1)
        self.mask = torch.cat([self.mask, self.mask.new_ones(len(tokens), 1)], dim=1)
        return self.forward(self.ids, self.mask)[:, -1]


class BuiltinDecoder:
    """The built-in model's cached decoding: the prompts as one plain call, then one static-shape
    ``decode_step`` per token (see ``KVCache``), the model's own or a compiled one (``compiled.Compiler``).

    An eager step attends over the filled slots. A compiled one attends over a window of them rounded up
    (``compiled.window``), with ``steps(window)`` its graph for that window: fixed shapes, a few graphs a sample."""

    def __init__(
        self, model: TinyTransformer, cache: KVCache, steps: Callable[[int], Callable[..., Tensor]] | None = None
    ) -> None:
        self.model, self.cache, self.steps = model, cache, steps
        self.windows: dict[int, Callable[..., Tensor]] = {}

    def prefill(self, ids: Tensor, mask: Tensor, n: int = 1) -> Tensor:
        self.cache.shared = n  # each prompt's keys and values written into its n rows (``KVCache``)
        try:
            logits = self.model(ids, mask, self.cache, last=True)
        finally:
            self.cache.shared = 1
        mask = repeat_rows(mask, n)
        self.cache.fill(mask)
        self.pos = positions(mask)[:, -1] + 1  # each row's next position: its real tokens so far
        self.slot = torch.tensor([ids.shape[1]], device=ids.device)
        self.filled = ids.shape[1]
        return repeat_rows(logits, n)

    def step(self, tokens: Tensor) -> Tensor:
        self.filled += 1
        if self.steps is None:
            self.cache.end, decode_step = self.filled, TinyTransformer.decode_step
        else:
            self.cache.end = window(self.filled, self.cache.real.shape[1])
            if self.cache.end not in self.windows:
                self.windows[self.cache.end] = self.steps(self.cache.end)
            decode_step = self.windows[self.cache.end]
        return decode_step(self.model, tokens, self.pos, self.slot, self.cache)  # advances pos and slot


class HFDecoder:
    """transformers 5.x incremental decoding: the model's cache passed as ``cache=``, explicit position ids
    (learned-position models such as GPT-2 need them with left padding). With ``static`` (compiled
    decoding) a ``StaticCache`` of ``max_len`` slots and a fixed-length mask: every step has the same shapes.
    With ``steps`` too, the cache is a ``hf_window.WindowedCache`` and each step attends over a window of its slots
    (``compiled.window``), ``steps(window)`` its graph for that window: a few graphs a sample, as ``BuiltinDecoder``."""

    def __init__(
        self,
        model: nn.Module,
        static: tuple[Any, int] | None = None,
        steps: Callable[[int], Callable[..., Tensor]] | None = None,
    ) -> None:
        """``static``: a ``StaticCache`` and its number of slots."""
        from transformers import DynamicCache

        self.model, self.steps = model, steps
        self.cache: Any
        self.cache, self.max_len = static if static is not None else (DynamicCache(), 0)
        self.windows: dict[int, Callable[..., Tensor]] = {}

    def prefill(self, ids: Tensor, mask: Tensor, n: int = 1) -> Tensor:
        """Each prompt once, through a ``DynamicCache`` of its own when ``n`` > 1, whose keys and values are then
        repeated (``batch_repeat_interleave``) or, for a static cache, written into its ``n`` rows (``update``)."""
        from transformers import DynamicCache

        rows = repeat_rows(mask, n)
        self.last = positions(rows)[:, -1].contiguous()  # advanced in place by each step (``hf_step``)
        self.filled = ids.shape[1]
        if self.max_len:  # the mask covers every slot from the start; the causal part hides the future ones
            self.mask = rows.new_ones(rows.shape[0], self.max_len)
            self.mask[:, : rows.shape[1]] = rows
        else:
            self.mask = rows
        if self.steps is not None:
            self.end = window(self.filled, self.max_len)
            self.cache.attend(self.end)
        own = self.cache if n == 1 else DynamicCache()
        out = self.model(
            input_ids=ids,
            attention_mask=self.mask if n == 1 else mask,
            position_ids=positions(mask),
            cache=own,
            use_cache=True,
            logits_to_keep=1,
        )
        if n > 1 and self.max_len:
            for layer, filled in zip(self.cache.layers, own.layers, strict=True):
                layer.update(filled.keys.repeat_interleave(n, 0), filled.values.repeat_interleave(n, 0))
        elif n > 1:
            own.batch_repeat_interleave(n)
            self.cache = own
        return repeat_rows(out.logits[:, -1], n)

    def step(self, tokens: Tensor) -> Tensor:
        self.filled += 1
        decode_step = hf_step
        if not self.max_len:
            self.mask = torch.cat([self.mask, self.mask.new_ones(len(tokens), 1)], dim=1)
        elif self.steps is not None:
            end = window(self.filled, self.max_len)
            if end != self.end:
                self.end = end
                self.cache.attend(end)
            if end not in self.windows:
                self.windows[end] = self.steps(end)
            decode_step = self.windows[end]
        return decode_step(self.model, tokens, self.mask, self.last, self.cache)


PROMPT_LOGIT_BYTES = 1 << 28
"""The most fp32 logits a prompt's log-probs hold at once: the whole prompt's would be 19 GB for a 32k-token
prompt of a 151k-token vocabulary (Qwen3's)."""


def hf_prompt_logits(model: nn.Module, ids: Tensor, vocab: int) -> Iterator[Tensor]:
    """Logits ``[T, V]`` of a prompt ``ids`` ``[T]``, a few hundred positions at a time, each chunk attending
    to the earlier ones through the model's own cache (chunked prefill, as vLLM computes prompt log-probs)."""
    from transformers import DynamicCache

    rows, cache = max(1, PROMPT_LOGIT_BYTES // (4 * vocab)), DynamicCache()
    for start in range(0, len(ids), rows):
        chunk = ids[start : start + rows]
        pos = torch.arange(start, start + len(chunk), device=ids.device)
        yield model(input_ids=chunk[None], position_ids=pos[None], cache=cache, use_cache=True).logits[0]


def hf_step(model: nn.Module, tokens: Tensor, mask: Tensor, pos: Tensor, cache: Any) -> Tensor:
    """Next-token logits ``[B, V]`` after ``tokens`` ``[B]`` at the positions after ``pos``, which it advances in
    place (the step ``HFDecoder`` compiles: inside its graph, that add costs no dispatch of its own)."""
    pos.add_(1)
    out = model(input_ids=tokens[:, None], attention_mask=mask, position_ids=pos[:, None], cache=cache, use_cache=True)
    return out.logits[:, -1]


DECODE_ATTENTION = "rlnb_decode_sdpa"
"""transformers' ``sdpa`` attention, except for a one-token query (``decode_attention``). With a padding mask on the
CPU, transformers repeats the key/value heads when compiling (``repeat_kv``): a copy of every layer's whole static
cache at every step, which made compiled decoding of Qwen3 shapes of 5 M and 21 M parameters 2.0x and 1.27x slower
(``bench/bench_sampler.py``). Eager decoding already avoids the copy (transformers packs the query's heads instead)."""


def decode_attention(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[Tensor, None]:
    """``DECODE_ATTENTION``: a one-token query attends without a copy of the cache's heads: compiled, as products,
    sums and a softmax (``one_query_attention``), eager with SDPA's own grouped-query support (``enable_gqa``);
    anything else as transformers' ``sdpa``."""
    groups = getattr(module, "num_key_value_groups", 1)
    if query.shape[2] == 1 and kwargs.get("softcap") is None and not dropout:
        if torch.compiler.is_compiling():
            return one_query_attention(query, key, value, attention_mask, scaling), None
        if groups > 1:
            out = torch.nn.functional.scaled_dot_product_attention(
                query, key, value, attn_mask=attention_mask, scale=scaling, enable_gqa=True
            )
            return out.transpose(1, 2).contiguous(), None
    return transformers_sdpa()(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                               **kwargs)  # fmt: skip


@functools.cache
def transformers_sdpa() -> Callable[..., tuple[Tensor, None]]:
    """transformers' ``sdpa_attention_forward``, imported once (not with this module: transformers takes a second to
    import, and the built-in model's decoding does not need it)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward


def one_query_attention(
    query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None, scaling: float | None
) -> Tensor:
    """Attention of a one-token query ``[B, H, 1, D]`` over keys and values ``[B, K, S, D]`` (``H / K`` query heads
    a key head), as ``[B, 1, H, D]``: a batched product for the scores, then a softmax and sums that the compiler
    fuses into a few loops, where CPU's fused SDPA kernel is slow for a single query. The scores are a product, not
    a sum of products: inductor would fuse the query's rotary embedding into that sum and compute its cos and sin
    again for every key slot. ``mask`` ``[B, 1, 1, S]``: boolean (True: attend) or added to the scores."""
    b, heads, _, dim = query.shape
    kv = key.shape[1]
    scale = dim**-0.5 if scaling is None else scaling
    scores = torch.matmul(query.reshape(b, kv, heads // kv, dim), key.transpose(-1, -2)) * scale  # [B, K, H / K, S]
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else scores + mask
    weights = torch.softmax(scores, dim=-1)
    return (weights[..., None] * value[:, :, None]).sum(-2).view(b, 1, heads, dim)


def use_decode_attention(model: nn.Module) -> None:
    """Make ``model`` (a transformers model using ``sdpa``) attend with ``DECODE_ATTENTION``."""
    config: Any = model.config
    if config._attn_implementation != "sdpa":  # another implementation, or this one already
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(DECODE_ATTENTION, decode_attention)
    AttentionMaskInterface.register(DECODE_ATTENTION, sdpa_mask)
    config._attn_implementation = DECODE_ATTENTION

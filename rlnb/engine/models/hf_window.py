"""transformers' ``StaticCache`` attending over a window of its slots (``compiled.window``), as the built-in model's
compiled step does: a ``StaticCache`` step attends over every slot, 2.5x the filled ones on average over a sample
that fills its cache. Imported when a compiled Hugging Face sample starts (it imports transformers).

A sliding-window layer (Mistral's, Gemma's, Qwen3's ``use_sliding_window``) is such a layer too: it holds every slot,
and the model's sliding-window mask hides the keys older than its window. transformers' ``StaticSlidingWindowLayer``
keeps only the window's slots, but its mask sizes read a Python int that grows by one a token, which a compiled step
specialised on: it compiled again at every token (up to torch's limit, then ran eager). A full layer costs the slots
past the window, as many as a full-attention layer's, which rlnb's memory estimate already counts."""

from __future__ import annotations

from typing import Any

from torch import Tensor
from transformers import StaticCache
from transformers.cache_utils import StaticLayer, StaticSlidingWindowLayer


class WindowLayer(StaticLayer):
    """A full-attention ``StaticLayer`` whose step attends over its first ``end`` slots: the new keys and values are
    written in place as before, and the keys, values and mask (``get_mask_sizes``) cover ``end`` slots. ``end`` is a
    Python int, so a compiled step specialises on it: one graph per window."""

    def __init__(self, max_cache_len: int, **kwargs: Any) -> None:
        super().__init__(max_cache_len=max_cache_len, **kwargs)
        self.end = max_cache_len

    def update(self, key_states: Tensor, value_states: Tensor, *args: Any, **kwargs: Any) -> tuple[Tensor, Tensor]:
        keys, values = super().update(key_states, value_states, *args, **kwargs)
        return keys[:, :, : self.end], values[:, :, : self.end]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.end, 0


class WindowedCache(StaticCache):
    """A ``StaticCache`` of ``max_cache_len`` slots whose full-attention layers attend over a window of them
    (``attend``), sliding-window layers too (the mask slides: see the module's docstring)."""

    def __init__(self, config: Any, max_cache_len: int) -> None:
        super().__init__(config=config, max_cache_len=max_cache_len)
        kinds = (StaticLayer, StaticSlidingWindowLayer)
        self.layers = [WindowLayer(max_cache_len) if type(x) in kinds else x for x in self.layers]

    def attend(self, end: int) -> None:
        """Attend over the first ``end`` slots from the next call on (the slots written so far must be among them)."""
        for layer in self.layers:
            if isinstance(layer, WindowLayer):
                layer.end = end

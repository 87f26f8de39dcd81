"""A transformers causal LM behind the ``ModelAdapter`` interface (``adapter``): ``.logits`` of its output, its own
KV cache (a ``StaticCache`` when compiled), its embeddings by role, ``save_pretrained`` for a merged checkpoint."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from rlnb.engine.models import hf
from rlnb.engine.models.adapter import (
    HEAP_SLACK,
    ModelAdapter,
    architecture,
    declared_context,
    model_dtype,
    unwrap,
)
from rlnb.engine.models.compiled import Compiler
from rlnb.engine.models.decoders import Decoder, HFDecoder, hf_prompt_logits, hf_step, positions, use_decode_attention


class HFAdapter(ModelAdapter):
    """A transformers causal LM: ``.logits`` of its output, its own cache, its embeddings by role."""

    kind = "hf"
    trust_remote_code = False
    """Whether the model was loaded with its folder's own code (then its merged checkpoints need it too)."""

    def _probe(self) -> tuple[int, int]:
        m: Any = self.module
        head = m.get_output_embeddings()
        vocab = head.weight.shape[0] if head is not None else m.config.vocab_size
        return int(vocab), declared_context(m)

    def kv_bytes_per_token(self) -> int:
        c: Any = self.module.config
        c = c.get_text_config() if callable(getattr(c, "get_text_config", None)) else c
        heads = getattr(c, "num_attention_heads", 0) or 0
        kv, dim = getattr(c, "num_key_value_heads", None) or heads, getattr(c, "head_dim", None)
        dim = dim or (getattr(c, "hidden_size", 0) or 0) // max(heads, 1)
        return 2 * (getattr(c, "num_hidden_layers", 0) or 0) * kv * dim * model_dtype(self.module).itemsize

    def prefill_bytes_per_token(self, keys: int, masked: bool, repeated: bool) -> int:
        """What a prefill holds at its peak per prompt token (``prefill_activations``) and, ``repeated`` for more
        than one sample, the prompt's own KV cache, which ``HFDecoder`` fills before it repeats it into the samples'
        rows (one sample's rows are that cache, counted with theirs)."""
        c: Any = self.module.config
        c = c.get_text_config() if callable(getattr(c, "get_text_config", None)) else c
        own = self.kv_bytes_per_token() if repeated else 0
        return prefill_activations(c, model_dtype(self.module).itemsize, keys, masked) + own

    def forward(self, model: nn.Module, ids: Tensor, mask: Tensor | None = None) -> Tensor:
        if mask is None:  # no left padding: plain causal attention (the fast path)
            return model(input_ids=ids, use_cache=False).logits
        return model(input_ids=ids, attention_mask=mask, position_ids=positions(mask), use_cache=False).logits

    def decoder(self, model: nn.Module, batch: int, max_len: int, compiler: Compiler | None = None) -> Decoder:
        if compiler is None:
            return HFDecoder(model)
        from rlnb.engine.models.hf_window import WindowedCache

        base = unwrap(model)  # peft's wrapper adds nothing to a LoRA forward, and would be compiled too
        use_decode_attention(base)  # the sampler copy's own config: the trainer keeps transformers' sdpa
        config, arch = base.config, architecture(base)
        cache = compiler.cache(("hf", batch, max_len), lambda: WindowedCache(config, max_len))

        def step(window: int) -> Any:  # one graph per attention window (``compiled.window``)
            return compiler.wrap(hf_step, "decode step", arch, batch=batch, length=max_len, window=window)

        return HFDecoder(base, (cache, max_len), step)

    def prompt_logits(self, model: nn.Module, ids: Tensor) -> Iterator[Tensor]:
        return hf_prompt_logits(model, ids, self.vocab_size)

    def embedding_params(self) -> list[nn.Parameter]:
        m: Any = self.module
        layers = [m.get_input_embeddings(), m.get_output_embeddings()]
        layers += [x for x in m.modules() if isinstance(x, nn.Embedding)]  # e.g. GPT-2's learned positions
        return [p for layer in layers if layer is not None for p in layer.parameters()]

    def head_module(self) -> nn.Module | None:
        return self.module.get_output_embeddings()  # type: ignore[operator]  # a transformers model method, typed as a Tensor attribute by nn.Module

    def save_merged(self, state: dict[str, Tensor], directory: Path) -> None:
        """``save_pretrained`` of the merged weights (and the tokenizer), loadable by ``from_pretrained``."""
        m: Any = self.module
        tied = bool(getattr(m.config, "tie_word_embeddings", False))
        head, emb = m.get_output_embeddings(), m.get_input_embeddings()
        head_key = _weight_key(m, head) if head is not None else None
        untie = tied and head_key is not None and not torch.equal(state[head_key], state[_weight_key(m, emb)])
        if untie:  # LoRA trained the head: its merged weight no longer equals the embedding
            m.config.tie_word_embeddings = False
        try:
            m.save_pretrained(directory, state_dict=state)
        finally:
            m.config.tie_word_embeddings = tied
        if callable(getattr(self.codec.tokenizer, "save_pretrained", None)):  # a tokenizer of one's own (encode and
            self.codec.tokenizer.save_pretrained(directory)  # decode only) would fail the whole save: weights kept

    def load_merged(self, directory: Path) -> dict[str, Tensor]:
        """The weights of a merged checkpoint's folder, checked as a model folder is (none missing, none of
        another shape): a weight it lacked would come back random, and the session resume on it."""
        model = hf.load_weights(directory, directory.name, model_dtype(self.module), self.trust_remote_code)
        return dict(model.state_dict())


def prefill_activations(config: Any, itemsize: int, keys: int, masked: bool) -> int:
    """Bytes a token of a transformers decoder's prefill holds at its peak, from its widths (llama, qwen3 and gpt2
    shapes; within 3% of the tensors alive at once in each, ``tests/engine/test_prefill_memory.py``): the
    embeddings, a layer's input, its residual and norm (4 hidden-wide, and the rotary embedding's cosines and sines;
    GPT-2's learned positions and their sum with the tokens' 2 more) beside the larger of the MLP's live tensors (a
    gated MLP's activated gate, up and their product, 3 ``intermediate_size`` wide; GPT-2's GELU, written out, 4)
    and the attention's (queries 4 times over through the rotary embedding, keys and values; with a mask, keys and
    values copied to every query head); ``HEAP_SLACK`` hidden widths more; and where ``masked`` a ``keys``-wide mask,
    boolean and as SDPA's float (5 bytes a key: one large tensor each, which the allocator maps and unmaps whole)."""
    hidden = getattr(config, "hidden_size", 0) or 0
    heads = getattr(config, "num_attention_heads", 0) or 0
    dim = getattr(config, "head_dim", None) or hidden // max(heads, 1)
    queries, kv = heads * dim, (getattr(config, "num_key_value_heads", None) or heads) * dim
    gated = getattr(config, "intermediate_size", None)
    if gated:
        held, mlp = 4 * hidden + 2 * dim, 3 * gated
    else:
        held, mlp = 6 * hidden, 4 * (getattr(config, "n_inner", None) or 4 * hidden)
    attention = held - hidden + 4 * queries + 2 * kv + (2 * queries if masked and kv < queries else 0)
    return (max(held + mlp, attention) + HEAP_SLACK * hidden) * itemsize + (5 * keys if masked else 0)


def _weight_key(model: nn.Module, layer: nn.Module) -> str:
    """The merged state dict's key of ``layer``'s weight, by the layer's own name: a tied head's tensor is the
    embedding's, so the first key holding it names the embedding (peft's wrapper, ``.base_layer``, dropped)."""
    name = next(n for n, mod in model.named_modules(remove_duplicate=False) if mod is layer)
    return f"{name}.weight".replace(".base_layer.", ".")

"""What each kind of model a session can hold answers: built-in, Hugging Face, or a plain module.

The backend, the handlers and the sampler only call a ``ModelAdapter``: a full forward for training
(``forward``), an incremental ``Decoder`` for sampling, the parameters whose *role* is embedding or
output head (AdamW in a Muon session, whatever their shape), the layers LoRA adapts, and how a
merged model is written so that transformers can load it. A transformers model's adapter is ``hf_adapter``'s.
Nothing outside these two modules and ``factory`` (which picks the kind for a model, and its codec) asks which
kind of model it is.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from rlnb.engine.models import hf
from rlnb.engine.models.compiled import Compiler, mark_static
from rlnb.engine.models.decoders import (
    BuiltinDecoder,
    Decoder,
    RecomputeDecoder,
)
from rlnb.engine.models.gpt2 import from_gpt2, gpt2_config, to_gpt2
from rlnb.engine.models.tiny import KVCache, TinyTransformer
from rlnb.text.codec import Codec

DEFAULT_CONTEXT = 1024
"""Context length assumed for a plain module that does not say (no ``block_size`` attribute)."""


def declared_context(module: nn.Module) -> int:
    """The context length an adapter takes for ``module`` (and supported-models lists for a served one): a
    transformers model's config, else a ``block_size`` of its config or its own, else ``DEFAULT_CONTEXT``."""
    if hf.is_hf_model(module):
        return hf.context_length(module) or DEFAULT_CONTEXT
    block = getattr(getattr(module, "config", None), "block_size", None) or getattr(module, "block_size", None)
    return int(block or DEFAULT_CONTEXT)


class ModelAdapter:
    """A plain ``nn.Module`` mapping token ids ``[B, T]`` to logits ``[B, T, V]`` (the fallback kind).

    It cannot take an attention mask, so left-padded batches are run one prompt length at a time, and
    decoding recomputes the whole sequence per token (no cache)."""

    kind = "module"
    fingerprint: str | None = None
    """The base weights' digest as loaded (``model_setup.fingerprint``): what a checkpoint's base is checked by."""
    base_dtype: str | None = None
    """The base weights' dtype as loaded (``"bfloat16"``): a LoRA checkpoint's base is named by it before its digest."""
    base_config: dict[str, str] | None = None
    """The base's config as loaded (``base_identity.config_fields``): a checkpoint's base is checked by it too."""
    shown_name: str | None = None
    """What exports call the base model in place of the folder it was loaded from (``rlnb serve``'s served name)."""
    base_tokenizer: str | None = None
    """The tokenizer's digest (``base_identity.tokenizer_digest``): a checkpoint's base is checked by it too."""

    def __init__(self, module: nn.Module, name: str, codec: Codec, device: torch.device) -> None:
        self.module = module
        self.name = name
        self.codec = codec
        self.device = device
        self.vocab_size, self.context_length = self._probe()

    def _probe(self) -> tuple[int, int]:
        with torch.no_grad():
            logits = self.forward(self.module, torch.zeros(1, 1, dtype=torch.long, device=self.device))
        if logits.dim() != 3 or logits.shape[:2] != (1, 1):
            raise ValueError(
                f"model must map token ids [B, T] to logits [B, T, vocab]; got shape {tuple(logits.shape)}"
            )
        return int(logits.shape[-1]), declared_context(self.module)

    # -- maths -------------------------------------------------------------------------------------

    def forward(self, model: nn.Module, ids: Tensor, mask: Tensor | None = None) -> Tensor:
        """Logits ``[B, T, V]``. ``mask`` (1 = real token) marks left padding; None = no padding on the left."""
        if mask is None or bool(mask.all()):
            return model(ids)
        out = None
        pads = (mask == 0).sum(-1)
        for pad in pads.unique().tolist():  # rows with the same padding run together, unpadded
            rows = (pads == pad).nonzero()[:, 0]
            logits = model(ids[rows, pad:])
            if out is None:
                out = logits.new_zeros(*ids.shape, logits.shape[-1])
            out[rows, pad:] = logits
        assert out is not None
        return out

    def prompt_logits(self, model: nn.Module, ids: Tensor) -> Iterator[Tensor]:
        """Logits ``[T, V]`` of one prompt ``ids`` ``[T]``, in chunks of positions where the model has a cache."""
        yield self.forward(model, ids[None])[0]

    def kv_bytes_per_token(self) -> int:
        """Bytes the decoder's KV cache holds per row and token (0: none; a plain module recomputes)."""
        return 0

    def prefill_bytes_per_token(self, keys: int, masked: bool, repeated: bool) -> int:
        """Bytes a prefill holds at once per prompt token besides the samples' KV cache: ``masked`` where it builds
        an attention mask over ``keys`` slots, ``repeated`` where each prompt's cache is then repeated for its
        samples (0: unknown; a plain module's)."""
        return 0

    def decoder(self, model: nn.Module, batch: int, max_len: int, compiler: Compiler | None = None) -> Decoder:
        """Incremental decoding of ``batch`` rows up to ``max_len`` tokens; ``compiler`` compiles its step (a plain
        module's recompute cannot be: its shapes grow with every token)."""
        return RecomputeDecoder(lambda ids, mask: self.forward(model, ids, mask))

    def embedding_params(self) -> list[nn.Parameter]:
        """Parameters whose role is token embedding, position table or output head (plus every ``nn.Embedding``).

        A plain module does not say which are which, so they are found by what their gradients look like
        (``lookup_tables``)."""
        found = [p for m in self.module.modules() if isinstance(m, nn.Embedding) for p in m.parameters()]
        token = torch.tensor([[1 % self.vocab_size]], device=self.device)
        return found + lookup_tables(self.module, token, 2 % self.vocab_size, {id(p) for p in found})

    def head_module(self) -> nn.Module | None:
        """The output layer (adapted by LoRA only with ``train_unembed``)."""
        roles = {id(p) for p in self.embedding_params()}
        heads = [
            m
            for m in self.module.modules()
            if isinstance(m, nn.Linear) and m.out_features == self.vocab_size and id(m.weight) in roles
        ]
        return heads[-1] if heads else None

    def lora_targets(self, train_unembed: bool) -> list[str]:
        """Names of every linear layer LoRA adapts: all of them, the output head only with ``train_unembed``."""
        head = self.head_module()
        return [
            name
            for name, m in self.module.named_modules()
            if (isinstance(m, nn.Linear) or type(m).__name__ == "Conv1D") and (train_unembed or m is not head)
        ]

    # -- files -------------------------------------------------------------------------------------

    def save_merged(self, state: dict[str, Tensor], directory: Path) -> None:
        """Write merged weights so that they can be loaded again (here: a torch state dict)."""
        directory.mkdir(parents=True, exist_ok=True)
        with open(directory / "model.pt", "wb") as fh:  # a failed write keeps its errno (a full disk says so)
            torch.save(state, fh)

    def load_merged(self, directory: Path) -> dict[str, Tensor]:
        return dict(torch.load(directory / "model.pt", map_location=self.device, weights_only=True))


class BuiltinAdapter(ModelAdapter):
    """The built-in byte-level transformer: masks, positions and a preallocated KV cache."""

    kind = "builtin"
    module: TinyTransformer

    def forward(self, model: nn.Module, ids: Tensor, mask: Tensor | None = None) -> Tensor:
        return model(ids, mask)

    def decoder(self, model: nn.Module, batch: int, max_len: int, compiler: Compiler | None = None) -> Decoder:
        base = unwrap(model)  # under LoRA: the model with its adapted layers, without peft's wrapper
        if compiler is None:
            cache = KVCache(self.module.config, batch, max_len, self.device, model_dtype(self.module))
            return BuiltinDecoder(base, cache)
        cache = compiler.cache(("builtin", batch, max_len), lambda: self._static_cache(batch, max_len))
        arch = architecture(base)

        def step(window: int) -> Any:  # one graph per attention window (``compiled.window``)
            shape = {"batch": batch, "length": max_len, "window": window}
            return compiler.wrap(TinyTransformer.decode_step, "decode step", arch, **shape)

        return BuiltinDecoder(base, cache, step)

    def kv_bytes_per_token(self) -> int:
        c = self.module.config  # keys and values of every layer: n_embd each
        return 2 * c.n_layer * c.n_embd * model_dtype(self.module).itemsize

    def prefill_bytes_per_token(self, keys: int, masked: bool, repeated: bool) -> int:
        c = self.module.config  # the MLP's 4 x n_embd, in and GELU'd; ``BuiltinDecoder`` passes a mask, padded or not
        return activation_bytes(c.n_embd, 8 * c.n_embd, keys, self.module)

    def _static_cache(self, batch: int, max_len: int) -> KVCache:
        cache = KVCache(self.module.config, batch, max_len, self.device, model_dtype(self.module), compiled=True)
        mark_static([*cache.k, *cache.v])
        return cache

    def embedding_params(self) -> list[nn.Parameter]:
        m = self.module
        return [*m.wte.parameters(), *m.wpe.parameters(), *m.lm_head.parameters()]

    def head_module(self) -> nn.Module:
        return self.module.lm_head

    def save_merged(self, state: dict[str, Tensor], directory: Path) -> None:
        """A GPT-2 checkpoint (``config.json`` + weights) that ``AutoModelForCausalLM`` loads."""
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "config.json").write_text(json.dumps(gpt2_config(self.module.config), indent=2))
        tensors = {k: v.detach().cpu().contiguous() for k, v in to_gpt2(state, self.module.config).items()}
        try:
            from safetensors.torch import save_file
        except ImportError:  # transformers also reads the older torch format
            torch.save(tensors, directory / "pytorch_model.bin")
        else:
            save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})

    def load_merged(self, directory: Path) -> dict[str, Tensor]:
        if (directory / "model.safetensors").is_file():
            from safetensors.torch import load_file

            state = load_file(str(directory / "model.safetensors"), device=str(self.device))
        else:
            state = torch.load(directory / "pytorch_model.bin", map_location=self.device, weights_only=True)
        return from_gpt2(state, self.module.config)


# -- shared by the kinds of model --------------------------------------------------------------------


def lookup_tables(module: nn.Module, token: Tensor, target: int, known: set[int]) -> list[nn.Parameter]:
    """The 2-D parameters of ``module`` (but ``known`` ones) that are lookup tables: backpropagating logit ``target``
    of the one-token input ``token`` ``[1, 1]`` reaches only its row of a token embedding, row 0 of a position table
    and row (or column) ``target`` of an output head, but every row and column of a hidden matrix.

    A matrix it reaches nowhere is none: a query or key (softmax over one position has zero derivative), or one behind
    a zero-initialised layer. So that a zero head or gate (modded-nanogpt's, ReZero's) stops no gradient, the probe
    runs on random stand-ins for all-zero parameters (``functional_call``: the module's weights and the global random
    state are untouched). One forward and one backward."""
    named = [(n, p) for n, p in module.named_parameters() if p.ndim == 2 and id(p) not in known]
    if not named:
        return []
    seed = torch.Generator(device=token.device).manual_seed(0)
    inputs = {
        n: (
            p.detach()
            if p.any() or not p.is_floating_point()
            else torch.randn(p.shape, generator=seed, device=p.device, dtype=p.dtype) * 0.02
        )
        for n, p in module.named_parameters()
    }
    probed = [inputs[n].requires_grad_() for n, _ in named]
    with torch.enable_grad():
        logits = torch.func.functional_call(module, inputs, (token,))
        grads = torch.autograd.grad(logits[0, -1, target], probed, allow_unused=True)
    return [p for (_, p), g in zip(named, grads, strict=True) if g is not None and _few_rows(g)]


def _few_rows(grad: Tensor) -> bool:
    """Whether ``grad`` is nonzero in 1 or 2 rows, or 1 or 2 columns, and not in all of them (a tied embedding and head:
    row ``token`` and row ``target``)."""
    for axis in (0, 1):
        live = int((grad.abs().sum(dim=1 - axis) > 0).sum())
        if 1 <= live <= 2 and live < grad.shape[axis]:
            return True
    return False


HEAP_SLACK = 12
"""Hidden widths a token that a fresh process's first prefill grew by beyond the tensors alive at its peak: the CPU
allocator keeps a layer's freed tensors in pieces the next layer's do not fit. Peak RSS grew 4-10.5 hidden widths
a token past the live bytes on the tests' llama and on a Qwen3-0.6B-wide model, 6-16 on the tests' GPT-2, and
``tiny`` and ``small`` 8-10 past what they counted before (``mallinfo2`` after every op; one sample's growth
varied up to 1.3x from run to run)."""


def activation_bytes(hidden: int, mlp: int, keys: int, module: nn.Module) -> int:
    """The built-in model's activations per prompt token at a prefill's peak: 8 ``hidden``-wide tensors (the
    residual stream, its norm, the attention's projections and output), the MLP's (``mlp`` wide in all) and the
    attention mask over ``keys`` slots, boolean and as SDPA's float: 5.1 KB on ``tiny`` at 200 tokens, 9.2 KB on
    ``small``, where a prefill's peak RSS grew 3.5-4.6 and 7.9-9.4 KB a token (``bench/bench_prefill.py``); their
    KV caches are 1 and 4 KB; and ``HEAP_SLACK`` hidden widths more: a fresh process's prefill grew 6.3 and 14
    KB a token there. (A Hugging Face model's: ``hf_adapter.prefill_activations``.)"""
    return (8 * hidden + mlp + HEAP_SLACK * hidden) * model_dtype(module).itemsize + 5 * keys


def architecture(model: nn.Module) -> tuple[Any, ...]:
    """What tells one compiled graph apart from another's: the parameters' names, shapes and dtypes (two
    sessions of one architecture share their graphs; LoRA adapters make another)."""
    return tuple((n, tuple(p.shape), p.dtype) for n, p in model.named_parameters())


def unwrap(model: nn.Module) -> Any:
    """A peft model's base model (its layers adapted in place), or the model itself."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def model_dtype(module: nn.Module) -> torch.dtype:
    first = next(module.parameters(), None)
    return first.dtype if first is not None else torch.float32

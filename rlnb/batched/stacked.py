"""K members of one built-in model as one stacked model: the members' weights side by side, one vmapped
forward for all of them.

Batched trials (``rlnb.batched``) train members that share an architecture, not weights or hyperparameters.
The master weights are one buffer ``flat`` ``[K, P]`` (member k's parameters in row k, in the column order
``layout`` that the optimizer needs: its groups contiguous), and ``backward`` writes the gradients into
``grad`` ``[K, P]``. So the optimizer updates every member with a few large tensor ops, a member's gradient
norm is a reduction over its row, and dropping a member is one ``index_select``. The forward reads each
parameter as a contiguous ``[K, *shape]`` copy of its columns, refreshed after every update (a view with a
batch stride of P would be copied by every batched matmul instead).

The forward is the built-in ``TinyTransformer`` itself, called on each member's weights with
``torch.func.functional_call`` under ``torch.func.vmap``: no second copy of the model. Sampling uses the
model's own KV cache: vmap hands each member its slice of one stacked cache (``KVCache.over``), and the
model's in-place writes land in that slice.

In the forward-backward its linear layers run as one ``baddbmm`` each and its log-probs come from
``rlnb.batched.fused``: fewer passes over the activations than vmap's rules and ``losses.logprobs_and_entropy``.
Attention is computed by ``batched_attention`` (softmax(q·kᵀ/√d + mask)·v, in ops vmap batches), set on the
stacked model's attention layers. CPU's fused kernel (``_scaled_dot_product_flash_attention_for_cpu``) has no
vmap batching rule in torch 2.13: vmap runs it member by member, and its backward through zero-filled
per-member gradient slices (measured here: the whole step 1.7x slower). Logits differ from the fused
kernel's by ~3e-7 (fp32). Selecting torch's math kernel with ``sdpa_kernel`` instead would flip a
process-wide flag under every other session's feet.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from functools import partial

import torch
from torch import Tensor, nn
from torch.func import functional_call, vmap

from rlnb.batched import fused
from rlnb.engine.models.decoders import repeat_rows
from rlnb.engine.models.tiny import CausalSelfAttention, KVCache, TinyConfig, TinyTransformer


def batched_attention(
    q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None = None, is_causal: bool = False
) -> Tensor:
    """``F.scaled_dot_product_attention`` (no dropout, default scale) as plain ops: (B, nh, T, hs) queries
    over (B, nh, S, hs) keys; ``attn_mask`` (boolean, True = may attend) or ``is_causal``. The scores are laid out
    keys by queries, their softmax over the keys' dimension -2: torch's CPU softmax over a last dimension narrower
    than its vector (16 floats with AVX-512; the demo's rows hold 5-13 keys) takes a slow path, 17-23x an element's
    time over dimension -2 (``bench/bench_batched_ab.py --part softmax``). The mask is filled into the fresh scores
    in place: torch's out-of-place ``masked_fill`` clones every score first."""
    scores = k @ q.transpose(-2, -1) * q.shape[-1] ** -0.5  # (B, nh, S, T)
    if is_causal:
        T, S = q.shape[-2], k.shape[-2]
        attn_mask = torch.ones(T, S, dtype=torch.bool, device=q.device).tril()  # top-left aligned, as torch
    if attn_mask is not None:
        scores.masked_fill_(~attn_mask.transpose(-2, -1), float("-inf"))
    return torch.softmax(scores, dim=-2).transpose(-2, -1) @ v


class StackedModel:
    """``members`` copies of one ``TinyTransformer`` architecture, trained as one.

    Args:
        modules: one model per member, all of the same config (their weights are copied in).
        layout: every trainable parameter name once, in the column order of ``flat``.
    """

    def __init__(self, modules: Sequence[nn.Module], layout: Sequence[str]) -> None:
        if not modules:
            raise ValueError("a stacked model needs at least one member")
        built = [m for m in modules if isinstance(m, TinyTransformer)]
        if len(built) != len(modules):
            raise ValueError("a stacked model's members must be built-in models (TinyTransformer)")
        config: TinyConfig = built[0].config
        if any(m.config != config for m in built):
            raise ValueError("every member must have the same architecture (model config)")
        named = dict(modules[0].named_parameters())
        if sorted(layout) != sorted(named):
            raise ValueError("layout must name every parameter of the model exactly once")
        self.config = config
        self.base = copy.deepcopy(modules[0]).to("meta")
        """The architecture without weights: ``functional_call`` runs it on each member's."""
        for layer in self.base.modules():
            if isinstance(layer, CausalSelfAttention):
                layer.attention = batched_attention
            if isinstance(layer, nn.Linear):  # its bias added in the product's pass (``fused.linear``)
                layer.forward = partial(fused.linear, layer)  # type: ignore[method-assign]
        self.columns: dict[str, tuple[int, int, torch.Size]] = {}
        """``name -> (start, stop, shape)``: where a parameter lives in each member's row."""
        start = 0
        for name in layout:
            shape = named[name].shape
            self.columns[name] = (start, start + named[name].numel(), shape)
            start += named[name].numel()
        first = named[layout[0]]
        self.device, self.dtype = first.device, first.dtype
        self.flat = torch.empty(len(modules), start, device=self.device, dtype=self.dtype)
        with torch.no_grad():
            for k, module in enumerate(modules):
                own = dict(module.named_parameters())
                for name, (a, b, _) in self.columns.items():
                    self.flat[k, a:b] = own[name].reshape(-1)
        self.grad = torch.zeros_like(self.flat)
        self.grads = self._views(self.grad)
        self.refresh()
        base = self.base

        def one(params: dict[str, Tensor], ids: Tensor) -> Tensor:
            return functional_call(base, params, (ids,))

        self._forward: Callable[[dict[str, Tensor], Tensor], Tensor] = vmap(one)

    @property
    def members(self) -> int:
        return self.flat.shape[0]

    def refresh(self) -> None:
        """Copy ``flat`` into the parameters the forward uses, each a contiguous ``[K, *shape]`` leaf for
        autograd (after every change to ``flat``: a view with a batch stride of P would be copied by every
        batched matmul instead)."""
        self.params: dict[str, Tensor] = {
            name: self.flat[:, a:b].reshape(self.members, *shape).clone().requires_grad_()
            for name, (a, b, shape) in self.columns.items()
        }

    def backward(self, loss: Tensor | None) -> None:
        """``grad`` ← d loss / d every member's weights (zero where ``loss`` is None). Gradients are not
        accumulated across calls: each RL step has one forward-backward; one that fails leaves ``grad`` zero. Each
        gradient is copied once, into its columns of ``grad``: a linear layer's weight gradient is a transposed view,
        which a ``reshape`` to a row a member would copy, and a ``cat`` into ``grad`` copy again."""
        if loss is None:
            self.grad.zero_()
            return
        try:
            grads = torch.autograd.grad(loss, list(self.params.values()))
            for into, g in zip(self.grads, grads, strict=True):
                into.copy_(g)
        except BaseException:
            self.grad.zero_()  # out of memory part way: no gradient kept, the last step's nor part of this one's
            raise

    def _views(self, rows: Tensor) -> list[Tensor]:
        """Each parameter's columns of ``rows`` ``[K, P]`` as ``[K, *shape]`` views, in ``columns`` order."""
        return [rows[:, a:b].view(self.members, *shape) for a, b, shape in self.columns.values()]

    def keep(self, index: Sequence[int]) -> None:
        """Drop every member not in ``index`` (members are renumbered in that order); the others keep their
        weights and their gradients (a member may leave between the backward and the update)."""
        rows = torch.tensor(list(index), dtype=torch.long, device=self.device)
        self.flat = self.flat.index_select(0, rows)
        self.grad = self.grad.index_select(0, rows)
        self.grads = self._views(self.grad)
        self.refresh()

    def state(self, k: int) -> dict[str, Tensor]:
        """A copy of member ``k``'s weights, under the model's own parameter names."""
        return {name: self.flat[k, a:b].view(shape).clone() for name, (a, b, shape) in self.columns.items()}

    # -- maths -------------------------------------------------------------------------------------

    def logprobs(self, ids: Tensor, targets: Tensor, where: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``[K, B, T]`` log-prob of each target token under its member's weights, and the policy's entropy at
        each position (only where ``where`` is true, when given), for right-padded ``ids`` ``[K, B, T]`` (with
        causal attention, padding after a sequence cannot change its positions)."""
        logits = self._forward(self.params, ids)  # (K, B, T, V)
        return fused.target_logprobs(logits, targets, where)

    def decoder(self, batch: int, max_len: int) -> StackedDecoder:
        """Incremental decoding of ``members * batch`` rows: row ``k * batch + b`` is member k's row b."""
        return StackedDecoder(self, batch, max_len)


class StackedDecoder:
    """The sampler's ``Decoder`` over every member's rows at once: one vmapped cached forward per token."""

    def __init__(self, model: StackedModel, batch: int, max_len: int) -> None:
        c = model.config
        # layer-major: a layer's keys of every member are one contiguous block, so the batched matmuls over a
        # slice of them fold members and rows into one batch dimension (member-major, the layer between, every
        # decoding step copied each layer's filled slots of every member first)
        shape = (c.n_layer, model.members, batch, c.n_head, max_len, c.n_embd // c.n_head)
        self.model, self.batch = model, batch
        self.k = torch.empty(shape, device=model.device, dtype=model.dtype)
        self.v = torch.empty(shape, device=model.device, dtype=model.dtype)
        self.length = 0
        base = model.base

        def one(params: dict[str, Tensor], k: Tensor, v: Tensor, ids: Tensor, mask: Tensor, past: int,
                shared: int) -> Tensor:  # fmt: skip
            cache = KVCache.over(k, v, past)
            cache.shared = shared  # a prefill's prompt written into the rows of its samples
            return functional_call(base, params, (ids, mask, cache), {"last": True})

        self._step = vmap(one, in_dims=(0, 1, 1, 0, 0, None, None))

    @torch.no_grad()
    def _run(self, ids: Tensor, mask: Tensor, n: int = 1) -> Tensor:
        K, T = self.model.members, ids.shape[-1]
        ids, mask = ids.view(K, -1, T), mask.view(K, ids.shape[0] // K, -1)
        logits = self._step(self.model.params, self.k, self.v, ids, mask, self.length, n)  # (K, B / n, V)
        self.length += T
        return repeat_rows(logits.reshape(-1, logits.shape[-1]), n)

    def prefill(self, ids: Tensor, mask: Tensor, n: int = 1) -> Tensor:
        """Each member's prompts ``[K * P, T]`` once, each for its ``n`` rows (``Decoder``)."""
        self.mask = repeat_rows(mask, n)
        return self._run(ids, mask, n)

    def step(self, tokens: Tensor) -> Tensor:
        self.mask = torch.cat([self.mask, self.mask.new_ones(len(tokens), 1)], dim=1)
        return self._run(tokens[:, None], self.mask)

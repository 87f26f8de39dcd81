"""Prepacked weights for the sampler's large linear layers on the CPU.

A decode step multiplies a few rows (the batch) by every weight matrix, and for that shape oneDNN's blocked
weight layout runs 1.2-2.7x faster than the plain one on this project's CPU at 16 rows (a 512 x 8192 output
head: 3.6 -> 1.3 ms; ``bench/bench_sampler.py --parts p``); on small matrices (256 x 256) it is slower. So ``pack``
turns the sampler copy's large float32 ``nn.Linear`` layers into ``PackedLinear``: the same module, parameters
and state dict, plus a packed copy of the weight, re-packed when the weight was written in place since
(weights-sync, a checkpoint's restore: torch counts in-place writes in ``Tensor._version``): by the layer itself
when it runs eagerly, by ``refresh`` (the sample handler, before each sample) for the compiled step.

The cost is that copy, about the size of the packed weights. So it is not done under LoRA, whose sampler shares
the frozen base with the trainer (one base is the point of LoRA), nor on CUDA or for other dtypes, nor where
torch has no oneDNN. Under ``torch.compile`` the packed product is the op ``rlnb::packed_linear`` (``_LIB``), which
the compiler calls as it is, so compiled and eager decoding run the same kernel.

A gated MLP (``down(act(gate(x)) * up(x))``, Llama's and Qwen's) multiplies the same rows by ``gate`` and ``up``:
``pack`` gives it one packed copy of the two weights stacked, one product instead of two (``PackedGatedMLP``; on
this project's CPU at 16 rows, 768 x 256 each: 191 -> 148 us, ``bench/bench_sampler.py --parts p``). The copy
is made from ``gate`` and ``up`` themselves and re-made when either is written, as a ``PackedLinear``'s; it takes the
bytes of the two weights, also where neither alone would be packed (bench (a)'s 3m Qwen3: 6 MiB).
"""

from __future__ import annotations

import functools
import threading
import weakref

import torch
import torch.nn.functional as F
from torch import Tensor, nn

MIN_ELEMENTS = 1 << 18
"""Pack weights of at least this many elements (512 x 512): below, oneDNN's packed product is no faster."""

_PACKED: dict[int, Tensor] = {}
"""Each live ``PackedLinear``'s packed weight, by the layer's ``id`` (the ops find it there through ``_SLOTS``: a
packed oneDNN tensor cannot be a traced input). A layer's entry goes when the layer does; a copy packs its own."""


_SLOTS = threading.local()
"""``layers``: the ``id`` and (first) weight's address of each packed layer of the model whose compiled step runs on
this thread, by its place in the model (``slot``), set by ``refresh`` before each compiled sample. The ops find a
layer's packed copy by its slot, the same in every session of one architecture: with the layer's ``id``, a constant
Dynamo guards, each new session's model compiled the step again, and past torch's eighth graph ran it eager."""


def available(device: torch.device) -> bool:
    return device.type == "cpu" and torch.backends.mkldnn.is_available()


def _remember(owner: object, weight: Tensor) -> None:
    """Pack ``weight`` as ``owner``'s packed weight (its entry goes when ``owner`` does)."""
    if id(owner) not in _PACKED:
        weakref.finalize(owner, _PACKED.pop, id(owner), None)
    _PACKED[id(owner)] = torch.ops.mkldnn._reorder_linear_weight(weight, None)


class PackedLinear(nn.Linear):
    """An ``nn.Linear`` that multiplies by a packed copy of its weight (see the module docstring)."""

    packed_version: int
    packed_slot: int

    def stale(self) -> bool:
        """Whether the weight was written since it was packed (or this layer, a copy, was never packed)."""
        return id(self) not in _PACKED or self.weight._version != self.packed_version

    def repack(self) -> None:
        _remember(self, self.weight.detach())
        self.packed_version = self.weight._version

    def forward(self, x: Tensor) -> Tensor:
        if x.dtype != torch.float32:
            return F.linear(x, self.weight, self.bias)
        if torch.compiler.is_compiling():  # refreshed before the compiled step runs (``refresh``)
            return packed_linear(x, self.weight, self.bias, self.packed_slot)
        if self.stale():
            self.repack()
        return torch.ops.mkldnn._linear_pointwise(x, _PACKED[id(self)], self.bias, "none", [], "")


_LIB = torch.library.Library("rlnb", "DEF")
"""The packed products as ops of their own, for the compiled step. Defined with ``Library``, a CPU kernel and a fake
one, not ``torch.library.custom_op``: that one wraps each call in Python (an autograd function, an alias check, a
redispatch: 8 Python calls a product, ~45 a decode step of bench (a)'s 3m Qwen3), where the sampler runs without
gradients and the kernels alias nothing."""
_LIB.define("packed_linear(Tensor x, Tensor weight, Tensor? bias, int slot) -> Tensor")
_LIB.define("packed_pair(Tensor x, Tensor first, Tensor second, int slot) -> Tensor")


def _packed_linear(x: Tensor, weight: Tensor, bias: Tensor | None, slot: int) -> Tensor:
    """``x @ weight.T + bias`` with the packed copy of ``weight`` that the layer at ``slot`` keeps (``_SLOTS``): a
    step of another model than ``refresh`` last named on this thread is an error, not another's weights."""
    layer, data = _SLOTS.layers[slot]
    if weight.data_ptr() != data:  # inline: a function would be a Python call a product
        raise RuntimeError(_NOT_REFRESHED)
    return torch.ops.mkldnn._linear_pointwise(x, _PACKED[layer], bias, "none", [], "")


def _packed_pair(x: Tensor, first: Tensor, second: Tensor, slot: int) -> Tensor:
    """``x @ cat([first, second]).T`` with the packed copy of the two that the module at ``slot`` keeps."""
    layer, data = _SLOTS.layers[slot]
    if first.data_ptr() != data:
        raise RuntimeError(_NOT_REFRESHED)
    return torch.ops.mkldnn._linear_pointwise(x, _PACKED[layer], None, "none", [], "")


_NOT_REFRESHED = "a packed layer's copy asked for another model's: call packed.refresh(model) before its compiled step"


_LIB.impl("packed_linear", _packed_linear, "CPU")
_LIB.impl("packed_pair", _packed_pair, "CPU")
packed_linear = torch.ops.rlnb.packed_linear.default
packed_pair = torch.ops.rlnb.packed_pair.default


@torch.library.register_fake("rlnb::packed_linear", lib=_LIB)
def _(x: Tensor, weight: Tensor, bias: Tensor | None, slot: int) -> Tensor:
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


@torch.library.register_fake("rlnb::packed_pair", lib=_LIB)
def _(x: Tensor, first: Tensor, second: Tensor, slot: int) -> Tensor:
    return x.new_empty((*x.shape[:-1], first.shape[0] + second.shape[0]))


class PackedGatedMLP(nn.Module):
    """A gated MLP whose ``gate`` and ``up`` products are one packed product (see the module docstring). Its class
    is the model's own MLP class under this one (``_gated``): the model's code still sees its type."""

    gate_proj: nn.Linear
    up_proj: nn.Linear
    down_proj: nn.Module
    act_fn: nn.Module
    packed_versions: tuple[int, int]
    packed_slot: int

    def versions(self) -> tuple[int, int]:
        return self.gate_proj.weight._version, self.up_proj.weight._version

    def stale(self) -> bool:
        """Whether ``gate`` or ``up`` was written since the pair was packed (or this module, a copy, never was)."""
        return id(self) not in _PACKED or self.versions() != self.packed_versions

    def repack(self) -> None:
        _remember(self, torch.cat([self.gate_proj.weight.detach(), self.up_proj.weight.detach()]))
        self.packed_versions = self.versions()

    def forward(self, x: Tensor) -> Tensor:
        if x.dtype != torch.float32:
            return super().forward(x)  # the model's own MLP
        if torch.compiler.is_compiling():  # refreshed before the compiled step runs (``refresh``)
            both = packed_pair(x, self.gate_proj.weight, self.up_proj.weight, self.packed_slot)
        else:
            if self.stale():
                self.repack()
            both = torch.ops.mkldnn._linear_pointwise(x, _PACKED[id(self)], None, "none", [], "")
        gate, up = both.split(self.gate_proj.out_features, -1)
        return self.down_proj(self.act_fn(gate) * up)


@functools.cache
def _gated(cls: type[nn.Module]) -> type[nn.Module]:
    return type(f"Packed{cls.__name__}", (PackedGatedMLP, cls), {})


def _pack_gated(module: nn.Module, min_elements: int) -> bool:
    """Make ``module`` a ``PackedGatedMLP`` if it has a gated MLP's layers (unbiased float32 ``gate_proj`` and
    ``up_proj`` of one input, ``down_proj``, ``act_fn``) and, on a probe, computes ``down(act(gate(x)) * up(x))``:
    an MLP of another formula, or whose forward takes other arguments, keeps its own class. Whether it did."""
    gate, up = getattr(module, "gate_proj", None), getattr(module, "up_proj", None)
    if not (type(gate) is nn.Linear and type(up) is nn.Linear and hasattr(module, "down_proj")):
        return False
    if not (hasattr(module, "act_fn") and gate.bias is None and up.bias is None):
        return False
    if gate.weight.dtype != torch.float32 or up.weight.dtype != torch.float32 or gate.in_features != up.in_features:
        return False
    if (gate.weight.numel() + up.weight.numel()) < min_elements:
        return False
    own = type(module)
    probe = torch.randn(2, gate.in_features, generator=torch.Generator().manual_seed(0)).to(gate.weight.device)
    with torch.no_grad():
        try:
            want = module(probe)
        except (TypeError, RuntimeError, ValueError):  # a forward of other arguments: not this formula
            return False
        module.__class__ = _gated(own)
        if torch.allclose(module(probe), want, rtol=1e-4, atol=1e-5):
            return True
    module.__class__ = own
    _PACKED.pop(id(module), None)
    return False


def pack(model: nn.Module, min_elements: int = MIN_ELEMENTS) -> int:
    """Turn ``model``'s float32 gated MLPs into ``PackedGatedMLP`` and its other float32 linear layers of at least
    ``min_elements`` weights into ``PackedLinear``, in place; how many packed weights that made (a pair is one)."""
    count, paired = 0, set()
    for module in model.modules():
        if _pack_gated(module, min_elements):
            paired |= {id(module.gate_proj), id(module.up_proj)}
            count += 1
    for module in model.modules():
        if type(module) is nn.Linear and module.weight.dtype == torch.float32 and module.weight.numel() >= min_elements:
            if id(module) in paired:
                continue
            module.__class__ = PackedLinear
            packed: PackedLinear = module  # type: ignore[assignment]  # the class was just swapped
            packed.repack()
            count += 1
    for slot, module in enumerate(_packed(model)):
        module.packed_slot = slot
    return count


def _packed(model: nn.Module) -> list[PackedLinear | PackedGatedMLP]:
    """``model``'s packed layers, in the order of ``modules()``: a layer's slot is its place here."""
    return [m for m in model.modules() if isinstance(m, PackedLinear | PackedGatedMLP)]


def refresh(model: nn.Module) -> None:
    """Re-pack every layer whose weight was written in place since it was packed, and make ``model``'s packed
    layers the ones the compiled step on this thread finds by slot (``_SLOTS``)."""
    layers = _packed(model)
    for module in layers:
        if module.stale():
            module.repack()
    _SLOTS.layers = [
        (id(m), (m.weight if isinstance(m, PackedLinear) else m.gate_proj.weight).data_ptr()) for m in layers
    ]

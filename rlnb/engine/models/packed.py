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
torch has no oneDNN. Under ``torch.compile`` the packed product is the custom op ``rlnb::packed_linear``, which
the compiler calls as it is, so compiled and eager decoding run the same kernel.
"""

from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F
from torch import Tensor, nn

MIN_ELEMENTS = 1 << 18
"""Pack weights of at least this many elements (512 x 512): below, oneDNN's packed product is no faster."""

_PACKED: dict[int, Tensor] = {}
"""Each live ``PackedLinear``'s packed weight, by the layer's ``id`` (the custom op finds it there: a packed oneDNN
tensor cannot be a traced input). A layer's entry goes when the layer does; a copy of a layer packs its own."""


def available(device: torch.device) -> bool:
    return device.type == "cpu" and torch.backends.mkldnn.is_available()


class PackedLinear(nn.Linear):
    """An ``nn.Linear`` that multiplies by a packed copy of its weight (see the module docstring)."""

    packed_version: int

    def stale(self) -> bool:
        """Whether the weight was written since it was packed (or this layer, a copy, was never packed)."""
        return id(self) not in _PACKED or self.weight._version != self.packed_version

    def repack(self) -> None:
        if id(self) not in _PACKED:
            weakref.finalize(self, _PACKED.pop, id(self), None)
        _PACKED[id(self)] = torch.ops.mkldnn._reorder_linear_weight(self.weight.detach(), None)
        self.packed_version = self.weight._version

    def forward(self, x: Tensor) -> Tensor:
        if x.dtype != torch.float32:
            return F.linear(x, self.weight, self.bias)
        if torch.compiler.is_compiling():  # refreshed before the compiled step runs (``refresh``)
            return packed_linear(x, self.weight, self.bias, id(self))
        if self.stale():
            self.repack()
        return torch.ops.mkldnn._linear_pointwise(x, _PACKED[id(self)], self.bias, "none", [], "")


@torch.library.custom_op("rlnb::packed_linear", mutates_args=())
def packed_linear(x: Tensor, weight: Tensor, bias: Tensor | None, layer: int) -> Tensor:
    """``x @ weight.T + bias`` with the packed copy of ``weight`` that layer ``id`` ``layer`` keeps."""
    return torch.ops.mkldnn._linear_pointwise(x, _PACKED[layer], bias, "none", [], "")


@packed_linear.register_fake
def _(x: Tensor, weight: Tensor, bias: Tensor | None, layer: int) -> Tensor:
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


def pack(model: nn.Module, min_elements: int = MIN_ELEMENTS) -> int:
    """Turn ``model``'s float32 linear layers of at least ``min_elements`` weights into ``PackedLinear`` in place;
    how many were."""
    count = 0
    for module in model.modules():
        if type(module) is nn.Linear and module.weight.dtype == torch.float32 and module.weight.numel() >= min_elements:
            module.__class__ = PackedLinear
            packed: PackedLinear = module  # type: ignore[assignment]  # the class was just swapped
            packed.repack()
            count += 1
    return count


def refresh(model: nn.Module) -> None:
    """Re-pack every layer whose weight was written in place since it was packed."""
    for module in model.modules():
        if isinstance(module, PackedLinear) and module.stale():
            module.repack()

"""Base-model randomness off: RL compares the sampler's log-probs with the trainer's, so a train-mode forward must
give the same logits as an eval-mode one.

Dropout would make the same weights disagree with themselves, and its masks come from torch's global RNG, which
concurrent sessions in one process share. ``disable_dropout`` turns off what it can find by type and by name;
``check_deterministic`` then runs the model in train mode under two seeds (one of them twice) and refuses it,
naming the module, if anything random is left (a rate held under a name no one could guess, passed to ``F.dropout``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.dropout import _DropoutNd

from rlnb.engine.models.hf import ModelLoadError

RATE_NAMES = ("dropout", "drop_prob", "drop_path", "drop_rate", "drop_connect", "stochastic_depth", "pdrop",
              "layerdrop", "jitter")  # fmt: skip
"""A float attribute whose name holds one of these is a rate of something random in training (Llama's
``attention_dropout``, GPT-2's ``resid_pdrop``, timm's ``DropPath.drop_prob``, EfficientNet's ``drop_connect_rate``,
torchvision's ``stochastic_depth_prob``, OPT's ``layerdrop``, Mixtral's router ``jitter_noise``): zeroed on every
module and on the config."""
DEPTH_CLASSES = ("DropPath", "StochasticDepth")
"""Stochastic-depth modules whose rate is a float ``p`` (torchvision's ``StochasticDepth``)."""


def disable_dropout(model: nn.Module) -> list[str]:
    """Zero every rate of randomness ``model`` has in train mode: torch's dropout layers by type (``nn.Dropout``,
    ``Dropout1d/2d/3d``, ``AlphaDropout``, ``FeatureAlphaDropout``), stochastic-depth modules, and float attributes
    named like a rate (layers copy them from the config when built). Adapters added later (LoRA) keep theirs.
    The names of what was zeroed."""
    zeroed = []
    for path, module in model.named_modules():
        is_depth = any(c in type(module).__name__ for c in DEPTH_CLASSES)
        if isinstance(module, _DropoutNd) or is_depth and isinstance(getattr(module, "p", None), float):
            module.p = 0.0
            zeroed.append(f"{path or type(module).__name__}.p")
        zeroed += [f"{path}.{name}" if path else name for name in _zero_rates(module)]
    return zeroed


def _zero_rates(obj: Any, seen: set[int] | None = None) -> list[str]:
    """``obj``'s rates, and those of its ``config`` and of that config's sub-configs (a ``text_config``: modules
    read them when they run)."""
    seen = set() if seen is None else seen
    seen.add(id(obj))
    names = [n for n, v in vars(obj).items() if type(v) is float and v and any(r in n.lower() for r in RATE_NAMES)]
    for name in names:
        setattr(obj, name, 0.0)
    for key, value in vars(obj).items():
        is_config = key == "config" or type(value).__name__.endswith("Config")
        if is_config and hasattr(value, "__dict__") and id(value) not in seen and not isinstance(value, nn.Module):
            names += [f"{key}.{name}" for name in _zero_rates(value, seen)]
    return names


KERNEL_NOISE = 1e-2
"""Two runs under one seed that differ by at most this share of the largest logit differ by a kernel's float noise
(atomics on a GPU); by more, the model draws from randomness of its own (a ``torch.Generator``, numpy, ``random``)."""


def check_deterministic(
    model: nn.Module, forward: Callable[[nn.Module, Tensor], Tensor], ids: Tensor, name: str
) -> None:
    """Run ``forward(model, ids)`` in train mode under seeds 1 and 2 of torch's global RNGs (CPU, and ``ids``' GPU):
    different logits are a ``ModelLoadError`` naming the innermost modules whose output changed on the same input.
    Seed 1 is then run a third time: kernels that are not deterministic (some on a GPU) are no random draw of the
    model's, and refusing a user's model for them would leave no way to use it, so a difference between the seeds
    no larger than ten times that float noise is accepted; a larger one, or noise far past a float's, is refused.
    Each module's tensors are recorded (two runs more) only to name the modules of a model that is refused. BatchNorm
    running statistics are as they were before the probe."""
    devices = [ids.device] if ids.device.type == "cuda" else []

    def run(seed: int, seen: dict[str, tuple[list[Tensor], list[Tensor]]] | None = None) -> Tensor:
        recording = _recording(model, seen) if seen is not None else contextlib.nullcontext()
        with torch.random.fork_rng(devices=devices), torch.no_grad(), recording:
            torch.manual_seed(seed)
            return forward(model, ids)

    first: dict[str, tuple[list[Tensor], list[Tensor]]] = {}
    second: dict[str, tuple[list[Tensor], list[Tensor]]] = {}
    was_training = model.training
    model.train()
    try:
        with _batch_norm_kept(model):
            logits = run(1), run(2)
            if _same([logits[0]], [logits[1]]) or _kernel_noise(*logits, run(1)):
                return
            run(1, first)  # again, each module's tensors recorded, to name those that changed
            run(2, second)
    finally:
        model.train(was_training)
    changed = {p for p in first if p and p in second and _same(first[p][0], second[p][0])
               and not _same(first[p][1], second[p][1])}  # fmt: skip
    innermost = sorted(p for p in changed if not any(q.startswith(p + ".") for q in changed))
    modules = dict(model.named_modules())
    where = ", ".join(f"{p} ({type(modules[p]).__name__})" for p in innermost[:5]) or "its forward"
    raise ModelLoadError(
        f"model {name!r} is random in train mode after rlnb turned off its dropout (torch's dropout layers, "
        f"{' / '.join(DEPTH_CLASSES)}, float attributes named *{'*, *'.join(RATE_NAMES)}*): {where} gave other "
        "outputs for the same input. RL needs the trainer's log-probs to equal the sampler's: set that rate to 0 "
        "in the model before passing it to rlnb"
    )


@torch.no_grad()
def _kernel_noise(first: Tensor, second: Tensor, again: Tensor) -> bool:
    """Whether seed 1 run again differs from its first run by float noise (not zero: a seeded draw repeats), and
    seed 2 from seed 1 by no more than ten times that."""
    if _same([first], [again]):
        return False
    scale = first.float().abs().max().item()
    noise = (first.float() - again.float()).abs().max().item()
    return noise <= KERNEL_NOISE * scale and (first.float() - second.float()).abs().max().item() <= 10 * noise


_BN_STATS = ("running_mean", "running_var", "num_batches_tracked")


@contextlib.contextmanager
def _batch_norm_kept(model: nn.Module) -> Iterator[None]:
    """The train-mode probe updates BatchNorm's running mean and variance (the eval-mode sampler's): put them back."""
    saved = [(b, {k: v.clone() for k, v in b.named_buffers(recurse=False) if k in _BN_STATS})
             for b in model.modules() if isinstance(b, _BatchNorm)]  # fmt: skip
    try:
        yield
    finally:
        with torch.no_grad():
            for module, buffers in saved:
                for key, value in buffers.items():
                    getattr(module, key).copy_(value)


@torch.no_grad()
def _same(a: list[Tensor], b: list[Tensor]) -> bool:
    """Equal up to float noise (a dropped activation is far off it)."""
    return len(a) == len(b) and all(
        x.shape == y.shape and (not x.is_floating_point() and torch.equal(x, y)
                                or x.is_floating_point() and torch.allclose(x.float(), y.float(), rtol=1e-3, atol=1e-4))
        for x, y in zip(a, b, strict=True)
    )  # fmt: skip


@contextlib.contextmanager
def _recording(model: nn.Module, seen: dict[str, tuple[list[Tensor], list[Tensor]]]) -> Iterator[None]:
    """Record each module's tensors in and out of its first call, by its path."""

    def hook(path: str) -> Callable[..., None]:
        def record(module: nn.Module, args: Any, kwargs: Any, out: Any) -> None:  # None: the output is kept
            seen.setdefault(path, (list(_tensors((args, kwargs))), list(_tensors(out))))

        return record

    handles = [m.register_forward_hook(hook(p), with_kwargs=True) for p, m in model.named_modules() if p]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _tensors(obj: Any) -> Iterator[Tensor]:
    if isinstance(obj, Tensor):
        yield obj.detach().clone()
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from _tensors(value)
    elif isinstance(obj, list | tuple):
        for value in obj:
            yield from _tensors(value)

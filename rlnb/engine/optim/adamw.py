"""``torch.optim.AdamW`` (foreach) whose step reads its weights' step counts in one op, not two a weight.

torch's foreach AdamW (``torch.optim.adam._multi_tensor_adam``, not capturable) works out each weight's bias
corrections from its step count read by ``.item()``, twice a weight: 58 of the 348 torch ops of a ``tiny`` session's
forward-backward + optim-step, each a dispatch and a host read. Here the counts are stacked and read in
one transfer, and every other op is torch's own, with the same Python arithmetic, in torch's order: the update is
torch's bit for bit (``tests/engine/test_adamw.py`` steps both side by side). Its state, state dict and hooks are
torch's AdamW's. A group with any other option (amsgrad, maximize, capturable, differentiable, fused, not foreach,
complex weights, tensor hyperparameters) steps through torch's own ``step``.

Those ops are private to torch (``_INTERNALS``): a torch without one, with ``_init_group`` taking its lists in
another order or ``adam`` without a keyword the step passes (``_KEYWORDS``), is told when the optimizer is made (a
``RuntimeWarning`` naming it), and every step is torch's own.
The bit-for-bit test pins the arithmetic on the torch that is installed (``torch<2.15``, pyproject.toml).
"""

from __future__ import annotations

import importlib
import inspect
import operator
import warnings
from collections.abc import Callable
from typing import Any, cast

import torch
from torch import Tensor

_ADAM = importlib.import_module("torch.optim.adam")  # the module: ``torch.optim.adam`` names no attribute

_OWN = {"amsgrad": False, "maximize": False, "foreach": True, "capturable": False, "differentiable": False}
"""The options this step is torch's for; ``fused`` must be off (None or False) too."""


_INTERNALS: tuple[tuple[Any, str, str, tuple[str, ...]], ...] = (
    (torch.optim.Optimizer, "Optimizer", "_group_tensors_by_device_and_dtype", ()),
    (_ADAM, "adam", "_multi_tensor_adam", ()),  # the function whose ops ``_update`` repeats
    (
        torch.optim.AdamW,
        "AdamW",
        "_init_group",
        ("group", "params_with_grad", "grads", "exp_avgs", "exp_avg_sqs", "max_exp_avg_sqs", "state_steps"),
    ),
    (_ADAM, "adam", "adam", ("params", "grads", "exp_avgs", "exp_avg_sqs", "max_exp_avg_sqs", "state_steps")),
)
"""The torch internals this step is built on: (owner, its name, the attribute, the parameters it is called with by
position, first to last after ``self``)."""

_KEYWORDS = {
    "adam": ("foreach", "has_complex", "amsgrad", "beta1", "beta2", "lr", "weight_decay", "eps", "maximize",
             "capturable", "differentiable", "decoupled_weight_decay"),
}  # fmt: skip
"""The keywords the step passes each internal by name (``adam.adam``, for complex weights)."""


def missing() -> list[str]:
    """Those of ``_INTERNALS`` this torch lacks, or whose parameters begin otherwise or lack a keyword the step passes,
    each as ``owner.name(params)``."""
    gone = []
    for owner, said, name, positional in _INTERNALS:
        found = getattr(owner, name, None)
        params = [p for p in inspect.signature(found).parameters if p != "self"] if callable(found) else None
        named = _KEYWORDS.get(name, ())
        if params is None or params[: len(positional)] != list(positional) or not set(named) <= set(params):
            listed = [*positional, *(f"{k}=" for k in named)]
            gone.append(f"{said}.{name}" + (f"({', '.join(listed)})" if listed else ""))
    return gone


class AdamW(torch.optim.AdamW):
    """``torch.optim.AdamW(params, foreach=True)``, its step's ``.item()`` per weight and count replaced by one read
    of every count (see the module's docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.torchs_step = bool(gone := missing())
        """Whether every step is torch's own: this torch lacks an internal the engine's step is built on."""
        if gone:
            warnings.warn(f"this torch ({torch.__version__}) has no {' nor '.join(gone)} of the shape rlnb's AdamW "
                          "step is built on: every step is torch's own AdamW step (the same update, two host reads a "
                          "weight more)", RuntimeWarning, stacklevel=2)  # fmt: skip

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A copy's (``copy.deepcopy``, pickle): torch's ``__getstate__`` keeps no attribute of ours."""
        super().__setstate__(state)
        self.torchs_step = bool(missing())

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> Any:
        """One AdamW update of every weight with a gradient, as torch's ``step``."""
        if closure is not None or self.torchs_step or not all(map(_plain, self.param_groups)):
            return super().step(closure)
        for group in self.param_groups:
            params: list[Tensor] = []
            grads: list[Tensor] = []
            exp_avgs: list[Tensor] = []
            exp_avg_sqs: list[Tensor] = []
            steps: list[Tensor] = []
            if self._init_group(group, params, grads, exp_avgs, exp_avg_sqs, [], steps):  # complex weights: torch's
                beta1, beta2 = group["betas"]
                _ADAM.adam(
                    params, grads, exp_avgs, exp_avg_sqs, [], steps, foreach=True, has_complex=True,
                    amsgrad=False, beta1=beta1, beta2=beta2, lr=group["lr"], weight_decay=group["weight_decay"],
                    eps=group["eps"], maximize=False, capturable=False, differentiable=False,
                    decoupled_weight_decay=True,
                )  # fmt: skip
            elif params:
                _update(params, grads, exp_avgs, exp_avg_sqs, steps, group)
        return None


def _plain(group: dict[str, Any]) -> bool:
    """Whether ``group``'s options are the ones ``_update`` is torch's step for."""
    numbers = (group["lr"], *group["betas"])
    return (
        all(map(operator.eq, map(group.get, _OWN), _OWN.values()))  # C passes, not a generator's 6 Python calls a step
        and not group.get("fused")
        and group.get("decoupled_weight_decay", True)
        and not any(map(torch.is_tensor, numbers))
    )


def _update(
    params: list[Tensor],
    grads: list[Tensor],
    exp_avgs: list[Tensor],
    exp_avg_sqs: list[Tensor],
    steps: list[Tensor],
    group: dict[str, Any],
) -> None:
    """``torch.optim.adam._multi_tensor_adam``'s ops for AdamW (decoupled weight decay, no amsgrad, not maximize, not
    capturable), per device and dtype as it groups them, each step count read once from one stacked tensor."""
    lr, (beta1, beta2), eps, weight_decay = group["lr"], group["betas"], group["eps"], group["weight_decay"]
    lists = [params, grads, exp_avgs, exp_avg_sqs, steps]
    grouped = torch.optim.Optimizer._group_tensors_by_device_and_dtype(lists)  # type: ignore[arg-type]
    for tensors, _ in grouped.values():
        device_params, device_grads, device_exp_avgs, device_exp_avg_sqs, device_steps = cast(
            list[list[Tensor]], tensors
        )
        if device_steps[0].is_cpu:  # torch's: a CPU tensor 1 wrapped once, not per count
            torch._foreach_add_(device_steps, torch.tensor(1.0, device="cpu"), alpha=1.0)
        else:
            torch._foreach_add_(device_steps, 1)
        if weight_decay != 0:
            torch._foreach_mul_(device_params, 1 - lr * weight_decay)
        torch._foreach_lerp_(device_exp_avgs, device_grads, 1 - beta1)
        torch._foreach_mul_(device_exp_avg_sqs, beta2)
        torch._foreach_addcmul_(device_exp_avg_sqs, device_grads, device_grads, 1 - beta2)
        counts = torch.stack(device_steps).tolist()  # torch: ``.item()`` of each, twice
        # torch's arithmetic, once a distinct count (the weights share one, but for one a step left without gradient)
        by_count = {t: ((lr / (1 - beta1**t)) * -1, (1 - beta2**t) ** 0.5) for t in set(counts)}
        step_size, bias_correction2_sqrt = map(list, zip(*map(by_count.__getitem__, counts), strict=True))
        exp_avg_sq_sqrt = torch._foreach_sqrt(device_exp_avg_sqs)
        torch._foreach_div_(exp_avg_sq_sqrt, bias_correction2_sqrt)
        torch._foreach_add_(exp_avg_sq_sqrt, eps)
        torch._foreach_addcdiv_(device_params, device_exp_avgs, exp_avg_sq_sqrt, step_size)

"""How a sweep's config becomes validated optimizer params (``apply``; ``applied`` names the config in its error),
and the short label each trial's row shows for it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlnb import wire
from rlnb.errors import InvalidParams
from rlnb.params import PARAMS, MuonParams, OptimizerParams, kind_of


def apply(base: OptimizerParams, config: Mapping[str, Any]) -> OptimizerParams:
    """``base`` with the config's optimizer fields set (validated: a bad value raises before any run); a config
    switching the optimizer keeps what ``carried`` says of the base."""
    kind = config.get("optimizer", kind_of(base))
    cls = PARAMS[wire.optimizer_kind(kind, "config 'optimizer'")]
    data = base.model_dump(exclude_unset=True) if isinstance(base, cls) else carried(base)
    for key, value in config.items():
        if key == "optimizer":
            continue
        head, _, sub = key.partition(".")
        if sub:
            data.setdefault(head, {})[sub] = value
        else:
            data[key] = value
    return cls(**data)


def carried(base: OptimizerParams) -> dict[str, Any]:
    """What a config switching ``base``'s optimizer keeps of it: the settings of the parameters AdamW steps under both
    optimizers (embeddings, head, norms: an AdamParams base's fields become Muon's ``adam`` group, a MuonParams base's
    ``adam`` group becomes AdamParams), and the one global ``grad_clip_norm`` both clip by. Else a one-factor ablation
    changed more than its label says (``{"optimizer": "muon"}`` on ``AdamParams(weight_decay=0.0)`` decayed them at
    AdamW's 0.1). Muon's own fields act on the matrices alone, with no counterpart in AdamW: the other kind's defaults,
    or what the config sets."""
    clip = {"grad_clip_norm": base.grad_clip_norm} if base.grad_clip_norm is not None else {}
    if isinstance(base, MuonParams):
        return {**(base.adam.model_dump(exclude_unset=True) if base.adam is not None else {}), **clip}
    group = base.model_dump(exclude_unset=True, exclude={"grad_clip_norm"})  # Muon reads its own clip, not adam's
    return {**clip, "adam": group} if group else clip


def applied(where: str, base: OptimizerParams, config: Mapping[str, Any]) -> OptimizerParams:
    """``apply``, its ``InvalidParams`` naming ``where`` (the config, or ``ablate``'s variant): one typo'd field among a
    grid's configs or an ablation's changes was "AdamParams.wieght_decay = 0.0 is invalid: unknown field", naming
    neither."""
    try:
        return apply(base, config)
    except InvalidParams as exc:
        field = f".{exc.errors[0][0]} = "  # each line is "<owner>.<field> = ..." (an owner: "MuonParams.adam")
        owner = str(exc).partition(field)[0]
        raise InvalidParams(f"{where}: {owner}", exc.errors) from None


def meant(body: dict[str, Any]) -> dict[str, Any]:
    """What an optim-step body asks for: its optimizer's params without their empty groups (``{'adam': {}}`` in
    Muon's: every field of a group is optional, and one that sets none overrides none, as if left out). The optimizer's
    own key stays: ``{'muon_params': {}}`` and ``{'adam_params': {}}`` ask for different optimizers."""
    return {key: _pruned(params) for key, params in body.items()}


def _pruned(params: dict[str, Any]) -> dict[str, Any]:
    kept = {k: _pruned(v) if isinstance(v, dict) else v for k, v in params.items()}
    return {k: v for k, v in kept.items() if v != {}}


BASELINE = "baseline"
"""The name of the base config unchanged: its label, and ``ablate``'s variant of it (one was "base", the other
"baseline")."""


def label(config: Mapping[str, Any]) -> str:
    """A short readable name for a config (floats to 3 significant digits; ``BASELINE`` for no change)."""
    return ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in config.items()) or BASELINE

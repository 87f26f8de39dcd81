"""How a sweep's config becomes validated optimizer params (``apply``; ``applied`` names the config in its error),
and the short label each trial's row shows for it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlnb import wire
from rlnb.errors import InvalidParams
from rlnb.params import PARAMS, OptimizerParams, kind_of


def apply(base: OptimizerParams, config: Mapping[str, Any]) -> OptimizerParams:
    """``base`` with the config's optimizer fields set (validated: a bad value raises before any run)."""
    kind = config.get("optimizer", kind_of(base))
    cls = PARAMS[wire.optimizer_kind(kind, "config 'optimizer'")]
    data = base.model_dump(exclude_unset=True) if isinstance(base, cls) else {}  # another kind starts from defaults
    for key, value in config.items():
        if key == "optimizer":
            continue
        head, _, sub = key.partition(".")
        if sub:
            data.setdefault(head, {})[sub] = value
        else:
            data[key] = value
    return cls(**data)


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

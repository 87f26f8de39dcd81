"""The rates of the learning-rate range test (``find``): its default range by optimizer and Muon scaling
convention, the range checked before anything is opened, and ``base`` at each rate (Muon's ``adam`` part moving
with it at ``base``'s ratio; a suggestion rounded to two significant figures within ``DECAY_RULE``)."""

from __future__ import annotations

from typing import Any

from rlnb import wire
from rlnb.errors import InvalidParams
from rlnb.history.runconfig import LOCAL
from rlnb.params import DECAY_RULE, MuonHyperparams, OptimizerParams, decay_rule_holds
from rlnb.session import Session
from rlnb.wire import SCALING_NAMES

from .curve import significant

DEFAULT_RANGES = {wire.ADAM: (1e-5, 1.0), wire.MUON_ORIGINAL: (1e-3, 10.0), wire.MUON_MATCH_ADAM: (1e-5, 1.0)}
"""(start_lr, end_lr) by optimizer / Muon scaling convention: a decade or more either side of the usual
values (Adam 3e-4..3e-3; Muon 0.02 in "original" units)."""


def with_lr(base: OptimizerParams, lr: float, rounded: bool = False) -> OptimizerParams:
    """``base`` at learning rate ``lr``; Muon's ``adam`` part moves with it at ``base``'s ratio (when ``rounded``,
    each rate to two significant figures, the AdamW one from Muon's as rounded; down where to nearest would break
    ``DECAY_RULE``: a range test ends before the first rate it refuses, and 0.0106 at weight_decay 92 was suggested
    as 0.011, refused)."""
    resolved = base.resolved()
    data = base.model_dump(exclude_unset=True)
    data["learning_rate"] = _fit(lr, lr, resolved.weight_decay) if rounded else lr
    if isinstance(resolved, MuonHyperparams):
        ratio = resolved.adam.learning_rate / resolved.learning_rate
        adam = _fit(data["learning_rate"] * ratio, lr * ratio, resolved.adam.weight_decay) if rounded else lr * ratio
        data["adam"] = {**data.get("adam", {}), "learning_rate": adam}
    return type(base)(**data)


def _fit(lr: float, measured: float, weight_decay: float) -> float:
    """``lr`` to two significant figures; where that breaks ``DECAY_RULE``, ``measured`` (a rate run) rounded down."""
    near = significant(lr)
    return near if decay_rule_holds(near, weight_decay) else significant(measured, down=True)


def check_lrs(base: OptimizerParams, start_lr: float | None, end_lr: float | None, key: str | None) -> None:
    """``ValueError`` unless start < end and ``check_rates`` holds, where the defaults are known (``key`` of
    ``DEFAULT_RANGES``; None: known only once the session is open, so only the rates given are checked now: a
    remote Muon session was copied and a new one opened before a given start_lr was refused)."""
    if key is not None or (start_lr is not None and end_lr is not None):
        check_rates(base, *lr_range(start_lr, end_lr, key or wire.ADAM))
    else:
        check_rates(base, start_lr, end_lr)


def check_rates(base: OptimizerParams, start_lr: float | None, end_lr: float | None) -> None:
    """``ValueError`` naming ``start_lr`` (or ``end_lr``) where ``base`` at that rate is refused (None: a default not
    known yet, not checked): found at step 0, the session had been copied and a run folder made. The rates between
    lie within the two. An ``end_lr`` refused by ``DECAY_RULE`` alone is taken: the range ends before the first rate
    the decay refuses."""
    for name, lr in (("start_lr", start_lr), ("end_lr", end_lr)):
        if lr is None:
            continue
        try:
            with_lr(base, lr)
        except InvalidParams as exc:
            if not all(DECAY_RULE in rule for *_, rule in exc.errors):
                raise ValueError(f"lr_find: {name}={lr:g} is refused: {exc}") from None
            if name == "start_lr":
                raise ValueError(_decay_refused(base, lr)) from None


def _decay_refused(base: OptimizerParams, lr: float) -> str:
    """Why ``DECAY_RULE`` refuses ``base`` at start rate ``lr``, and the rates it allows: below 1 / weight_decay (Muon:
    the AdamW part's too, at its ratio to Muon's rate), the lowest limit, which ``lr`` is at or past."""
    resolved = base.resolved()
    parts = [("weight_decay", 1.0, resolved.weight_decay)]
    if isinstance(resolved, MuonHyperparams):
        parts.append(
            ("adam.weight_decay", resolved.adam.learning_rate / resolved.learning_rate, resolved.adam.weight_decay)
        )
    limit, field, ratio, decay = min((1 / (r * wd), f, r, wd) for f, r, wd in parts if wd > 0)
    at, over = (
        ("", "1 / weight_decay")
        if field == "weight_decay"
        else (f"its AdamW part at {ratio:.3g}x it: ", f"1 / ({ratio:.3g} * adam.weight_decay)")
    )
    return (
        f"lr_find: start_lr={lr:g} is refused at {type(base).__name__}.{field} = {decay:g}: {DECAY_RULE}, got {at}"
        f"{lr * ratio:g} * {decay:g} = {lr * ratio * decay:g}; the rates allowed are below {over} = {limit:.3g}: "
        "give a smaller start_lr or weight_decay"
    )


def lr_range(start_lr: float | None, end_lr: float | None, key: str) -> tuple[float, float]:
    """(start_lr, end_lr), None filled in from ``DEFAULT_RANGES[key]``; ``ValueError`` unless start < end."""
    lo, hi = DEFAULT_RANGES[key]
    start, end = float(lo if start_lr is None else start_lr), float(hi if end_lr is None else end_lr)
    if not start < end:
        raise ValueError(f"start_lr must be < end_lr, got start_lr={start}, end_lr={end}")
    return start, end


def range_key(kind: wire.OptimizerKind, session: Session | None, target: str, options: dict[str, Any]) -> str | None:
    """The ``DEFAULT_RANGES`` key, from the arguments and the session's config before anything is opened;
    None where only the service knows it (a remote Muon session's scaling when nobody named it)."""
    if kind == wire.ADAM:
        return wire.ADAM
    config = session.history.config if session is not None else {}
    given = options.get("muon_scaling") or config.get("muon_scaling")
    local = not session.is_remote if session is not None else target == LOCAL
    name = SCALING_NAMES.get(str(given), given) if given is not None else (wire.MUON_ORIGINAL if local else None)
    return name if name in DEFAULT_RANGES else None

"""A run's ``config.json`` fields across sessions: what a session that starts or continues a run writes
(``continued``), and when later sessions continued it (``continued_at``): each one starts a step.
"""

from __future__ import annotations

from typing import Any, TypeGuard

from rlnb.history.record import LATEST_TIME

RUN_FIELDS = frozenset({"run_id", "created_at", "continued_at"})
"""The config fields this module writes: the run's folder name and when its sessions started."""


def continued(run_id: str, earlier: dict[str, Any] | None, now: float) -> dict[str, Any]:
    """The config fields of a run started or continued ``now`` (``earlier``: the config it had): the first
    ``created_at``, the times it was continued at, and what the earlier config held (``annotate``'s fields: a label;
    the new session's own values replace the others). A damaged earlier config (a time that is no number,
    ``continued_at`` no list) loses only those values."""
    if earlier is None:
        return {"run_id": run_id, "created_at": now}
    created = earlier.get("created_at")
    first = float(created) if is_time(created) else now
    return {**earlier, "run_id": run_id, "created_at": first, "continued_at": [*continued_at(earlier), now]}


def continued_at(config: dict[str, Any]) -> list[float]:
    """When later sessions continued the run, as far as its config says (a value that is no time is left out)."""
    times = config.get("continued_at")
    return [float(t) for t in times if is_time(t)] if isinstance(times, list) else []


def is_time(value: Any) -> TypeGuard[float]:
    """Whether ``value`` is a time (POSIX seconds) a datetime holds."""
    return isinstance(value, int | float) and not isinstance(value, bool) and abs(value) <= LATEST_TIME

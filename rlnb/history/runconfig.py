"""A run's ``config.json`` fields across sessions: what a session that starts or continues a run writes
(``continued``), when later sessions continued it (``continued_at``): each one starts a step, and what the earlier
sessions were set up with where a later one differs (``EARLIER``), and the package versions it ran with
(``environment``).
"""

from __future__ import annotations

import platform
from typing import Any, TypeGuard

from rlnb.history.record import LATEST_TIME

EARLIER = "earlier_sessions"
"""The config field that keeps each earlier session's own fields, oldest first, once a later session continued the
run: the config's top level is the latest session's (its seed, model, ...), and the earlier ones' are not lost."""

RUN_FIELDS = frozenset({"run_id", "created_at", "continued_at", EARLIER})
"""The config fields this module writes: the run's folder name, when its sessions started, how they were set up."""

PER_SESSION = frozenset({"session_id", "resume_from", "device", "threads", "thread_policy", "malloc", "compile",
                         "versions", "batched"})  # fmt: skip  (batched: its ensemble's id, size, the member's index)
"""Fields that differ from session to session of one run without changing what it trains: no warning."""


def continued(run_id: str, earlier: dict[str, Any] | None, now: float) -> dict[str, Any]:
    """The config fields of a run started or continued ``now`` (``earlier``: the config it had): the first
    ``created_at``, the times it was continued at, each earlier session's own fields (``EARLIER``), and what the
    earlier config held (``annotate``'s fields: a label; the new session's own values replace the others). A damaged
    earlier config (a time that is no number, ``continued_at`` or ``EARLIER`` no list) loses only those values."""
    if earlier is None:
        return {"run_id": run_id, "created_at": now}
    created = earlier.get("created_at")
    first = float(created) if is_time(created) else now
    kept = earlier.get(EARLIER)
    sessions = [*(kept if isinstance(kept, list) else []), {k: v for k, v in earlier.items() if k not in RUN_FIELDS}]
    return {**earlier, "run_id": run_id, "created_at": first, "continued_at": [*continued_at(earlier), now],
            EARLIER: sessions}  # fmt: skip


def changed(earlier: dict[str, Any], config: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """The setup fields a session continuing a run changes (field: (earlier, now)), those of ``PER_SESSION`` apart."""
    return {k: (earlier[k], v) for k, v in config.items()
            if k in earlier and k not in RUN_FIELDS | PER_SESSION and earlier[k] != v}  # fmt: skip


def continued_at(config: dict[str, Any]) -> list[float]:
    """When later sessions continued the run, as far as its config says (a value that is no time is left out)."""
    times = config.get("continued_at")
    return [float(t) for t in times if is_time(t)] if isinstance(times, list) else []


def is_time(value: Any) -> TypeGuard[float]:
    """Whether ``value`` is a time (POSIX seconds) a datetime holds."""
    return isinstance(value, int | float) and not isinstance(value, bool) and abs(value) <= LATEST_TIME


def environment() -> dict[str, str]:
    """Package versions for the run's config."""
    import importlib.metadata as md

    versions = {"python": platform.python_version()}
    for pkg in ("rlnb", "torch", "pandas", "numpy", "pydantic", "httpx"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            continue
    return versions

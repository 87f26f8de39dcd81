"""A run's ``config.json`` fields across sessions: what a session that starts or continues a run writes
(``continued``), where later sessions continued it (``session_starts``): each one starts a step, and what the earlier
sessions were set up with where a later one differs (``EARLIER``), what ``annotate`` may add to it
(``check_annotation``) and the package versions it ran with (``environment``).
"""

from __future__ import annotations

import json
import platform
from dataclasses import dataclass
from typing import Any, TypeGuard

from rlnb._input.scalars import scalar
from rlnb.history.jsontext import TEXTS
from rlnb.history.reading import loads
from rlnb.history.record import LATEST_TIME, MAX_SEQ, fits_int64
from rlnb.text.prompts import check_text, escaped

EARLIER = "earlier_sessions"
"""The config field that keeps each earlier session's own fields, oldest first, once a later session continued the
run: the config's top level is the latest session's (its seed, model, ...), and the earlier ones' are not lost."""

RUN_FIELDS = frozenset({"run_id", "created_at", "continued_at", "continued_seq", EARLIER, TEXTS})
"""The config fields rlnb writes: the run's folder name, when its sessions started, how they were set up, where a
text is spelled like a number (``jsontext.TEXTS``)."""

PER_SESSION = frozenset(
    {"session_id", "resume_from", "device", "threads", "thread_policy", "malloc", "compile", "versions", "batched"}
)  # fmt: skip  (batched: its ensemble's id, size, the member's index)
"""Fields that differ from session to session of one run without changing what it trains: no warning."""

LOCAL = "local"
"""config.json's ``backend`` for the in-process engine, and ``rlnb.connect``'s target that opens one."""
REMOTE = "remote"
"""config.json's ``backend`` for a session a service runs over HTTP (``rlnb.connect(url)``)."""
FAKE = "fake"
"""config.json's ``backend`` for ``rlnb.testing.FakeBackend``."""


def continued(run_id: str | None, earlier: dict[str, Any] | None, now: float, seq: int = 0) -> dict[str, Any]:
    """The config fields of a run started or continued ``now`` at operation ``seq`` (``earlier``: the config it had):
    the first ``created_at``, where it was continued (``session_starts``), each earlier session's own fields
    (``EARLIER``), and what the earlier config held (``annotate``'s fields: a label; the new session's own values
    replace the others). A damaged earlier config (a time that is no number, ``continued_at`` or ``EARLIER`` no list)
    loses only those values."""
    if earlier is None:
        return {"run_id": run_id, "created_at": now}
    created = earlier.get("created_at")
    first = float(created) if is_time(created) else now
    kept = earlier.get(EARLIER)
    sessions = [*(kept if isinstance(kept, list) else []), {k: v for k, v in earlier.items() if k not in RUN_FIELDS}]
    starts = session_starts(earlier)
    return {**earlier, "run_id": run_id, "created_at": first, "continued_at": [*(s.at for s in starts), now],
            "continued_seq": [*(s.seq for s in starts), seq], EARLIER: sessions}  # fmt: skip


@dataclass(frozen=True)
class SessionStart:
    """Where a later session of a run began: at operation ``seq`` (``continued_seq``), or, in a run an older rlnb
    continued, at the first operation submitted at ``at`` or later (``continued_at``: a later session whose clock was
    behind the earlier one's put that boundary inside the earlier session, its unstepped loss in the next's step)."""

    at: float | None
    seq: int | None

    def begins(self, rec: Any) -> bool:
        """Whether the operation ``rec`` (read: ``seq``, ``submitted_at``) is this session's or a later one's."""
        if self.seq is not None:
            return bool(rec.seq >= self.seq)
        return self.at is not None and rec.submitted_at >= self.at


def session_attrs(config: dict[str, Any]) -> dict[str, list[Any]]:
    """Where later sessions continued the run, as ``history.df.attrs`` carries it (``session_starts`` reads it back)."""
    starts = session_starts(config)
    return {"continued_at": [s.at for s in starts], "continued_seq": [s.seq for s in starts]}


def session_starts(config: dict[str, Any]) -> list[SessionStart]:
    """Where later sessions continued the run, in order, as far as ``config`` (or a ``df.attrs``) says: a value that is
    neither a time nor an operation number is left out. A run no session numbered (an older rlnb's) goes by time."""
    times, seqs = config.get("continued_at"), config.get("continued_seq")
    times, seqs = (v if isinstance(v, list) else [] for v in (times, seqs))
    starts = []
    for i, at in enumerate(times):
        seq = seqs[i] if i < len(seqs) and fits_int64(seqs[i]) and 0 <= seqs[i] < MAX_SEQ else None
        if seq is not None or is_time(at):
            starts.append(SessionStart(float(at) if is_time(at) else None, seq))
    if any(s.seq is not None for s in starts):
        return starts
    return sorted(starts, key=lambda s: s.at or 0.0)  # as the times were read before sessions were numbered


def changed(earlier: dict[str, Any], config: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """The setup fields a session continuing a run changes (field: (earlier, now)), those of ``PER_SESSION`` apart."""
    return {k: (earlier[k], v) for k, v in config.items()
            if k in earlier and k not in RUN_FIELDS | PER_SESSION and earlier[k] != v}  # fmt: skip


def is_time(value: Any) -> TypeGuard[float]:
    """Whether ``value`` is a time (POSIX seconds) a datetime holds."""
    return isinstance(value, int | float) and not isinstance(value, bool) and abs(value) <= LATEST_TIME


def check_annotation(fields: dict[str, Any]) -> dict[str, Any]:
    """``History.annotate``'s fields as ``config.json`` holds them (``plain``), refused before any is added: one of the
    run's own (``RUN_FIELDS``: they name its folder and order its sessions), or one that ``config.json`` cannot hold
    and give back."""
    own = sorted(RUN_FIELDS & fields.keys())
    if own:
        raise ValueError(f"annotate: {', '.join(own)} is the run's own field (its folder and sessions); "
                         "pick another name")  # fmt: skip
    for name, value in fields.items():  # one config.json cannot hold, kept, would fail every later write
        try:  # (the session's close too, which would then leave its sinks unflushed)
            loads(json.dumps({name: value}, default=str))
            check_text(name, "its name")  # a lone surrogate is written as an escape, and no table or sink shows it
            check_text(json.dumps(value, default=str, ensure_ascii=False), "its value (as JSON)")
        except (TypeError, ValueError, RecursionError) as exc:
            shown = escaped(name)  # printing a lone surrogate fails
            raise ValueError(
                f"annotate: {shown} cannot be written to config.json and read back ({exc}); give "
                "JSON-like values: str keys, valid Unicode text, at most 31 levels deep (nothing was "
                "annotated)"
            ) from None
    return {name: plain(value) for name, value in fields.items()}


def plain(value: Any) -> Any:
    """``value`` with numpy's and torch's numbers as Python's, as JSON writes and reads them: a scalar as its number
    (``np.float32``, ``np.int64``: their ``str()`` went to ``config.json``, read back as text), an array or tensor as
    a list, a tuple as a list; anything else as it is."""
    value = scalar(value)
    if hasattr(value, "shape") and callable(getattr(value, "tolist", None)):
        return value.tolist()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


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

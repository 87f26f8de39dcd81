"""The registry's tables read back from the journal (``state.Journal.load``) at a restart: what a line cannot be
read as is skipped with a warning, a checkpoint outside the checkpoint folder is never restored, and a session
that was active gets its last view rebuilt from its operations and checkpoints (``progress``)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlnb import wire
from rlnb.server.records import CheckpointRecord, OpRecord, SessionRecord

log = logging.getLogger("rlnb")


@dataclass
class Restored:
    """What the journal held: the registry's three tables."""

    resources: dict[str, wire.ModelResources] = field(default_factory=dict)
    sessions: dict[str, SessionRecord] = field(default_factory=dict)
    checkpoints: dict[str, CheckpointRecord] = field(default_factory=dict)


def restore(saved: dict[str, list[dict[str, Any]]], checkpoints: Path) -> Restored:
    """The registry's tables read back from the journal (what a line cannot be read as is skipped, with a
    warning). Sessions that were active get their progress from their operations and checkpoints.
    A checkpoint is kept only if its path, resolved, is an entry of the ``checkpoints`` folder: a journal
    line can name any path, and its files would be served to anyone with a download link."""
    registry = Restored()
    root = checkpoints.resolve()
    for data in saved["resource"]:
        with _skipping("resource"):
            res = wire.ModelResources.model_validate(data)
            registry.resources[res.id] = res
    for data in saved["session"]:
        with _skipping("session"):
            rec = SessionRecord.restored(wire.Session.model_validate(data))
            registry.sessions[rec.id] = rec
    for data in saved["checkpoint"]:
        with _skipping("checkpoint"):
            info, path = wire.Checkpoint.model_validate(data["info"]), Path(data["path"])
            if path.resolve().parent != root:
                log.warning("rlnb serve: skipped checkpoint %s of the journal: %s is not in %s", info.id, path, root)
                continue
            registry.checkpoints[info.id] = CheckpointRecord(info, path)
    floors: dict[str, tuple[int, int]] = {}
    """Per session, the largest step and weights version of its operations, dropped or kept."""
    for data in saved["dropped"]:
        with _skipping("dropped operation"):
            s = registry.sessions.get(data["session"])
            if s is None or data["kind"] not in wire.ENVELOPES:
                continue
            s.dropped[str(data["id"])] = wire.OperationKind(data["kind"])
            if data["key"]:
                s.keys[str(data["key"])] = str(data["id"])
            step, version = floors.get(s.id, (0, 0))
            floors[s.id] = max(step, int(data.get("step", 0))), max(version, int(data.get("weights_version", 0)))
    for data in saved["op"]:
        with _skipping("operation"):
            s = registry.sessions.get(data["session"])
            if s is None or data["kind"] not in wire.ENVELOPES:
                continue
            kind = wire.OperationKind(data["kind"])
            env = wire.ENVELOPES[kind].model_validate(data["env"])
            s.ops[env.id] = OpRecord(kind, env, key=data["key"], fingerprint=data["fingerprint"])
            if data["key"]:
                s.keys[data["key"]] = env.id
            floors[s.id] = reached(floors.get(s.id, (0, 0)), env)  # read before ``ended`` lets its output go
            if env.status in wire.TERMINAL_STATUSES:
                s.ended(env.id)  # trimmed to max_kept_result_bytes once the progress is read
    for s in registry.sessions.values():
        if s.status in wire.SESSION_HOLDS_SLOT:  # its last view may predate operations that completed after it
            s.final = progress(s, list(registry.checkpoints.values()), floors.get(s.id, (0, 0)))
    return registry


@contextlib.contextmanager
def _skipping(what: str) -> Iterator[None]:
    try:
        yield
    except (ValueError, KeyError, TypeError, RuntimeError, OSError) as exc:  # RuntimeError: deep nesting, symlink loops
        log.warning("rlnb serve: skipped a %s of the journal that cannot be read: %s", what, exc)


def reached(floor: tuple[int, int], env: wire.Operation[Any]) -> tuple[int, int]:
    """The step and weights version ``floor`` (of a session's operations read so far), past ``env``'s result."""
    out = env.output if env.status == wire.OperationStatus.COMPLETED else None
    step = max(floor[0], int(out.step)) if isinstance(out, wire.OptimStepResult) else floor[0]
    return step, max(floor[1], int(out.weights_version)) if isinstance(out, wire.WeightsSyncResult) else floor[1]


def progress(s: SessionRecord, checkpoints: list[CheckpointRecord], floor: tuple[int, int] = (0, 0)) -> wire.Session:
    """A session's last view rebuilt from its checkpoints and ``floor``, the step and weights version its completed
    operations reached (``reached``): a server that stopped without closing it never saved one. The saved session
    line is a floor too: a resumed session's step comes from its checkpoint, not from an operation, and a compacted
    journal's tombstones carry none."""
    mine = sorted((c.info for c in checkpoints if c.info.session_id == s.id), key=lambda c: c.created_at)
    view = s.view()
    saved = view.policy_state
    step = max(floor[0], int(view.step), int(saved.trainer_step))
    version = max(floor[1], int(saved.applied_weights_version), int(saved.target_weights_version))
    view.step = step
    view.policy_state = wire.PolicyState(
        applied_weights_version=version, target_weights_version=version, trainer_step=step
    )
    view.training_checkpoints = [
        wire.TrainingCheckpoint(id=c.id, step=c.step, created_at=c.created_at)
        for c in mine
        if c.type == wire.CHECKPOINT_TRAINING
    ]
    view.inference_checkpoints = [
        wire.InferenceCheckpoint(id=c.id, step=c.step, created_at=c.created_at)
        for c in mine
        if c.type == wire.CHECKPOINT_INFERENCE
    ]
    return view

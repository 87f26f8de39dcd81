"""The server's state: model resources, sessions, their operations, checkpoints and payloads.

**Locking rule.** One re-entrant lock, ``Registry.lock``, guards every record (and the payload store).
Hold it only to read or change records — never across a call that waits for a session's worker
(``backend.close()`` joins it; building a model is slow), because the worker reports each status change
through ``_record``, which takes the lock. Handlers get copies, never live records.

Sessions are driven only through the ``Backend`` protocol plus checkpoint files (``SessionBackend``);
``make_backend`` is the one place a ``LocalBackend`` is built.
"""

from __future__ import annotations

import secrets
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rlnb import wire
from rlnb.server.errors import ServerError, not_found
from rlnb.server.ops import OperationsMixin
from rlnb.server.payloads import PayloadStore
from rlnb.server.records import CheckpointRecord, SessionBackend, SessionRecord, page, status_filter
from rlnb.server.settings import ServerSettings

PRICE_PER_GPU_HOUR = 0.0
"""``estimate-cost`` answers 0: local compute is free."""


def make_backend(
    settings: ServerSettings,
    resource: wire.ModelResources,
    lora: wire.LoraConfig | None,
    resume: Path | None,
    load_optimizer: bool | None,
) -> SessionBackend:
    """A session's backend: the resource's model (seeded by ``base_seed``, the same for every session of
    it), optimizer and replicas; LoRA adapters seeded by the session's own ``lora_config.seed``."""
    from rlnb.backends.local import LocalBackend

    muon = resource.optimizer_config.muon
    adapters: dict[str, Any] | bool | None = None
    if resource.lora_enabled:
        adapters = (lora or wire.LoraConfig()).model_dump(exclude_none=True) or True
    return LocalBackend(
        wire.optimizer_of(resource.optimizer_config),
        settings.models[resource.base_model],
        seed=settings.base_seed,
        sampling_seed=secrets.randbits(62),  # sessions share base weights, not their unseeded samples
        device=settings.device,
        muon_scaling="match_adam"
        if muon and muon.scaling_strategy == "MUON_SCALING_STRATEGY_MATCH_ADAM"
        else "original",
        num_generator_replicas=resource.compute_config.num_generator_replicas,
        checkpoint_dir=settings.checkpoint_dir,
        resume_from=resume,
        load_optimizer=load_optimizer,
        op_delay=settings.op_delay,
        lora=adapters,
        dtype=settings.dtype,
    )


class Registry(OperationsMixin):
    """Everything ``rlnb serve`` knows. ``clock`` (seconds since the epoch) is injectable for expiry tests."""

    def __init__(self, settings: ServerSettings, clock: Callable[[], float] = time.time):
        self.settings, self.clock = settings, clock
        self.lock = threading.RLock()
        self.resources: dict[str, wire.ModelResources] = {}
        self.sessions: dict[str, SessionRecord] = {}
        self.checkpoints: dict[str, CheckpointRecord] = {}
        self.payloads = PayloadStore(self.lock, settings.max_payload_bytes)

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.clock(), UTC)

    def close(self) -> None:
        with self.lock:
            backends = [s.backend for s in self.sessions.values() if s.backend is not None]
        for b in backends:
            b.close()

    # -- model resources -------------------------------------------------------------------------

    def check_base_model(self, name: str) -> None:
        if name not in self.settings.models:
            raise ServerError(400, f"base_model must be one of {sorted(self.settings.models)}", param="base_model")

    def resource(self, rid: str) -> wire.ModelResources:
        with self.lock:
            if rid not in self.resources:
                raise not_found("model resource", rid, "model_resources_id")
            return self.resources[rid].model_copy(deep=True)

    def create_resource(self, req: wire.CreateModelResourcesRequest, user: str) -> wire.ModelResources:
        self.check_base_model(req.base_model)
        opt = req.optimizer_config or wire.optimizer_config("adam")
        if (opt.adam is None) == (opt.muon is None):
            raise ServerError(400, "optimizer_config needs exactly one of adam or muon", param="optimizer_config")
        now, timeout = self.now(), req.inactive_timeout or self.settings.default_inactive_timeout
        cc = req.compute_config or wire.ComputeConfigRequest()
        res = wire.ModelResources(
            id=f"mr-{uuid.uuid4()}",
            base_model=req.base_model,
            base_weights_ref=req.base_weights_ref,
            compute_config=wire.ComputeConfig(
                num_generator_replicas=1 if cc.num_generator_replicas is None else cc.num_generator_replicas,
                gpu_type=cc.gpu_type or "B200-SXM",
            ),
            created_at=now,
            created_by=user,
            inactive_timeout=timeout,
            lora_enabled=bool(req.lora_enabled),
            optimizer_config=opt,
            status=wire.RESOURCE_READY,
            updated_at=now,
            expires_at=now + timedelta(seconds=timeout),
        )
        with self.lock:
            self.resources[res.id] = res
            return res.model_copy(deep=True)

    def list_resources(
        self, after: str | None, limit: int, status: str | None, created_by: str | None, user: str
    ) -> wire.ModelResourcesList:
        who = user if created_by == "me" else created_by
        keep = status_filter(status)
        with self.lock:
            items = [r.model_copy(deep=True) for r in self.resources.values()]
        data, meta = page(
            items,
            after,
            limit,
            lambda r: keep(r) and who in (None, r.created_by),
            lambda r: r.id,
            lambda r: r.created_at,
        )
        return wire.ModelResourcesList(data=data, meta=meta)

    def extend_expiry(self, rid: str, seconds: int) -> wire.ModelResources:
        """``expires_at`` becomes at least ``seconds`` from now; it never moves earlier."""
        with self.lock:
            res = self._resource(rid)
            if res.status != wire.RESOURCE_READY:
                raise ServerError(409, f"model resource {rid} is {res.status}, not ready")
            target = self.now() + timedelta(seconds=seconds)
            if res.expires_at is None or target > res.expires_at:
                res.expires_at = target
            return res.model_copy(deep=True)

    def stop_resource(self, rid: str, force: bool) -> wire.ModelResources:
        with self.lock:
            res = self._resource(rid)
            active = [s for s in self.sessions.values() if s.resource_id == rid and s.status in wire.SESSION_ACTIVE]
            if active and not force:
                raise ServerError(
                    409, f"{len(active)} session(s) are active; stop them or pass force=true", param="force"
                )
            now = self.now()
            for s in active:
                s.status, s.updated_at = wire.SESSION_STOPPED, now
            if res.status in wire.RESOURCE_ACTIVE:
                res.status, res.updated_at, res.expires_at = wire.RESOURCE_STOPPED, now, None
            stopped = res.model_copy(deep=True)
        self._close(active)
        return stopped

    def _resource(self, rid: str) -> wire.ModelResources:
        if rid not in self.resources:
            raise not_found("model resource", rid, "model_resources_id")
        return self.resources[rid]

    def _touch(self, rid: str) -> None:
        """Activity keeps a resource alive for ``inactive_timeout`` more seconds (never earlier)."""
        res = self.resources[rid]
        later = self.now() + timedelta(seconds=res.inactive_timeout)
        if res.status == wire.RESOURCE_READY and (res.expires_at is None or later > res.expires_at):
            res.expires_at = later

    def reap(self) -> int:
        """Stop every READY resource idle past its ``expires_at`` with nothing running; its sessions
        become EXPIRED. Returns how many resources stopped."""
        now, expired, stopped = self.now(), [], 0
        with self.lock:
            for res in self.resources.values():
                if res.status != wire.RESOURCE_READY or res.expires_at is None or res.expires_at > now:
                    continue
                mine = [s for s in self.sessions.values() if s.resource_id == res.id]
                if any(s.busy() for s in mine):
                    continue  # never stops while an operation runs; its end counts as activity
                res.status, res.updated_at, res.expires_at = wire.RESOURCE_STOPPED, now, None
                stopped += 1
                for s in mine:
                    if s.status in wire.SESSION_ACTIVE:
                        s.status, s.updated_at = wire.SESSION_EXPIRED, now
                        expired.append(s)
        self._close(expired)
        return stopped

    def _close(self, sessions: list[SessionRecord]) -> None:
        """Close backends outside the lock (close joins the worker, whose listener takes the lock)."""
        for s in sessions:
            if s.backend is not None:
                s.backend.close()
            self.payloads.drop_session(s.id)

    # -- sessions --------------------------------------------------------------------------------

    def session(self, sid: str) -> SessionRecord:
        with self.lock:
            if sid not in self.sessions:
                raise not_found("training session", sid, "session_id")
            return self.sessions[sid]

    def create_session(self, req: wire.StartTrainingSessionRequest, user: str) -> wire.Session:
        """Reserve a slot under the lock, build the model outside it, then mark the session RUNNING."""
        with self.lock:
            res = self._resource(req.model_resources_id)
            if res.status != wire.RESOURCE_READY:
                raise ServerError(409, f"model resource {res.id} is {res.status}", param="model_resources_id")
            cap = self.settings.lora_session_cap if res.lora_enabled else self.settings.full_session_cap
            if sum(s.resource_id == res.id and s.status in wire.SESSION_ACTIVE for s in self.sessions.values()) >= cap:
                raise ServerError(429, f"model resource {res.id} already has {cap} active session(s)")
            resume = self._resume_path(req)
            lora = req.lora_config if res.lora_enabled else None
            if lora is not None and lora.rank is not None and lora.rank > self.settings.max_lora_rank:
                raise ServerError(
                    400, f"lora_config.rank must be <= {self.settings.max_lora_rank}", param="lora_config.rank"
                )
            now = self.now()
            rec = SessionRecord(
                id=f"sess-{uuid.uuid4()}", resource_id=res.id, base_model=res.base_model, created_by=user,
                created_at=now, updated_at=now, status=wire.SESSION_CREATING, lora_config=lora,
                resume_from=req.resume_from_checkpoint_id, display_name=req.display_name,
                metadata=req.metadata or wire.SessionMetadata(),
            )  # fmt: skip
            self.sessions[rec.id] = rec
            self._touch(res.id)
            snapshot = res.model_copy(deep=True)
        try:
            backend = make_backend(self.settings, snapshot, lora, resume, req.load_optimizer)
        except BaseException as exc:  # never leave a CREATING session holding a slot of the cap
            with self.lock:
                del self.sessions[rec.id]
            from rlnb.backends.checkpoints import CheckpointMismatch

            if isinstance(exc, CheckpointMismatch) or (isinstance(exc, RuntimeError) and resume is not None):
                detail = " ".join(str(exc).split())[:300]  # the checkpoint's weights do not fit this session
                raise ServerError(400, detail, param="resume_from_checkpoint_id") from None
            if isinstance(exc, ValueError):
                raise ServerError(400, str(exc), param="lora_config" if snapshot.lora_enabled else None) from None
            raise
        with self.lock:
            rec.backend, rec.lora_config = backend, backend.session().lora_config
            if rec.status == wire.SESSION_CREATING:
                rec.status, rec.updated_at = wire.SESSION_RUNNING, self.now()
            stopped_meanwhile = rec.status not in wire.SESSION_ACTIVE
        if stopped_meanwhile:  # its resource was stopped while the model was built
            self._close([rec])
        return rec.view()

    def _resume_path(self, req: wire.StartTrainingSessionRequest) -> Path | None:
        cid = req.resume_from_checkpoint_id
        if cid is None:
            return None
        ckpt = self.checkpoints.get(cid)
        if ckpt is None or ckpt.session.backend is None:
            raise not_found("checkpoint", cid, "resume_from_checkpoint_id")
        if ckpt.info.type != "CHECKPOINT_TYPE_TRAINING" and req.load_optimizer is not None:
            raise ServerError(400, "load_optimizer is only valid with a training checkpoint", param="load_optimizer")
        return ckpt.session.backend.checkpoint_path(cid)

    def list_sessions(
        self, after: str | None, limit: int, status: str | None, created_by: str | None, rid: str | None, user: str
    ) -> wire.SessionList:
        who = user if created_by == "me" else created_by
        keep = status_filter(status)
        with self.lock:
            views = [s.view() for s in self.sessions.values()]

        def wanted(s: wire.Session) -> bool:
            return keep(s) and who in (None, s.created_by) and rid in (None, s.model_resources_id)

        data, meta = page(views, after, limit, wanted, lambda s: s.id, lambda s: s.created_at)
        return wire.SessionList(data=data, meta=meta)

    def update_session(self, sid: str, req: wire.UpdateSessionRequest) -> wire.Session:
        with self.lock:
            s = self.session(sid)
            if req.display_name is not None:
                s.display_name = req.display_name or None  # an empty string clears it
            if req.metadata is not None:
                s.metadata = req.metadata
            s.updated_at = self.now()
            return s.view()

    def stop_session(self, sid: str) -> wire.Session:
        with self.lock:
            s = self.session(sid)
            active = s.status in wire.SESSION_ACTIVE
            if active:
                s.status, s.updated_at = wire.SESSION_STOPPED, self.now()
        if active:
            self._close([s])
        return s.view()

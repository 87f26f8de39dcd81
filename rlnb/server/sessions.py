"""Training sessions of the registry: create (the model built outside the lock), list, rename, stop.

A mixin of ``Registry`` (split off to keep one module per concern, as ``resources`` and ``ops``); it follows
the registry's one locking rule and uses its records.
"""

from __future__ import annotations

import threading
import uuid
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlnb import wire
from rlnb.server.backends import make_backend
from rlnb.server.errors import ServerError, not_found
from rlnb.server.limits import check_labels, check_lora
from rlnb.server.records import CheckpointRecord, SessionRecord, page, status_filter
from rlnb.server.settings import ServerSettings


class SessionsMixin:
    lock: threading.RLock
    settings: ServerSettings
    sessions: dict[str, SessionRecord]
    checkpoints: dict[str, CheckpointRecord]

    if TYPE_CHECKING:  # provided by Registry

        def now(self) -> datetime: ...

        def _resource(self, rid: str) -> wire.ModelResources: ...

        def _touch(self, rid: str) -> None: ...

        def _save(self, kind: str, data: Any) -> None: ...

        def _end(self, s: SessionRecord, status: wire.SessionStatus, reason: str | None = None) -> None: ...

        def _close_later(self, sessions: list[SessionRecord]) -> None: ...

    def session(self, sid: str) -> SessionRecord:
        with self.lock:
            if sid not in self.sessions:
                raise not_found("training session", sid, "session_id")
            return self.sessions[sid]

    def create_session(self, req: wire.StartTrainingSessionRequest, user: str) -> wire.Session:
        """Reserve a slot under the lock, build the model outside it, then mark the session RUNNING."""
        with self.lock:
            res = self._resource(req.model_resources_id)
            if res.status != wire.ModelResourcesStatus.READY:
                raise ServerError(409, f"model resource {res.id} is {res.status}", param="model_resources_id")
            if res.base_model not in self.settings.models:  # made before a restart that dropped a --model
                raise ServerError(
                    409, f"model resource {res.id} is of base_model {res.base_model!r}, which this server does not "
                    f"serve now (it serves {', '.join(self.settings.models)}): restart rlnb serve with "
                    f"--model {res.base_model}=PATH_OR_ID",
                    param="model_resources_id",
                )  # fmt: skip
            cap = self.settings.lora_session_cap if res.lora_enabled else self.settings.full_session_cap
            held = wire.SESSION_HOLDS_SLOT
            if sum(s.resource_id == res.id and s.status in held for s in self.sessions.values()) >= cap:
                raise ServerError(429, f"model resource {res.id} already has {cap} active or stopping session(s)")
            live = sum(s.status in held for s in self.sessions.values())
            if live >= self.settings.max_live_sessions:
                raise ServerError(429, f"this server already runs {live} sessions (max_live_sessions): stop one first")
            resume = self._resume_path(req)
            check_lora(self.settings, res, req.lora_config)
            check_labels(self.settings, req.display_name, req.metadata)
            lora = req.lora_config
            now = self.now()
            rec = SessionRecord(
                id=f"sess-{uuid.uuid4()}", resource_id=res.id, base_model=res.base_model, created_by=user,
                created_at=now, updated_at=now, status=wire.SessionStatus.CREATING, lora_config=lora,
                resume_from=req.resume_from_checkpoint_id, display_name=req.display_name or None,  # '' is none
                metadata=req.metadata or wire.SessionMetadata(),
            )  # fmt: skip
            self.sessions[rec.id] = rec
            self._touch(res.id)
            self._save("session", rec.view())
            snapshot = res.model_copy(deep=True)
        try:
            backend = make_backend(self.settings, snapshot, lora, resume, req.load_optimizer)
        except BaseException as exc:  # never leave a CREATING session holding a slot of the cap
            with self.lock:
                del self.sessions[rec.id]
            from rlnb.engine.checkpoints import CheckpointMismatch

            if isinstance(exc, CheckpointMismatch) or (isinstance(exc, RuntimeError) and resume is not None):
                # the checkpoint's weights do not fit this session; its path on this server is none of the client's
                detail = " ".join(str(exc).replace(str(resume), str(req.resume_from_checkpoint_id)).split())[:300]
                raise ServerError(400, detail, param="resume_from_checkpoint_id") from None
            if isinstance(exc, ValueError):
                raise ServerError(400, str(exc), param="lora_config" if snapshot.lora_enabled else None) from None
            raise
        with self.lock:
            rec.backend, rec.lora_config = backend, backend.session().lora_config
            if rec.status == wire.SessionStatus.CREATING:
                rec.status, rec.updated_at = wire.SessionStatus.RUNNING, self.now()
            stopped_meanwhile = rec.status not in wire.SESSION_ACTIVE
            self._save("session", rec.view())
        if stopped_meanwhile:  # its resource was stopped while the model was built
            self._close_later([rec])
        return rec.view()

    def _resume_path(self, req: wire.StartTrainingSessionRequest) -> Path | None:
        cid = req.resume_from_checkpoint_id
        if cid is None:
            if req.load_optimizer is not None:  # it would be ignored: a client that sets it expects a resume
                raise ServerError(
                    400, "load_optimizer is only valid with resume_from_checkpoint_id", param="load_optimizer"
                )
            return None
        ckpt = self.checkpoints.get(cid)
        if ckpt is None:
            raise not_found("checkpoint", cid, "resume_from_checkpoint_id")
        if ckpt.info.type != "CHECKPOINT_TYPE_TRAINING" and req.load_optimizer is not None:
            raise ServerError(400, "load_optimizer is only valid with a training checkpoint", param="load_optimizer")
        if not ckpt.path.exists():
            raise ServerError(
                409, f"checkpoint {cid}'s files are gone from this server", param="resume_from_checkpoint_id"
            )
        return ckpt.path

    def list_sessions(
        self,
        after: str | None,
        limit: int,
        status: list[str] | None,
        created_by: str | None,
        rid: str | None,
        user: str,
    ) -> wire.SessionList:
        who = user if created_by == "me" else created_by
        keep = status_filter(status, wire.SessionStatus)
        with self.lock:
            views = [s.view() for s in self.sessions.values()]

        def wanted(s: wire.Session) -> bool:
            return keep(s) and who in (None, s.created_by) and rid in (None, s.model_resources_id)

        data, meta = page(views, after, limit, wanted, lambda s: s.id, lambda s: s.created_at)
        return wire.SessionList(data=data, meta=meta)

    def update_session(self, sid: str, req: wire.UpdateSessionRequest) -> wire.Session:
        """Apply a PATCH; ``updated_at`` moves only if a field changed (``{}`` or the same name used to move it)."""
        with self.lock:
            s = self.session(sid)
            check_labels(self.settings, req.display_name, req.metadata)
            before = (s.display_name, s.metadata)
            if req.display_name is not None:
                s.display_name = req.display_name or None  # an empty string clears it
            if req.metadata is not None:
                s.metadata = s.metadata.patched(req.metadata)
            if (s.display_name, s.metadata) != before:
                s.updated_at = self.now()
                self._save("session", s.view())
            return s.view()

    def stop_session(self, sid: str) -> wire.Session:
        with self.lock:
            s = self.session(sid)
            active = s.status in wire.SESSION_ACTIVE
            if active:
                self._end(s, self._stopped(s))
            view = s.view()
        if active:
            self._close_later([s])
        return view

    def _stopped(self, s: SessionRecord) -> wire.SessionStatus:
        """What a stop makes of an active session: STOPPING while an operation of it is queued or running (the
        running one finishes, and may still change its step; ``_close`` makes it STOPPED once its backend is let
        go), else STOPPED. A stopped session's step used to change after a stop answered STOPPED."""
        busy = s.backend is not None and s.busy()
        return wire.SessionStatus.STOPPING if busy else wire.SessionStatus.STOPPED

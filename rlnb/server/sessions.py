"""Training sessions of the registry: create (answers CREATING; the model built on a thread), list, rename, stop.

A mixin of ``Registry`` (split off to keep one module per concern, as ``resources`` and ``ops``); what it needs of
the registry is ``core.RegistryCore``. It follows the registry's one locking rule and uses its records.
"""

from __future__ import annotations

import functools
import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path

from rlnb import wire
from rlnb.engine.oom import ModelOutOfMemory, out_of_memory
from rlnb.errors import OptionRefused
from rlnb.server import stopping
from rlnb.server.backends import make_backend, planned_lora
from rlnb.server.core import RegistryCore
from rlnb.server.errors import ServerError, not_found
from rlnb.server.limits import check_labels, check_lora, check_resume
from rlnb.server.records import SessionBackend, SessionRecord, page, status_filter

log = logging.getLogger("rlnb")


def start_error_code(exc: BaseException) -> wire.SessionErrorCode:
    """The reference's code for a build that failed: out of memory is ``RESOURCE_AT_CAPACITY`` (the resource's
    compute holds no more: stop a session of it, or use a smaller model); anything else ``SESSION_FAILED``."""
    return wire.SessionErrorCode.RESOURCE_AT_CAPACITY if out_of_memory(exc) else wire.SessionErrorCode.SESSION_FAILED


def failed_start(
    exc: BaseException, resume: Path | None, cid: str | None, served: str, models: Mapping[str, object] | None = None
) -> str:
    """Why a session's model could not be built, for its ``error.message`` (was the 400 or 500 of the create).
    The checkpoint's path on this server is none of the client's: it is named by its id, and a model folder a
    refused resume names by the name it is served as (``models``: the server's). Only the engine's refusal of
    the adapters is the client's ``lora_config``; any other failure names the server's setting ``served``."""
    from rlnb.engine.checkpoints import CheckpointMismatch

    if isinstance(exc, ModelOutOfMemory) and exc.__cause__ is not None:  # its advice is connect's keywords: torch's
        exc = exc.__cause__
    detail = str(exc) if resume is None else str(exc).replace(str(resume), str(cid))
    if isinstance(exc, CheckpointMismatch) and exc.dtype is not None:  # connect's keyword: no client sends it
        detail = detail.replace(f"resume with dtype={exc.dtype!r}", f"resume under rlnb serve --dtype {exc.dtype}")
    detail = " ".join(detail.split())[:300]
    if out_of_memory(exc):  # a RuntimeError from torch: no fault of a checkpoint it resumes
        source = f" from checkpoint {cid}" if resume is not None else ""  # by the id the client sent
        return f"out of memory building the session's model{source} ({type(exc).__name__}): {detail}"
    if isinstance(exc, CheckpointMismatch) or (isinstance(exc, RuntimeError) and resume is not None):
        detail = by_served_name(detail, models or {})
        return f"resume_from_checkpoint_id: checkpoint {cid} does not fit this session: {detail}"
    if isinstance(exc, OptionRefused) and exc.field == "lora":  # the engine says "lora: ...", its keyword
        return f"lora_config: {detail.removeprefix('lora: ')}"
    return f"building the session's model failed ({type(exc).__name__}): {served}: {detail}"


def by_served_name(text: str, models: Mapping[str, object]) -> str:
    """``text`` with each served model's folder, quoted as the engine quotes it (as given, or resolved), in place of
    its served name: a client knows the models by name, and the server's paths are none of its business."""
    spellings: dict[str, str] = {}
    for name, spec in models.items():
        if isinstance(spec, str) and Path(spec).expanduser().is_dir():
            spellings.update({repr(spec): repr(name), repr(str(Path(spec).expanduser().resolve())): repr(name)})
    for spelled in sorted(spellings, key=len, reverse=True):  # a folder inside another's is replaced first
        text = text.replace(spelled, spellings[spelled])
    return text


def served_model(name: str, spec: object) -> str:
    """The server setting a session's model is built from, as a failed build names it (a module by its class)."""
    shown_spec = repr(spec) if isinstance(spec, str) else f"a {type(spec).__name__}"
    return f"the server's models[{name!r}] ({shown_spec})"


class SessionsMixin(RegistryCore):
    def session(self, sid: str) -> SessionRecord:
        with self.lock:
            if sid not in self.sessions:
                raise not_found("training session", sid, "session_id")
            return self.sessions[sid]

    def create_session(self, req: wire.StartTrainingSessionRequest, user: str) -> wire.Session:
        """Check the request and reserve a slot under the lock (a bad request is still a 4xx here), answer CREATING,
        and build the model on a thread (``_build``); clients poll GET until RUNNING, as the SDK does."""
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
            check_lora(self.settings, res, req.lora_config)
            resume = self._resume_path(req, res)
            check_labels(self.settings, req.display_name, req.metadata)
            lora = req.lora_config
            planned = planned_lora(res, lora, self._saved_lora(req.resume_from_checkpoint_id))
            now = self.now()
            rec = SessionRecord(
                id=f"sess-{uuid.uuid4()}", resource_id=res.id, base_model=res.base_model, created_by=user,
                created_at=now, updated_at=now, status=wire.SessionStatus.CREATING, lora_config=planned,
                resume_from=req.resume_from_checkpoint_id, display_name=req.display_name or None,  # '' is none
                metadata=req.metadata or wire.SessionMetadata(), drop_payload=self.payloads.drop,
            )  # fmt: skip
            self.sessions[rec.id] = rec
            self._touch(res.id)
            self._save("session", rec.view())
            snapshot, view = res.model_copy(deep=True), rec.view()  # CREATING, however fast the build
        build = functools.partial(make_backend, self.settings, snapshot, lora, resume, req.load_optimizer)
        self._build_later(rec, build, resume, req.resume_from_checkpoint_id)
        return view

    def _build_later(self, rec: SessionRecord, build: Callable[[], SessionBackend], resume: Path | None,
                     cid: str | None) -> None:  # fmt: skip
        """Build the session's model on a thread of its own (the create answers CREATING at once: loading a real
        model can outlast the SDK's 60 s HTTP timeout, and its retried POST would make a second session). A stop waits
        for it with ``settle``'s deadline, as for a closing backend."""

        def run() -> None:
            try:
                self._build(rec, build, resume, cid)
            finally:
                with self.lock:
                    self._closers.discard(thread)

        thread = threading.Thread(target=run, name=f"{stopping.BUILD}{rec.id}", daemon=True)
        with self.lock:
            self._closers.add(thread)
        try:
            thread.start()
        except (
            RuntimeError
        ) as exc:  # no thread to be had: building here would be the minutes-long create the SDK retries
            with self.lock:
                self._closers.discard(thread)
            why = f"this server could not start a thread to build the session's model ({exc}): it runs too many"
            self._not_built(rec, f"{why} threads; stop sessions it no longer needs, or restart rlnb serve")

    def _build(self, rec: SessionRecord, build: Callable[[], SessionBackend], resume: Path | None,
               cid: str | None) -> None:  # fmt: skip
        """CREATING -> RUNNING once built; ERROR (SESSION_FAILED, the reason) if building failed, its slot freed.
        A session stopped meanwhile (STOPPING) is STOPPED once its new model is let go."""
        try:
            backend = build()
        except BaseException as exc:  # noqa: BLE001 - a damaged checkpoint, a bad LoRA target, out of memory, a model's
            # own sys.exit (left CREATING for good, its slot held, nothing logged): the session ends ERROR saying why
            served = served_model(rec.base_model, self.settings.models[rec.base_model])
            self._not_built(rec, failed_start(exc, resume, cid, served, self.settings.models), start_error_code(exc))
            return
        with self.lock:
            rec.backend, rec.lora_config = backend, backend.session().lora_config
            if rec.status == wire.SessionStatus.CREATING:
                rec.status, rec.updated_at = wire.SessionStatus.RUNNING, self.now()
                self._save("session", rec.view())
                return
        self._close([rec])  # stopped, expired or shut down while it was built: its model is let go here

    def _not_built(
        self, rec: SessionRecord, why: str, code: wire.SessionErrorCode = wire.SessionErrorCode.SESSION_FAILED
    ) -> None:
        """A session whose model was not built ends ERROR ``code`` saying ``why`` (STOPPED if a stop came first): its
        slot is free."""
        log.warning("rlnb serve: session %s failed to start: %s", rec.id, why)
        with self.lock:
            if rec.status == wire.SessionStatus.CREATING:
                self._end(rec, wire.SessionStatus.ERROR, why, code)
            elif rec.status == wire.SessionStatus.STOPPING:
                self._end(rec, wire.SessionStatus.STOPPED)

    def _resume_path(self, req: wire.StartTrainingSessionRequest, res: wire.ModelResources) -> Path | None:
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
        if ckpt.info.type != wire.CHECKPOINT_TRAINING and req.load_optimizer is not None:
            raise ServerError(400, "load_optimizer is only valid with a training checkpoint", param="load_optimizer")
        if not ckpt.path.exists():
            raise ServerError(
                409, f"checkpoint {cid}'s files are gone from this server", param="resume_from_checkpoint_id"
            )
        check_resume(res, req.lora_config, ckpt.info)
        return ckpt.path

    def _saved_lora(self, cid: str | None) -> wire.LoraConfig | None:
        """The LoRA settings of the session that saved checkpoint ``cid`` (the build takes them from its file); its
        rank alone where that session is not known."""
        ckpt = self.checkpoints.get(cid) if cid is not None else None
        if ckpt is None or ckpt.info.lora_rank is None:
            return None
        saver = self.sessions.get(ckpt.info.session_id)
        if saver is not None and saver.lora_config is not None:
            return saver.lora_config
        return wire.LoraConfig(rank=ckpt.info.lora_rank)

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
        """Apply a PATCH; ``updated_at`` moves only if a field changed (``{}`` or the same name leaves it)."""
        with self.lock:
            s = self.session(sid)
            merged = s.metadata.patched(req.metadata) if req.metadata is not None else None
            check_labels(self.settings, req.display_name, merged)  # what it leaves: six fields, each up to the limit
            before = (s.display_name, s.metadata)
            if req.display_name is not None:
                s.display_name = req.display_name or None  # an empty string clears it
            if merged is not None:
                s.metadata = merged
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
        """What a stop makes of an active session: STOPPING while its model is being built (CREATING: the build
        cannot be cut; STOPPED once it ends and the model is let go) or an operation of it is queued or running
        (the running one finishes, and may still change its step; ``_close`` makes it STOPPED once its backend
        is let go), else STOPPED: a session answered STOPPED keeps its step."""
        busy = s.status == wire.SessionStatus.CREATING or (s.backend is not None and s.busy())
        return wire.SessionStatus.STOPPING if busy else wire.SessionStatus.STOPPED

"""``rlnb serve``: a Together-compatible RL training-session server on the in-process backend.

Serves the R-new paths under ``/v1/rl`` with request and response bodies from ``rlnb.wire`` (no
second schema), so clients written for Together — rlnb's remote backend, the official ``together``
SDK — work offline. Each training session is a ``LocalBackend``; model resources are bookkeeping
(they are READY at once: there is no GPU queue here).

Errors use the API's body ``{"error": {"message", "type", "param", "code"}}``: 400 for an invalid body
(``param`` names the field), 401 for a missing or wrong token, 404 for unknown ids, 409 for a state
conflict, 429 past a resource's session cap.
"""

import hashlib
import hmac
import random
import secrets
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from rlnb import wire
from rlnb.backends.checkpoints import CheckpointMismatch
from rlnb.backends.local import LocalBackend
from rlnb.backends.model import SIZES

FULL_SESSION_CAP = 1
"""Concurrent sessions on a full-weight resource (as on the service)."""
LORA_SESSION_CAP = 5
"""Concurrent sessions on a LoRA resource (the service's default)."""
DEFAULT_INACTIVE_TIMEOUT = 3600
PRICE_PER_GPU_HOUR = 0.0
"""``estimate-cost`` answers 0: local compute is free."""
MAX_LIST_LIMIT = 100
DEFAULT_LIST_LIMIT = 20
MAX_LORA_RANK = 64
"""Largest LoRA rank a session may ask for (supported-models' ``max_rank``)."""
DEFAULT_GPU_TYPE = "B200-SXM"
"""The one GPU type SDK 3.1.1 accepts in supported-models (``Literal["B200-SXM"]``) and in a create request."""
BASE_MODELS = {f"rlnb/{name}": name for name in SIZES}
"""Served base models: the built-in transformer sizes."""
ACTIVE = {"TRAINING_SESSION_STATUS_CREATING", "TRAINING_SESSION_STATUS_RUNNING"}


class APIError(Exception):
    """A domain error that becomes the API's error body with ``status``."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error", param: str | None = None):
        self.status, self.message, self.type, self.param = status, message, type, param
        super().__init__(message)


def _now() -> datetime:
    return datetime.now(UTC)


def _error(status: int, message: str, type: str, param: str | None = None, code: str | None = None) -> JSONResponse:
    body = wire.ErrorData(error=wire.ErrorDetail(message=message, type=type, param=param, code=code))
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else {}
    if status == 409:
        headers["x-should-retry"] = "false"  # a state conflict: retrying cannot help (SDKs retry 409 by default)
    return JSONResponse(body.model_dump(mode="json"), status_code=status, headers=headers)


def _listing(
    items: list[Any],
    after: str | None,
    limit: int,
    *,
    status: str | None = None,
    created_by: str | None = None,
    **equal: Any,
) -> tuple[list[Any], wire.ListMeta]:
    """Newest first, filtered, one page. ``status`` is a comma-joined list (as the SDK sends it);
    ``created_by="me"`` matches everyone here; every other filter is an equality, skipped when None."""
    items = sorted(items, key=lambda i: i.created_at, reverse=True)
    if status:
        items = [i for i in items if i.status in status.split(",")]
    if created_by and created_by != "me":
        items = [i for i in items if i.created_by == created_by]
    for name, value in equal.items():
        if value is not None:
            items = [i for i in items if getattr(i, name) == value]
    return _page(items, after, limit)


def _page(items: list[Any], after: str | None, limit: int) -> tuple[list[Any], wire.ListMeta]:
    """Cursor pagination: ``after`` is the last id of the previous page."""
    if after is not None:
        ids = [i.id for i in items]
        if after not in ids:
            raise APIError(400, f"unknown cursor {after!r}", param="after")
        items = items[ids.index(after) + 1 :]
    page, more = items[:limit], len(items) > limit
    return page, wire.ListMeta(limit=limit, has_more=more, next_cursor=page[-1].id if more and page else "")


@dataclass
class _SessionState:
    backend: LocalBackend
    id: str
    resource_id: str
    base_model: str
    created_by: str
    display_name: str | None = None
    metadata: wire.SessionMetadata = field(default_factory=wire.SessionMetadata)
    ops: dict[str, tuple[str, wire.Operation[Any]]] = field(default_factory=dict)
    """operation id → (kind, latest envelope)."""
    keys: dict[str, str] = field(default_factory=dict)
    """Idempotency-Key → operation id."""

    def view(self) -> wire.Session:
        info = self.backend.session()
        info.id, info.model_resources_id, info.base_model = self.id, self.resource_id, self.base_model
        info.display_name = self.display_name
        info.metadata = self.metadata
        info.created_by = self.created_by
        return info


@dataclass
class _Checkpoint:
    info: wire.Checkpoint
    backend: LocalBackend
    secret: str


class ServerState:
    """Everything the server knows: model resources, sessions, operations, checkpoints."""

    def __init__(self, *, device: str = "auto", op_delay: float = 0.0, checkpoint_dir: Path | None = None):
        self.device = device
        self.op_delay = op_delay
        self.checkpoint_dir = checkpoint_dir
        self.resources: dict[str, wire.ModelResources] = {}
        self.sessions: dict[str, _SessionState] = {}
        self.checkpoints: dict[str, _Checkpoint] = {}
        self.lock = threading.RLock()

    def close(self) -> None:
        for s in self.sessions.values():
            s.backend.close()

    # -- lookups ---------------------------------------------------------------------------------

    def resource(self, rid: str) -> wire.ModelResources:
        if rid not in self.resources:
            raise APIError(404, f"model resource {rid!r} not found", type="not_found", param="model_resources_id")
        return self.resources[rid]

    def session(self, sid: str) -> _SessionState:
        if sid not in self.sessions:
            raise APIError(404, f"training session {sid!r} not found", type="not_found", param="session_id")
        return self.sessions[sid]

    def active_sessions(self, rid: str) -> list[_SessionState]:
        return [
            s
            for s in self.sessions.values()
            if s.resource_id == rid and s.backend.session().status in ACTIVE
        ]

    # -- model resources -------------------------------------------------------------------------

    def create_resource(self, req: wire.CreateModelResourcesRequest, user: str) -> wire.ModelResources:
        if req.base_model not in BASE_MODELS:
            raise APIError(400, f"base_model must be one of {sorted(BASE_MODELS)}", param="base_model")
        opt = req.optimizer_config or wire.OptimizerConfig(adam=wire.AdamOptimizerConfig())
        if (opt.adam is None) == (opt.muon is None):
            raise APIError(400, "optimizer_config needs exactly one of adam or muon", param="optimizer_config")
        now = _now()
        timeout = req.inactive_timeout or DEFAULT_INACTIVE_TIMEOUT
        cc = req.compute_config or wire.ComputeConfigRequest()
        res = wire.ModelResources(
            id=f"mr-{uuid.uuid4()}",
            base_model=req.base_model,
            base_weights_ref=req.base_weights_ref,
            compute_config=wire.ComputeConfig(
                num_generator_replicas=1 if cc.num_generator_replicas is None else cc.num_generator_replicas,
                gpu_type=cc.gpu_type or DEFAULT_GPU_TYPE,
            ),
            created_at=now,
            created_by=user,
            inactive_timeout=timeout,
            lora_enabled=bool(req.lora_enabled),
            optimizer_config=opt,
            status="MODEL_RESOURCES_STATUS_READY",
            updated_at=now,
            expires_at=now + timedelta(seconds=timeout),
        )
        with self.lock:
            self.resources[res.id] = res
        return res

    def stop_resource(self, rid: str, force: bool) -> wire.ModelResources:
        with self.lock:
            res = self.resource(rid)
            active = self.active_sessions(rid)
            if active and not force:
                raise APIError(409, f"{len(active)} session(s) are active; stop them or pass force=true", param="force")
            for s in active:
                s.backend.close()
            res.status, res.updated_at, res.expires_at = "MODEL_RESOURCES_STATUS_STOPPED", _now(), None
            return res

    # -- sessions --------------------------------------------------------------------------------

    def create_session(self, req: wire.StartTrainingSessionRequest, user: str) -> wire.Session:
        with self.lock:
            res = self.resource(req.model_resources_id)
            if res.status != "MODEL_RESOURCES_STATUS_READY":
                raise APIError(409, f"model resource {res.id} is {res.status}", param="model_resources_id")
            cap = LORA_SESSION_CAP if res.lora_enabled else FULL_SESSION_CAP
            if len(self.active_sessions(res.id)) >= cap:
                raise APIError(
                    429, f"model resource {res.id} already has {cap} active session(s)", type="rate_limit_error"
                )
            resume = None
            if req.resume_from_checkpoint_id is not None:
                ckpt = self.checkpoints.get(req.resume_from_checkpoint_id)
                if ckpt is None:
                    raise APIError(404, "checkpoint not found", type="not_found", param="resume_from_checkpoint_id")
                if ckpt.info.type != "CHECKPOINT_TYPE_TRAINING" and req.load_optimizer is not None:
                    raise APIError(
                        400, "load_optimizer is only valid with a training checkpoint", param="load_optimizer"
                    )
                resume = ckpt.backend.checkpoint_path(ckpt.info.id)
            lora = None
            if res.lora_enabled:
                rank = req.lora_config.rank if req.lora_config else None
                if rank is not None and rank > MAX_LORA_RANK:
                    raise APIError(400, f"lora_config.rank must be <= {MAX_LORA_RANK}", param="lora_config.rank")
                lora = (req.lora_config or wire.LoraConfig()).model_dump(exclude_none=True) or True
            muon = res.optimizer_config.muon
            try:
                backend = LocalBackend(
                    "muon" if muon is not None else "adam",
                    BASE_MODELS[res.base_model],
                    seed=int(req.lora_config.seed) if req.lora_config and req.lora_config.seed is not None else 0,
                    device=self.device,
                    muon_scaling="match_adam"
                    if muon is not None and muon.scaling_strategy == "MUON_SCALING_STRATEGY_MATCH_ADAM"
                    else "original",
                    num_generator_replicas=res.compute_config.num_generator_replicas,
                    checkpoint_dir=self.checkpoint_dir,
                    resume_from=resume,
                    load_optimizer=req.load_optimizer,
                    op_delay=self.op_delay,
                    lora=lora,
                )
            except CheckpointMismatch as exc:
                raise APIError(400, str(exc), param="resume_from_checkpoint_id") from None
            except ValueError as exc:
                raise APIError(400, str(exc), param="lora_config" if res.lora_enabled else None) from None
            state = _SessionState(
                backend, f"sess-{uuid.uuid4()}", res.id, res.base_model, created_by=user, display_name=req.display_name
            )
            state.metadata = req.metadata or wire.SessionMetadata()
            self.sessions[state.id] = state
            self._touch(res)
            return state.view()

    def _touch(self, res: wire.ModelResources) -> None:
        """Activity keeps a resource alive: ``expires_at`` never moves earlier."""
        later = _now() + timedelta(seconds=res.inactive_timeout)
        if res.expires_at is None or later > res.expires_at:
            res.expires_at = later

    # -- operations ------------------------------------------------------------------------------

    def submit(self, sid: str, kind: str, key: str, body: wire._Model | None) -> wire.Operation[Any]:
        with self.lock:
            state = self.session(sid)
            if key in state.keys:  # a retry: the original operation, never a second run
                op_kind, env = state.ops[state.keys[key]]
                if op_kind != kind:
                    raise APIError(
                        409, f"Idempotency-Key was already used for a {op_kind} operation", param="Idempotency-Key"
                    )
                return env
            submitted: list[str] = []

            def listener(env: wire.Operation[Any]) -> None:
                state.ops[env.id] = (kind, env)
                if not submitted:
                    submitted.append(env.id)
                if env.status == "TRAINING_OPERATION_STATUS_COMPLETED" and kind.endswith("checkpoint"):
                    self.record_checkpoint(state, env)

            state.backend.submit(kind, body, listener)
            state.keys[key] = submitted[0]
            self._touch(self.resource(state.resource_id))
            return state.ops[submitted[0]][1]

    def operation(self, sid: str, kind: str, op_id: str) -> wire.Operation[Any]:
        state = self.session(sid)
        found = state.ops.get(op_id)
        if found is None or found[0] != kind:
            raise APIError(
                404, f"{kind} operation {op_id!r} not found in session {sid}", type="not_found", param="operation_id"
            )
        return found[1]

    def record_checkpoint(self, state: _SessionState, env: wire.Operation[Any]) -> None:
        """Register a finished checkpoint operation's file in the checkpoints collection."""
        out = env.output
        if out is None:
            return
        ckpt = out.checkpoint
        info = state.view()
        training = isinstance(out, wire.TrainingCheckpointResult)
        self.checkpoints[ckpt.id] = _Checkpoint(
            info=wire.Checkpoint(
                id=ckpt.id,
                base_model=info.base_model,
                created_at=ckpt.created_at,
                session_id=info.id,
                step=ckpt.step,
                type="CHECKPOINT_TYPE_TRAINING" if training else "CHECKPOINT_TYPE_INFERENCE",
                lora_rank=state.backend.lora.rank if state.backend.lora else None,
            ),
            backend=state.backend,
            secret=secrets.token_urlsafe(16),
        )


# ------------------------------------------------------------------------------------------------
# The app


def create_app(
    *,
    token: str | None = None,
    device: str = "auto",
    op_delay: float = 0.0,
    checkpoint_dir: str | Path | None = None,
    fail_rate: float = 0.0,
    fail_seed: int = 0,
) -> FastAPI:
    """The FastAPI app. ``token`` turns on bearer auth; ``op_delay`` adds simulated compute seconds
    to every operation; ``fail_rate`` answers that fraction of requests with an error *after* the
    server has acted (fault injection for client tests)."""
    state = ServerState(
        device=device, op_delay=op_delay, checkpoint_dir=Path(checkpoint_dir) if checkpoint_dir else None
    )
    bearer = HTTPBearer(auto_error=False)

    def user(creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> str:
        if token is None:
            return "local-user"
        if creds is None or not hmac.compare_digest(creds.credentials.encode(), token.encode()):
            raise APIError(401, "missing or invalid API key", type="authentication_error")
        return "user-" + hashlib.sha256(token.encode()).hexdigest()[:12]

    User = Annotated[str, Depends(user)]
    auth = [Depends(user)]

    app = FastAPI(
        title="rlnb serve — Together-compatible RL training sessions",
        version="R-new",
        lifespan=_lifespan(state),
    )
    app.state.rlnb = state

    @app.exception_handler(APIError)
    def _api_error(request: Request, exc: APIError) -> JSONResponse:
        return _error(exc.status, exc.message, exc.type, exc.param)

    @app.exception_handler(RequestValidationError)
    def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0]
        loc = [str(p) for p in first.get("loc", ()) if p not in ("body", "query", "path", "header")]
        param = ".".join(loc) or None
        return _error(400, f"{param or 'request'}: {first.get('msg', 'invalid')}", "invalid_request_error", param)

    @app.exception_handler(StarletteHTTPException)
    def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(
            exc.status_code, str(exc.detail), "invalid_request_error" if exc.status_code < 500 else "server_error"
        )

    @app.get("/health", include_in_schema=False)
    def health() -> dict[str, str]:
        return {"status": "ok"}

    # -- supported models and model resources ----------------------------------------------------

    models = APIRouter(prefix="/v1/rl", tags=["model-resources"], dependencies=auth)

    @models.get("/supported-models")
    def supported_models() -> wire.SupportedModels:
        data = []
        for name, size in BASE_MODELS.items():
            cfg = SIZES[size]
            data.append(
                wire.SupportedModel(
                    base_model=name,
                    default_gpu_type=DEFAULT_GPU_TYPE,
                    compute_configs=[
                        wire.SupportedComputeConfig(
                            gpu_type=DEFAULT_GPU_TYPE,
                            generator_config=wire.GeneratorConfig(
                                context_length=cfg.block_size,
                                sampling_defaults=wire.SamplingDefaults(
                                    logprobs=1, max_tokens=16, n=1, temperature=1.0
                                ),
                            ),
                            trainer_config=wire.TrainerConfig(
                                full=wire.FullTrainerConfig(max_batch_size=256, max_seq_length=cfg.block_size),
                                lora=wire.LoraTrainerConfig(
                                    max_batch_size=256, max_rank=MAX_LORA_RANK, max_seq_length=cfg.block_size
                                ),
                            ),
                        )
                    ],
                )
            )
        return wire.SupportedModels(data=data)

    @models.post("/model-resources")
    def create_model_resources(body: wire.CreateModelResourcesRequest, who: User) -> wire.ModelResources:
        return state.create_resource(body, who)

    @models.post("/model-resources/estimate-cost")
    def estimate_cost(body: wire.CreateModelResourcesRequest) -> wire.CostEstimate:
        if body.base_model not in BASE_MODELS:
            raise APIError(400, f"base_model must be one of {sorted(BASE_MODELS)}", param="base_model")
        return wire.CostEstimate(currency="USD", price_per_hour=PRICE_PER_GPU_HOUR)

    @models.get("/model-resources")
    def list_model_resources(
        after: str | None = None,
        limit: Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)] = DEFAULT_LIST_LIMIT,
        status: str | None = None,
        created_by: str | None = None,
    ) -> wire.ModelResourcesList:
        page, meta = _listing(list(state.resources.values()), after, limit, status=status, created_by=created_by)
        return wire.ModelResourcesList(data=page, meta=meta)

    @models.get("/model-resources/{model_resources_id}")
    def get_model_resources(model_resources_id: str) -> wire.ModelResources:
        return state.resource(model_resources_id)

    @models.post("/model-resources/{model_resources_id}/extend-expiry")
    def extend_expiry(model_resources_id: str, body: wire.ExtendExpiryRequest) -> wire.ModelResources:
        res = state.resource(model_resources_id)
        if res.status != "MODEL_RESOURCES_STATUS_READY":
            raise APIError(409, f"model resource is {res.status}, not ready")
        res.expires_at = (res.expires_at or _now()) + timedelta(seconds=body.seconds)
        return res

    @models.post("/model-resources/{model_resources_id}/stop")
    def stop_model_resources(model_resources_id: str, force: bool = False) -> wire.ModelResources:
        return state.stop_resource(model_resources_id, force)

    # -- training sessions -----------------------------------------------------------------------

    sessions = APIRouter(prefix="/v1/rl/training-sessions", tags=["training-sessions"], dependencies=auth)

    @sessions.post("")
    def create_session(body: wire.StartTrainingSessionRequest, who: User) -> wire.Session:
        return state.create_session(body, who)

    @sessions.get("")
    def list_sessions(
        after: str | None = None,
        limit: Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)] = DEFAULT_LIST_LIMIT,
        status: str | None = None,
        model_resources_id: str | None = None,
        created_by: str | None = None,
    ) -> wire.SessionList:
        live = list(state.sessions.values())  # a snapshot: sessions are added concurrently (handlers run in threads)
        views = [s.view() for s in live]
        page, meta = _listing(
            views, after, limit, status=status, created_by=created_by, model_resources_id=model_resources_id
        )
        return wire.SessionList(data=page, meta=meta)

    @sessions.get("/{session_id}")
    def get_session(session_id: str) -> wire.Session:
        return state.session(session_id).view()

    @sessions.patch("/{session_id}")
    def update_session(session_id: str, body: wire.UpdateSessionRequest) -> wire.Session:
        s = state.session(session_id)
        if body.display_name is not None:
            s.display_name = body.display_name or None  # an empty string clears it
        if body.metadata is not None:
            s.metadata = body.metadata
        return s.view()

    @sessions.post("/{session_id}/stop")
    def stop_session(session_id: str) -> wire.Session:
        s = state.session(session_id)
        s.backend.close()
        return s.view()

    # -- operations: one POST and one GET per kind, typed by the wire tables -----------------------

    ops = APIRouter(prefix="/v1/rl/training-sessions/{session_id}/operations", tags=["operations"], dependencies=auth)
    for kind, request_type in wire.REQUEST_TYPES.items():
        _add_operation_routes(ops, state, kind, request_type)

    # -- checkpoints -----------------------------------------------------------------------------

    ckpts = APIRouter(prefix="/v1/rl/checkpoints", tags=["checkpoints"])

    @ckpts.get("", dependencies=auth)
    def list_checkpoints(
        after: str | None = None,
        limit: Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)] = DEFAULT_LIST_LIMIT,
        base_model: str | None = None,
        session_id: str | None = None,
        type: wire.CheckpointType | None = None,
    ) -> wire.CheckpointList:
        saved = list(state.checkpoints.values())  # a snapshot: session workers add checkpoints concurrently
        infos = [c.info for c in saved]
        page, meta = _listing(infos, after, limit, base_model=base_model, session_id=session_id, type=type)
        return wire.CheckpointList(data=page, meta=meta)

    @ckpts.get("/{checkpoint_id}", dependencies=auth)
    def get_checkpoint(checkpoint_id: str) -> wire.Checkpoint:
        return _checkpoint(state, checkpoint_id).info

    @ckpts.get("/{checkpoint_id}/download", dependencies=auth)
    def download_checkpoint(
        checkpoint_id: str, request: Request, variant: wire.CheckpointVariant
    ) -> wire.CheckpointDownload:
        c = _checkpoint(state, checkpoint_id)
        if c.info.type != "CHECKPOINT_TYPE_INFERENCE":
            raise APIError(400, "only inference checkpoints can be downloaded", param="checkpoint_id")
        if variant == "CHECKPOINT_VARIANT_ADAPTER" and c.info.lora_rank is None:
            raise APIError(400, "the ADAPTER variant exists only for LoRA sessions", param="variant")
        kind = "adapter" if variant == "CHECKPOINT_VARIANT_ADAPTER" else "merged"
        files = []
        for path in c.backend.checkpoint_files(checkpoint_id, kind):
            url = str(request.url_for("checkpoint_file", checkpoint_id=checkpoint_id, kind=kind, filename=path.name))
            files.append(wire.CheckpointFile(filename=path.name, url=f"{url}?sig={c.secret}", size=path.stat().st_size))
        return wire.CheckpointDownload(data=files)

    @ckpts.get("/{checkpoint_id}/files/{kind}/{filename}", include_in_schema=False, name="checkpoint_file")
    def checkpoint_file(checkpoint_id: str, kind: str, filename: str, sig: str = "") -> FileResponse:
        """A presigned download: no Authorization header (the SDK strips it), a per-checkpoint secret."""
        c = _checkpoint(state, checkpoint_id)
        if not hmac.compare_digest(sig.encode(), c.secret.encode()) or kind not in ("merged", "adapter"):
            raise APIError(403, "bad or missing download signature", type="permission_error")
        files = {p.name: p for p in c.backend.checkpoint_files(checkpoint_id, kind)}  # type: ignore[arg-type]
        if filename not in files:
            raise APIError(404, f"checkpoint {checkpoint_id} has no file {filename!r}", type="not_found")
        return FileResponse(files[filename], filename=filename, media_type="application/octet-stream")

    for router in (models, sessions, ops, ckpts):
        app.include_router(router)
    if fail_rate:
        app.add_middleware(FaultInjector, rate=fail_rate, seed=fail_seed)  # type: ignore[arg-type]
    return app


def _checkpoint(state: ServerState, checkpoint_id: str) -> _Checkpoint:
    if checkpoint_id not in state.checkpoints:
        raise APIError(404, f"checkpoint {checkpoint_id!r} not found", type="not_found", param="checkpoint_id")
    return state.checkpoints[checkpoint_id]


def _add_operation_routes(router: APIRouter, state: ServerState, kind: str, request_type: Any) -> None:
    """POST (submit) and GET (poll) for one operation kind, with the kind's own body and result types."""
    envelope = wire.Operation[wire.RESULT_TYPES[kind]]  # type: ignore[name-defined]
    name = kind.replace("-", "_")
    Key = Annotated[
        str,
        Header(
            alias="Idempotency-Key", description="Required; a retry with the same key returns the original operation."
        ),
    ]

    def respond(env: wire.Operation[Any]) -> JSONResponse:
        return JSONResponse(env.model_dump(mode="json", exclude_none=True))

    if request_type is None:

        def submit(session_id: str, idempotency_key: Key) -> Any:
            return respond(state.submit(session_id, kind, idempotency_key, None))

    else:

        def submit(session_id: str, idempotency_key: Key, body: Annotated[request_type, Body()]) -> Any:  # type: ignore[valid-type]
            return respond(state.submit(session_id, kind, idempotency_key, body))

    def get(session_id: str, operation_id: str) -> Any:
        return respond(state.operation(session_id, kind, operation_id))

    router.add_api_route(f"/{kind}", submit, methods=["POST"], response_model=envelope, name=f"submit_{name}")
    router.add_api_route(f"/{kind}/{{operation_id}}", get, methods=["GET"], response_model=envelope, name=f"get_{name}")


def _lifespan(state: ServerState) -> Any:
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> Any:
        yield
        state.close()

    return lifespan


class FaultInjector:
    """ASGI middleware: lets the app act, then replaces a fraction of responses with an error —
    the "response lost after the server acted" case that idempotency keys exist for."""

    def __init__(self, app: ASGIApp, rate: float, seed: int = 0):
        self.app, self.rate, self.rng = app, rate, random.Random(seed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1/") or self.rng.random() >= self.rate:
            await self.app(scope, receive, send)
            return

        async def swallow(message: dict[str, Any]) -> None:
            pass

        await self.app(scope, receive, swallow)  # the server acts; its answer is lost
        body = b'{"error": {"message": "injected fault", "type": "server_error", "param": null, "code": null}}'
        await send({"type": "http.response.start", "status": 503, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})


def serve(host: str = "127.0.0.1", port: int = 8000, **options: Any) -> None:
    """Run the server with uvicorn (blocking)."""
    import uvicorn

    uvicorn.run(create_app(**options), host=host, port=port, log_level="warning")


class ServerProcess:
    """A server in a child process on loopback, for notebooks, tests and benchmarks::

        with ServerProcess.rlnb_serve("--op-delay", "0.05") as url:
            session = rlnb.connect(url, base_model="rlnb/tiny")

    ``start()`` waits until ``health`` answers (or the process dies: its stderr is in the error);
    ``stop()`` terminates it, then kills it if it does not exit.
    """

    def __init__(self, cmd: list[str], url: str, health: str = "/health", timeout: float = 60.0):
        self.cmd, self.url, self.health, self.timeout = cmd, url, health, timeout
        self.proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def rlnb_serve(cls, *args: str, port: int | None = None) -> "ServerProcess":
        """``rlnb serve`` with ``args`` (e.g. ``"--token", "t"``) on ``port`` (default: a free one)."""
        port = port or free_port()
        cmd = [sys.executable, "-m", "rlnb.cli", "serve", "--port", str(port), *args]
        return cls(cmd, f"http://127.0.0.1:{port}")

    def start(self) -> str:
        import httpx

        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                if httpx.get(self.url + self.health, timeout=1).status_code < 500:
                    return self.url
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                err = self.proc.stderr.read().decode(errors="replace")[-2000:] if self.proc.stderr else ""
                self.stop()
                raise RuntimeError(f"{' '.join(self.cmd[:4])} did not start: {err}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stderr:
            self.proc.stderr.close()
        self.proc = None

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])

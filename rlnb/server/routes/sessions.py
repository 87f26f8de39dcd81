"""``/v1/rl/training-sessions``: create, list, get, update, stop."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from rlnb import wire
from rlnb.server.deps import AUTHENTICATED, NoBody, RegistryDep, User
from rlnb.server.limits import check_known
from rlnb.server.settings import DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT, STATUS_QUERY
from rlnb.wire import paths

router = APIRouter(prefix=paths.API_PREFIX, tags=["training-sessions"], **AUTHENTICATED)


@router.post(paths.SESSIONS)
def create_session(body: wire.StartTrainingSessionRequest, registry: RegistryDep, who: User) -> wire.Session:
    check_known(body)
    return registry.create_session(body, who)


@router.get(paths.SESSIONS)
def list_sessions(
    registry: RegistryDep,
    who: User,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)] = DEFAULT_LIST_LIMIT,
    status: Annotated[list[str] | None, Query(description=STATUS_QUERY.format("SessionStatus"))] = None,
    model_resources_id: str | None = None,
    created_by: Annotated[str | None, Query(description="A creator id, or `me`")] = None,
) -> wire.SessionList:
    return registry.list_sessions(after, limit, status, created_by, model_resources_id, who)


@router.get(paths.SESSION)
def get_session(session_id: str, registry: RegistryDep) -> wire.Session:
    return registry.session(session_id).view()


@router.patch(paths.SESSION)
def update_session(session_id: str, body: wire.UpdateSessionRequest, registry: RegistryDep) -> wire.Session:
    check_known(body)
    return registry.update_session(session_id, body)


@router.post(paths.STOP_SESSION)
def stop_session(session_id: str, registry: RegistryDep, body: NoBody = None) -> wire.Session:
    return registry.stop_session(session_id)

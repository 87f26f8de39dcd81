"""``/v1/rl/supported-models`` and ``/v1/rl/model-resources``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from rlnb import wire
from rlnb.server.deps import AUTHENTICATED, NoBody, RegistryDep, User
from rlnb.server.limits import check_known
from rlnb.server.models import supported_models
from rlnb.server.resources import PRICE_PER_GPU_HOUR
from rlnb.server.settings import DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT, STATUS_QUERY
from rlnb.wire import paths

router = APIRouter(prefix=paths.API_PREFIX, tags=["model-resources"], **AUTHENTICATED)


@router.get(paths.SUPPORTED_MODELS)
def get_supported_models(registry: RegistryDep) -> wire.SupportedModels:
    return supported_models(registry.settings)


@router.post(paths.MODEL_RESOURCES)
def create_model_resources(
    body: wire.CreateModelResourcesRequest, registry: RegistryDep, who: User
) -> wire.ModelResources:
    check_known(body)
    return registry.create_resource(body, who)


@router.post(paths.ESTIMATE_COST)
def estimate_cost(body: wire.CreateModelResourcesRequest, registry: RegistryDep) -> wire.CostEstimate:
    check_known(body)
    registry.check_resource_request(body)
    return wire.CostEstimate(currency="USD", price_per_hour=PRICE_PER_GPU_HOUR)


@router.get(paths.MODEL_RESOURCES)
def list_model_resources(
    registry: RegistryDep,
    who: User,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)] = DEFAULT_LIST_LIMIT,
    status: Annotated[list[str] | None, Query(description=STATUS_QUERY.format("ModelResourcesStatus"))] = None,
    created_by: Annotated[str | None, Query(description="A creator id, or `me`")] = None,
) -> wire.ModelResourcesList:
    return registry.list_resources(after, limit, status, created_by, who)


@router.get(paths.MODEL_RESOURCE)
def get_model_resources(model_resources_id: str, registry: RegistryDep) -> wire.ModelResources:
    return registry.resource(model_resources_id)


@router.post(paths.EXTEND_EXPIRY)
def extend_expiry(
    model_resources_id: str, body: wire.ExtendExpiryRequest, registry: RegistryDep
) -> wire.ModelResources:
    """Keep a READY resource up for at least ``seconds`` from now (``expires_at`` never moves earlier)."""
    return registry.extend_expiry(model_resources_id, body.seconds)


@router.post(paths.STOP_MODEL_RESOURCE)
def stop_model_resources(
    model_resources_id: str, registry: RegistryDep, force: bool = False, body: NoBody = None
) -> wire.ModelResources:
    return registry.stop_resource(model_resources_id, force)

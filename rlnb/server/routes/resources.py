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

router = APIRouter(prefix="/v1/rl", tags=["model-resources"], **AUTHENTICATED)


@router.get("/supported-models")
def get_supported_models(registry: RegistryDep) -> wire.SupportedModels:
    return supported_models(registry.settings)


@router.post("/model-resources")
def create_model_resources(
    body: wire.CreateModelResourcesRequest, registry: RegistryDep, who: User
) -> wire.ModelResources:
    check_known(body)
    return registry.create_resource(body, who)


@router.post("/model-resources/estimate-cost")
def estimate_cost(body: wire.CreateModelResourcesRequest, registry: RegistryDep) -> wire.CostEstimate:
    check_known(body)
    registry.check_resource_request(body)
    return wire.CostEstimate(currency="USD", price_per_hour=PRICE_PER_GPU_HOUR)


@router.get("/model-resources")
def list_model_resources(
    registry: RegistryDep,
    who: User,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)] = DEFAULT_LIST_LIMIT,
    status: Annotated[list[str] | None, Query(description=STATUS_QUERY.format("ModelResourcesStatus"))] = None,
    created_by: Annotated[str | None, Query(description="A creator id, or `me`")] = None,
) -> wire.ModelResourcesList:
    return registry.list_resources(after, limit, status, created_by, who)


@router.get("/model-resources/{model_resources_id}")
def get_model_resources(model_resources_id: str, registry: RegistryDep) -> wire.ModelResources:
    return registry.resource(model_resources_id)


@router.post("/model-resources/{model_resources_id}/extend-expiry")
def extend_expiry(
    model_resources_id: str, body: wire.ExtendExpiryRequest, registry: RegistryDep
) -> wire.ModelResources:
    """Keep a READY resource up for at least ``seconds`` from now (``expires_at`` never moves earlier)."""
    return registry.extend_expiry(model_resources_id, body.seconds)


@router.post("/model-resources/{model_resources_id}/stop")
def stop_model_resources(
    model_resources_id: str, registry: RegistryDep, force: bool = False, body: NoBody = None
) -> wire.ModelResources:
    return registry.stop_resource(model_resources_id, force)

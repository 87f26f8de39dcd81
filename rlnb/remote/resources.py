"""``APIClient``'s model-resources half: supported models, and creating, listing, keeping up, pricing and stopping
the compute that sessions run on."""

from __future__ import annotations

from collections.abc import Iterable

from rlnb import wire
from rlnb._input.checks import check_int
from rlnb.errors import BadRequestError
from rlnb.remote.call_spec import Call
from rlnb.remote.endpoints import Endpoints, at, json_body, list_params, status_filter
from rlnb.wire import paths


class ResourceCalls(Endpoints):
    """The model-resources endpoints (see ``APIClient`` for the client's arguments). Every one but the create is
    retried as any call: a GET, a stop, an estimate and an extend-expiry (whose expiry never moves earlier) do the
    same when sent twice."""

    def supported_models(self) -> wire.SupportedModels:
        """The base models the service trains, with their compute options and limits."""
        return self._parse(self._send(Call("GET", paths.SUPPORTED_MODELS)), wire.SupportedModels)

    def create_model_resources(self, request: wire.CreateModelResourcesRequest) -> wire.ModelResources:
        """Sent once it may have reached the server (no Idempotency-Key: a resend could create two); see
        ``rlnb.remote.recover`` for finding it when the answer is lost."""
        call = Call("POST", paths.MODEL_RESOURCES, json_body(request), idempotent=False)
        return self._parse(self._send(call), wire.ModelResources)

    def estimate_cost(self, request: wire.CreateModelResourcesRequest) -> wire.CostEstimate:
        """What the resource ``request`` describes would cost per hour (nothing is created; ``rlnb serve``: 0)."""
        if not isinstance(request, wire.CreateModelResourcesRequest):
            raise TypeError(f"estimate_cost takes a wire.CreateModelResourcesRequest, got {type(request).__name__}")
        call = Call("POST", paths.ESTIMATE_COST, json_body(request))
        return self._parse(self._send(call), wire.CostEstimate)

    def list_model_resources(
        self,
        *,
        status: str | Iterable[str] | None = (),
        created_by: str | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> wire.ModelResourcesList:
        """One page, newest first on rlnb serve; ``status`` one ``wire.ModelResourcesStatus`` value or a list of them
        (comma-joined, as the SDK sends a list), each checked before anything is sent; ``limit`` 1..100."""
        status_given = status_filter(status, wire.ModelResourcesStatus)
        params = list_params(limit, status=status_given, created_by=created_by, after=after)
        return self._parse(self._send(Call("GET", paths.MODEL_RESOURCES, params=params)), wire.ModelResourcesList)

    def get_model_resources(self, model_resources_id: str) -> wire.ModelResources:
        """One model resource by id (``APIError`` when the answer is about another one)."""
        path = at(paths.MODEL_RESOURCE, model_resources_id=model_resources_id)
        return self._one(self._send(Call("GET", path)), wire.ModelResources, model_resources_id)

    def extend_expiry(self, model_resources_id: str, seconds: int) -> wire.ModelResources:
        """Keep a READY resource from stopping for inactivity for ``seconds`` from now; its ``expires_at`` never
        moves earlier. A resource that is not READY is refused (409). The reference gives ``seconds`` no range: only
        what is no positive integer is refused here, the rest is the service's to judge by its own limits (``rlnb
        serve``'s are ``wire.ExtendExpiryRequest``'s, 60..86400)."""
        count = check_int("seconds", seconds, 1)
        body = wire.ExtendExpiryRequest.model_construct(seconds=count)  # not the model's bounds: rlnb serve's
        path = at(paths.EXTEND_EXPIRY, model_resources_id=model_resources_id)
        return self._one(self._send(Call("POST", path, json_body(body))), wire.ModelResources, model_resources_id)

    def stop_model_resources(
        self, model_resources_id: str, *, force: bool = False, reconnect_until: float | None = None
    ) -> wire.ModelResources:
        """Stop a resource; ``force`` also stops the sessions attached to it (without it, as the API's default, the
        call fails while one is active).
        ``reconnect_until``: as ``stop_session``'s. One that has already stopped (or failed) is answered as it is:
        the API refuses its stop with a 400, as the SDK reads it (it expired, or this stop's answer was lost and
        its retry found it stopped)."""
        path = at(paths.STOP_MODEL_RESOURCE, model_resources_id=model_resources_id)
        params = {"force": "true" if force else "false"}
        call = Call("POST", path, params=params, reconnect_until=reconnect_until)
        try:
            return self._one(self._send(call), wire.ModelResources, model_resources_id)
        except BadRequestError:
            res = self.get_model_resources(model_resources_id)
            if res.status not in wire.RESOURCE_ENDED:
                raise
            return res

"""Dependencies every router shares: the registry, the settings and the caller (bearer token)."""

from __future__ import annotations

import hashlib
import hmac
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from rlnb.server.errors import ERROR_RESPONSES, ServerError
from rlnb.server.registry import Registry

_bearer = HTTPBearer(auto_error=False)


def get_registry(request: Request) -> Registry:
    registry: Registry = request.app.state.registry
    return registry


def current_user(
    registry: Annotated[Registry, Depends(get_registry)],
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> str:
    """The caller's id; 401 without the right token when the server has one (compared in constant time)."""
    token = registry.settings.token
    if token is None:
        return "local-user"
    if creds is None or not hmac.compare_digest(creds.credentials.encode(), token.encode()):
        raise ServerError(401, "missing or invalid API key")
    return "user-" + hashlib.sha256(token.encode()).hexdigest()[:12]


RegistryDep = Annotated[Registry, Depends(get_registry)]
User = Annotated[str, Depends(current_user)]
AUTHENTICATED: dict[str, Any] = {"dependencies": [Depends(current_user)], "responses": ERROR_RESPONSES}
"""``APIRouter(**AUTHENTICATED)``: every route checks the token and declares the error responses."""

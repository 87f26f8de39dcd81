"""The API's paths under ``API_PREFIX``, each a template whose ``{names}`` are its path parameters: spelt once for the
server's routes and the client's calls (a path changed on one side alone was caught only where a test ran the client
against the server). The presigned URLs are the server's own: it signs them, and the client takes them as given."""

from __future__ import annotations

__all__ = [
    "API_PREFIX",
    "CHECKPOINT",
    "CHECKPOINTS",
    "CHECKPOINT_DOWNLOAD",
    "ESTIMATE_COST",
    "EXTEND_EXPIRY",
    "MODEL_RESOURCE",
    "MODEL_RESOURCES",
    "OPERATION",
    "OPERATIONS",
    "PAYLOAD_DOWNLOAD_URL",
    "PAYLOAD_UPLOAD_URL",
    "SESSION",
    "SESSIONS",
    "STOP_MODEL_RESOURCE",
    "STOP_SESSION",
    "SUPPORTED_MODELS",
]

API_PREFIX = "/v1/rl"
"""Where every path below is: rlnb adds it to a client's ``base_url``, and the server's routes sit under it."""

SUPPORTED_MODELS = "/supported-models"
MODEL_RESOURCES = "/model-resources"
ESTIMATE_COST = f"{MODEL_RESOURCES}/estimate-cost"
MODEL_RESOURCE = f"{MODEL_RESOURCES}/{{model_resources_id}}"
EXTEND_EXPIRY = f"{MODEL_RESOURCE}/extend-expiry"
STOP_MODEL_RESOURCE = f"{MODEL_RESOURCE}/stop"

SESSIONS = "/training-sessions"
SESSION = f"{SESSIONS}/{{session_id}}"
STOP_SESSION = f"{SESSION}/stop"
OPERATIONS = f"{SESSION}/operations/{{kind}}"
"""An operation kind's: POST submits one (``kind`` an ``OperationKind``)."""
OPERATION = f"{OPERATIONS}/{{operation_id}}"
PAYLOAD_UPLOAD_URL = f"{SESSION}/payloads/upload-url"
PAYLOAD_DOWNLOAD_URL = f"{SESSION}/payloads/{{payload_id}}/download-url"

CHECKPOINTS = "/checkpoints"
CHECKPOINT = f"{CHECKPOINTS}/{{checkpoint_id}}"
CHECKPOINT_DOWNLOAD = f"{CHECKPOINT}/download"

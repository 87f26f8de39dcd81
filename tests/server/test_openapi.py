"""``/openapi.json`` tells the truth: the errors the server sends, no 422 it never sends, int64 as integer or
string, response fields required where the official SDK's types require them, the GPU type enum, the
payload paths."""

import types
import typing
from typing import Any

import pytest
from fastapi.testclient import TestClient

from rlnb import wire
from rlnb.server import create_app

together = pytest.importorskip("together")
from together._models import BaseModel as SdkModel  # noqa: E402
from together.types import post_training as sdk  # noqa: E402

ERROR_STATUSES = ("400", "401", "403", "404", "409", "429")


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    with TestClient(create_app(device="cpu")) as c:
        return c.get("/openapi.json").json()


def resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[-1]]
    return node


def response_schema(schema: dict[str, Any], method: str, path: str) -> dict[str, Any]:
    content = schema["paths"][path][method]["responses"]["200"]["content"]["application/json"]
    return resolve(schema, content["schema"])


def test_no_422_and_every_error_the_server_sends_is_declared(schema):
    assert "HTTPValidationError" not in schema["components"]["schemas"]
    for path, methods in schema["paths"].items():
        for method, op in methods.items():
            assert "422" not in op["responses"], (method, path)
            for status in ERROR_STATUSES:
                body = op["responses"][status]["content"]["application/json"]["schema"]
                assert body == {"$ref": "#/components/schemas/ErrorData"}, (method, path, status)


def test_int64_fields_take_integers_or_strings_and_are_sent_as_strings(schema):
    body = schema["paths"]["/v1/rl/training-sessions/{session_id}/operations/sample"]["post"]["requestBody"]
    sample_body = resolve(schema, body["content"]["application/json"]["schema"])
    model_input = resolve(schema, sample_body["properties"]["model_inputs"]["items"])
    chunk = resolve(schema, model_input["properties"]["chunks"]["items"])
    tokens = resolve(schema, chunk["properties"]["encoded_text"])["properties"]["tokens"]["items"]
    assert {t["type"] for t in tokens["anyOf"]} == {"integer", "string"}
    session = response_schema(schema, "get", "/v1/rl/training-sessions/{session_id}")
    assert session["properties"]["step"]["type"] == "string"
    wire.EncodedText.model_validate({"tokens": [1, "2"]})  # and the server takes both


def test_gpu_type_is_an_enum(schema):
    models = response_schema(schema, "get", "/v1/rl/supported-models")
    model = resolve(schema, models["properties"]["data"]["items"])
    assert model["properties"]["default_gpu_type"] == {
        "type": "string",
        "const": "B200-SXM",
        "title": "Default Gpu Type",
    }
    create = schema["paths"]["/v1/rl/model-resources"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    compute = resolve(schema, resolve(schema, create)["properties"]["compute_config"]["anyOf"][0])
    assert compute["properties"]["gpu_type"]["anyOf"][0]["const"] == "B200-SXM"


def test_the_payload_side_channel_is_declared(schema):
    assert "post" in schema["paths"]["/v1/rl/training-sessions/{session_id}/payloads/upload-url"]
    assert "post" in schema["paths"]["/v1/rl/training-sessions/{session_id}/payloads/{payload_id}/download-url"]
    assert {"put", "get"} <= set(schema["paths"]["/v1/rl/payloads/{payload_id}"])
    for kind in ("forward-backward", "custom-forward-backward", "sample"):
        body = schema["paths"][f"/v1/rl/training-sessions/{{session_id}}/operations/{kind}"]["post"]["requestBody"]
        assert "payload_id" in resolve(schema, body["content"]["application/json"]["schema"])["properties"]


SDK_RESPONSES = [
    ("get", "/v1/rl/supported-models", sdk.RlSupportedModels),
    ("post", "/v1/rl/model-resources", sdk.ModelResources),
    ("get", "/v1/rl/model-resources", sdk.ModelResourcesListResponse),
    ("post", "/v1/rl/model-resources/estimate-cost", sdk.ModelResourcesEstimateCostResponse),
    ("post", "/v1/rl/model-resources/{model_resources_id}/extend-expiry", sdk.ModelResources),
    ("post", "/v1/rl/training-sessions", sdk.Session),
    ("get", "/v1/rl/training-sessions", sdk.SessionsListResponse),
    ("patch", "/v1/rl/training-sessions/{session_id}", sdk.Session),
    ("get", "/v1/rl/checkpoints", sdk.CheckpointsListResponse),
    ("get", "/v1/rl/checkpoints/{checkpoint_id}", sdk.Checkpoint),
    ("get", "/v1/rl/checkpoints/{checkpoint_id}/download", sdk.CheckpointDownloadResponse),
    *[
        (method, f"/v1/rl/training-sessions/{{session_id}}/operations/{kind}" + suffix, operation)
        for kind, operation in [
            ("forward-backward", sdk.ForwardBackwardOperation),
            ("custom-forward-backward", sdk.CustomForwardBackwardOperation),
            ("optim-step", sdk.OptimStepOperation),
            ("weights-sync", sdk.WeightsSyncOperation),
            ("sample", sdk.SampleOperation),
            ("inference-checkpoint", sdk.InferenceCheckpointOperation),
            ("training-checkpoint", sdk.TrainingCheckpointOperation),
        ]
        for method, suffix in (("post", ""), ("get", "/{operation_id}"))
    ],
]


def _models(annotation: Any) -> list[type[SdkModel]]:
    """The SDK models inside an annotation (through Optional, List, Union, Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, SdkModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models(arg)]


def _nullable(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType) and type(None) in typing.get_args(
        annotation
    )


def _object(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """The object schema behind a property (through $ref, anyOf with null, array items, map values)."""
    node = resolve(schema, node)
    if "anyOf" in node:
        node = resolve(schema, next(n for n in node["anyOf"] if n.get("type") != "null"))
    if node.get("type") == "array":
        node = _object(schema, node["items"])
    elif "properties" not in node and isinstance(node.get("additionalProperties"), dict):
        node = _object(schema, node["additionalProperties"])
    return node


def _compare(schema: dict[str, Any], model: type[SdkModel], node: dict[str, Any], where: str) -> list[str]:
    problems = []
    node = _object(schema, node)
    for name, field in model.model_fields.items():
        key = field.alias or name
        if key not in node.get("properties", {}):
            if field.is_required():
                problems.append(f"{where}.{key}: the SDK requires it; the server does not declare it")
            continue
        prop = resolve(schema, node["properties"][key])
        if field.is_required() and key not in node.get("required", []):
            problems.append(f"{where}.{key}: the SDK requires it; the server's schema does not")
        if not _nullable(field.annotation) and any(v.get("type") == "null" for v in prop.get("anyOf", [])):
            problems.append(f"{where}.{key}: the SDK says never null; the server's schema allows null")
        for sub in _models(field.annotation):
            problems += _compare(schema, sub, node["properties"][key], f"{where}.{key}")
    return problems


@pytest.mark.parametrize(("method", "path", "model"), SDK_RESPONSES, ids=[f"{m} {p}" for m, p, _ in SDK_RESPONSES])
def test_response_fields_are_required_where_the_sdk_requires_them(schema, method, path, model):
    content = schema["paths"][path][method]["responses"]["200"]["content"]["application/json"]["schema"]
    assert _compare(schema, model, content, model.__name__) == []

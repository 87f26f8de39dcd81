"""Property-based fuzzing of ``rlnb serve`` from its own ``/openapi.json`` (schemathesis + hypothesis).

Every served operation is fuzzed twice: with schema-valid data (positive) and with data that breaks
the schema (negative). The requirement is zero server errors: no 5xx, ever. Valid data must also get
responses that match the declared response schemas; invalid data must get a 4xx.

Routes under a session, a resource or a checkpoint would only ever see 404s with random ids, so most
generated cases get the id of a real object, made before fuzzing (``World``): one LoRA session with
one finished operation of every kind, its checkpoints, a throwaway session and resource for the stop
routes, and a LoRA and a full-weight resource that fuzzed session creation attaches to (each session
made that way is stopped at once, so the session caps and the server's memory stay bounded). Positive
cases come half from the served schema and half from a copy without ``additionalProperties: true``, so
the budget is not all spent on junk keys the server ignores. The server is ``auth_server``: cases
carry the bearer token, and negative cases that drop it must get a 401.

Each test item is bounded (``MAX_EXAMPLES``, ``MORE_EXAMPLES``) and hypothesis runs derandomized, so a
run is reproducible; the whole file takes about 30 s on two cores. The regression tests at the end
pin the 5xx found while writing this (see each docstring for how it was found).
"""

import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

schemathesis = pytest.importorskip("schemathesis")

import requests  # noqa: E402  (schemathesis' transport)
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from schemathesis import GenerationMode  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
)

from rlnb import wire  # noqa: E402
from rlnb.server import create_app  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]  # fuzzes a server process (auth_server) with hypothesis

MAX_EXAMPLES = {GenerationMode.POSITIVE: 15, GenerationMode.NEGATIVE: 12}
"""Per operation and mode: 29 operations x 2 modes stays well inside a minute on two cores."""
MORE_EXAMPLES = {
    ("POST", "/v1/rl/training-sessions"): 40,
    ("POST", "/v1/rl/training-sessions/{session_id}/operations/forward-backward"): 30,
    ("POST", "/v1/rl/training-sessions/{session_id}/operations/sample"): 30,
}
"""Positive examples for the routes with the deepest bodies: they build torch sessions and run ops."""
REAL_ID_WEIGHT = 3
"""Of every REAL_ID_WEIGHT + 1 generated cases, REAL_ID_WEIGHT use real ids in the path."""

_PATHS = create_app().openapi()["paths"]  # the same document the server serves (checked below)
OPERATIONS = sorted((method.upper(), path) for path, methods in _PATHS.items() for method in methods)
KINDS = tuple(wire.REQUEST_TYPES)  # every operation kind
PRESIGNED = {
    ("PUT", "/v1/rl/payloads/{payload_id}"),
    ("GET", "/v1/rl/payloads/{payload_id}"),
    ("GET", "/v1/rl/checkpoints/{checkpoint_id}/files/{kind}/{filename}"),
}
"""Routes behind presigned URLs: a signature in the query instead of the token (403 without it)."""


# -- the objects the fuzzed requests point at -----------------------------------------------------


def _tokens(*ids: int) -> dict[str, Any]:
    return {"chunks": [{"encoded_text": {"tokens": list(ids)}}]}


def _ce_sample() -> dict[str, Any]:
    return {
        "model_input": _tokens(1, 2, 3),
        "loss_fn_inputs": {
            "target_tokens": {"data": [2, 3, 4], "dtype": "int64"},
            "weights": {"data": [1.0, 1.0, 1.0], "dtype": "float32"},
        },
    }


OP_BODIES: dict[str, Any] = {
    "forward-backward": {"samples": [_ce_sample()], "loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}},
    "custom-forward-backward": {
        "samples": [_ce_sample()],
        "gradients": [{"data": [0.1, 0.1, 0.1], "dtype": "D_TYPE_FLOAT32"}],
    },
    "optim-step": {"adam_params": {"learning_rate": 1e-3}},
    "weights-sync": {"weight_sync_type": "WEIGHT_SYNC_TYPE_SYNCHRONOUS"},
    "sample": {"model_inputs": [_tokens(1, 2)], "sampling_params": {"max_tokens": 2}},
    "inference-checkpoint": None,
    "training-checkpoint": None,
}


@dataclass
class World:
    resource: str
    session: str
    spawn_resources: tuple[str, str]
    """A LoRA and a full-weight resource for fuzzed session creation."""
    victim_resource: str
    victim_session: str
    """Targets of the stop routes."""
    op_ids: dict[str, str] = field(default_factory=dict)
    checkpoints: list[str] = field(default_factory=list)
    payload: str = ""
    """An uploaded payload of ``session``."""

    def path_parameters(self, method: str, path: str) -> dict[str, str]:
        """Real ids for this route's path parameters ({} when it has none)."""
        if path == "/v1/rl/training-sessions/{session_id}/stop":
            return {"session_id": self.victim_session}
        if path == "/v1/rl/model-resources/{model_resources_id}/stop":
            return {"model_resources_id": self.victim_resource}
        params: dict[str, str] = {}
        if "{session_id}" in path:
            params["session_id"] = self.session
        if "{model_resources_id}" in path:
            params["model_resources_id"] = self.resource
        if "{checkpoint_id}" in path:
            params["checkpoint_id"] = self.checkpoints[0]  # the inference one: it also downloads
        if "{payload_id}" in path:
            params["payload_id"] = self.payload
        if "{filename}" in path:
            params["kind"], params["filename"] = "merged", "config.json"
        if "{operation_id}" in path:
            kind = re.search(r"/operations/([a-z-]+)/", path).group(1)  # type: ignore[union-attr]
            params["operation_id"] = self.op_ids[kind]
        return params


def _check(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    return response.json()


def _wait(http: httpx.Client, session: str, kind: str, op: dict[str, Any]) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while op["status"] not in ("TRAINING_OPERATION_STATUS_COMPLETED", "TRAINING_OPERATION_STATUS_FAILED"):
        assert time.monotonic() < deadline
        time.sleep(0.01)
        op = _check(http.get(f"/v1/rl/training-sessions/{session}/operations/{kind}/{op['id']}"))
    assert op["status"] == "TRAINING_OPERATION_STATUS_COMPLETED", op
    return op


TOKEN = "secret-token"  # conftest's auth_server: fuzzing also proves every route checks the token
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def world(auth_server: str) -> World:
    with httpx.Client(base_url=auth_server, headers=AUTH, timeout=30) as http:

        def resource(lora: bool) -> str:
            return _check(http.post("/v1/rl/model-resources", json={"base_model": "rlnb/tiny", "lora_enabled": lora}))[
                "id"
            ]

        def session(rid: str) -> str:  # once RUNNING: a create answers CREATING and builds the model on a thread
            sid = _check(http.post("/v1/rl/training-sessions", json={"model_resources_id": rid}))["id"]
            deadline = time.monotonic() + 60
            while _check(http.get(f"/v1/rl/training-sessions/{sid}"))["status"] == "TRAINING_SESSION_STATUS_CREATING":
                assert time.monotonic() < deadline, f"session {sid} still CREATING"
                time.sleep(0.01)
            return sid

        main = resource(lora=True)
        victim = resource(lora=False)
        w = World(
            resource=main,
            session=session(main),
            spawn_resources=(resource(lora=True), resource(lora=False)),
            victim_resource=victim,
            victim_session=session(victim),
        )
        for kind in KINDS:  # one finished operation of each kind, in a sensible order
            body = OP_BODIES[kind]
            url = f"/v1/rl/training-sessions/{w.session}/operations/{kind}"
            op = _check(http.post(url, json=body, headers={"Idempotency-Key": str(uuid.uuid4())}))
            op = _wait(http, w.session, kind, op)
            w.op_ids[kind] = op["id"]
            if kind.endswith("checkpoint"):
                w.checkpoints.append(op["output"]["checkpoint"]["id"])
        assert w.checkpoints[0].startswith("ckpt-infer")
        upload = _check(http.post(f"/v1/rl/training-sessions/{w.session}/payloads/upload-url"))
        assert http.put(upload["upload_url"], content=b'{"samples": []}').status_code == 200
        w.payload = upload["payload_id"]
        return w


@pytest.fixture(scope="module")
def schema(auth_server: str) -> Any:
    """The schema as ``rlnb serve`` serves it; generated cases carry the real bearer token, except
    negative ones that break the security requirement on purpose (which must get a 401)."""
    config = schemathesis.Config.from_dict({"auth": {"openapi": {"HTTPBearer": {"bearer": TOKEN}}}})
    loaded = schemathesis.openapi.from_url(auth_server + "/openapi.json", config=config)
    doc = httpx.get(auth_server + "/openapi.json").json()
    served = sorted((m.upper(), p) for p, ms in doc["paths"].items() for m in ms)
    assert served == OPERATIONS
    return loaded


def _closed(node: Any) -> Any:
    """The document with every ``additionalProperties: true`` made false. Requests may carry unknown
    fields (the server ignores them), but generating them spends most of hypothesis' budget on junk
    keys; cases drawn from this variant put it all into the declared fields, where bugs live."""
    if isinstance(node, dict):
        return {k: (False if k == "additionalProperties" and v is True else _closed(v)) for k, v in node.items()}
    if isinstance(node, list):
        return [_closed(v) for v in node]
    return node


@pytest.fixture(scope="module")
def closed_schema(auth_server: str) -> Any:
    doc = httpx.get(auth_server + "/openapi.json").json()
    config = schemathesis.Config.from_dict({"auth": {"openapi": {"HTTPBearer": {"bearer": TOKEN}}}})
    return schemathesis.openapi.from_dict(_closed(doc), config=config)


@pytest.fixture(scope="module")
def transport() -> Any:
    with requests.Session() as s:
        yield s


# -- strategies -----------------------------------------------------------------------------------


def _realistic(case: Any, pick: int, key: uuid.UUID, world: World, mode: GenerationMode) -> Any:
    """Point some generated bodies at real models, resources and checkpoints, and give some
    operations an Idempotency-Key of their own kind (hypothesis reuses simple values like "0"
    across kinds, which only ever gets a 409). Only string values are replaced by strings, so a
    negative case stays negative."""
    body = case.body
    if isinstance(body, dict):
        if isinstance(body.get("base_model"), str) and pick % 2 == 0:
            body["base_model"] = "rlnb/tiny"
        if isinstance(body.get("model_resources_id"), str) and pick < 5:
            body["model_resources_id"] = world.spawn_resources[pick == 4]  # mostly the LoRA one
        if isinstance(body.get("resume_from_checkpoint_id"), str) and pick % 3 == 0:
            body["resume_from_checkpoint_id"] = world.checkpoints[pick % len(world.checkpoints)]
    if mode is GenerationMode.POSITIVE and case.headers and "Idempotency-Key" in case.headers and pick % 2:
        case.headers["Idempotency-Key"] = f"{case.operation.path.rsplit('/', 1)[-1]}-{key}"  # unique per kind
    return case


def _rebound(case: Any, operation: Any) -> Any:
    """A case drawn from the closed variant, as a case of the served operation (whose response
    schemas the checks use)."""
    return operation.Case(
        path_parameters=case.path_parameters,
        headers=dict(case.headers or {}),
        query=case.query,
        body=case.body,
        media_type=case.media_type,
    )


def _cases(operation: Any, closed: Any, method: str, path: str, mode: GenerationMode, world: World) -> Any:
    """Generated cases, most with real ids in the path; positive ones half from the closed variant."""
    real = world.path_parameters(method, path)

    def drawn(op: Any) -> Any:
        generated = op.as_strategy(generation_mode=mode)
        if not real:
            return generated
        return st.one_of(*[op.as_strategy(generation_mode=mode, path_parameters=real)] * REAL_ID_WEIGHT, generated)

    strategy = drawn(operation)
    if mode is GenerationMode.POSITIVE:
        strategy = st.one_of(strategy, drawn(closed).map(lambda case: _rebound(case, operation)))
    return st.builds(_realistic, strategy, st.integers(0, 5), st.uuids(), st.just(world), st.just(mode))


def _has_inputs(method: str, path: str) -> bool:
    """Negative data needs something to break: a body, or a constrained query parameter."""
    op = _PATHS[path][method.lower()]
    return "requestBody" in op or any(p["in"] in ("query", "header") for p in op.get("parameters", ()))


# -- the fuzz test --------------------------------------------------------------------------------


CASES = [
    pytest.param(method, path, mode, id=f"{mode.value}-{method} {path}")
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    for method, path in OPERATIONS
    if mode is GenerationMode.POSITIVE or _has_inputs(method, path)
]


@pytest.mark.parametrize(("method", "path", "mode"), CASES)
def test_no_server_errors(
    auth_server: str,
    schema: Any,
    closed_schema: Any,
    world: World,
    transport: Any,
    method: str,
    path: str,
    mode: GenerationMode,
):
    operation = schema[path][method]
    if mode is GenerationMode.POSITIVE:
        checks = [not_a_server_error, response_schema_conformance, content_type_conformance]
    else:
        checks = [not_a_server_error, negative_data_rejection]
    seen: dict[int, int] = {}
    examples = MAX_EXAMPLES[mode]
    if mode is GenerationMode.POSITIVE:
        examples = MORE_EXAMPLES.get((method, path), examples)

    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=_cases(operation, closed_schema[path][method], method, path, mode, world))
    def fuzz(case: Any) -> None:
        response = case.call(base_url=auth_server, session=transport, timeout=60)
        seen[response.status_code] = seen.get(response.status_code, 0) + 1
        assert response.status_code < 500, f"{case.as_curl_command()}\n-> {response.status_code} {response.text}"
        case.validate_response(response, checks=checks)
        if method == "POST" and path == "/v1/rl/training-sessions" and response.status_code == 200:
            # free the slot at once: fuzzing must not pile up live torch sessions
            sid = response.json()["id"]
            stopped = transport.post(f"{auth_server}/v1/rl/training-sessions/{sid}/stop", headers=AUTH)
            assert stopped.status_code == 200, stopped.text

    fuzz()
    assert seen, "nothing was generated"
    print(f"{mode.value} {method} {path}: {dict(sorted(seen.items()))}")


# -- plain regression tests (the fuzzer's findings, and invalid input on every route) ---------------


def _sample_path(path: str, world: World) -> str:
    return path.format(**world.path_parameters("GET", path) | {"session_id": world.session})


def test_every_route_checks_the_token(auth_server: str, world: World):
    for method, path in OPERATIONS:
        r = httpx.request(method, auth_server + _sample_path(path, world), json={})
        if (method, path) in PRESIGNED:  # no token, and no signature either
            assert r.status_code == 403 and r.json()["error"]["type"] == "permission_error", (method, path, r.text)
            continue
        assert r.status_code == 401, (method, path, r.text)
        assert r.headers["www-authenticate"] == "Bearer"
        assert r.json()["error"]["type"] == "authentication_error"


BAD_BODIES = [b"not json", b"[]", b"null", b'"text"', b"{}", b'{"unknown": 1}', b'{"a": NaN}', b"{" * 5000]


@pytest.mark.parametrize(
    ("method", "path"),
    [op for op in OPERATIONS if "requestBody" in _PATHS[op[1]][op[0].lower()] and op not in PRESIGNED],
)
def test_invalid_bodies_are_400(auth_server: str, world: World, method: str, path: str):
    headers = AUTH | {"Content-Type": "application/json", "Idempotency-Key": f"bad-body-{uuid.uuid4()}"}
    url = auth_server + _sample_path(path, world)
    optional = not _PATHS[path][method.lower()]["requestBody"].get("required", False)
    for body in BAD_BODIES:
        r = httpx.request(method, url, content=body, headers=headers)
        if body == b"{}" and r.status_code == 200:
            continue  # no required field (PATCH session, optim-step): a no-op
        if body == b"null" and optional and r.status_code == 200:
            continue  # a kind that takes no body (the checkpoints): null is no body
        assert r.status_code == 400, (method, path, body[:20], r.status_code, r.text[:300])
        err = r.json()["error"]
        assert set(err) == {"message", "type", "param", "code"} and err["type"] == "invalid_request_error"
    # a body of the wrong media type is refused too, never a 5xx
    r = httpx.request(method, url, content=b"a=1", headers=headers | {"Content-Type": "text/plain"})
    assert 400 <= r.status_code < 500


def test_unknown_routes_and_methods_use_the_error_body(auth_server: str):
    r = httpx.get(auth_server + "/v1/rl/no-such-thing", headers=AUTH)
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found"
    r = httpx.delete(auth_server + "/v1/rl/model-resources", headers=AUTH)
    assert r.status_code == 405 and "error" in r.json()


def test_regression_huge_lora_rank_is_a_400(auth_server: str, world: World):
    """Found by probing the boundaries of what the fuzzer generates for session creation: a rank of
    10**12 was a 500 (torch could not allocate the adapter) and a rank of 10**6 took the whole server
    down (out of memory). The cap is supported-models' ``max_rank``."""
    with httpx.Client(base_url=auth_server, headers=AUTH, timeout=30) as http:
        lora = world.spawn_resources[0]
        max_rank = http.get("/v1/rl/supported-models").json()["data"][0]["compute_configs"][0]["trainer_config"][
            "lora"
        ]["max_rank"]
        for rank in (max_rank + 1, 10**6, 10**12, 2**63 - 1):
            r = http.post("/v1/rl/training-sessions", json={"model_resources_id": lora, "lora_config": {"rank": rank}})
            assert r.status_code == 400, r.text
            assert r.json()["error"]["param"] == "lora_config.rank"
        ok = _check(
            http.post("/v1/rl/training-sessions", json={"model_resources_id": lora, "lora_config": {"rank": max_rank}})
        )
        assert ok["lora_config"]["rank"] == max_rank
        _check(http.post(f"/v1/rl/training-sessions/{ok['id']}/stop"))


def test_regression_huge_extend_expiry_is_a_400(auth_server: str, world: World):
    """Found by review: ``seconds`` past datetime's range was an OverflowError, a 500. The SDK
    documents 60..86400."""
    with httpx.Client(base_url=auth_server, headers=AUTH, timeout=30) as http:
        url = f"/v1/rl/model-resources/{world.resource}/extend-expiry"
        for seconds in (10**12, 2**63, 86401, 59, 0, -1):
            r = http.post(url, json={"seconds": seconds})
            assert r.status_code == 400, r.text
            assert r.json()["error"]["param"] == "seconds"
        assert _check(http.post(url, json={"seconds": 86400}))["expires_at"]


def test_regression_huge_lora_alpha_is_a_400(auth_server: str, world: World):
    """Found by review: an alpha past float range (``alpha / rank`` overflows) was a 500. LoRA rank
    and alpha are int32 on the wire (plain JSON numbers in the SDK's types)."""
    with httpx.Client(base_url=auth_server, headers=AUTH, timeout=30) as http:
        for alpha in (2**31, 10**400):
            body = f'{{"model_resources_id": "{world.spawn_resources[0]}", "lora_config": {{"alpha": {alpha}}}}}'
            r = http.post("/v1/rl/training-sessions", content=body, headers={"Content-Type": "application/json"})
            assert r.status_code == 400, r.text
            assert r.json()["error"]["param"] == "lora_config.alpha"

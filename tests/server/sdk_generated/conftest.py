"""The official SDK's own generated tests for the RL resources, run against a real ``rlnb serve``.

The five ``test_*.py`` files here are together 3.1.1's ``tests/api_resources/post_training`` tests (from
its sdist), with their assertions unchanged; they were written for a mock server that accepts any id, so
every placeholder is replaced by a live object of the server (``Live``). The replacements, all of them:

* ids: ``"model_resources_id"``, ``"session_id"``, ``"id"`` (a checkpoint), ``"operation_id"`` → the live
  resource, session, inference checkpoint and one finished operation of each kind; an id a test stops
  (model-resources / sessions ``stop``) or a resource a test starts a session on → a fresh one of its own;
  ``resume_from_checkpoint_id`` → a training checkpoint of a compatible LoRA session (rank 32, alpha 64).
* values the API itself rejects: ``base_model="Qwen/Qwen3.5-4B"`` → ``"rlnb/tiny"``; ``limit=0`` → ``1``
  (the API's bounds are 1..100); ``after="after"`` → a live id (a cursor is an object's id);
  ``idempotency_key="Idempotency-Key"`` (one key for every kind would make every later kind a 409) → a fresh
  key per call; ``optimizer_config={"adam": {}, "muon": {...}}`` on create and estimate-cost (one body) → Muon
  only (a resource has exactly one optimizer); ``sparse_crow_indices`` / ``sparse_col_indices`` → dropped
  (reserved, rejected); a GRPO ``loss`` carrying every loss's params object → only ``grpo_params`` (params of
  another loss type are a 400, not silently ignored); the ``loss_fn_inputs`` key ``"foo"`` → ``"target_tokens"``
  (an input the operation does not read is a 400 naming it, not silently ignored); ``base_weights_ref`` on create
  and estimate-cost → dropped (rlnb serve has no model registry: a 400, not silently the base model's own weights).
* the async tests run on anyio's pytest plugin (the SDK uses pytest-asyncio); their ``aiohttp`` variant
  is left out (it needs the ``together[aiohttp]`` extra).

``tests/server/sdk_generated/utils.py`` is the sdist's ``assert_matches_type``, unchanged.
"""

import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

together = pytest.importorskip("together")

from together import AsyncTogether, Together  # noqa: E402

from rlnb import wire  # noqa: E402
from tests.support.server import running_server  # noqa: E402

TERMINAL = ("TRAINING_OPERATION_STATUS_COMPLETED", "TRAINING_OPERATION_STATUS_FAILED")
KINDS = (
    "forward_backward", "custom_forward_backward", "optim_step", "weights_sync", "sample",
    "inference_checkpoint", "training_checkpoint",
)  # fmt: skip
LORA = {"rank": 32, "alpha": 64}
"""The generated create-with-all-params test resumes with this adapter shape."""


def _ce_sample(seq: list[int]) -> dict[str, Any]:
    return {
        "model_input": {"chunks": [{"encoded_text": {"tokens": seq[:-1]}}]},
        "loss_fn_inputs": {
            "target_tokens": {"data": seq[1:], "dtype": "int64"},
            "weights": {"data": [1.0] * (len(seq) - 1), "dtype": "float32"},
        },
    }


class Live:
    """Real objects on the server: a LoRA resource and session, one finished operation of each kind, an
    inference and a training checkpoint; fresh resources and sessions for the tests that stop them."""

    def __init__(self, url: str):
        self.api = Together(base_url=url, api_key="generated-tests", max_retries=0)
        self._resources: list[str] = []
        self.model_resources_id = self.fresh_resource_id()
        pt = self.api.post_training
        self.session_id = self.running(
            pt.sessions.create(model_resources_id=self.model_resources_id, lora_config=LORA).id
        )
        sample = _ce_sample([1, 2, 3, 4])
        ops = pt.operations
        submitted = {
            "forward_backward": ops.forward_backward(
                self.session_id, samples=[sample], loss={"type": "LOSS_TYPE_CROSS_ENTROPY"}, idempotency_key=self.key()
            ),
            "custom_forward_backward": ops.custom_forward_backward(
                self.session_id, samples=[sample], gradients=[{"data": [0.1, 0.1, 0.1]}], idempotency_key=self.key()
            ),
            "optim_step": ops.optim_step(self.session_id, idempotency_key=self.key()),
            "weights_sync": ops.weights_sync(
                self.session_id, weight_sync_type="WEIGHT_SYNC_TYPE_SYNCHRONOUS", idempotency_key=self.key()
            ),
            "sample": ops.sample(
                self.session_id,
                model_inputs=[{"chunks": [{"encoded_text": {"tokens": [1, 2]}}]}],
                sampling_params={"max_tokens": 2},
                idempotency_key=self.key(),
            ),
            "inference_checkpoint": ops.create_inference_checkpoint(self.session_id, idempotency_key=self.key()),
            "training_checkpoint": ops.create_training_checkpoint(self.session_id, idempotency_key=self.key()),
        }
        self.ops = {kind: self._finished(kind, op).id for kind, op in submitted.items()}
        infer = ops.retrieve_inference_checkpoint(self.ops["inference_checkpoint"], session_id=self.session_id)
        train = ops.retrieve_training_checkpoint(self.ops["training_checkpoint"], session_id=self.session_id)
        self.inference_checkpoint_id = infer.output.checkpoint.id
        self.training_checkpoint_id = train.output.checkpoint.id

    def _finished(self, kind: str, op: Any) -> Any:
        retrieve = getattr(self.api.post_training.operations, f"retrieve_{kind}")
        deadline = time.monotonic() + 60
        while op.status not in TERMINAL:
            assert time.monotonic() < deadline, f"{kind} {op.id} still {op.status}"
            time.sleep(0.01)
            op = retrieve(op.id, session_id=self.session_id)
        assert op.status == "TRAINING_OPERATION_STATUS_COMPLETED", (kind, op.error)
        return op

    @staticmethod
    def key() -> str:
        """A fresh Idempotency-Key."""
        return str(uuid.uuid4())

    def op(self, kind: str) -> str:
        """The id of the live session's finished operation of ``kind`` (``forward_backward``, ...)."""
        return self.ops[kind]

    def fresh_resource_id(self) -> str:
        """A new LoRA resource, stopped (with its sessions) when the tests end."""
        rid = self.api.post_training.model_resources.create(base_model="rlnb/tiny", lora_enabled=True).id
        self._resources.append(rid)
        return rid

    def fresh_session_id(self) -> str:
        return self.running(self.api.post_training.sessions.create(model_resources_id=self.fresh_resource_id()).id)

    def running(self, session_id: str) -> str:
        """``session_id`` once its model is built: a create answers CREATING, as the API's does."""
        deadline = time.monotonic() + 60
        while (s := self.api.post_training.sessions.retrieve(session_id)).status == "TRAINING_SESSION_STATUS_CREATING":
            assert time.monotonic() < deadline, f"session {session_id} still CREATING"
            time.sleep(0.01)
        assert s.status == "TRAINING_SESSION_STATUS_RUNNING", s.error
        return session_id

    def close(self) -> None:
        for rid in self._resources:  # a stop of one a test stopped is a 400, as on the API
            if self.api.post_training.model_resources.retrieve(rid).status not in wire.RESOURCE_ENDED:
                self.api.post_training.model_resources.stop(rid, force=True)
        self.api.close()


@pytest.fixture(scope="session")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with running_server(tmp_dir=str(tmp_path_factory.mktemp("generated"))) as url:
        objects = Live(url)
        yield objects
        objects.close()


@pytest.fixture(scope="session")
def client(request: pytest.FixtureRequest, live: Live) -> Iterator[Together]:
    strict = getattr(request, "param", True)
    with Together(base_url=str(live.api.base_url), api_key="generated-tests", _strict_response_validation=strict) as c:
        yield c


@pytest.fixture
async def async_client(request: pytest.FixtureRequest, live: Live) -> AsyncIterator[AsyncTogether]:
    strict = getattr(request, "param", True)
    async with AsyncTogether(
        base_url=str(live.api.base_url), api_key="generated-tests", _strict_response_validation=strict
    ) as c:
        yield c


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The generated async tests run on anyio (as the SDK's conftest marks them for pytest-asyncio)."""
    for item in items:
        if "sdk_generated" in str(item.path) and "async_client" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.anyio)

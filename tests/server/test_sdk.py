"""The official ``together`` SDK (3.1.1) runs its whole RL loop against ``rlnb serve``.

The low-level client is built with ``_strict_response_validation=True``, so every response body is
validated against the SDK's own generated types: a field, enum or type the server gets wrong fails
here. The high-level helpers (``ModelResourcesClient``, ``SessionClient``) run with tiny poll
intervals. Everything talks to a real ``rlnb serve`` subprocess on 127.0.0.1.
"""

import logging
import random
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

together = pytest.importorskip("together")

from together import Together  # noqa: E402
from together._exceptions import (  # noqa: E402
    AuthenticationError,
    BadRequestError,
    ConflictError,
    NotFoundError,
    RateLimitError,
)
from together.post_training import ModelResourcesClient, SessionClient, download_checkpoint  # noqa: E402

from rlnb import samples  # noqa: E402
from tests.support.server import running_server  # noqa: E402

# slow: the official SDK against rlnb serve in a subprocess; the timeout: the SDK retries 5xx with backoff,
# so a server bug must not hang the run
pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

TERMINAL = ("TRAINING_OPERATION_STATUS_COMPLETED", "TRAINING_OPERATION_STATUS_FAILED")
VOCAB = 256  # the built-in models are byte-level
POLL = 0.01


@pytest.fixture(autouse=True)
def _sdk_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No ambient Together configuration may leak in (and nothing may reach api.together.ai)."""
    for var in ("TOGETHER_API_KEY", "TOGETHER_BASE_URL", "TOGETHER_PROJECT_ID", "TOGETHER_CUSTOM_HEADERS"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def client(server: str) -> Iterator[Together]:
    # base_url is the server root: the SDK's paths already start with /v1/rl/...
    c = Together(api_key="any-key", base_url=server, max_retries=0, _strict_response_validation=True)
    yield c
    c.close()


def tokens(*ids: int) -> dict[str, Any]:
    return {"chunks": [{"encoded_text": {"tokens": list(ids)}}]}


def ce_sample(seq: list[int]) -> dict[str, Any]:
    """A cross-entropy sample: ``model_input = seq[:-1]``, targets ``seq[1:]``."""
    n = len(seq) - 1
    return {
        "model_input": tokens(*seq[:-1]),
        "loss_fn_inputs": {
            "target_tokens": {"data": seq[1:], "dtype": "int64"},
            "weights": {"data": [1.0] * n, "dtype": "float32"},
        },
    }


def grpo_sample(seq: list[int], advantage: float) -> dict[str, Any]:
    n = len(seq) - 1
    return {
        "model_input": tokens(*seq[:-1]),
        "loss_fn_inputs": {
            "target_tokens": {"data": seq[1:], "dtype": "int64"},
            "logprobs": {"data": [-5.5] * n, "dtype": "float32"},
            "advantages": {"data": [advantage] * n, "dtype": "float32"},
            "mask": {"data": [1.0] * n, "dtype": "float32"},
        },
    }


def wait(retrieve: Callable[..., Any], op: Any, session_id: str, timeout: float = 60.0) -> Any:
    """Poll a low-level ``retrieve_<kind>`` until the operation is terminal."""
    deadline = time.monotonic() + timeout
    while op.status not in TERMINAL:
        assert time.monotonic() < deadline, f"operation {op.id} still {op.status}"
        time.sleep(POLL)
        op = retrieve(op.id, session_id=session_id)
    return op


def completed(retrieve: Callable[..., Any], op: Any, session_id: str) -> Any:
    op = wait(retrieve, op, session_id)
    assert op.status == "TRAINING_OPERATION_STATUS_COMPLETED", op.error
    assert op.error is None
    return op.output


def key() -> str:
    return str(uuid.uuid4())


def running(pt: Any, s: Any, timeout: float = 60.0) -> Any:
    """The session once its model is built: a create answers CREATING, as the API's does; poll until RUNNING."""
    deadline = time.monotonic() + timeout
    while s.status == "TRAINING_SESSION_STATUS_CREATING":
        assert time.monotonic() < deadline, f"session {s.id} still CREATING"
        time.sleep(POLL)
        s = pt.sessions.retrieve(s.id)
    assert s.status == "TRAINING_SESSION_STATUS_RUNNING", s.error
    return s


# -- the low-level generated client ---------------------------------------------------------------


def test_supported_models_and_cost(client: Together):
    models = client.post_training.supported_models.get()
    names = [m.base_model for m in models.data]
    assert "rlnb/tiny" in names
    tiny = models.data[names.index("rlnb/tiny")]
    cfg = tiny.compute_configs[0]
    assert cfg.gpu_type == tiny.default_gpu_type
    assert cfg.generator_config.context_length == 256
    assert cfg.generator_config.sampling_defaults.max_tokens > 0
    assert cfg.trainer_config.full.max_seq_length == 256
    cost = client.post_training.model_resources.estimate_cost(base_model="rlnb/tiny", lora_enabled=True)
    assert cost.currency == "USD" and cost.price_per_hour == 0.0
    with pytest.raises(BadRequestError) as exc:
        client.post_training.model_resources.estimate_cost(base_model="no/such-model")
    assert exc.value.body["error"]["param"] == "base_model"


def test_low_level_adam_loop(client: Together):
    pt = client.post_training
    ops = pt.operations

    mr = pt.model_resources.create(
        base_model="rlnb/tiny",
        lora_enabled=False,
        optimizer_config={"adam": {}},
        compute_config={"num_generator_replicas": 1},
        inactive_timeout=600,
    )
    assert mr.status == "MODEL_RESOURCES_STATUS_READY"
    assert mr.optimizer_config.adam is not None and mr.optimizer_config.muon is None
    assert mr.compute_config.num_generator_replicas == 1 and mr.inactive_timeout == 600
    assert pt.model_resources.retrieve(mr.id).id == mr.id
    assert mr.id in [r.id for r in pt.model_resources.list(status=["MODEL_RESOURCES_STATUS_READY"]).data]
    assert pt.model_resources.extend_expiry(mr.id, seconds=120).expires_at >= mr.expires_at

    s = pt.sessions.create(
        model_resources_id=mr.id, display_name="sdk-adam", metadata={"wandb": {"project": "rlnb-tests"}}
    )
    assert s.status == "TRAINING_SESSION_STATUS_CREATING"
    s = running(pt, s)
    assert s.resources_id == mr.id and s.base_model == "rlnb/tiny"
    assert int(s.step) == 0 and s.display_name == "sdk-adam" and s.metadata.wandb.project == "rlnb-tests"
    assert int(s.policy_state.trainer_step) == 0

    # forward-backward, cross-entropy, with per-token logprobs back
    seq = [10, 11, 12, 13, 14, 15]
    op = ops.forward_backward(
        s.id,
        loss={"type": "LOSS_TYPE_CROSS_ENTROPY", "cross_entropy_params": {}},
        samples=[ce_sample(seq), ce_sample([20, 21, 22, 23])],
        return_loss_fn_outputs=True,
        idempotency_key=key(),
    )
    assert op.status in ("TRAINING_OPERATION_STATUS_PENDING", "TRAINING_OPERATION_STATUS_RUNNING", *TERMINAL)
    fb = completed(ops.retrieve_forward_backward, op, s.id)
    assert fb.loss > 0
    lps = [o.tensors["logprobs"].data for o in fb.loss_fn_outputs]
    assert [len(x) for x in lps] == [5, 3]
    assert all(x < 0 for row in lps for x in row)
    # a plain cross-entropy sum over trained tokens: the loss is minus the logprob sum
    assert fb.loss == pytest.approx(-sum(sum(row) for row in lps), rel=1e-4)

    # forward-backward, GRPO
    op = ops.forward_backward(
        s.id,
        loss={"type": "LOSS_TYPE_GRPO", "grpo_params": {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}},
        samples=[grpo_sample(seq, 1.0), grpo_sample([30, 31, 32, 33], -1.0)],
        idempotency_key=key(),
    )
    grpo = completed(ops.retrieve_forward_backward, op, s.id)
    assert isinstance(grpo.loss, float)

    # a forward-only pass must not touch the gradients or the step
    op = ops.forward_backward(
        s.id,
        loss={"type": "LOSS_TYPE_CROSS_ENTROPY"},
        samples=[ce_sample(seq)],
        forward_only=True,
        idempotency_key=key(),
    )
    assert completed(ops.retrieve_forward_backward, op, s.id).loss > 0

    # optim-step with adam_params
    op = ops.optim_step(
        s.id,
        adam_params={
            "learning_rate": 1e-2,
            "beta1": 0.9,
            "beta2": 0.95,
            "eps": 1e-8,
            "weight_decay": 0.0,
            "grad_clip_norm": 1.0,
        },
        idempotency_key=key(),
    )
    step = completed(ops.retrieve_optim_step, op, s.id)
    assert int(step.step) == 1
    # the optim-step's retrieve is stable once terminal
    again = ops.retrieve_optim_step(op.id, session_id=s.id)
    assert again.id == op.id and int(again.output.step) == 1

    # sampling before weights-sync still sees version 0; after it, version 1
    op = ops.sample(s.id, model_inputs=[tokens(1, 2, 3)], sampling_params={"max_tokens": 2}, idempotency_key=key())
    assert completed(ops.retrieve_sample, op, s.id).results[0].policy_segments[0].version == 0
    op = ops.weights_sync(s.id, weight_sync_type="WEIGHT_SYNC_TYPE_SYNCHRONOUS", idempotency_key=key())
    assert int(completed(ops.retrieve_weights_sync, op, s.id).weights_version) == 1

    sampling = {"max_tokens": 5, "temperature": 1.0, "top_p": 0.95, "top_k": 50, "seed": 7}
    op = ops.sample(
        s.id,
        model_inputs=[tokens(1, 2, 3), tokens(40, 41)],
        num_samples=3,
        sampling_params=sampling,
        prompt_logprobs=True,
        topk_prompt_logprobs=2,
        idempotency_key=key(),
    )
    out = completed(ops.retrieve_sample, op, s.id)
    assert len(out.results) == 2
    for prompt_len, result in zip((3, 2), out.results, strict=True):
        assert [(p.start_token, p.version) for p in result.policy_segments] == [(0, 1)]
        assert len(result.sequences) == 3
        for seq_out in result.sequences:
            toks = [int(t) for t in seq_out.tokens]
            assert len(toks) == 5 and all(0 <= t < VOCAB for t in toks)
            assert seq_out.stop_reason == "STOP_REASON_LENGTH"
            assert len(seq_out.logprobs) == 5 and all(lp <= 0 for lp in seq_out.logprobs)
        assert len(result.prompt_logprobs) == prompt_len
        assert len(result.topk_prompt_logprobs) == prompt_len
        assert all(len(t.token_ids) == 2 for t in result.topk_prompt_logprobs[1:])
    # same seed, same prompt, same weights -> same tokens
    op = ops.sample(
        s.id, model_inputs=[tokens(1, 2, 3)], num_samples=3, sampling_params=sampling, idempotency_key=key()
    )
    again_out = completed(ops.retrieve_sample, op, s.id)
    assert [q.tokens for q in again_out.results[0].sequences] == [q.tokens for q in out.results[0].sequences]

    # training checkpoint
    op = ops.create_training_checkpoint(s.id, idempotency_key=key())
    ckpt = completed(ops.retrieve_training_checkpoint, op, s.id).checkpoint
    assert ckpt.id and int(ckpt.step) == 1
    info = pt.checkpoints.retrieve(ckpt.id)
    assert info.type == "CHECKPOINT_TYPE_TRAINING" and info.session_id == s.id and int(info.step) == 1
    assert ckpt.id in [c.id for c in pt.checkpoints.list(session_id=s.id).data]
    with pytest.raises(BadRequestError):  # only inference checkpoints download
        pt.checkpoints.download(ckpt.id, variant="CHECKPOINT_VARIANT_MERGED")

    # session state as the SDK sees it
    got = pt.sessions.retrieve(s.id)
    assert int(got.step) == 1
    assert int(got.policy_state.trainer_step) == 1
    assert int(got.policy_state.applied_weights_version) == 1
    assert int(got.policy_state.target_weights_version) == 1
    assert got.policy_state.pending_publish is False
    assert [c.id for c in got.training_checkpoints] == [ckpt.id]
    listed = pt.sessions.list(model_resources_id=mr.id, limit=5)
    assert [x.id for x in listed.data] == [s.id]
    assert s.id in [x.id for x in pt.sessions.list(status=["TRAINING_SESSION_STATUS_RUNNING"]).data]
    assert pt.sessions.update(s.id, display_name="renamed").display_name == "renamed"

    # a full-weight resource holds one session
    with pytest.raises(RateLimitError):
        pt.sessions.create(model_resources_id=mr.id)
    # and will not stop under an active session unless forced
    with pytest.raises(ConflictError):
        pt.model_resources.stop(mr.id)

    # stop the session, then the resource
    assert pt.sessions.stop(s.id).status == "TRAINING_SESSION_STATUS_STOPPED"
    late = ops.optim_step(s.id, adam_params={"learning_rate": 1e-3}, idempotency_key=key())
    late = wait(ops.retrieve_optim_step, late, s.id)
    assert late.status == "TRAINING_OPERATION_STATUS_FAILED"
    assert late.error.code == "TRAINING_OPERATION_ERROR_CODE_SESSION_NOT_ACTIVE"
    assert int(pt.sessions.retrieve(s.id).step) == 1
    stopped = pt.model_resources.stop(mr.id)
    assert stopped.status == "MODEL_RESOURCES_STATUS_STOPPED"
    assert pt.model_resources.retrieve(mr.id).status == "MODEL_RESOURCES_STATUS_STOPPED"


def test_low_level_muon(client: Together):
    pt = client.post_training
    ops = pt.operations
    mr = pt.model_resources.create(
        base_model="rlnb/tiny",
        lora_enabled=False,
        optimizer_config={"muon": {"scaling_strategy": "MUON_SCALING_STRATEGY_MATCH_ADAM"}},
    )
    assert mr.optimizer_config.muon.scaling_strategy == "MUON_SCALING_STRATEGY_MATCH_ADAM"
    assert mr.optimizer_config.adam is None
    s = running(pt, pt.sessions.create(model_resources_id=mr.id))
    try:
        op = ops.forward_backward(
            s.id,
            loss={"type": "LOSS_TYPE_CROSS_ENTROPY"},
            samples=[ce_sample([5, 6, 7, 8, 9])],
            idempotency_key=key(),
        )
        completed(ops.retrieve_forward_backward, op, s.id)
        muon_params = {
            "learning_rate": 0.02,
            "momentum": 0.95,
            "newton_schulz_steps": 5,
            "weight_decay": 0.01,
            "grad_clip_norm": 1.0,
            "adam": {"learning_rate": 3e-4, "beta1": 0.9, "beta2": 0.99, "eps": 1e-8, "weight_decay": 0.0},
        }
        op = ops.optim_step(s.id, muon_params=muon_params, idempotency_key=key())
        out = completed(ops.retrieve_optim_step, op, s.id)
        assert int(out.step) == 1
        # rlnb's metrics extension shows both parameter groups were stepped with the given rates
        metrics = out.to_dict().get("metrics", {})
        assert metrics["learning_rate"] == pytest.approx(0.02)
        assert metrics["adam/learning_rate"] == pytest.approx(3e-4)

        # adam_params on a Muon session: the operation fails INVALID_INPUT, the step stays
        op = ops.optim_step(s.id, adam_params={"learning_rate": 1e-3}, idempotency_key=key())
        bad = wait(ops.retrieve_optim_step, op, s.id)
        assert bad.status == "TRAINING_OPERATION_STATUS_FAILED"
        assert bad.error.code == "TRAINING_OPERATION_ERROR_CODE_INVALID_INPUT"
        # an out-of-range value never becomes an operation: 400 naming the field
        with pytest.raises(BadRequestError) as exc:
            ops.optim_step(s.id, muon_params={"newton_schulz_steps": 0}, idempotency_key=key())
        assert exc.value.body["error"]["param"] == "muon_params.newton_schulz_steps"
        assert int(pt.sessions.retrieve(s.id).step) == 1
    finally:
        assert pt.model_resources.stop(mr.id, force=True).status == "MODEL_RESOURCES_STATUS_STOPPED"
    assert pt.sessions.retrieve(s.id).status == "TRAINING_SESSION_STATUS_STOPPED"


def test_idempotency_key_is_honoured(client: Together):
    pt = client.post_training
    ops = pt.operations
    mr = pt.model_resources.create(base_model="rlnb/tiny", lora_enabled=True)
    s = running(pt, pt.sessions.create(model_resources_id=mr.id, lora_config={"rank": 2}))
    try:
        op = ops.forward_backward(
            s.id, loss={"type": "LOSS_TYPE_CROSS_ENTROPY"}, samples=[ce_sample([1, 2, 3])], idempotency_key=key()
        )
        completed(ops.retrieve_forward_backward, op, s.id)
        k = key()
        first = ops.optim_step(s.id, adam_params={"learning_rate": 1e-3}, idempotency_key=k)
        second = ops.optim_step(s.id, adam_params={"learning_rate": 1e-3}, idempotency_key=k)
        assert second.id == first.id
        completed(ops.retrieve_optim_step, first, s.id)
        third = ops.optim_step(s.id, adam_params={"learning_rate": 1e-3}, idempotency_key=k)
        assert third.id == first.id and third.status == "TRAINING_OPERATION_STATUS_COMPLETED"
        assert int(third.output.step) == 1
        assert int(pt.sessions.retrieve(s.id).step) == 1  # advanced once, not three times
        # the same key for another kind of operation is a conflict, not a silent replay
        with pytest.raises(ConflictError) as exc:
            ops.weights_sync(s.id, weight_sync_type="WEIGHT_SYNC_TYPE_SYNCHRONOUS", idempotency_key=k)
        assert exc.value.body["error"]["param"] == "Idempotency-Key"
        # a fresh key is a fresh operation
        fresh = ops.optim_step(s.id, adam_params={"learning_rate": 1e-3}, idempotency_key=key())
        assert fresh.id != first.id
        assert int(completed(ops.retrieve_optim_step, fresh, s.id).step) == 2
    finally:
        pt.model_resources.stop(mr.id, force=True)


def test_errors_come_back_as_sdk_exceptions(client: Together):
    pt = client.post_training
    with pytest.raises(NotFoundError) as exc:
        pt.sessions.retrieve("sess-does-not-exist")
    err = exc.value.body["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["param"] == "session_id"
    with pytest.raises(NotFoundError):
        pt.model_resources.retrieve("mr-does-not-exist")
    with pytest.raises(NotFoundError):
        pt.operations.retrieve_sample("op-nope", session_id="sess-nope")
    with pytest.raises(NotFoundError):
        pt.checkpoints.retrieve("ckpt-nope")
    with pytest.raises(BadRequestError) as exc:
        pt.model_resources.create(base_model="rlnb/tiny", inactive_timeout=5)
    assert exc.value.body["error"]["param"] == "inactive_timeout"


def test_bearer_token_is_checked(auth_server: str):
    bad = Together(api_key="wrong", base_url=auth_server, max_retries=0)
    with pytest.raises(AuthenticationError) as exc:
        bad.post_training.model_resources.list()
    assert exc.value.body["error"]["type"] == "authentication_error"
    good = Together(api_key="secret-token", base_url=auth_server, max_retries=0, _strict_response_validation=True)
    assert isinstance(good.post_training.model_resources.list().data, list)
    bad.close()
    good.close()


def test_the_key_in_default_headers_too_is_one_key(auth_server: str):
    """The SDK's header merge is case-sensitive: ``default_headers={"authorization": ...}`` is sent besides its own
    ``Authorization``. One key twice is that key (every call was a 400); two keys that differ are a 400 naming it."""
    given = {"authorization": "Bearer secret-token"}
    with Together(api_key="secret-token", base_url=auth_server, max_retries=0, default_headers=given) as c:
        assert isinstance(c.post_training.model_resources.list().data, list)
    with Together(api_key="other-token", base_url=auth_server, max_retries=0, default_headers=given) as c:
        with pytest.raises(BadRequestError) as exc:
            c.post_training.model_resources.list()
        assert exc.value.body["error"]["param"] == "Authorization"
        assert "secret-token" not in str(exc.value.body) and "other-token" not in str(exc.value.body)


def test_resume_with_a_mismatched_lora_config_is_a_400(client: Together):
    """A resume that does not fit the session is the client's error: a 500 would make the SDK retry with
    backoff, hanging ``create_session``."""
    pt = client.post_training
    ops = pt.operations
    mr = pt.model_resources.create(base_model="rlnb/tiny", lora_enabled=True)
    try:
        s = running(pt, pt.sessions.create(model_resources_id=mr.id, lora_config={"rank": 4}))
        op = ops.create_training_checkpoint(s.id, idempotency_key=key())
        ckpt = completed(ops.retrieve_training_checkpoint, op, s.id).checkpoint
        with pytest.raises(BadRequestError) as exc:
            pt.sessions.create(model_resources_id=mr.id, resume_from_checkpoint_id=ckpt.id, lora_config={"rank": 8})
        assert exc.value.body["error"]["param"] == "resume_from_checkpoint_id"
        resumed = running(
            pt, pt.sessions.create(model_resources_id=mr.id, resume_from_checkpoint_id=ckpt.id, lora_config={"rank": 4})
        )
        assert resumed.resume_from_checkpoint_id == ckpt.id
        # a full-weight resource cannot load a LoRA checkpoint either
        full = pt.model_resources.create(base_model="rlnb/tiny", lora_enabled=False)
        with pytest.raises(BadRequestError):
            pt.sessions.create(model_resources_id=full.id, resume_from_checkpoint_id=ckpt.id)
        pt.model_resources.stop(full.id, force=True)
    finally:
        pt.model_resources.stop(mr.id, force=True)


# -- the high-level helpers -----------------------------------------------------------------------


def test_high_level_helpers(server: str, tmp_path):
    with ModelResourcesClient.create(
        api_key="any-key",
        base_url=server,
        base_model="rlnb/tiny",
        lora_enabled=True,
        optimizer_config={"adam": {}},
        interval=POLL,
        ready_timeout=30,
    ) as mr:
        assert mr.retrieve().status == "MODEL_RESOURCES_STATUS_READY"
        with mr.create_session(lora_config={"rank": 4, "alpha": 8}, interval=POLL, timeout=30) as session:
            info = session.retrieve()
            assert info.status == "TRAINING_SESSION_STATUS_RUNNING"
            assert info.lora_config.rank == 4
            seq = [50, 51, 52, 53, 54, 55, 56]
            sample = ce_sample(seq)
            # short loss names are the SDK's own convenience ("cross_entropy" -> LOSS_TYPE_CROSS_ENTROPY)
            first = session.trainer.forward_backward(samples=[sample], loss={"type": "cross_entropy"}, interval=POLL)
            assert first.loss > 0
            opt = session.trainer.optim_step(adam_params={"learning_rate": 5e-2}, interval=POLL)
            assert int(opt.step) == 1
            synced = session.trainer.weights_sync(interval=POLL)
            assert int(synced.weights_version) == 1
            scored = session.trainer.forward(samples=[sample], loss={"type": "cross_entropy"}, interval=POLL)
            assert scored.loss < first.loss  # one step on this very sequence lowers its loss
            assert len(scored.loss_fn_outputs[0].tensors["logprobs"].data) == len(seq) - 1

            result = session.generator.sample(tokens(1, 2, 3), 2, {"max_tokens": 4, "seed": 3}, interval=POLL)
            assert [(p.start_token, p.version) for p in result.policy_segments] == [(0, 1)]
            assert len(result.sequences) == 2
            assert all(len(q.tokens) == 4 and len(q.logprobs) == 4 for q in result.sequences)
            lps = session.generator.compute_logprobs(tokens(1, 2, 3, 4), interval=POLL)
            assert len(lps) == 4 and all(lp <= 0 for lp in lps[1:])

            ckpt = session.create_training_checkpoint(interval=POLL)
            assert int(ckpt.step) == 1
            infer = session.create_inference_checkpoint(interval=POLL)
            assert int(infer.step) == 1
            assert [c.id for c in session.retrieve().training_checkpoints] == [ckpt.id]
            session_id = session.session_id
        # leaving the block stopped the session
        with Together(api_key="any-key", base_url=server, max_retries=0) as c:
            assert c.post_training.sessions.retrieve(session_id).status == "TRAINING_SESSION_STATUS_STOPPED"
            files = download_checkpoint(c, infer.id, variant="CHECKPOINT_VARIANT_ADAPTER", output_dir=tmp_path)
            names = sorted(f.name for f in files)
            assert names == ["README.md", "adapter_config.json", "adapter_model.safetensors"]
            assert all(f.stat().st_size > 0 for f in files)

        # a new session resumes from the training checkpoint with its step
        lora = {"rank": 4, "alpha": 8}  # the checkpoint's adapter shape
        with mr.create_session(
            resume_from_checkpoint_id=ckpt.id, lora_config=lora, interval=POLL, timeout=30
        ) as resumed:
            got = resumed.retrieve()
            assert got.resume_from_checkpoint_id == ckpt.id and int(got.step) == 1
            resumed.trainer.forward_backward(samples=[sample], loss={"type": "cross_entropy"}, interval=POLL)
            assert int(resumed.trainer.optim_step(adam_params={"learning_rate": 1e-3}, interval=POLL).step) == 2
        resource_id = mr.model_resources_id
    with Together(api_key="any-key", base_url=server, max_retries=0) as c:
        assert c.post_training.model_resources.retrieve(resource_id).status == "MODEL_RESOURCES_STATUS_STOPPED"


def test_high_level_muon_session(server: str):
    with (
        ModelResourcesClient.create(
            base_url=server,
            api_key="any-key",
            base_model="rlnb/tiny",
            lora_enabled=False,
            optimizer_config={"muon": {"scaling_strategy": "MUON_SCALING_STRATEGY_ORIGINAL"}},
            interval=POLL,
        ) as mr,
        mr.create_session(interval=POLL) as session,
    ):
        session.trainer.forward_backward(
            samples=[ce_sample([7, 8, 9, 10])], loss={"type": "LOSS_TYPE_CROSS_ENTROPY"}, interval=POLL
        )
        out = session.trainer.optim_step(
            muon_params={"learning_rate": 0.02, "momentum": 0.9, "adam": {"learning_rate": 1e-3}}, interval=POLL
        )
        assert int(out.step) == 1
        assert int(session.retrieve().policy_state.trainer_step) == 1


def grpo_batch(n: int) -> list[dict[str, Any]]:
    """``n`` GRPO samples of 64 tokens with full-precision sampler logprobs: 256 of them are ~0.9 MB of JSON."""
    rng = random.Random(0)
    out = []
    for _ in range(n):
        prompt, completion = [rng.randrange(256) for _ in range(8)], [rng.randrange(256) for _ in range(57)]
        logprobs = [rng.uniform(-6, -0.1) for _ in completion]
        out.append(samples.policy(prompt, completion, logprobs, rng.gauss(0, 1)).to_json_dict())
    return out


def test_bodies_over_half_a_mebibyte_use_the_payload_side_channel(server: str, monkeypatch: pytest.MonkeyPatch):
    """The SDK's helper uploads a 256-sample GRPO batch and submits an 8-token stand-in; the low-level call
    sends the same batch inline to a session with the same base weights: the losses are equal."""
    from together.post_training import _payloads

    uploads: list[int] = []
    real_upload = _payloads._upload_payload

    async def counted(client: Any, *, session_id: str, payload: bytes) -> str:
        uploads.append(len(payload))
        return await real_upload(client, session_id=session_id, payload=payload)

    monkeypatch.setattr(_payloads, "_upload_payload", counted)
    batch = grpo_batch(256)
    loss = {"type": "LOSS_TYPE_GRPO"}
    with Together(api_key="any-key", base_url=server, max_retries=0) as c:
        pt = c.post_training
        sessions = []
        for _ in range(2):
            mr = pt.model_resources.create(base_model="rlnb/tiny", lora_enabled=False)
            sessions.append(running(pt, pt.sessions.create(model_resources_id=mr.id)).id)
        op = pt.operations.forward_backward(
            sessions[0], loss=loss, samples=batch, forward_only=True, idempotency_key=key()
        )  # the generated low-level method always sends the body inline
        inline = completed(pt.operations.retrieve_forward_backward, op, sessions[0])
    with SessionClient.attach(session_id=sessions[1], api_key="any-key", base_url=server) as session:
        via = session.trainer.forward(samples=batch, loss={"type": "grpo"}, return_loss_fn_outputs=False, interval=POLL)
    assert len(uploads) == 1 and uploads[0] > 512 * 1024
    assert via.loss == pytest.approx(inline.loss, rel=1e-6)
    assert via.metrics["loss/tokens"] == inline.metrics["loss/tokens"] == 256 * 57


def test_large_results_are_resolved_by_the_sdk(tmp_path):
    """With results offloaded (as the service may), the SDK's helpers fetch them through download-url."""
    with (
        running_server("--offload-results-over", "2000", tmp_dir=str(tmp_path)) as url,
        ModelResourcesClient.create(api_key="k", base_url=url, base_model="rlnb/tiny", interval=POLL) as mr,
        mr.create_session(interval=POLL) as session,
    ):
        seq = list(range(30, 60))
        scored = session.trainer.forward(samples=[ce_sample(seq)] * 8, loss={"type": "cross_entropy"}, interval=POLL)
        assert len(scored.loss_fn_outputs) == 8 and len(scored.loss_fn_outputs[0].tensors["logprobs"].data) == 29
        out = session.generator.sample(tokens(1, 2, 3), 16, {"max_tokens": 16, "seed": 3}, interval=POLL)
        assert len(out.sequences) == 16 and all(len(q.tokens) == 16 for q in out.sequences)


def test_sdk_retries_are_exactly_once(tmp_path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture):
    """A server that loses a share of its answers *after acting* (``--fail-rate``): the SDK retries
    with the same Idempotency-Key, and every optimizer step still happens exactly once."""
    import together._base_client as base_client

    monkeypatch.setattr(base_client, "INITIAL_RETRY_DELAY", 0.01)  # keep the SDK's backoff short
    monkeypatch.setattr(base_client, "MAX_RETRY_DELAY", 0.05)
    caplog.set_level(logging.INFO, logger="together")  # the SDK logs each retry: "Retrying request to <path> ..."

    def lost_optim_steps() -> int:  # retried POSTs (a poll's path ends in the operation id)
        return sum("/operations/optim-step in " in r.getMessage() for r in caplog.records)

    with running_server("--fail-rate", "0.25", tmp_dir=str(tmp_path)) as url:
        c = Together(api_key="k", base_url=url, max_retries=20)
        mr = c.post_training.model_resources.create(base_model="rlnb/tiny", lora_enabled=True)  # room for retries
        with SessionClient.create(model_resources_id=mr.id, api_key="k", base_url=url, interval=POLL) as session:
            steps = 0
            while steps < 3 or (lost_optim_steps() == 0 and steps < 40):
                session.trainer.forward_backward(
                    samples=[ce_sample([1, 2, 3, 4])], loss={"type": "cross_entropy"}, interval=POLL
                )
                out = session.trainer.optim_step(adam_params={"learning_rate": 1e-3}, interval=POLL)
                steps += 1
                assert int(out.step) == steps
            assert int(session.retrieve().step) == steps
        try:  # a lost answer's retry finds it stopped: a 400, as the API answers (ModelResourcesClient.stop's way)
            c.post_training.model_resources.stop(mr.id, force=True)
        except BadRequestError:
            assert c.post_training.model_resources.retrieve(mr.id).status == "MODEL_RESOURCES_STATUS_STOPPED"
        c.close()
    assert lost_optim_steps() > 0, "no optim-step answer was lost: the test proved nothing"


def test_past_max_pending_operations_the_sdk_raises_rate_limit_error(tmp_path):
    """A session's queue at ``max_pending_operations`` is a 429 with ``Retry-After``, which the SDK retries, then
    raises as ``RateLimitError`` with the server's message."""
    with running_server("--op-delay", "30", "--limit", "max_pending_operations=1", tmp_dir=str(tmp_path)) as url:
        pt = Together(api_key="k", base_url=url, max_retries=1, _strict_response_validation=True).post_training
        s = running(pt, pt.sessions.create(model_resources_id=pt.model_resources.create(base_model="rlnb/tiny").id))
        pt.operations.optim_step(s.id, idempotency_key=key())  # 30 s of simulated compute: it holds the one place
        started = time.monotonic()
        with pytest.raises(RateLimitError, match=r"the limit is 1 \(max_pending_operations\)") as refused:
            pt.operations.optim_step(s.id, idempotency_key=key())
        assert refused.value.response.headers["retry-after"] == "1" and time.monotonic() - started >= 1  # it waited
        pt.sessions.stop(s.id)

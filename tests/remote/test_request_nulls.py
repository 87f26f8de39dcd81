"""Request bodies hold only what the caller gave: an optional field left unset is absent, never ``null`` (the
reference's optional fields, such as ``SamplingParams``' and ``forward_only``, default when absent; a service that
reads ``null`` as a value would refuse or misread it)."""

import json

import httpx
import pytest

import rlnb
from rlnb.tasks import pieces
from tests.support.fake_api import BASE, FAST_POLL, KEY, FakeAPI

SAMPLE = {
    "model_input": {"chunks": [{"encoded_text": {"tokens": [1, 2]}}]},
    "loss_fn_inputs": {
        "target_tokens": {"data": [2, 3], "dtype": "int64"},
        "weights": {"data": [1.0, 1.0], "dtype": "float32"},
    },
}


class _SamplingAPI(FakeAPI):
    """The fake API, its sample operations answered with one sequence per prompt, its checkpoints with one."""

    def submit(self, request, sid, kind, body):
        response = super().submit(request, sid, kind, body)
        if kind == "sample":
            seq = {"tokens": [5], "stop_reason": rlnb.wire.STOP_REASON_LENGTH}
            result = {"policy_segments": [], "sequences": [seq] * (body.get("num_samples") or 1)}
            self.ops[response.json()["id"]]["output"] = {"results": [result] * len(body["model_inputs"])}
        if kind.endswith("-checkpoint"):
            checkpoint = {"id": f"ckpt-{kind}", "step": "0", "created_at": "2026-01-01T00:00:00Z"}
            self.ops[response.json()["id"]]["output"] = {"checkpoint": checkpoint}
        return response


def _nulls(value, where=""):
    """The paths of every ``null`` in a decoded JSON ``value``."""
    if value is None:
        return [where or "<body>"]
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    return [found for k, v in items for found in _nulls(v, f"{where}.{k}")]


def test_no_request_body_sends_null_for_a_field_not_given():
    fake = _SamplingAPI()
    with rlnb.connect(BASE, api_key=KEY, transport=httpx.MockTransport(fake), ready_timeout=5, record=False,
                      **FAST_POLL) as s:  # fmt: skip
        s.sample([[1, 2, 3]]).result(timeout=5)
        s.forward_backward([SAMPLE], "cross_entropy").result(timeout=5)
        s.optim_step(rlnb.AdamParams(learning_rate=1e-4)).result(timeout=5)
        s.weights_sync().result(timeout=5)
        s.save_training_checkpoint().result(timeout=5)
        s.save_inference_checkpoint().result(timeout=5)
    sent = {r.url.path.rsplit("/", 1)[-1]: r.content for r in fake.calls() if r.method in ("POST", "PATCH")}
    kinds = {"sample", "forward-backward", "optim-step", "weights-sync", "training-checkpoint", "inference-checkpoint"}
    assert {"model-resources", "training-sessions", *kinds} <= set(sent)
    nulls = {path: _nulls(json.loads(body)) for path, body in sent.items() if body}
    assert nulls == {path: [] for path in nulls}
    sample = json.loads(sent["sample"])
    assert sample["sampling_params"] == {"temperature": 1.0, "top_p": 1.0, "top_k": -1}
    assert "prompt_logprobs" not in sample and "topk_prompt_logprobs" not in sample
    assert set(json.loads(sent["forward-backward"])) == {"samples", "loss"}


def test_given_values_are_sent():
    fake = _SamplingAPI()
    with rlnb.connect(BASE, api_key=KEY, transport=httpx.MockTransport(fake), ready_timeout=5, record=False,
                      **FAST_POLL) as s:  # fmt: skip
        s.sample([[1, 2, 3]], max_tokens=4, seed=7, prompt_logprobs=True, topk_prompt_logprobs=2).result(timeout=5)
        s.forward_backward([SAMPLE], "cross_entropy", forward_only=True, return_loss_fn_outputs=True).result(timeout=5)
    sent = {r.url.path.rsplit("/", 1)[-1]: json.loads(r.content) for r in fake.calls("POST") if r.content}
    assert sent["sample"]["sampling_params"] == {"max_tokens": 4, "temperature": 1.0, "top_p": 1.0, "top_k": -1,
                                                 "seed": 7}  # fmt: skip
    assert (sent["sample"]["prompt_logprobs"], sent["sample"]["topk_prompt_logprobs"]) == (True, 2)
    assert (sent["forward-backward"]["forward_only"], sent["forward-backward"]["return_loss_fn_outputs"]) == (
        True,
        True,
    )


def _ce(s):
    s.forward_backward([rlnb.samples.cross_entropy([1, 2, 3], [0.0, 1.0, 1.0])], "cross_entropy").result(timeout=5)


def _policy(loss):
    def send(s):
        batch = [rlnb.samples.policy([1, 2], [3, 4], [-0.5, -0.25], 1.0, [-0.4, -0.3])]
        s.forward_backward(batch, loss).result(timeout=5)

    return send


def _dumped(s):
    """A sample with a part of a subclass: copied by its dump, not by its fields' dicts."""

    class Mine(rlnb.wire.TensorData):
        pass

    sample = rlnb.samples.cross_entropy([1, 2, 3])
    sample.loss_fn_inputs["weights"] = Mine(data=[1.0, 0.5], dtype="float32")
    s.forward_backward([sample], "cross_entropy").result(timeout=5)


def _split(s):
    """A split RL step's pieces (``rlnb.tasks.pieces``), each body built before any is sent."""
    batches = [[rlnb.samples.policy([1, 2], [3 + i], [-0.5], 1.0)] for i in range(2)]
    for op in pieces.send(s, batches, "ppo", None):
        op.result(timeout=5)


@pytest.mark.parametrize(
    "send",
    [_ce, _policy("importance_sampling"), _policy("ppo"), _dumped, _split],
    ids=["ce", "is", "ppo", "dumped", "split"],
)
def test_a_forward_backward_of_built_samples_sends_only_the_fields_they_set(send):
    """Samples built by ``rlnb.samples`` (``wire.Sample`` objects, copied at submission): the copy counted every field
    as set, so each tensor went out with ``"shape": null`` and both sparse fields ``null``, each sample with
    ``"routed_experts_key": null``, which R-new says to omit (``shape`` is no nullable field)."""
    fake = _SamplingAPI()
    with rlnb.connect(BASE, api_key=KEY, transport=httpx.MockTransport(fake), ready_timeout=5, record=False,
                      **FAST_POLL) as s:  # fmt: skip
        send(s)
    bodies = [json.loads(r.content) for r in fake.calls("POST") if r.url.path.endswith("/forward-backward")]
    assert bodies and all(_nulls(b) == [] for b in bodies), [_nulls(b) for b in bodies]
    for sample in (one for b in bodies for one in b["samples"]):
        assert set(sample) == {"model_input", "loss_fn_inputs"}
        assert all(set(t) == {"data", "dtype"} for t in sample["loss_fn_inputs"].values()), sample

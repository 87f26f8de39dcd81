"""The remote backend against a real `rlnb serve` subprocess on loopback."""

import math
import random
import time

import httpx
import pytest

import rlnb
from rlnb import samples
from tests.conftest import running_server

pytestmark = pytest.mark.slow  # rlnb serve in a subprocess

BATCH = [samples.cross_entropy(list(b"remote and local agree"))]


def test_full_loop_pipelined(server):
    with rlnb.connect(server, optimizer="muon", base_model="rlnb/tiny", record=False) as s:
        assert s.optimizer == "muon"
        fb = s.forward_backward(BATCH)
        opt = s.optim_step(rlnb.MuonParams(learning_rate=0.02, adam={"learning_rate": 3e-3}))
        sync = s.weights_sync()
        smp = s.sample([list(b"ab")], num_samples=2, max_tokens=4, seed=1)
        assert fb.result(30).loss > 0
        assert opt.result(30).step == 1
        assert sync.result(30).weights_version == 1
        out = smp.result(30).results[0]
        assert out.policy_segments[0].version == 1 and [len(q.tokens) for q in out.sequences] == [4, 4]
        ckpt = s.save_training_checkpoint().result(30).checkpoint
        assert ckpt.step == 1 and s.step == 1
        df = s.history.df
        assert list(df.kind) == ["forward-backward", "optim-step", "weights-sync", "sample", "training-checkpoint"]
        assert (df.status == "TRAINING_OPERATION_STATUS_COMPLETED").all()
        row = df[df.kind == "optim-step"].iloc[0]
        assert row.grad_norm > 0 and row.learning_rate == 0.02  # rlnb serve reports its extension metrics


def test_submissions_pipeline_before_results(server):
    """Several operations are queued on the server before the first finishes."""
    with running_server("--op-delay", "0.1") as url, rlnb.connect(url, base_model="rlnb/tiny", record=False) as s:
        t0 = time.perf_counter()
        ops = [s.forward_backward(BATCH), s.optim_step(), s.forward_backward(BATCH), s.optim_step()]
        submitted = time.perf_counter() - t0
        assert submitted < 0.3 and not ops[-1].done()
        assert [op.result(30).step for op in ops[1::2]] == [1, 2]
        finished = [op.envelope.status for op in ops]
        assert finished == ["TRAINING_OPERATION_STATUS_COMPLETED"] * 4


def test_faults_after_the_server_acted_never_run_an_operation_twice(tmp_path):
    """30% of answers are lost after the server acted; retries reuse the Idempotency-Key."""
    steps = 12
    with running_server("--fail-rate", "0.3", tmp_dir=str(tmp_path)) as url:
        with rlnb.connect(url, base_model="rlnb/tiny", runs_dir=tmp_path, run_id="faulty", max_retries=20) as s:
            for _ in range(steps):
                s.forward_backward(BATCH)
                s.optim_step(rlnb.AdamParams(learning_rate=1e-3))
            s.wait(120)
            assert s.step == steps  # exactly the optim-steps asked for: none ran twice, none was lost
        history = rlnb.History.load(tmp_path / "faulty")
    df = history.df
    assert len(df) == 2 * steps and (df.status == "TRAINING_OPERATION_STATUS_COMPLETED").all()
    assert sorted(df[df.kind == "optim-step"].step) == list(range(1, steps + 1))
    assert df.op_id.is_unique


def test_auth_and_grad_norm_na_against_a_together_like_server(auth_server):
    with pytest.raises(rlnb.AuthenticationError) as info:
        rlnb.connect(auth_server, api_key="wrong-key", base_model="rlnb/tiny", record=False)
    assert "wrong-key" not in str(info.value)
    with rlnb.connect(auth_server, api_key="secret-token", base_model="rlnb/tiny", record=False) as s:
        s.forward_backward(BATCH)
        assert s.optim_step().result(30).step == 1
        assert "secret-token" not in repr(s.backend) and "secret-token" not in str(s.backend.config())


def test_history_says_why_grad_norm_is_missing():
    """Together's optim-step output is only `step`: the column is NaN with a reason, never 0."""
    h = rlnb.History()
    rec = h.new("optim-step", 0, {"learning_rate": 1e-4}, at=time.time())
    h.update(
        rec,
        rlnb.wire.Operation(
            id="x", status="TRAINING_OPERATION_STATUS_COMPLETED", output=rlnb.wire.OptimStepResult(step=1)
        ),
        at=time.time(),
    )
    row = h.df.iloc[0]
    assert math.isnan(row.grad_norm) and "only `step`" in row.na_reason and row.learning_rate == 1e-4


def test_unknown_session_is_404(server):
    with pytest.raises(rlnb.NotFoundError):
        rlnb.connect(server, session_id="sess-does-not-exist", record=False)


class CountingTransport(httpx.HTTPTransport):
    """Counts requests by method and path kind."""

    def __init__(self) -> None:
        super().__init__()
        self.gets = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and "/operations/" in request.url.path:
            self.gets += 1
        return super().handle_request(request)


def test_rlnb_serve_is_long_polled_oldest_first_with_at_most_two_gets_per_operation():
    with running_server("--op-delay", "0.05") as url:
        counting = CountingTransport()
        with rlnb.connect(url, base_model="rlnb/tiny", record=False, transport=counting) as s:
            features = s.backend.client.features
            assert features.long_poll_max_wait == 30.0 and features.in_order
            ops = []
            for _ in range(3):  # wait for each
                ops += [s.forward_backward(BATCH), s.optim_step()]
                ops[-1].result(30)
            for _ in range(5):  # pipelined: every operation queued before the first ends
                ops += [s.forward_backward(BATCH), s.optim_step()]
            s.wait(60)
            assert all(op.status == "TRAINING_OPERATION_STATUS_COMPLETED" for op in ops)
            assert counting.gets <= 2 * len(ops), counting.gets
            df = s.history.df
            assert (df.queue_s >= 0).all() and (df.run_s > 0).all()  # RUNNING was seen for every operation


def test_the_rlnb_client_sends_a_large_batch_through_the_side_channel(server):
    """A 256-sample batch (over 0.5 MiB) gives the loss of the same batch on a local session with the
    same base weights: the server trained on the upload, not on the stand-in."""
    rng = random.Random(0)
    batch = [
        samples.policy([rng.randrange(256) for _ in range(8)], completion, [rng.uniform(-6, -0.1) for _ in completion],
                       rng.gauss(0, 1))
        for completion in ([rng.randrange(256) for _ in range(57)] for _ in range(256))
    ]  # fmt: skip
    with rlnb.connect(server, base_model="rlnb/tiny", record=False) as remote_session:
        uploads = []
        original = remote_session.backend.client.upload_payload
        remote_session.backend.client.upload_payload = lambda sid, data: (
            uploads.append(len(data)) or original(sid, data)
        )
        remote = remote_session.forward_backward(batch, "grpo", forward_only=True).result(60)
    with rlnb.connect("local", model="tiny", seed=0, device="cpu", record=False) as local_session:
        local = local_session.forward_backward(batch, "grpo", forward_only=True).result(60)
    assert len(uploads) == 1 and uploads[0] > rlnb.wire.LARGE_PAYLOAD_BYTES
    assert remote.loss == pytest.approx(local.loss, rel=1e-5)
    assert remote.metrics["loss/tokens"] == local.metrics["loss/tokens"] == 256 * 57

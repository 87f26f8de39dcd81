"""An optim-step's clip factor through the real app (FastAPI TestClient): the one the gradients were multiplied by,
as in process (tests/engine/test_optim.py)."""

from fastapi.testclient import TestClient

from rlnb import samples, wire
from tests.support.server import app_client, new_session, submit, wait


def test_a_clip_norm_float32_cannot_hold_reports_the_zero_it_applied(tmp_path):
    """grad_clip_norm 1e-300 is 0 in float32: the gradients became exactly 0 (the weights moved only by their
    decay) while the metrics said clip_coef 1e-300 / grad_norm."""
    c: TestClient
    with app_client(tmp_path) as c:
        _, sid = new_session(c)
        sample = samples.policy(list(b"n="), list(b"42"), [-3.0, -2.5], [1.0, -1.0])
        body = wire.ForwardBackwardBody(samples=[sample], loss=wire.loss_config("grpo", {})).to_json_dict()
        done = wait(c, sid, "forward-backward", submit(c, sid, "forward-backward", body)["id"])
        assert done["status"] == wire.OperationStatus.COMPLETED, done.get("error")
        step = {"adam_params": {"grad_clip_norm": 1e-300}}
        env = wait(c, sid, "optim-step", submit(c, sid, "optim-step", step)["id"])
    assert env["status"] == wire.OperationStatus.COMPLETED, env.get("error")
    metrics = env["output"]["metrics"]
    assert metrics["grad_norm"] > 0 and metrics["grad_clip_norm"] == 1e-300 and metrics["clip_coef"] == 0.0
